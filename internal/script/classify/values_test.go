package classify

import (
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// valueSwitches are lock scripts that treat a value otherwise for a reason
// the relations do not see (a value they compute from an argument), with a
// first call the probes accept and a second, in the same relations, that
// the script treats otherwise.
var valueSwitches = []struct {
	name, text    string
	first, second []string
}{
	{
		// A TTL below 1024 is in seconds: read on a call in ms, a call
		// of 60 (s) must not be served as 60 ms.
		name: "seconds below 2^10",
		text: `if tonumber(ARGV[2]) < 2^10 then
  return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
		first: []string{"owner-a", "30000"}, second: []string{"owner-b", "60"},
	},
	{
		name:  "acquire capped at a minute",
		text:  `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', math.min(tonumber(ARGV[2]), 60 * 1000))`,
		first: []string{"owner-a", "30000"}, second: []string{"owner-b", "120000"},
	},
	{
		name: "extend capped at a minute",
		text: `if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], math.min(tonumber(ARGV[2]), 60 * 1000))
end
return 0`,
		first: []string{"owner-a", "30000"}, second: []string{"owner-b", "120000"},
	},
	{
		name:  "acquire of at least a second",
		text:  `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', math.max(tonumber(ARGV[2]), 10 * 100))`,
		first: []string{"owner-a", "30000"}, second: []string{"owner-b", "500"},
	},
	{
		// An empty owner is anonymous and never re-enters.
		name: "empty owner",
		text: `local v = redis.call('GET', KEYS[1])
if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
if v == ARGV[1] and #ARGV[1] > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) return 1 end
return 0`,
		first: []string{"worker-7f3a", "30000"}, second: []string{"", "30000"},
	},
	{
		name: "token cut to 400 bytes",
		text: `if redis.call('GET', KEYS[1]) == string.sub(ARGV[1], 1, 400) then
  return redis.call('DEL', KEYS[1])
end
return 0`,
		first: []string{"owner-a"}, second: []string{strings.Repeat("a-long-owner-", 40)},
	},
	{
		name: "forced by a prefix",
		text: `if string.sub(ARGV[1], 1, 6) == 'force:' or redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`,
		first: []string{"owner-a"}, second: []string{"force:owner-a"},
	},
	{
		// Numeric owners from 2^40 up are the operators', who may free
		// any lock.
		name: "operators above 2^40",
		text: `if (tonumber(ARGV[1]) or 0) >= 2^40 or redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`,
		first: []string{"4242"}, second: []string{"1099511627776"},
	},
	{
		name: "forced by a long reason",
		text: `if #ARGV[2] > 20 or redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0`,
		first: []string{"owner-a", "done"}, second: []string{"owner-a", "maintenance window, forced"},
	},
}

// A classification holds only for values within those its probes ran:
// a later call that a script treats otherwise, for a reason the relations
// do not see, is classified on its own, and either refused or classified
// as what the script does (on a real redis-server) with its values.
func TestClassificationHoldsOnlyForValuesProbed(t *testing.T) {
	r := startRedis(t)
	rng := rand.New(rand.NewSource(31))
	keys := []string{"lock:report"}
	for _, sw := range valueSwitches {
		t.Run(sw.name, func(t *testing.T) {
			reg := NewRegistry()
			e := reg.Load([]byte(sw.text), true)
			k := spec.BytesOf(keys)
			first, ref := reg.Classify(e, k, spec.BytesOf(sw.first))
			if ref != nil {
				t.Fatalf("first call %q refused: %v", sw.first, ref)
			}
			if cl := e.Lookup(k, spec.BytesOf(sw.second)); cl != nil {
				t.Fatalf("the classification of %q answers for %q: %s", sw.first, sw.second, cl.Spec())
			}
			second, ref := reg.Classify(e, k, spec.BytesOf(sw.second))
			if ref != nil {
				t.Logf("second call refused: %s", ref.Reason)
			} else {
				t.Logf("second call: %s", second.Spec())
				checkOracle(t, r, rng, sw.text, second, keys, sw.second, 20)
			}
			checkOracle(t, r, rng, sw.text, first, keys, sw.first, 20)
			// The first call's own values stay served.
			if e.Lookup(k, spec.BytesOf(sw.first)) != first {
				t.Fatalf("the first call is no longer covered")
			}
		})
	}
}

// What a classification was probed with is recorded: the TTLs around the
// call's, the tokens' lengths, an ignored argument's.
func TestSeenBoundsTheValuesServed(t *testing.T) {
	text := `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end return 0`
	p, ref := sandbox.Compile([]byte(text))
	if ref != nil {
		t.Fatal(ref)
	}
	cl, ref := Script(p, []string{"lock:a"}, []string{"owner-a", "30000", "note"})
	if ref != nil {
		t.Fatal(ref)
	}
	keys := spec.BytesOf([]string{"lock:b"})
	for _, c := range []struct {
		argv []string
		want bool
	}{
		{[]string{"owner-b", "30000", "note"}, true},
		{[]string{"owner-b", "45000", "other note"}, true},
		{[]string{"t", "2000", ""}, true},
		{[]string{"owner-b", "600000", "note"}, false}, // a TTL beyond those probed
		{[]string{"owner-b", "5", "note"}, false},      // and below
		{[]string{"", "30000", "note"}, false},         // an empty token
		{[]string{strings.Repeat("o", 400), "30000", "note"}, false},
		{[]string{"owner-b", "30000", strings.Repeat("n", 400)}, false},
	} {
		if got := cl.Covers(keys, spec.BytesOf(c.argv)); got != c.want {
			t.Errorf("%q: covered %v, want %v (%s)", sandbox.Short(strings.Join(c.argv, " ")), got, c.want, strings.Join(cl.Explain(), "; "))
		}
	}
}

// A numeric token is bounded by its order of magnitude, not its value: a
// library whose tokens are random numbers, or a count that grows, stays
// within its first classification's bounds on almost every call, while a
// token ten thousand times larger (past a threshold the script may
// compute) is classified on its own.
func TestSeenBoundsNumericTokensByTheirOrder(t *testing.T) {
	text := `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`
	p, ref := sandbox.Compile([]byte(text))
	if ref != nil {
		t.Fatal(ref)
	}
	cl, ref := Script(p, []string{"lock:a"}, []string{"4242"})
	if ref != nil {
		t.Fatal(ref)
	}
	keys := spec.BytesOf([]string{"lock:b"})
	for _, c := range []struct {
		tok  string
		want bool
	}{
		{"4243", true}, {"1000", true}, {"9999", true}, {"7315", true},
		{"1099511627776", false}, {"12", false}, {"-4242", false},
	} {
		if got := cl.Covers(keys, spec.BytesOf([]string{c.tok})); got != c.want {
			t.Errorf("%q: covered %v, want %v (%s)", c.tok, got, c.want, strings.Join(cl.Explain(), "; "))
		}
	}
}

// A deadline is bounded by the time left to it: a later call with the same
// time ahead is covered, read a moment later or from a clock a little
// ahead; one much further ahead is classified on its own, and one already
// passed is covered (read as a read of the keys).
func TestSeenBoundsTheTimeLeftToADeadline(t *testing.T) {
	text := `return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PXAT', ARGV[2])`
	p, ref := sandbox.Compile([]byte(text))
	if ref != nil {
		t.Fatal(ref)
	}
	ahead := func(ms int64) string { return strconv.FormatInt(time.Now().UnixMilli()+ms, 10) }
	cl, ref := Script(p, []string{"lock:a"}, []string{"owner-a", ahead(30000)})
	if ref != nil {
		t.Fatal(ref)
	}
	if !cl.Deadline {
		t.Fatalf("classified as %s, want a deadline", cl.Spec())
	}
	keys := spec.BytesOf([]string{"lock:b"})
	time.Sleep(20 * time.Millisecond)
	for _, c := range []struct {
		argv []string
		want bool
	}{
		{[]string{"owner-b", ahead(30000)}, true},
		{[]string{"owner-b", ahead(30500)}, true},
		{[]string{"owner-b", ahead(5000)}, true},
		{[]string{"owner-b", ahead(-5000)}, true},
		{[]string{"owner-b", ahead(600000)}, false},
	} {
		if got := cl.Covers(keys, spec.BytesOf(c.argv)); got != c.want {
			t.Errorf("%q: covered %v, want %v (%s)", c.argv, got, c.want, strings.Join(cl.Explain(), "; "))
		}
	}
}
