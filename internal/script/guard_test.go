package script

import (
	"math/rand"
	"strconv"
	"strings"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// evalOn runs a script text on Redis with keys and argv.
func (r *redisConn) evalOn(text string, keys, argv []string) resp.Value {
	a := append([]string{"EVAL", text, strconv.Itoa(len(keys))}, keys...)
	return r.do(append(a, argv...)...)
}

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
		cases = append(cases, sc{randomScript(rng), []string{"k"}, []string{"tok-a", "30000"}})
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
		guarded, ref := Guard([]byte(c.text), "redlock-proxy:", 60_000)
		if ref != nil {
			t.Fatalf("%s\nrefused by the guard: %s", c.text, ref.Reason)
		}
		for _, st := range states {
			specs := make([]keySpec, len(c.keys))
			for i := range specs {
				specs[i] = st[0]
			}
			r.setState(c.keys, specs)
			want := r.evalOn(c.text, c.keys, c.argv)
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
			got := r.evalOn(string(guarded.Body), c.keys, c.argv)
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

// What the guard refuses before a script runs, and what it stops while
// it runs: on a real Redis, nothing is changed.
func TestGuardRefuses(t *testing.T) {
	r := startRedis(t)
	for _, c := range []struct {
		name, text string
		keys       []string
		want       string
		static     bool
	}{
		{"FLUSHALL", `return redis.call('flushall')`, nil, "flushall, which is not one of the commands", false},
		{"FLUSHALL by pcall, caught", `local e = redis.pcall('flushall') return 1`, nil, "flushall", false},
		{"FLUSHALL through a local alias", `local r = redis local c = r.call return c('FLUSHALL')`, nil, "flushall", false},
		{"CONFIG SET", `return redis.call('config', 'set', 'maxmemory-policy', 'allkeys-lru')`, nil, "config", false},
		{"SCRIPT FLUSH", `return redis.call('script', 'flush')`, nil, "script, which", false},
		{"a write with no keys", `return redis.call('set', 'x', 'v', 'PX', 60000)`, nil, "not in KEYS", false},
		{"a write to a key not given", `return redis.call('set', 'x', 'v', 'PX', 60000)`, []string{"k"}, "not in KEYS", false},
		{"a number for a key", `return redis.call('set', 5, 'v', 'PX', 60000)`, []string{"5"}, "not a string", false},
		{"KEYS changed first", `KEYS[1] = 'x' return redis.call('set', 'x', 'v', 'PX', 60000)`, []string{"k"}, "not in KEYS", false},
		{"SET without an expiry", `return redis.call('set', KEYS[1], 'v')`, []string{"k"}, "SET without an expiry", false},
		{"HSET never given an expiry", `return redis.call('hset', KEYS[1], 'f', 'v')`, []string{"k"}, "without an expiry, or with more than max_ttl; it was deleted", false},
		{"a TTL beyond max_ttl", `return redis.call('set', KEYS[1], 'v', 'PX', 90000000)`, []string{"k"}, "more than max_ttl", false},
		{"GETEX PERSIST", `redis.call('set', KEYS[1], 'v', 'PX', 1000) return redis.call('getex', KEYS[1], 'persist')`, []string{"k"}, "without an expiry", false},
		{"PERSIST", `return redis.call('persist', KEYS[1])`, []string{"k"}, "persist, which", false},
		{"the proxy's own keys", `return redis.call('del', KEYS[1])`, []string{"redlock-proxy:marker"}, "the proxy's own keys", false},
		{"_G", `return _G.redis.call('flushall')`, nil, "reads the global _G", true},
		{"rawget", `return rawget(_G, 'redis').call('flushall')`, nil, "reads the global rawget", true},
		{"loadstring", `return loadstring("return redis.call('flushall')")()`, nil, "reads the global loadstring", true},
		{"load", `return load("return 1")()`, nil, "reads the global load", true},
		{"getmetatable", `return getmetatable('').__index`, nil, "reads the global getmetatable", true},
		{"debug", `return debug.getupvalue(redis.call, 1)`, nil, "reads the global debug", true},
		{"the guard's own names", `return __rlp_call('flushall')`, nil, "reads the global __rlp_call", true},
		{"a global assigned", `redis = nil return 1`, nil, "assigns the global redis", true},
		{"a global function", `function f() return 1 end return f()`, nil, "assigns the global f", true},
		{"setfenv", `setfenv(1, {}) return 1`, nil, "reads the global setfenv", true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r.do("FLUSHALL")
			r.do("SET", "canary", "alive", "PX", "60000")
			r.do("SET", "redlock-proxy:marker", "m")
			guarded, ref := Guard([]byte(c.text), "redlock-proxy:", 60_000)
			if c.static {
				if ref == nil || !strings.Contains(ref.Reason, c.want) {
					t.Fatalf("Guard = %v; want a refusal naming %q", ref, c.want)
				}
				return
			}
			if ref != nil {
				t.Fatalf("refused before it ran: %v", ref)
			}
			v := r.evalOn(string(guarded.Body), c.keys, nil)
			if v.Kind != resp.KindError || !strings.Contains(string(v.Str), c.want) {
				t.Fatalf("replied %v; want an error naming %q", v, c.want)
			}
			if got := r.do("GET", "canary"); string(got.Str) != "alive" {
				t.Fatalf("the canary key is gone: %v", got)
			}
			if got := r.do("DBSIZE"); got.Int != 2 {
				t.Fatalf("DBSIZE %v after the refused script; want the 2 keys it started with", got)
			}
			if got := r.do("CONFIG", "GET", "maxmemory-policy"); string(got.Elems[1].Str) != "noeviction" {
				t.Fatalf("maxmemory-policy is %v", got)
			}
		})
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
