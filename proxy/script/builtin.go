package script

import "time"

// builtin is a spec with the script texts that define it. Each text is
// normalized, so formatting variants of it are recognised too.
type builtin struct {
	spec    *Spec
	sources []string
}

var (
	int1  = Pattern{Kind: PatInt, Int: 1}
	int0  = Pattern{Kind: PatInt, Int: 0}
	intM1 = Pattern{Kind: PatInt, Int: -1}
)

// The compare-and-delete of the Redlock page (seed 000), hand-copied in
// countless forms, and the matching compare-and-pexpire.
var (
	seedRelease = &Spec{
		Name: "compare-and-delete (Redlock page)", Role: RoleRelease, Keys: 1,
		TokenArg: 0, TTLArg: -1,
		Granted: []Pattern{int1}, Refused: []Pattern{int0},
		Success: int1, Failure: int0,
	}
	seedExtend = &Spec{
		Name: "compare-and-pexpire", Role: RoleExtend, Keys: 1,
		TokenArg: 0, TTLArg: 1, TTLUnit: time.Millisecond,
		Granted: []Pattern{int1}, Refused: []Pattern{int0},
		Success: int1, Failure: int0,
	}
	seedExtendSeconds = &Spec{
		Name: "compare-and-expire", Role: RoleExtend, Keys: 1,
		TokenArg: 0, TTLArg: 1, TTLUnit: time.Second,
		Granted: []Pattern{int1}, Refused: []Pattern{int0},
		Success: int1, Failure: int0,
	}
)

var builtins = []builtin{
	{seedRelease, []string{
		// The seed's exact text (sha1 647c65a442733a1aa440f99908d249d13b4d6c4a).
		"if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend",
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("unlink",KEYS[1]) else return 0 end`,
		`if ARGV[1] == redis.call("get",KEYS[1]) then return redis.call("del",KEYS[1]) else return 0 end`,
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) end return 0`,
		`local v = redis.call("get",KEYS[1]) if v == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`,
		`local v = redis.call("get",KEYS[1]) if v == ARGV[1] then return redis.call("del",KEYS[1]) end return 0`,
	}},
	{seedExtend, []string{
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`,
		`if ARGV[1] == redis.call("get",KEYS[1]) then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`,
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) end return 0`,
		`local v = redis.call("get",KEYS[1]) if v == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`,
	}},
	{seedExtendSeconds, []string{
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("expire",KEYS[1],ARGV[2]) else return 0 end`,
	}},
}
