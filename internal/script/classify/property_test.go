package classify

import (
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// Mutations of known scripts that change what they do are refused or
// classified as something else, never as the original; and what is
// classified matches its reference on Redis.
func TestMutationsAreNotClassifiedAsTheOriginal(t *testing.T) {
	r := startRedis(t)
	rng := rand.New(rand.NewSource(3))
	bases := []struct{ name, text, call string }{
		{"release", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`, "k -- tok"},
		{"extend", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`, "k -- tok 30000"},
		{"acquire", `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`, "k -- tok 30000"},
		{"extend-or-acquire", `local v = redis.call("get", KEYS[1])
if v == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end
if v == false then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) and 1 or 0 end
return 0`, "k -- tok 30000"},
		{"ttl", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pttl", KEYS[1]) else return -3 end`, "k -- tok"},
		{"multi-key acquire", `for _, k in ipairs(KEYS) do if redis.call("exists", k) == 1 then return 0 end end
for _, k in ipairs(KEYS) do redis.call("set", k, ARGV[1], "PX", ARGV[2]) end
return #KEYS`, "a b c -- tok 30000"},
	}
	mutations := []struct {
		name     string
		old, new string
	}{
		{"swap the compare", "== ARGV[1]", "~= ARGV[1]"},
		{"compare with ~= on the other side", `v == ARGV[1]`, `v ~= ARGV[1]`},
		{"delete without comparing", `redis.call("get", KEYS[1]) == ARGV[1]`, `true`},
		{"drop the expiry", `, "PX", ARGV[2]`, ``},
		{"pexpire becomes set without expiry", `redis.call("pexpire", KEYS[1], ARGV[2])`, `redis.call("set", KEYS[1], ARGV[1])`},
		{"write another key", `redis.call("del", KEYS[1])`, `redis.call("del", KEYS[1] .. ":x")`},
		{"expire another key", `redis.call("pexpire", KEYS[1],`, `redis.call("pexpire", "x" .. KEYS[1],`},
		{"set another key", `redis.call("set", KEYS[1],`, `redis.call("set", "x:" .. KEYS[1],`},
		{"add a PUBLISH call", `return`, `redis.call("PUBLISH", "ch", "x") return`},
		{"off-by-one token", `ARGV[1]`, `ARGV[2]`},
		{"off-by-one TTL", `ARGV[2]`, `ARGV[3]`},
		{"TTL in seconds", `"pexpire"`, `"expire"`},
		{"PX becomes EX", `"PX"`, `"EX"`},
		{"NX becomes XX", `"NX"`, `"XX"`},
		{"exists becomes not exists", `== 1 then return 0`, `== 0 then return 0`},
		{"delete instead of extend", `redis.call("pexpire", KEYS[1], ARGV[2])`, `redis.call("del", KEYS[1])`},
		{"another reply when not held", `else return 0 end`, `else return 1 end`},
		{"pttl becomes ttl", `"pttl"`, `"ttl"`},
		{"release every key it sees", `then return redis.call("del", KEYS[1]) else`, `then return redis.call("del", KEYS[1]) elseif redis.call("get", KEYS[1]) then return redis.call("del", KEYS[1]) else`},
	}
	applied := 0
	for _, b := range bases {
		keys, argv := splitCall(b.call)
		orig := mustClassify(t, b.text, keys, argv)
		for _, m := range mutations {
			if !strings.Contains(b.text, m.old) {
				continue
			}
			text := strings.Replace(b.text, m.old, m.new, 1)
			applied++
			t.Run(b.name+"/"+m.name, func(t *testing.T) {
				p, ref := sandbox.Compile([]byte(text))
				if ref != nil {
					return
				}
				cl, ref := Script(p, keys, argv)
				if ref != nil {
					return
				}
				if cl.Spec() == orig.Spec() {
					t.Fatalf("mutant\n%s\nclassified as the original: %s", text, cl.Spec())
				}
				checkOracle(t, r, rng, text, cl, keys, argv, 25)
			})
		}
	}
	if applied < 30 {
		t.Fatalf("only %d mutations applied", applied)
	}
}

// Random scripts built from the allowed commands are classified correctly
// (the script and its role's reference agree on many random states of a
// real Redis) or refused.
func TestRandomScriptsAreClassifiedCorrectlyOrRefused(t *testing.T) {
	r := startRedis(t)
	rng := rand.New(rand.NewSource(4))
	classified, roles := 0, map[spec.Role]int{}
	n := 400
	if testing.Short() {
		n = 100
	}
	for i := 0; i < n; i++ {
		text := libscripts.Random(rng)
		keys, argv := []string{"k"}, []string{"tok-a", "30000"}
		p, ref := sandbox.Compile([]byte(text))
		if ref != nil {
			t.Fatalf("generated script does not compile: %v\n%s", ref, text)
		}
		cl, ref := Script(p, keys, argv)
		if ref != nil {
			continue
		}
		classified++
		roles[cl.Role]++
		checkOracle(t, r, rng, text, cl, keys, argv, 25)
	}
	t.Logf("%d of %d random scripts classified: %v", classified, n, roles)
	if classified < n/10 || len(roles) < 4 {
		t.Fatalf("only %d of %d random scripts classified (%v): the generator no longer exercises the classifier", classified, n, roles)
	}
}

// A control: the oracle sees a classification that promises the wrong
// reply or the wrong effect.
func TestOracleSeesAWrongClassification(t *testing.T) {
	r := startRedis(t)
	text := `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`
	keys, argv := []string{"k"}, []string{"tok"}
	own := []keySpec{{held: true, value: "tok", ttl: 30000}}
	cl := mustClassify(t, text, keys, argv)
	if d := r.oracle(text, cl, keys, argv, own); d != "" {
		t.Fatalf("the right classification differs: %s", d)
	}
	wrongReply := *cl
	wrongReply.Replies[spec.CaseOwn] = spec.MustTemplate("2")
	if d := r.oracle(text, &wrongReply, keys, argv, own); !strings.Contains(d, "promises :2") {
		t.Fatalf("a wrong reply went unseen: %q", d)
	}
	wrongRole := *cl
	wrongRole.Role, wrongRole.TTLArg, wrongRole.TTLConst = spec.RoleExtend, -1, 5*time.Second
	if d := r.oracle(text, &wrongRole, keys, argv, own); !strings.Contains(d, "the script left") {
		t.Fatalf("a wrong effect went unseen: %q", d)
	}
}
