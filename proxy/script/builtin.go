package script

import (
	"embed"
	"time"
)

// lua holds the exact bytes that client libraries send (see lua/NOTES.md
// and ../../shared CLIENTS.md). Each is normalized, so formatting variants
// of them are recognised too.
//
//go:embed lua/*.lua
var lua embed.FS

// builtin is a spec with the script texts that define it: inline texts, or
// files under lua/.
type builtin struct {
	spec    *Spec
	sources []string
	files   []string
}

var (
	int1  = Pattern{Kind: PatInt, Int: 1}
	int0  = Pattern{Kind: PatInt, Int: 0}
	intM1 = Pattern{Kind: PatInt, Int: -1}
	nkeys = Pattern{Kind: PatIntNKeys}
	okPat = Pattern{Kind: PatOK}
	nilP  = Pattern{Kind: PatNil}
	ms    = time.Millisecond
)

// The compare-and-delete of the Redlock page (seed 000), hand-copied in
// countless forms, and the matching compare-and-pexpire. bsm/redislock's
// release and refresh are formatting variants of these.
var (
	seedRelease = &Spec{
		Name: "compare-and-delete (Redlock page, redislock, hand-written)", Role: RoleRelease, Keys: 1,
		TokenArg: 0, TTLArg: -1,
		Granted: []Pattern{int1}, Refused: []Pattern{int0},
		Success: int1, Failure: int0,
	}
	seedExtend = &Spec{
		Name: "compare-and-pexpire (redsync extend, redislock refresh, hand-written)", Role: RoleExtend, Keys: 1,
		TokenArg: 0, TTLArg: 1, TTLUnit: ms,
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

// go-redsync/redsync v4 (its extend is the compare-and-pexpire above).
var (
	redsyncRelease = &Spec{
		Name: "redsync v4 release", Role: RoleRelease, Keys: 1, TokenArg: 0, TTLArg: -1,
		Granted: []Pattern{int1}, Refused: []Pattern{int0, intM1},
		Success: int1, Failure: intM1, // -1: the lock is no longer held (ErrLockAlreadyExpired)
	}
	redsyncExtendOrAcquire = &Spec{
		Name: "redsync v4 extend (WithSetNXOnExtend)", Role: RoleExtendOrAcquire, Keys: 1, TokenArg: 0, TTLArg: 1, TTLUnit: ms,
		Granted: []Pattern{int1}, Refused: []Pattern{int0}, Success: int1, Failure: int0,
	}
)

// bsm/redislock v0.9.4: obtain re-takes a lock whose value starts with the
// same token; pttl answers -3 for a lock that is not ours.
var (
	redislockObtain = &Spec{
		Name: "redislock v0.9.4 obtain", Role: RoleAcquire, Keys: 1, TokenArg: 0, TTLArg: 2, TTLUnit: ms,
		Granted: []Pattern{okPat}, Refused: []Pattern{nilP}, Success: okPat, Failure: nilP,
	}
	redislockPTTL = &Spec{
		Name: "redislock v0.9.4 pttl", Role: RoleTTL, Keys: 1, TokenArg: 0, TTLArg: -1,
		Granted: []Pattern{{Kind: PatIntAtLeast, Int: -1}}, Refused: []Pattern{{Kind: PatInt, Int: -3}},
		Failure: Pattern{Kind: PatInt, Int: -3}, ReplyUnit: ms,
	}
)

// node-redlock 4.2.0 and 5.x, and @sesamecare-oss/redlock 1.4: multi-key
// scripts that hold all their keys on a backend or none. A backend's vote
// is "for" when it answers the number of keys.
func multiKey(name string, role Role, tokenArg, ttlArg, dbArg int) *Spec {
	return &Spec{
		Name: name, Role: role, Keys: 0, TokenArg: tokenArg, TTLArg: ttlArg, TTLUnit: ms,
		Granted: []Pattern{nkeys}, Refused: []Pattern{{Kind: PatIntAtLeast, Int: 0}},
		Success: nkeys, Failure: int0, DBArg: dbArg,
	}
}

var (
	nodeRedlockAcquire = multiKey("node-redlock acquire", RoleAcquire, 0, 1, 0)
	nodeRedlockExtend  = multiKey("node-redlock extend", RoleExtend, 0, 1, 0)
	nodeRedlockRelease = multiKey("node-redlock release", RoleRelease, 0, -1, 0)
	sesameAcquire      = multiKey("@sesamecare-oss/redlock acquire", RoleAcquire, 1, 2, 1)
	sesameExtend       = multiKey("@sesamecare-oss/redlock extend", RoleExtend, 1, 2, 1)
	sesameRelease      = multiKey("@sesamecare-oss/redlock release", RoleRelease, 1, -1, 1)
)

// RedLock.net 2.3: its release is the compare-and-delete above; its extend
// re-creates a missing key, and answers -1 for another owner.
var redlockNetExtend = &Spec{
	Name: "RedLock.net 2.3 extend", Role: RoleExtendOrAcquire, Keys: 1, TokenArg: 0, TTLArg: 1, TTLUnit: ms,
	Granted: []Pattern{int1}, Refused: []Pattern{intM1}, Success: int1, Failure: intM1,
}

// pottery 3: release and extend are the scripts above; the TTL query
// answers 0 for a lock that is not ours (or has no TTL).
var potteryTTL = &Spec{
	Name: "pottery 3 ttl", Role: RoleTTL, Keys: 1, TokenArg: 0, TTLArg: -1,
	Granted: []Pattern{{Kind: PatIntPos}}, Refused: []Pattern{int0}, Failure: int0, ReplyUnit: ms,
}

// aioredlock 0.7 answers a lock held by another with the error ERROR
// (Redis 7.0 sends it as "ERR ERROR"); its release answers OK for a lock
// that is already gone.
var (
	aioError          = []Pattern{{Kind: PatError, Str: "ERR ERROR"}, {Kind: PatError, Str: "ERROR"}}
	aioredlockAcquire = &Spec{
		Name: "aioredlock 0.7 acquire-or-extend", Role: RoleExtendOrAcquire, Keys: 1, TokenArg: 0, TTLArg: 1, TTLUnit: ms,
		Granted: []Pattern{okPat}, Refused: aioError, Success: okPat, Failure: aioError[0],
	}
	aioredlockRelease = &Spec{
		Name: "aioredlock 0.7 release", Role: RoleRelease, Keys: 1, TokenArg: 0, TTLArg: -1,
		Granted: []Pattern{int1, okPat}, Refused: aioError, Success: int1, Failure: aioError[0],
	}
	aioredlockTTL = &Spec{
		Name: "aioredlock 0.7 ttl", Role: RoleTTL, Keys: 1, TokenArg: 0, TTLArg: -1,
		Granted: []Pattern{{Kind: PatIntAtLeast, Int: -1}}, Refused: aioError, Failure: aioError[0], ReplyUnit: time.Second,
	}
)

var builtins = []builtin{
	{spec: seedRelease, sources: []string{
		// The seed's exact text (sha1 647c65a442733a1aa440f99908d249d13b4d6c4a).
		"if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend",
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("unlink",KEYS[1]) else return 0 end`,
		`if ARGV[1] == redis.call("get",KEYS[1]) then return redis.call("del",KEYS[1]) else return 0 end`,
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) end return 0`,
		`local v = redis.call("get",KEYS[1]) if v == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`,
		`local v = redis.call("get",KEYS[1]) if v == ARGV[1] then return redis.call("del",KEYS[1]) end return 0`,
	}, files: []string{"redislock-0.9.4-release.lua", "redlocknet-2.3-release.lua", "redlocknet-2.3-release-crlf.lua",
		"pottery-3-release.lua", "redlockpy-release.lua"}},
	{spec: seedExtend, sources: []string{
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`,
		`if ARGV[1] == redis.call("get",KEYS[1]) then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`,
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) end return 0`,
		`local v = redis.call("get",KEYS[1]) if v == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`,
	}, files: []string{"redislock-0.9.4-refresh.lua", "redsync-4-extend.lua", "pottery-3-extend.lua"}},
	{spec: seedExtendSeconds, sources: []string{
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("expire",KEYS[1],ARGV[2]) else return 0 end`,
	}},
	{spec: redsyncRelease, files: []string{"redsync-4-release.lua"}},
	{spec: redsyncExtendOrAcquire, files: []string{"redsync-4-extend-or-acquire.lua"}},
	{spec: redislockObtain, files: []string{"redislock-0.9.4-obtain.lua"}},
	{spec: redislockPTTL, files: []string{"redislock-0.9.4-pttl.lua"}},
	{spec: nodeRedlockAcquire, files: []string{"noderedlock-4.2.0-acquire.lua", "noderedlock-5-acquire.lua"}},
	{spec: nodeRedlockExtend, files: []string{"noderedlock-4.2.0-extend.lua", "noderedlock-5-extend.lua"}},
	{spec: nodeRedlockRelease, files: []string{"noderedlock-4.2.0-release.lua", "noderedlock-5-release.lua"}},
	{spec: sesameAcquire, files: []string{"sesamecare-1.4-acquire.lua"}},
	{spec: sesameExtend, files: []string{"sesamecare-1.4-extend.lua"}},
	{spec: sesameRelease, files: []string{"sesamecare-1.4-release.lua"}},
	{spec: redlockNetExtend, files: []string{"redlocknet-2.3-extend.lua", "redlocknet-2.3-extend-crlf.lua"}},
	{spec: potteryTTL, files: []string{"pottery-3-ttl.lua"}},
	{spec: aioredlockAcquire, files: []string{"aioredlock-0.7-acquire.lua"}},
	{spec: aioredlockRelease, files: []string{"aioredlock-0.7-release.lua"}},
	{spec: aioredlockTTL, files: []string{"aioredlock-0.7-ttl.lua"}},
}

// builtinSources returns every text of b.
func (b builtin) texts() []string {
	out := append([]string(nil), b.sources...)
	for _, f := range b.files {
		data, err := lua.ReadFile("lua/" + f)
		if err != nil {
			panic("script: missing built-in " + f)
		}
		out = append(out, string(data))
	}
	return out
}
