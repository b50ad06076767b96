package classify

import (
	"math"
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// A script whose role depends on an argument's value (an owner singled out
// by a constant in its text) is classified for each value's relations: a
// classification made on an ordinary owner's call never answers for the
// special owner's, whichever came first, and the special owner never
// re-enters.
func TestRoleHoldsOnlyForItsArgumentsRelations(t *testing.T) {
	r := startRedis(t)
	rng := rand.New(rand.NewSource(29))
	keys := spec.BytesOf([]string{"lock:report"})
	for _, sw := range libscripts.Switches() {
		t.Run(sw.Name, func(t *testing.T) {
			ordinary, special := spec.BytesOf(sw.Ordinary), spec.BytesOf(sw.Special)
			for _, specialFirst := range []bool{false, true} {
				reg := NewRegistry()
				e := reg.Load([]byte(sw.Text), true)
				first, second := ordinary, special
				if specialFirst {
					first, second = special, ordinary
				}
				if _, ref := reg.Classify(e, keys, first); ref != nil {
					t.Fatalf("first call %q refused: %v", first, ref)
				}
				if cl := e.Lookup(keys, second); cl != nil {
					t.Fatalf("the classification of %q answers for %q: %s", first, second, cl.Spec())
				}
				sc, ref := reg.Classify(e, keys, special)
				if ref != nil {
					t.Fatalf("special call refused: %v", ref)
				}
				oc, ref := reg.Classify(e, keys, ordinary)
				if ref != nil {
					t.Fatalf("ordinary call refused: %v", ref)
				}
				if oc.Role != spec.RoleExtendOrAcquire || !oc.Acts(spec.CaseOwn) {
					t.Errorf("ordinary owner: %s, want an extend-or-acquire", oc.Spec())
				}
				if sc.Acts(spec.CaseOwn) || !sc.Acts(spec.CaseMissing) {
					t.Errorf("special owner: %s, want an acquire that does not re-enter", sc.Spec())
				}
				// The script and the role agree on Redis for both owners.
				checkOracle(t, r, rng, sw.Text, oc, sandbox.Strs(keys), sw.Ordinary, 10)
				checkOracle(t, r, rng, sw.Text, sc, sandbox.Strs(keys), sw.Special, 10)
			}
			// Another ordinary owner stands in the same relations: no new
			// classification.
			reg := NewRegistry()
			e := reg.Load([]byte(sw.Text), true)
			oc, _ := reg.Classify(e, keys, ordinary)
			other := spec.BytesOf(append([]string{"1" + sw.Ordinary[0]}, sw.Ordinary[1:]...))
			if cl := e.Lookup(keys, other); cl != oc {
				t.Errorf("owner %q is not covered by the classification of %q", other[0], ordinary[0])
			}
		})
	}
}

// The signature tells calls apart exactly by the relations: to the
// script's constants, to each other, numeric or not, sign and whole.
func TestRelationsTellCallsApart(t *testing.T) {
	text := `if ARGV[1] == '*' or tonumber(ARGV[2]) > 1000 or ARGV[3] == 'force' or ARGV[3] == 'anon:' then return 1 end return 0`
	p, ref := sandbox.Compile([]byte(text))
	if ref != nil {
		t.Fatal(ref)
	}
	sig := func(call string) string {
		keys, argv := splitCall(call)
		return spec.SigOf(p.Lits, keys, argv)
	}
	for _, c := range []struct {
		a, b string
		same bool
	}{
		{"k -- owner-a 30000 x", "k -- owner-b 45000 y", true},
		{"k -- owner-a 30000 x", "other-key -- owner-a 30000 x", true},
		{"k -- owner-a 30000 x", "k -- * 30000 x", false},               // equal to a string constant
		{"k -- owner-a 30000 x", "k -- owner-a 30000 force", false},     // a reserved token
		{"k -- owner-a 30000 x", "k -- owner-a 700 x", false},           // the other side of a number constant
		{"k -- owner-a 30000 x", "k -- owner-a 1000 x", false},          // equal to it
		{"k -- owner-a 1000 x", "k -- owner-a 1e3 x", true},             // the same number
		{"k -- owner-a 1000 x", "k -- owner-a 0x3e8 x", true},           // in hexadecimal
		{"k -- owner-a -5 x", "k -- owner-a -7 x", true},                //
		{"k -- owner-a -5 x", "k -- owner-a 0 x", false},                // sign
		{"k -- owner-a 5 x", "k -- owner-a 5.5 x", false},               // whole or not
		{"k -- owner-a 5 x", "k -- owner-a five x", false},              // numeric or not
		{"k -- owner-a 30000 owner-a", "k -- owner-a 30000 x", false},   // equal to each other
		{"k -- 300 30000 x", "k -- 30001 30000 x", false},               // above or below each other
		{"k -- 300 30000 x", "k -- 500 30000 x", true},                  //
		{"k -- owner-a 30000 30000", "k -- owner-a 30000 40000", false}, //
		{"k -- nan 5 x", "k -- NaN(1) 5 x", true},                       // strtod's nan
		{"k -- inf 5 x", "k -- 1e999 5 x", true},                        // infinity, either way
		{"k -- owner-a 30000 x", "k -- anon:a 30000 x", false},          // beginning with a string constant
		{"k -- owner-a 30000 x", "k -- a-anon: 30000 x", false},         // ending with one
		{"k -- owner-a 30000 x", "k -- force:a 30000 x", true},          // not a word (command and option names are)
		{"k -- owner-a 10001 x", "k -- owner-a 20001 x", true},          // beginning with a number constant is no relation
	} {
		if got := sig(c.a) == sig(c.b); got != c.same {
			t.Errorf("%q and %q: same relations = %v, want %v", c.a, c.b, got, c.same)
		}
	}
	// Beyond the values related without allocating, the same answers.
	many := func(swap bool, v string) string {
		parts := []string{"k", "--", v}
		for i := 0; i < 80; i++ {
			parts = append(parts, strconv.Itoa(100+i))
		}
		if swap {
			parts[10], parts[11] = parts[11], parts[10]
		}
		return strings.Join(parts, " ")
	}
	if sig(many(false, "a")) != sig(many(false, "b")) || sig(many(false, "a")) == sig(many(true, "a")) || sig(many(false, "a")) == sig(many(false, "*")) {
		t.Error("a call of 81 arguments is not told apart by its relations")
	}
}

// argNumber reads a string as a number as Redis's Lua does.
func TestArgNumberReadsAsRedisLua(t *testing.T) {
	r := startRedis(t)
	script := `local n = tonumber(ARGV[1]) if n == nil then return false end
if n ~= n then return 'nan' end
return string.format('%.17g', n)`
	for _, s := range []string{"1", " 1 ", "1 x", "-0", "+5", "0x10", "0X1p4", "-0x10", "0x", "0x.8", "1e5", "1e", "1e+", "1.", ".5", ".",
		"inf", "-Infinity", "INF", "infx", "nan", "NaN(12)", "nan(", "1_000", "5\x00junk", "\x00", "\t7\n", "\v8\f", "0b1", "1e400", "-1e400", "1e-400",
		"00012", "08", "", "abc", "12345678901234567890", "123456789012345", "0x1.8p1", "1.5e+3", "1,5", "--1", "+-1", "0x1p", "9007199254740993"} {
		v := r.Do("EVAL", script, "0", s)
		f, ok := sandbox.ArgNumber([]byte(s))
		want := ""
		if ok {
			switch {
			case math.IsNaN(f):
				want = "nan"
			case math.IsInf(f, 1):
				want = "inf"
			case math.IsInf(f, -1):
				want = "-inf"
			default:
				want = strconv.FormatFloat(f, 'g', 17, 64)
				if !strings.ContainsAny(want, "e.") {
					want = strconv.FormatFloat(f, 'f', -1, 64)
				}
			}
		}
		got := string(v.Str)
		if v.Kind == resp.KindNil {
			got = ""
		}
		if normFloat(got) != normFloat(want) {
			t.Errorf("%q: Redis's Lua reads %q, argNumber %q", s, got, want)
		}
	}
}

// normFloat writes a %.17g number as Go does, to compare the two.
func normFloat(s string) string {
	if s == "" || s == "nan" || strings.HasSuffix(s, "inf") {
		return s
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return "unreadable " + s
	}
	return strconv.FormatFloat(f, 'g', -1, 64)
}

// A call covered by a classification is found without allocating.
func TestLookupDoesNotAllocate(t *testing.T) {
	sw := libscripts.Switches()[0]
	reg := NewRegistry()
	e := reg.Load([]byte(sw.Text), true)
	keys, argv := spec.BytesOf([]string{"lock:a"}), spec.BytesOf(sw.Ordinary)
	if _, ref := reg.Classify(e, keys, argv); ref != nil {
		t.Fatal(ref)
	}
	if n := testing.AllocsPerRun(100, func() {
		if e.Lookup(keys, argv) == nil {
			t.Fatal("not covered")
		}
	}); n != 0 {
		t.Fatalf("Lookup allocates %v times", n)
	}
}
