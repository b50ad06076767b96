package libscripts

// Counted is a reentrant lock script written for this project: the lock is
// a hash whose one field is its owner and counts the owner's holds, as
// Redisson's RLock keeps it (a lease in ms and an owner "uuid:threadId";
// taking it answers nil or the holder's PTTL, releasing nil, 0 while holds
// are left, or 1), and in another style; and releases that tell waiters
// (a forced unlock, a string lock's release that publishes its key's name
// as Spring's pub/sub lock does); a release that records its result for a
// retry under a latch key, and a take that numbers each grant with a
// counter, as Redisson 3.2x's unlock and RFencedLock do; and a release
// that pushes a signal onto a list for BLPOP waiters, as
// python-redis-lock's does.
type Counted struct {
	Name string
	Text string
	Argv []string // ARGV of a typical call
	Spec string   // its classification (spec.Class.Spec)
	// Keys: the call's KEYS after the first (a channel to publish on, a
	// latch, a counter, a signal list, or more locks).
	Keys []string
}

// Reentrant lists the scripts.
func Reentrant() []Counted {
	return []Counted{
		{"take or enter again", `local mine = redis.call('hget', KEYS[1], ARGV[2])
if mine or redis.call('exists', KEYS[1]) == 0 then
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return false
end
return redis.call('pttl', KEYS[1])`, []string{"30000", "6f1c2e7a-52b8-4a42:41"},
			`extend-or-acquire keys=1 args=2 token=2 ttl=1ms nottl-acts hash="1" counted; missing: nil; own: nil; own-no-ttl: nil; other: pttl; other-no-ttl: -1; own-again: nil`, nil},
		{"leave once", `if redis.call('hexists', KEYS[1], ARGV[2]) == 0 then return false end
if redis.call('hincrby', KEYS[1], ARGV[2], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 0
end
redis.call('del', KEYS[1])
return 1`, []string{"30000", "6f1c2e7a-52b8-4a42:41"},
			`release keys=1 args=2 token=2 ttl=1ms hash="1" counted; missing: nil; own: 1; own-no-ttl: 1; other: nil; other-no-ttl: nil; own-again: 0`, nil},
		{"take or enter again for a fixed 30 s", `if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  redis.call('hincrby', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], 30000)
  return false
end
return redis.call('pttl', KEYS[1])`, []string{"6f1c2e7a-52b8-4a42:41"},
			`extend-or-acquire keys=1 args=1 token=1 ttl=const:30000 nottl-acts hash="1" counted; missing: nil; own: nil; own-no-ttl: nil; other: pttl; other-no-ttl: -1; own-again: nil`, nil},
		{"leave once, re-arming for a fixed 30 s", `if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return false end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  redis.call('pexpire', KEYS[1], 30000)
  return 0
end
redis.call('del', KEYS[1])
return 1`, []string{"6f1c2e7a-52b8-4a42:41"},
			`release keys=1 args=1 token=1 ttl=const:30000 hash="1" counted; missing: nil; own: 1; own-no-ttl: 1; other: nil; other-no-ttl: nil; own-again: 0`, nil},
		{"leave once, telling waiters", `if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return false end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
return 1`, []string{"0", "30000", "6f1c2e7a-52b8-4a42:41", "publish"},
			`release keys=1 args=5 keyargs=1 token=4 ttl=3ms hash="1" counted notice="PUBLISH KEYS[2] ARGV[1]" control=5:"publish"; missing: nil; own: 1; own-no-ttl: 1; other: nil; other-no-ttl: nil; own-again: 0`,
			[]string{"redlock-channel:{k}"}},
		{"leave once, answering a retry from its latch", `local done = redis.call('get', KEYS[3])
if done then return tonumber(done) end
if redis.call('hexists', KEYS[1], ARGV[3]) == 0 then return false end
if redis.call('hincrby', KEYS[1], ARGV[3], -1) > 0 then
  redis.call('pexpire', KEYS[1], ARGV[2])
  redis.call('set', KEYS[3], '0', 'PX', ARGV[5])
  return 0
end
redis.call('del', KEYS[1])
redis.call(ARGV[4], KEYS[2], ARGV[1])
redis.call('set', KEYS[3], '1', 'PX', ARGV[5])
return 1`, []string{"0", "30000", "6f1c2e7a-52b8-4a42:41", "publish", "20000"},
			`release keys=1 args=7 keyargs=2 token=5 ttl=4ms hash="1" counted notice="PUBLISH KEYS[2] ARGV[1]" latch=2:7ms control=6:"publish"; missing: nil; own: 1; own-no-ttl: 1; other: nil; other-no-ttl: nil; own-again: 0`,
			[]string{"redlock-channel:{k}", "redlock-latch:{k}:req-1"}},
		{"take or enter again, numbering the grant", `if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  local n = redis.call('incr', KEYS[2])
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return {-1, n}
end
return {redis.call('pttl', KEYS[1]), -1}`, []string{"30000", "6f1c2e7a-52b8-4a42:41"},
			`extend-or-acquire keys=1 args=3 keyargs=1 token=3 ttl=2ms nottl-acts hash="1" counted counter=1; missing: [-1, fence]; own: [-1, fence]; own-no-ttl: [-1, fence]; other: [pttl, -1]; other-no-ttl: [-1, -1]; own-again: [-1, fence]`,
			[]string{"redlock-number:{k}"}},
		{"take or enter again, counting the grant", `if redis.call('exists', KEYS[1]) == 0 or redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('incr', KEYS[2])
  redis.call('hincrby', KEYS[1], ARGV[2], 1)
  redis.call('pexpire', KEYS[1], ARGV[1])
  return false
end
return redis.call('pttl', KEYS[1])`, []string{"30000", "6f1c2e7a-52b8-4a42:41"},
			`extend-or-acquire keys=1 args=3 keyargs=1 token=3 ttl=2ms nottl-acts hash="1" counted counter=1; missing: nil; own: nil; own-no-ttl: nil; other: pttl; other-no-ttl: -1; own-again: nil`,
			[]string{"redlock-number:{k}"}},
		{"force the lock free, telling waiters", `if redis.call('del', KEYS[1]) == 1 then
  redis.call('publish', KEYS[2], ARGV[1])
  return 1
end
return 0`, []string{"0"},
			`delete keys=1 args=2 keyargs=1 notice="PUBLISH KEYS[2] ARGV[1]"; missing: 0; other: 1; other-no-ttl: 1`,
			[]string{"redlock-channel:{k}"}},
		{"release, telling waiters its key", `local holder = redis.call('GET', KEYS[1])
if holder == ARGV[1] and redis.call('UNLINK', KEYS[1]) == 1 then
  redis.call('PUBLISH', ARGV[2], KEYS[1])
  return true
end
return false`, []string{"client-9", "registry-channel"},
			`release keys=1 args=2 token=1 notice="PUBLISH ARGV[2] KEYS[1]"; missing: nil; own: 1; own-no-ttl: 1; other: nil; other-no-ttl: nil`, nil},
		{"release, signalling a waiter on a list", `if redis.call('get', KEYS[1]) ~= ARGV[1] then return 1 end
redis.call('del', KEYS[2])
redis.call('lpush', KEYS[2], 'released')
redis.call('pexpire', KEYS[2], ARGV[2])
redis.call('del', KEYS[1])
return 0`, []string{"client-9", "1500"},
			`release keys=1 args=3 keyargs=1 token=2 notice="LPUSH KEYS[2] \"released\" for ARGV[2] ms"; missing: 1; own: 0; own-no-ttl: 0; other: 1; other-no-ttl: 1`,
			[]string{"signal:{k}"}},
		{"renew every lock held, each on its own", `local out = {}
for i = 1, #KEYS do
  if redis.call('hexists', KEYS[i], ARGV[i + 1]) == 1 then
    redis.call('pexpire', KEYS[i], ARGV[1])
    out[i] = 1
  else
    out[i] = 0
  end
end
return out`, []string{"30000", "6f1c2e7a-52b8-4a42:41", "6f1c2e7a-52b8-4a42:42"},
			`extend keys=2 args=3 tokens=2,3 ttl=1ms nottl-acts hash="1" each; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0`,
			[]string{"{k}:2"}},
		{"renew while held", `if redis.call('hexists', KEYS[1], ARGV[2]) == 1 then
  redis.call('pexpire', KEYS[1], ARGV[1])
  return 1
end
return 0`, []string{"30000", "6f1c2e7a-52b8-4a42:41"},
			`extend keys=1 args=2 token=2 ttl=1ms nottl-acts hash="1"; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0`, nil},
		{"enter, owner first, 1 or 0", `local held = redis.call('hget', KEYS[1], ARGV[1])
if not held and redis.call('exists', KEYS[1]) == 1 then return 0 end
redis.call('hincrby', KEYS[1], ARGV[1], 1)
redis.call('pexpire', KEYS[1], ARGV[2])
return 1`, []string{"worker-3", "8000"},
			`extend-or-acquire keys=1 args=2 token=1 ttl=2ms nottl-acts hash="1" counted; missing: 1; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0; own-again: 1`, nil},
		{"exit, owner first", `if redis.call('hlen', KEYS[1]) ~= 1 or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 'not-held' end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) == 0 then
  redis.call('del', KEYS[1])
  return 'released'
end
return 'held'`, []string{"worker-3"},
			`release keys=1 args=1 token=1 hash="1" counted; missing: "not-held"; own: "released"; own-no-ttl: "released"; other: "not-held"; other-no-ttl: "not-held"; own-again: "held"`, nil},
	}
}
