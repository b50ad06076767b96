package classify

import (
	"math/rand"
	"strings"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/script/guard"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// A script written back by the guard does what the original does on
// Redis: the same reply and the same keys, on many states, for library
// scripts and random ones (those that leave a key without expiry aside,
// which the guard deletes).
func TestGuardedScriptsBehaveAsTheOriginal(t *testing.T) {
	r := startRedis(t)
	rng := rand.New(rand.NewSource(5))
	type sc struct {
		text       string
		keys, argv []string
	}
	var cases []sc
	scripts, err := libscripts.Installed(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range append(scripts, libscripts.Styles()...) {
		cases = append(cases, sc{s.Text, s.Keys, s.Argv})
	}
	for i := 0; i < 150; i++ {
		cases = append(cases, sc{libscripts.Random(rng), []string{"k"}, []string{"tok-a", "30000"}})
	}
	cases = append(cases,
		sc{`local t = {} for i = 1, 3 do t[#t+1] = i * 2 end local s = 0 for _, v in ipairs(t) do s = s + v end
local function f(n) if n <= 1 then return 1 end return n * f(n - 1) end
local obj = {n = 2} function obj:get() return self.n end
return {s, f(5), obj:get(), #"x\0y\r\n", select('#', 1, 2, 3), ("ab"):rep(2), -2 ^ 2, not nil, 7 % 3, "a" .. 1 .. "\"q\\"}`, []string{"k"}, nil},
		sc{`local a, b = unpack({1, 2}) local function v(...) return select('#', ...), ... end
return {v(a, b, nil), (v(1, 2)), {v(3)}}`, []string{"k"}, nil},
		sc{`local n = 0 repeat local m = n n = n + 1 until m >= 3 while true do if n > 5 then break end n = n + 1 end return n`, []string{"k"}, nil},
	)
	states := [][]keySpec{
		{{}},
		{{held: true, value: "tok-a", ttl: 20_000}},
		{{held: true, value: "someone", ttl: 20_000}},
		{{held: true, value: "tok-a", ttl: 0}},
	}
	compared := 0
	for _, c := range cases {
		guarded, ref := guard.Script([]byte(c.text), "redlock-proxy:", 60_000)
		if ref != nil {
			t.Fatalf("%s\nrefused by the guard: %s", c.text, ref.Reason)
		}
		for _, st := range states {
			specs := make([]keySpec, len(c.keys))
			for i := range specs {
				specs[i] = st[0]
			}
			r.setState(c.keys, specs)
			want := r.Eval(c.text, c.keys, c.argv)
			after := r.state(c.keys)
			if want.Kind == resp.KindError {
				continue
			}
			leftNoTTL := false
			for _, k := range after {
				if k.pttl == -1 || k.pttl > 60_000 {
					leftNoTTL = true
				}
			}
			r.setState(c.keys, specs)
			got := r.Eval(string(guarded.Body), c.keys, c.argv)
			if leftNoTTL && got.Kind == resp.KindError && strings.HasPrefix(string(got.Str), "ERR redlock-proxy:") {
				continue // a key without expiry, or beyond max_ttl: the guard refuses it
			}
			if !nearReply(got, want) {
				t.Fatalf("%s\non %+v: the script replied %v, written back by the guard %v\n%s", c.text, specs, want, got, guarded.Body)
			}
			if g := r.state(c.keys); !sameState(after, g, slack) {
				t.Fatalf("%s\non %+v: the script left %+v, written back by the guard %+v", c.text, specs, after, g)
			}
			compared++
		}
	}
	if compared < 300 {
		t.Fatalf("only %d runs compared", compared)
	}
}

// nearReply compares replies, letting integers that read as TTLs (over a
// second) differ by the moments between the two runs.
func nearReply(a, b resp.Value) bool {
	if a.Kind == resp.KindInt && b.Kind == resp.KindInt && a.Int > 1000 && b.Int > 1000 {
		return near(a.Int, b.Int, slack)
	}
	if a.Kind == resp.KindArray && b.Kind == resp.KindArray && len(a.Elems) == len(b.Elems) {
		for i := range a.Elems {
			if !nearReply(a.Elems[i], b.Elems[i]) {
				return false
			}
		}
		return true
	}
	return a.Equal(b)
}
func near(a, b, tol int64) bool { return a-b <= tol && b-a <= tol }
