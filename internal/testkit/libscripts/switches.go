package libscripts

// Switch is a lock script, written for this project, whose role depends on
// an argument's value: for an ordinary owner it takes a free lock or
// re-enters (extends) its own; for a special owner, singled out by a
// constant in its text, it only takes a free lock. Two clients that both
// call it as the special owner must not both hold the lock.
type Switch struct {
	Name     string
	Text     string
	Ordinary []string // ARGV of a call by an ordinary owner
	Special  []string // ARGV of a call by the owner that may not re-enter
}

// Switches lists the scripts: an anonymous owner, a reserved token, a
// numeric threshold, and an anonymous owner told by its token's prefix.
func Switches() []Switch {
	return []Switch{
		{
			Name: "anonymous owner",
			// ARGV[1] the owner ("*" is anonymous and never re-enters),
			// ARGV[2] the lease in ms.
			Text: `local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] and ARGV[1] ~= '*' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`,
			Ordinary: []string{"worker-7f3a", "30000"},
			Special:  []string{"*", "30000"},
		},
		{
			Name: "reserved token",
			// ARGV[1] the holder ("force" is the maintenance job's name:
			// each run holds the lock alone, never twice), ARGV[2] the
			// lease in ms.
			Text: `if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 'taken' end
if ARGV[1] ~= 'force' and redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 'renewed'
end
return false`,
			Ordinary: []string{"nightly-report", "20000"},
			Special:  []string{"force", "20000"},
		},
		{
			Name: "numeric threshold",
			// ARGV[1] the worker id (numeric ids below 1000 are a shared
			// pool's and do not re-enter), ARGV[2] the lease in ms.
			Text: `local v = redis.call('GET', KEYS[1])
if v == false then return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) end
if v == ARGV[1] and (tonumber(ARGV[1]) or 1000) >= 1000 then
  return redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
end
return false`,
			Ordinary: []string{"4242", "15000"},
			Special:  []string{"17", "15000"},
		},
		{
			Name: "anonymous by prefix",
			// ARGV[1] the owner (one that begins with "anon:" is
			// anonymous and never re-enters), ARGV[2] the lease in ms.
			Text: `local v = redis.call('GET', KEYS[1])
if not v then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return 1
end
if v == ARGV[1] and string.sub(ARGV[1], 1, 5) ~= 'anon:' then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0`,
			Ordinary: []string{"worker-7f3a", "25000"},
			Special:  []string{"anon:7f3a", "25000"},
		},
	}
}
