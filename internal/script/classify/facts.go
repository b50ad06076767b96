package classify

import (
	"fmt"

	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// Fact is what is known of a library's script without its text: its SHA1,
// where it comes from, and its classification (the classifier's verdict
// on the library's text, checked by the tests).
type Fact struct {
	Sha     string
	Library string
	Version string
	Script  string
	Spec    string      // Class.Spec form
	Class   *spec.Class // Spec parsed (by Facts)
}

// Reply conventions shared by many libraries.
const (
	release10    = "release keys=1 args=1 token=1; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"
	pexpire10    = "extend keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"
	nodeAcquire  = "acquire keys=any args=2 token=1 ttl=2ms; missing: nkeys; own: 0; own-no-ttl: 0; other: 0; other-no-ttl: 0"
	nodeExtend   = "extend keys=any args=2 token=1 ttl=2ms nottl-acts; missing: 0; own: nkeys; own-no-ttl: nkeys; other: 0; other-no-ttl: 0"
	nodeRelease  = "release keys=any args=1 token=1; missing: 0; own: nkeys; own-no-ttl: nkeys; other: 0; other-no-ttl: 0; partial: count"
	aioError     = "-ERR ERROR"
	redisPyExtND = "; missing: 0; own: 1; own-no-ttl: 0; other: 0; other-no-ttl: 0"
)

type factRow struct{ sha, library, version, script, spec string }

// facts lists the lock scripts of client libraries: SHA1 of the exact
// text each sends, and what the classifier makes of that text (the tests
// check both against the library where it is installed, and against
// scripts of the same behaviour where it is not).
var facts = []factRow{
	{"647c65a442733a1aa440f99908d249d13b4d6c4a", "redis.io distributed locks page", "-", "release", release10},

	{"e950836ed1e694540c503ef9972b8de518044d3b", "go-redsync/redsync", "v4.18.1", "deleteScript",
		"release keys=1 args=1 token=1; missing: -1; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"},
	{"d75bb8b5bd13532ddedd17762e772346e39b321e", "go-redsync/redsync", "v4.18.1", "touchScript", pexpire10},
	{"b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79", "go-redsync/redsync", "v4.18.1", "touchWithSetNXScript",
		"extend-or-acquire keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: 1; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"},

	{"80a1b5f2cfccec3b7119ba7721d2127682b691a7", "bsm/redislock", "v0.9.4", "luaObtain (22-byte token)",
		`extend-or-acquire keys=1 args=3 token=1 prefix=22 ttl=3ms nottl-acts control=2:"22"; missing: +OK; own: +OK; own-no-ttl: +OK; other: nil; other-no-ttl: nil`},
	{"6484da7d58920897fdc22b7f9afd1a3d47524ea8", "bsm/redislock", "v0.9.4", "luaPTTL",
		"ttl keys=1 args=1 token=1; missing: -3; own: pttl; own-no-ttl: -1; other: -3; other-no-ttl: -3"},
	{"a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf", "bsm/redislock", "v0.9.4", "luaRefresh", pexpire10},
	{"cf0e94b2e9ffc7e04395cf88f7583fc309985910", "bsm/redislock", "v0.9.4", "luaRelease", release10},

	{"e5a322e2634ef59a516e8ea150cb085afafee684", "redlock (npm)", "4.2.0", "lockScript", nodeAcquire},
	{"ce46f80993d5dac20dd066eb301a4e37994bdbed", "redlock (npm)", "4.2.0", "extendScript", nodeExtend},
	{"0f0f23b9048b36752b5be114f357ba083449f908", "redlock (npm)", "4.2.0", "unlockScript", nodeRelease},
	{"96da70f7716f27d278a5218544df37fd8b0a5e4c", "redlock (npm)", "5.0.0-beta.2", "acquireScript", nodeAcquire},
	{"aed6f382e410db8ba7926d4e5e9aab410bf2a78a", "redlock (npm)", "5.0.0-beta.2", "extendScript", nodeExtend},
	{"e4612211c9f8f51c257e26e056b0a654b3187242", "redlock (npm)", "5.0.0-beta.2", "releaseScript", nodeRelease},

	{"1b77b94aa78451d55dfa97e18819bfbfc596cb5b", "@sesamecare-oss/redlock", "1.4.0", "acquireLock (database 0)",
		`acquire keys=any args=3 token=2 ttl=3ms control=1:"0"; missing: nkeys; own: 0; own-no-ttl: 0; other: 0; other-no-ttl: 0`},
	{"820e9778d2b6733e9ed771e4be90ae73a95a6f3b", "@sesamecare-oss/redlock", "1.4.0", "extendLock (database 0)",
		`extend keys=any args=3 token=2 ttl=3ms nottl-acts control=1:"0"; missing: 0; own: nkeys; own-no-ttl: nkeys; other: 0; other-no-ttl: 0`},
	{"df51f6837dcfe303d334e6abea9aeae192bab216", "@sesamecare-oss/redlock", "1.4.0", "releaseLock (database 0)",
		`release keys=any args=2 token=2 control=1:"0"; missing: 0; own: nkeys; own-no-ttl: nkeys; other: 0; other-no-ttl: 0; partial: count`},

	{"18b2a577dbe847b16bebde190d69a1613d68e60e", "RedLock.net", "2.3", "Unlock.lua", release10},
	{"cb0427378f700ddb2f0e9394dbb0a40bd6dba04a", "RedLock.net", "2.3", "Unlock.lua (CRLF build)", release10},
	{"9f614a785a5f9ae8c6396c6b4bf94d2087342603", "RedLock.net", "2.3", "Extend.lua",
		"extend-or-acquire keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: 1; own: 1; own-no-ttl: 1; other: -1; other-no-ttl: -1"},
	{"3e7c6bf3e080bb97a92e77362149c26252b98212", "RedLock.net", "2.3", "Extend.lua (CRLF build)",
		"extend-or-acquire keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: 1; own: 1; own-no-ttl: 1; other: -1; other-no-ttl: -1"},

	{"f5f7bd3a3aa4a63c507c1155c5ea1219b350d992", "pottery", "3.0.1", "acquired script",
		"ttl keys=1 args=1 token=1; missing: 0; own: pttl; own-no-ttl: 0; other: 0; other-no-ttl: 0"},
	{"ba015a80261b616e7a62d35df0b8e3edbe6c9414", "pottery", "3.0.1", "extend script", pexpire10},
	{"a4aada0b36710970eedaaaeec4a6b7d8c78c4f80", "pottery", "3.0.1", "release script", release10},

	{"4e92fdc63815b3a0a2dd1c1df3694de73607c88d", "redlock-py", "1.0.8", "unlock_script", release10},

	{"c75a9bf1538efcdb1f383acc3e273c5089d57e58", "aioredlock", "0.7.3", "SET_LOCK_SCRIPT",
		"extend-or-acquire keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: +OK; own: +OK; own-no-ttl: +OK; other: " + aioError + "; other-no-ttl: " + aioError},
	{"241e4ca540a1cc4ec1f32d9eb9f879e607d7e6e5", "aioredlock", "0.7.3", "UNSET_LOCK_SCRIPT",
		"release keys=1 args=1 token=1; missing: +OK; own: 1; own-no-ttl: 1; other: " + aioError + "; other-no-ttl: " + aioError},
	{"f908d3f43dbcabc68fc0c9ecaf1fa4a285ecdb0a", "aioredlock", "0.7.3", "GET_LOCK_TTL_SCRIPT",
		"ttl keys=1 args=1 token=1; missing: " + aioError + "; own: ttl; own-no-ttl: -1; other: " + aioError + "; other-no-ttl: " + aioError},

	{"c3f8721cbb97f72bc19e972846bd7aaf91901658", "redis-py", "4.3.4", "Lock.LUA_RELEASE_SCRIPT", release10},
	{"a4e8783852e6b949f9ef3a97212805108459a890", "redis-py", "4.3.4", "Lock.LUA_EXTEND_SCRIPT (adding)",
		`extend keys=1 args=3 token=1 ttl=2ms additive control=3:"0"` + redisPyExtND},
	{"a4e8783852e6b949f9ef3a97212805108459a890", "redis-py", "4.3.4", "Lock.LUA_EXTEND_SCRIPT (replacing)",
		`extend keys=1 args=3 token=1 ttl=2ms control=3:"1"` + redisPyExtND},
	{"1cac51482acf5858da00f6d685d68f886cd6b6b2", "redis-py", "4.3.4", "Lock.LUA_REACQUIRE_SCRIPT", pexpire10},

	{"7157921a7cc7cfba979acf6d63f073151df17d12", "redis-semaphore", "5.8.0", "Mutex release (delIfEqualLua)", release10},
	{"594683e49a64ebaf975caf5f8079a1d097c438f1", "redis-semaphore", "5.8.0", "Mutex refresh (expireIfEqualLua)", pexpire10},

	{"5cc368fb92acd8fee3a986dc8e971d6cf28c3b44", "node-redis-warlock", "1.0.2", "parityDel", release10},
	{"78d3bb55c589f1b2edf66f3527f5017f8dfcd6bb", "node-redis-warlock", "1.0.2", "parityRelock (TTL and token in KEYS)",
		"extend keys=1 args=2 keyargs=2 token=2 ttl=1ms nottl-acts; missing: 0; own: +OK; own-no-ttl: +OK; other: 0; other-no-ttl: 0"},

	{"da225123b2af4a41136fdba7ffac1e045e344da1", "@microfleet/ioredis-lock", "6.0.1", "delifequal", release10},
	{"bf3108245472c550b02852e1e425128e5eb399c4", "@microfleet/ioredis-lock", "6.0.1", "pexpireifequal", pexpire10},

	{"3875d208d9e377969d2022550302cc83ad17b584", "rueidislock", "v1.0.79", "acqat (SET NX PXAT)",
		"acquire keys=1 args=2 token=1 ttl=2ms deadline; missing: +OK; own: nil; own-no-ttl: nil; other: nil; other-no-ttl: nil"},
	{"fa3d1aaa7e4145457755016a3d5daf72fa7a11bf", "rueidislock", "v1.0.79", "acqms (SET NX PX, FallbackSETPX)",
		"acquire keys=1 args=2 token=1 ttl=2ms; missing: +OK; own: nil; own-no-ttl: nil; other: nil; other-no-ttl: nil"},
	{"852ba6ec6104340ced36643283c856d4698569e4", "rueidislock", "v1.0.79", "extend (PEXPIREAT)",
		"extend keys=1 args=2 token=1 ttl=2ms deadline nottl-acts; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"},
	{"9eb62214c9af87ae5f9a9f12bb4520281c0d2ae1", "rueidislock", "v1.0.79", "delkey", "release keys=1 args=2 token=1" + release10[len("release keys=1 args=1 token=1"):]},

	{"c000e088bd4aca36ab429d3b7a16fc736f4cb6f1", "redlock-universal", "0.8.5", "ATOMIC_EXTEND_SCRIPT",
		"extend keys=1 args=3 token=1 ttl=3ms min=2ms; missing: [-1, -2]; own: [1, pttl]; own-no-ttl: [0, -1]; own-low-ttl: [0, pttl]; " +
			"other: [-1, pttl]; other-no-ttl: [0, -1]; other-low-ttl: [0, pttl]"},
	{"fd83166fb3d7235e3ace652b700c9e217c1adc1f", "redlock-universal", "0.8.5", "DELETE_IF_MATCH_SCRIPT", release10},
	{"e218d686a8f90368e5cd45074f06ce766cad9987", "redlock-universal", "0.8.5", "EXTEND_IF_MATCH_SCRIPT", pexpire10},
	{"994908155dadb1bed08a5af6dee7fedf956c4826", "redlock-universal", "0.8.5", "INSPECT_SCRIPT",
		"inspect keys=1 args=0; missing: nil; other: [value, pttl]; other-no-ttl: [value, -1]"},
}

// Facts returns the library facts with their classes parsed.
func Facts() []Fact {
	out := make([]Fact, len(facts))
	for i, r := range facts {
		c, err := spec.Parse(r.spec)
		if err != nil {
			panic(fmt.Sprintf("script: fact %s %s: %v", r.library, r.script, err))
		}
		c.Origin = fmt.Sprintf("%s %s %s", r.library, r.version, r.script)
		out[i] = Fact{Sha: r.sha, Library: r.library, Version: r.version, Script: r.script, Spec: r.spec, Class: c}
	}
	return out
}
