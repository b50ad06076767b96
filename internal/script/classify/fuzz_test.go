package classify

import (
	"math/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// FuzzClassify: for any text and arguments, compiling and classifying
// never panics and stays within the sandbox's budget; a classification
// prints and parses back to itself, and the script, run in the sandbox on
// further states and arguments drawn from the probes' own vocabulary,
// never does other than its role says or replies other than its templates.
func FuzzClassify(f *testing.F) {
	for _, s := range libscripts.Styles() {
		a := append(s.Argv, "", "", "")
		f.Add(s.Text, uint8(3*len(s.Argv)), a[0], a[1], a[2], int64(1))
	}
	rng := rand.New(rand.NewSource(5))
	for i := 0; i < 20; i++ {
		f.Add(libscripts.Random(rng), uint8(1), "tok-a", "30000", "", int64(i))
	}
	f.Add(libscripts.BatchAcquire, uint8(3), "a", "b", "9000", int64(2))
	// Locks of several owners and deadlines: Symfony's RedisStore and
	// rueidislock, their texts read from the installed libraries.
	sf, err := libscripts.Symfony()
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range sf {
		a := append(slices.Clone(s.Argv), "", "", "")
		f.Add(s.Text, uint8(3*len(s.Argv)), a[0], a[1], a[2], int64(3))
	}
	for _, name := range []string{"acqat", "extend"} {
		text, err := libscripts.GoText(".", "github.com/redis/rueidis", "rueidislock/lock.go", name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(text, uint8(6), "tok", strconv.FormatInt(time.Now().UnixMilli()+5000, 10), "", int64(4))
	}
	for _, s := range []string{"", "return", "return {", "while true do end", "return redis.call('incr', KEYS[1])",
		"local t = {} t[1] = t return t", "return string.rep('x', 1e9)", "return ARGV[1] .. ARGV[2]"} {
		f.Add(s, uint8(2), "x", "1", "2", int64(0))
	}

	f.Fuzz(func(t *testing.T, text string, nk uint8, a1, a2, a3 string, seed int64) {
		keys := []string{"k:1", "k:2", "k:3"}[:1+int(nk%3)]
		argv := []string{a1, a2, a3}[:int(nk/3%4)%4]
		if len(argv) > 3 {
			argv = argv[:3]
		}
		p, ref := sandbox.Compile([]byte(text))
		if ref != nil {
			return
		}
		cl, ref := Script(p, keys, argv)
		if ref != nil {
			if ref.Reason == "" {
				t.Fatalf("a refusal without a reason")
			}
			return
		}
		back, err := spec.Parse(cl.Spec())
		if err != nil || back.Spec() != cl.Spec() {
			t.Fatalf("spec %q parses back as %v, %v", cl.Spec(), back, err)
		}
		lk, la := cl.Split(spec.StrArgs(keys), spec.StrArgs(argv))
		keys, argv = sandbox.Strs(lk), sandbox.Strs(la)
		c := &classifier{p: p, keys: keys, argv: argv, extra: cl.KeyArgs, names: cl.Names(), left: classifyBudget, now: time.Now().UnixMilli()}
		defer func() {
			if c.r != nil {
				c.r.Close()
			}
		}()
		rng := rand.New(rand.NewSource(seed))
		for i := 0; i < 12; i++ {
			a := slices.Clone(argv)
			if cl.Tokens != nil && rng.Intn(2) == 0 {
				alt := tokenAlts[rng.Intn(len(tokenAlts))]
				for _, t := range cl.Tokens {
					a[t] = alt
				}
			}
			v := argVariant{keys: keys, argv: a, full: true}
			states := c.states(cl, v)
			// Mix the battery's per-key states across keys.
			specs := make([]keySpec, len(keys))
			for k := range specs {
				specs[k] = states[rng.Intn(len(states))][k]
			}
			s, ref := c.check(cl, keys, a, specs, describe(keys, a, argv, specs, nil))
			if ref != nil {
				if ref.Kind == sandbox.RefuseBudget {
					return
				}
				t.Fatalf("%s\nclassified as %s, but %s", text, cl.Spec(), ref.Reason)
			}
			tm := cl.Replies[s.Sit.Case]
			if tm == nil || !tm.Fill(s.Sit).Equal(s.Reply) {
				t.Fatalf("%s\nclassified as %s, but %s it replied %v (case %s)", text, cl.Spec(), s.Probe, s.Reply, s.Sit.Case)
			}
		}
	})
}
