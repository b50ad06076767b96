package libscripts

// Scripts written for this project in the style of libraries whose
// runtime is not installed here: each does what the library's script does
// (same arguments, same replies in every case) with other text, and
// stands for the library fact of the script it mirrors.

var styles = []struct{ library, name, text, call, fact string }{
	// RedLock.net 2.3 (StackExchange.Redis): release, and an extend that
	// takes the lock again when it is gone and answers -1 to a conflict.
	{"RedLock.net 2.3", "Unlock.lua", `local held = redis.call('GET', KEYS[1])
if held == ARGV[1] then
	return redis.call('DEL', KEYS[1])
end
return 0`, "redlock:order -- 3f2504e0-4f89-11d3-9a0c-0305e82c3301", "18b2a577dbe847b16bebde190d69a1613d68e60e"},
	{"RedLock.net 2.3", "Extend.lua", `local held = redis.call('GET', KEYS[1])
if not held then
	if redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) then return 1 end
	return 0
end
if held ~= ARGV[1] then
	return -1
end
return redis.call('PEXPIRE', KEYS[1], ARGV[2])`, "redlock:order -- 3f2504e0-4f89-11d3-9a0c-0305e82c3301 30000", "9f614a785a5f9ae8c6396c6b4bf94d2087342603"},

	// pottery 3: TTL query (0 unless ours with a TTL), extend, release.
	{"pottery 3.0.0", "acquired script", `
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
local left = redis.call('pttl', KEYS[1])
if left > 0 then return left end
return 0
`, "redlock:printer -- 6f1c2e7a-52b8-4a42-9a53-8f1b8e8b9a11", "f5f7bd3a3aa4a63c507c1155c5ea1219b350d992"},
	{"pottery 3.0.0", "extend script", `
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('pexpire', KEYS[1], ARGV[2])
`, "redlock:printer -- 6f1c2e7a-52b8-4a42-9a53-8f1b8e8b9a11 10000", "ba015a80261b616e7a62d35df0b8e3edbe6c9414"},
	{"pottery 3.0.0", "release script", `
if redis.call('get', KEYS[1]) ~= ARGV[1] then return 0 end
return redis.call('del', KEYS[1])
`, "redlock:printer -- 6f1c2e7a-52b8-4a42-9a53-8f1b8e8b9a11", "a4aada0b36710970eedaaaeec4a6b7d8c78c4f80"},

	// redlock-py: a plain EVAL release.
	{"redlock-py 1.0.8", "unlock_script", `return redis.call("get", KEYS[1]) == ARGV[1] and redis.call("del", KEYS[1]) or 0`,
		"resource -- Zq81kPp2Wm4Tt7Yy0Bb3Cc", "4e92fdc63815b3a0a2dd1c1df3694de73607c88d"},

	// aioredlock 0.7: take or extend (an ERROR error to another owner),
	// release (OK when already gone), TTL in seconds.
	{"aioredlock 0.7", "SET_LOCK_SCRIPT", `local v = redis.call('get', KEYS[1])
if v and v ~= ARGV[1] then return redis.error_reply('ERROR') end
return redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2])`, "resource -- 0b0c6f5e-2a51-4f44-8f0f-7f4b1b0e9d7a 10000", "c75a9bf1538efcdb1f383acc3e273c5089d57e58"},
	{"aioredlock 0.7", "UNSET_LOCK_SCRIPT", `local v = redis.call('get', KEYS[1])
if v == false then return redis.status_reply('OK') end
if v ~= ARGV[1] then return redis.error_reply('ERROR') end
return redis.call('del', KEYS[1])`, "resource -- 0b0c6f5e-2a51-4f44-8f0f-7f4b1b0e9d7a", "241e4ca540a1cc4ec1f32d9eb9f879e607d7e6e5"},
	{"aioredlock 0.7", "GET_LOCK_TTL_SCRIPT", `local v = redis.call('get', KEYS[1])
if v ~= ARGV[1] then return redis.error_reply('ERROR') end
return redis.call('ttl', KEYS[1])`, "resource -- 0b0c6f5e-2a51-4f44-8f0f-7f4b1b0e9d7a", "f908d3f43dbcabc68fc0c9ecaf1fa4a285ecdb0a"},

	// redis-semaphore 5 Mutex: release and refresh through local aliases.
	{"redis-semaphore 5.8.0", "Mutex release", `
  local lockKey = KEYS[1]
  local id = ARGV[1]
  if redis.call('get', lockKey) ~= id then
    return 0
  end
  return redis.call('del', lockKey)
  `, "mutex:jobs -- 0c3b2a1f-6d5e-4f70-8a9b-1c2d3e4f5a6b", "7157921a7cc7cfba979acf6d63f073151df17d12"},
	{"redis-semaphore 5.8.0", "Mutex refresh", `
  local lockKey, id, timeout = KEYS[1], ARGV[1], ARGV[2]
  if redis.call('get', lockKey) ~= id then
    return 0
  end
  redis.call('pexpire', lockKey, timeout)
  return 1
  `, "mutex:jobs -- 0c3b2a1f-6d5e-4f70-8a9b-1c2d3e4f5a6b 10000", "594683e49a64ebaf975caf5f8079a1d097c438f1"},

	// redlock-universal 0.8: an extend that wants a least TTL left and
	// answers {status, ttl}; inspect; and the compare-and-delete and
	// compare-and-pexpire it shares with everyone.
	{"redlock-universal 0.8.5", "ATOMIC_EXTEND_SCRIPT", `local left = redis.call("PTTL", KEYS[1])
if left == -2 then return {-1, -2} end
if left < tonumber(ARGV[2]) then return {0, left} end
if redis.call("GET", KEYS[1]) ~= ARGV[1] then return {-1, left} end
redis.call("PEXPIRE", KEYS[1], tonumber(ARGV[3]))
return {1, left}`, "lock:report -- 9b2f3c4d5e6f 1500 30000", "c000e088bd4aca36ab429d3b7a16fc736f4cb6f1"},
	{"redlock-universal 0.8.5", "INSPECT_SCRIPT", `local v = redis.call("GET", KEYS[1])
if v == false then return nil end
return {v, redis.call("PTTL", KEYS[1])}`, "lock:report --", "994908155dadb1bed08a5af6dee7fedf956c4826"},
	{"redlock-universal 0.8.5", "DELETE_IF_MATCH_SCRIPT", `if redis.call("GET", KEYS[1]) ~= ARGV[1] then return 0 else return redis.call("DEL", KEYS[1]) end`,
		"lock:report -- 9b2f3c4d5e6f", "fd83166fb3d7235e3ace652b700c9e217c1adc1f"},
	{"redlock-universal 0.8.5", "EXTEND_IF_MATCH_SCRIPT", `if redis.call("GET", KEYS[1]) ~= ARGV[1] then return 0 else return redis.call("PEXPIRE", KEYS[1], ARGV[2]) end`,
		"lock:report -- 9b2f3c4d5e6f 30000", "e218d686a8f90368e5cd45074f06ce766cad9987"},
}

// BatchAcquire is in the style of redlock-universal's batch acquire: every
// key free, each set to its own value, TTL the last argument; {1, n} or
// {0, index, key} of the first key taken. No fact stands for it (its
// layout depends on the number of keys).
const BatchAcquire = `for i = 1, #KEYS do
  if redis.call("EXISTS", KEYS[i]) == 1 then return {0, i, KEYS[i]} end
end
local ttl = tonumber(ARGV[#ARGV])
for i = 1, #KEYS do
  redis.call("SET", KEYS[i], ARGV[i], "PX", ttl)
end
return {1, #KEYS}`

// Styles returns the style scripts.
func Styles() []Script {
	out := make([]Script, len(styles))
	for i, s := range styles {
		keys, argv := call(s.call)
		out[i] = Script{Library: s.library, Name: s.name, Text: s.text, Keys: keys, Argv: argv, Fact: s.fact, Style: true}
	}
	return out
}
