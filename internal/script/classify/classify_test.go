package classify

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// factsBySha indexes the library facts.
func factsBySha() map[string][]Fact {
	out := map[string][]Fact{}
	for _, f := range Facts() {
		out[f.Sha] = append(out[f.Sha], f)
	}
	return out
}

// instance is a fact as a classification of a call with n keys.
func instance(c *spec.Class, n int) *spec.Class {
	d := *c
	if d.Keys == 0 {
		d.Keys = n
		if d.Tokens != nil {
			d.Tokens = spec.UniformInts(n, d.Tokens[0])
		}
	}
	return &d
}

func mustClassify(t *testing.T, text string, keys, argv []string) *spec.Class {
	t.Helper()
	p, ref := sandbox.Compile([]byte(text))
	if ref != nil {
		t.Fatalf("Compile: %v", ref)
	}
	c, ref := Script(p, keys, argv)
	if ref != nil {
		t.Fatalf("Classify(%q, %q, %q): %v", sandbox.Short(text), keys, argv, ref)
	}
	return c
}

// checkAgainstFact classifies a library script and compares the result
// with the fact for its sha1 that covers the call.
func checkAgainstFact(t *testing.T, s libscripts.Script, facts map[string][]Fact) {
	t.Helper()
	fs := facts[s.Fact]
	if len(fs) == 0 {
		t.Fatalf("no fact for %s", s.Fact)
	}
	got := mustClassify(t, s.Text, s.Keys, s.Argv)
	var diffs []string
	for _, f := range fs {
		want := instance(f.Class, len(s.Keys)-f.Class.KeyArgs)
		if want.Args >= 0 && want.Args != len(s.Argv)+want.KeyArgs {
			continue
		}
		if got.Spec() == want.Spec() {
			return
		}
		diffs = append(diffs, want.Spec())
	}
	t.Fatalf("%s %s classified as\n  %s\nwant one of\n  %s", s.Library, s.Name, got.Spec(), strings.Join(diffs, "\n  "))
}

// The scripts of the libraries installed here, read from the libraries at
// test time, are classified as their facts say; their SHA1s are the facts'.
func TestInstalledLibraryScriptsMatchFacts(t *testing.T) {
	scripts, err := libscripts.Installed(".")
	if err != nil {
		t.Fatal(err)
	}
	facts := factsBySha()
	for _, s := range scripts {
		t.Run(s.Library+" "+s.Name, func(t *testing.T) {
			if sha := sandbox.Sha1([]byte(s.Text)); sha != s.Fact {
				t.Fatalf("sha1 of the installed text is %s; the fact says %s (a new library version?)", sha, s.Fact)
			}
			checkAgainstFact(t, s, facts)
		})
	}
}

// Scripts in the style of libraries that cannot run here behave as the
// library's script, with other text: they classify as the fact they stand
// for.
func TestStyleScriptsMatchFacts(t *testing.T) {
	facts := factsBySha()
	for _, s := range libscripts.Styles() {
		t.Run(s.Library+" "+s.Name, func(t *testing.T) {
			if sandbox.Sha1([]byte(s.Text)) == s.Fact {
				t.Fatalf("a style script must not be the library's text")
			}
			checkAgainstFact(t, s, facts)
		})
	}
}

// Every fact parses, prints back the same, and no two facts for one sha1
// cover the same call.
func TestFactsAreWellFormed(t *testing.T) {
	seen := map[string]bool{}
	for _, f := range Facts() {
		if got := f.Class.Spec(); got != f.Spec {
			t.Errorf("%s %s: spec prints back as\n%s\nnot\n%s", f.Library, f.Script, got, f.Spec)
		}
		if len(f.Sha) != 40 || strings.ToLower(f.Sha) != f.Sha {
			t.Errorf("%s %s: sha1 %q", f.Library, f.Script, f.Sha)
		}
		key := f.Sha + fmtControls(f.Class)
		if seen[key] {
			t.Errorf("%s %s: a second fact for the same sha1 and control values", f.Library, f.Script)
		}
		seen[key] = true
	}
}

func fmtControls(c *spec.Class) string {
	var b strings.Builder
	for _, ct := range c.Controls {
		b.WriteString(ct.Value + "|")
	}
	return b.String()
}

// Scripts no test has seen elsewhere, in other styles, one or more per
// role: local aliases, early returns, redis.pcall, EXISTS before GET,
// seconds instead of milliseconds, SET with XX, GETRANGE.
func TestFreshScriptsClassify(t *testing.T) {
	for _, c := range []struct {
		name, text, call, want string
	}{
		{"acquire, seconds, status reply", `local key, owner, secs = KEYS[1], ARGV[1], ARGV[2]
if redis.call('EXISTS', key) == 1 then return redis.status_reply('BUSY') end
redis.call('SET', key, owner, 'EX', secs)
return redis.status_reply('ACQUIRED')`, "job:1 -- w-7 30",
			"acquire keys=1 args=2 token=1 ttl=2s; missing: +ACQUIRED; own: +BUSY; own-no-ttl: +BUSY; other: +BUSY; other-no-ttl: +BUSY"},
		{"acquire answering the holder's PTTL", `if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return nil end
return redis.call('pttl', KEYS[1])`, "job:1 -- w-7 30000",
			"acquire keys=1 args=2 token=1 ttl=2ms; missing: nil; own: pttl; own-no-ttl: -1; other: pttl; other-no-ttl: -1"},
		{"acquire with a TTL computed from an argument", `return redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2] + 7)`, "job:1 -- w-7 1000",
			`acquire keys=1 args=2 token=1 ttl=const:1007 control=2:"1000"; missing: +OK; own: nil; own-no-ttl: nil; other: nil; other-no-ttl: nil`},
		{"release with pcall and an early return", `local k = KEYS[1]
local cur = redis.pcall('get', k)
if not cur then return -2 end
if cur ~= ARGV[1] then return -1 end
redis.pcall('unlink', k)
return 1`, "job:1 -- w-7",
			"release keys=1 args=1 token=1; missing: -2; own: 1; own-no-ttl: 1; other: -1; other-no-ttl: -1"},
		{"release by GETRANGE of the whole value", `local n = redis.call('strlen', KEYS[1])
if n == string.len(ARGV[1]) and redis.call('getrange', KEYS[1], 0, -1) == ARGV[1] then
  return redis.call('del', KEYS[1])
end
return 0`, "job:1 -- w-7",
			"release keys=1 args=1 token=1; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"},
		{"extend in seconds with SET XX, true and false", `local mine = redis.call('get', KEYS[1]) == ARGV[2]
if mine then
  redis.call('set', KEYS[1], ARGV[2], 'XX', 'EX', ARGV[1])
end
return mine`, "job:1 -- 15 w-7",
			"extend keys=1 args=2 token=2 ttl=1s nottl-acts; missing: nil; own: 1; own-no-ttl: 1; other: nil; other-no-ttl: nil"},
		{"extend-or-acquire with EXISTS first", `if redis.call('exists', KEYS[1]) == 0 then
  redis.call('set', KEYS[1], ARGV[1], 'px', ARGV[2])
  return 'new'
end
if redis.call('get', KEYS[1]) == ARGV[1] then
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 'kept'
end
return false`, "job:1 -- w-7 20000",
			`extend-or-acquire keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: "new"; own: "kept"; own-no-ttl: "kept"; other: nil; other-no-ttl: nil`},
		{"extend taking its TTL and token in KEYS", `local k, ms, me = KEYS[1], KEYS[2], KEYS[3]
if redis.call('get', k) ~= me then return 0 end
redis.call('pexpire', k, ms)
return 1`, "job:1 20000 w-7 --",
			"extend keys=1 args=2 keyargs=2 token=2 ttl=1ms nottl-acts; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"},
		{"owner TTL query in seconds", `if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -2 end
return redis.call('TTL', KEYS[1])`, "job:1 -- w-7",
			"ttl keys=1 args=1 token=1; missing: -2; own: ttl; own-no-ttl: -1; other: -2; other-no-ttl: -2"},
		{"owner query", `return redis.call('get', KEYS[1]) == ARGV[1]`, "job:1 -- w-7",
			"owner keys=1 args=1 token=1; missing: nil; own: 1; own-no-ttl: 1; other: nil; other-no-ttl: nil"},
		{"value query", `return redis.call('get', KEYS[1])`, "job:1 --",
			"value keys=1 args=0; missing: nil; other: value; other-no-ttl: value"},
		{"inspect with the key's name", `local v = redis.call('get', KEYS[1])
return {KEYS[1], v or '', redis.call('pttl', KEYS[1])}`, "job:1 --",
			`inspect keys=1 args=0; missing: [KEYS[1], "", -2]; other: [KEYS[1], value, pttl]; other-no-ttl: [KEYS[1], value, -1]`},
		{"multi-key acquire answering the first key taken", libscripts.BatchAcquire, "a b c -- t1 t2 t3 9000",
			"acquire keys=3 args=4 tokens=1,2,3 ttl=4ms; missing: [1, nkeys]; own: [0, index, KEYS[index]]; own-no-ttl: [0, index, KEYS[index]]; other: [0, index, KEYS[index]]; other-no-ttl: [0, index, KEYS[index]]"},
		{"acquire until a deadline (SET PXAT)", `return redis.call("SET", KEYS[1], ARGV[1], "NX", "PXAT", ARGV[2])`, "job:1 -- w-7 " + deadline(5000),
			"acquire keys=1 args=2 token=1 ttl=2ms deadline; missing: +OK; own: nil; own-no-ttl: nil; other: nil; other-no-ttl: nil"},
		{"acquire until a deadline in seconds (SET EXAT)", `if redis.call("SET", KEYS[1], ARGV[2], "NX", "EXAT", ARGV[1]) then return 1 end return 0`, "job:1 -- " + deadlineS(30) + " w-7",
			"acquire keys=1 args=2 token=2 ttl=1s deadline; missing: 1; own: 0; own-no-ttl: 0; other: 0; other-no-ttl: 0"},
		{"extend to a deadline (PEXPIREAT)", `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("PEXPIREAT", KEYS[1], ARGV[2]) end return 0`, "job:1 -- w-7 " + deadline(5000),
			"extend keys=1 args=2 token=1 ttl=2ms deadline nottl-acts; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"},
		{"extend to a deadline in seconds (EXPIREAT), answering EXPIRETIME", `if redis.call("GET", KEYS[1]) ~= ARGV[1] then return -3 end
redis.call("EXPIREAT", KEYS[1], ARGV[2])
return redis.call("TTL", KEYS[1])`, "job:1 -- w-7 " + deadlineS(20),
			"extend keys=1 args=2 token=1 ttl=2s deadline nottl-acts; missing: -3; own: ttl_after; own-no-ttl: ttl_after; other: -3; other-no-ttl: -3"},
		{"acquire with a deadline from TIME", `local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
return redis.call("SET", KEYS[1], ARGV[1], "NX", "PXAT", now + ARGV[2])`, "job:1 -- w-7 8000",
			"acquire keys=1 args=2 token=1 ttl=2ms; missing: +OK; own: nil; own-no-ttl: nil; other: nil; other-no-ttl: nil"},
		{"acquire in two steps, SETNX then PEXPIRE", `if redis.call("setnx", KEYS[1], ARGV[1]) == 1 then
  redis.call("pexpire", KEYS[1], ARGV[2])
  return 1
end
return 0`, "job:1 -- w-7 8000",
			"acquire keys=1 args=2 token=1 ttl=2ms; missing: 1; own: 0; own-no-ttl: 0; other: 0; other-no-ttl: 0"},
		{"multi-key release counting", `local n = 0
for _, k in ipairs(KEYS) do
  if redis.call('get', k) == ARGV[1] then n = n + redis.call('del', k) end
end
return n`, "a b c -- t1",
			"release keys=3 args=1 token=1; missing: 0; own: nkeys; own-no-ttl: nkeys; other: 0; other-no-ttl: 0; partial: count"},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys, argv := splitCall(c.call)
			got := mustClassify(t, c.text, keys, argv)
			if got.Spec() != c.want {
				t.Fatalf("classified as\n  %s\nwant\n  %s", got.Spec(), c.want)
			}
			if back, err := spec.Parse(got.Spec()); err != nil || back.Spec() != c.want {
				t.Fatalf("spec parses back as %v, %v", back, err)
			}
		})
	}
}

// deadline is a Unix time in ms, ms from now; deadlineS the same in s.
func deadline(ms int64) string { return strconv.FormatInt(time.Now().UnixMilli()+ms, 10) }
func deadlineS(s int64) string { return strconv.FormatInt(time.Now().Unix()+s, 10) }

func splitCall(s string) ([]string, []string) {
	k, a, _ := strings.Cut(s, "--")
	return strings.Fields(k), strings.Fields(a)
}

// Refusals name the probe that showed what the script does wrong.
func TestRefusalsNameTheProbe(t *testing.T) {
	for _, c := range []struct {
		name, text, call string
		want             []string
		noTTL            bool
	}{
		{"release that deletes another owner's lock", `if redis.call('get', KEYS[1]) then return redis.call('del', KEYS[1]) end return 0`, "k -- tok",
			[]string{"holding another value", "deleted KEYS[1]", "must leave a key held by another owner alone"}, false},
		{"acquire without expiry", `return redis.call('set', KEYS[1], ARGV[1], 'NX')`, "k -- tok 100",
			[]string{"KEYS[1] missing", "without an expiry"}, true},
		{"a key not in KEYS", `return redis.call('del', 'other:' .. KEYS[1])`, "k -- tok",
			[]string{`accesses key "other:k", which is not in KEYS`}, false},
		{"SETNX never given an expiry", `if redis.call('setnx', KEYS[1], ARGV[1]) == 1 then return 1 end return 0`, "k -- tok",
			[]string{"KEYS[1] missing", `leaves "k" without an expiry (it ran SETNX on it)`}, true},
		{"randomness", `local k = redis.call('randomkey') return 1`, "k -- tok", []string{`calls "RANDOMKEY"`, "randomness"}, false},
		{"math.random", `if math.random() > 2 then return 1 end return 0`, "k -- tok", []string{"math.random"}, false},
		{"os.time", `return os.time()`, "k -- tok", []string{"os.time"}, false},
		{"a command outside the allow-list", `return redis.call('lpush', KEYS[1], 'x')`, "k --", []string{`calls "LPUSH"`, "lists are not a shape"}, false},
		{"PERSIST", `if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('persist', KEYS[1]) end return 0`, "k -- tok",
			[]string{`calls "PERSIST"`, "a lock must always expire"}, false},
		{"database 3", `redis.pcall('select', ARGV[1]) return redis.call('del', KEYS[1])`, "k -- 3", []string{"database 3", "only database 0"}, false},
		{"an endless loop", `while true do end`, "k -- tok", []string{"more than 100000 Lua instructions"}, false},
		{"no keys", `return 1`, " -- tok", []string{"takes no keys"}, false},
		{"a delete that spares a lock holding a constant of its text", `local v = redis.call('GET', KEYS[1]) if v and v ~= '*' then return redis.call('DEL', KEYS[1]) end return 0`, "k --",
			[]string{`holding another value "*"`, "a delete would have deleted KEYS[1]"}, false},
		// A hash lock's release that only takes one hold off while holds
		// are left, re-arming to a TTL no argument or constant gives: it
		// must not pass for a release that frees the lock.
		{"a release that keeps a lock held twice", `if redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return false end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) > 0 then
  return redis.call('pexpire', KEYS[1], redis.call('pttl', KEYS[1]) * 2) - 1
end
redis.call('del', KEYS[1])
return 1`, "k -- tok",
			[]string{"holding ARGV[1] (counted", "a release would have"}, false},
		// A read-write lock's write lock (fields "mode" = "write" and the
		// writer's) is its writer's lock to a hash lock's extend, as the
		// extend's reference reads it (Redisson's write lock renews with
		// a hash lock's script): an extend that spares it must not pass
		// for one that re-arms it.
		{"a renewal that spares a write lock", `if redis.call('hlen', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then
  return redis.call('pexpire', KEYS[1], ARGV[2])
end
return 0`, "k -- tok 30000",
			[]string{`beside "mode" = "write"`, "an extend would have"}, false},
		// A threshold the script computes (no constant 1000 in its text):
		// the relations do not see it, the TTL probes do.
		{"small TTLs read as seconds", `local ttl = tonumber(ARGV[2])
if ttl * 0.001 < 1 then ttl = ttl / 0.001 end
if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ttl) else return 0 end`, "k -- tok 30000",
			[]string{`ARGV[2] = "7"`, "PTTL 7000 ms", "would have set KEYS[1]'s PTTL 7 ms"}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			keys, argv := splitCall(c.call)
			p, ref := sandbox.Compile([]byte(c.text))
			if ref == nil {
				_, ref = Script(p, keys, argv)
			}
			if ref == nil {
				t.Fatalf("classified")
			}
			for _, w := range c.want {
				if !strings.Contains(ref.Error(), w) {
					t.Errorf("refusal %q lacks %q", ref.Error(), w)
				}
			}
			if ref.NoTTL != c.noTTL {
				t.Errorf("NoTTL = %v", ref.NoTTL)
			}
		})
	}
}

// rueidislock's ForceWithContext scripts take a lock whatever its holder:
// refused, saying why, for both of its forms (PXAT, and PX with
// FallbackSETPX).
func TestForcedTakeoverIsRefusedWithWhy(t *testing.T) {
	for name, arg := range map[string]string{"fcqat": deadline(5000), "fcqms": "5000"} {
		text, err := libscripts.GoText(".", "github.com/redis/rueidis", "rueidislock/lock.go", name)
		if err != nil {
			t.Fatal(err)
		}
		p, ref := sandbox.Compile([]byte(text))
		if ref == nil {
			_, ref = Script(p, []string{"rueidislock:0:a"}, []string{"tok-1", arg})
		}
		if ref == nil {
			t.Fatalf("%s classified", name)
		}
		for _, w := range []string{"holding another value", "set KEYS[1] to ARGV[1]", "forced takeover", "never take a key from its holder"} {
			if !strings.Contains(ref.Reason, w) {
				t.Errorf("%s: refusal %q lacks %q", name, ref.Reason, w)
			}
		}
	}
}
