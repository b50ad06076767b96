package libscripts

// Scripts in the project's own words of a semaphore kept as a count of
// free permits (KEYS[1], no expiry) beside a sorted set of the permits
// taken, each id scored with its deadline in ms (KEYS[2]): the behaviour of
// Redisson's RPermitExpirableSemaphore, whose own scripts run in the Java
// tests.
const (
	// PermitsSetup: ARGV the limit. Sets the count where there is none;
	// 1 if it did, else 0.
	PermitsSetup = `if redis.call('exists', KEYS[1]) == 1 then return 0 end
redis.call('set', KEYS[1], ARGV[1])
return 1`
	// PermitsAcquire: ARGV the permit's id, its deadline, the caller's
	// clock. Expired permits are counted free again first; "OK" or nil.
	PermitsAcquire = `for _, m in ipairs(redis.call('zrangebyscore', KEYS[2], '-inf', ARGV[3])) do
  redis.call('zrem', KEYS[2], m)
  redis.call('incr', KEYS[1])
end
if tonumber(redis.call('get', KEYS[1]) or '0') < 1 then return false end
redis.call('decr', KEYS[1])
redis.call('zadd', KEYS[2], ARGV[2], ARGV[1])
return 'OK'`
	// PermitsRelease: ARGV the permit's id; 1 if it was taken, else 0.
	PermitsRelease = `if redis.call('zrem', KEYS[2], ARGV[1]) == 0 then return 0 end
redis.call('incr', KEYS[1])
return 1`
	// PermitsAvailable: the count of free permits.
	PermitsAvailable = `return tonumber(redis.call('get', KEYS[1]) or '0')`
)
