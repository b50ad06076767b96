package guard

import (
	"strings"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/respconn"
)

// What the guard refuses before a script runs, and what it stops while
// it runs: on a real Redis, nothing is changed.
func TestGuardRefuses(t *testing.T) {
	r := respconn.Start(t)
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
			r.Do("FLUSHALL")
			r.Do("SET", "canary", "alive", "PX", "60000")
			r.Do("SET", "redlock-proxy:marker", "m")
			guarded, ref := Script([]byte(c.text), "redlock-proxy:", 60_000)
			if c.static {
				if ref == nil || !strings.Contains(ref.Reason, c.want) {
					t.Fatalf("Guard = %v; want a refusal naming %q", ref, c.want)
				}
				return
			}
			if ref != nil {
				t.Fatalf("refused before it ran: %v", ref)
			}
			v := r.Eval(string(guarded.Body), c.keys, nil)
			if v.Kind != resp.KindError || !strings.Contains(string(v.Str), c.want) {
				t.Fatalf("replied %v; want an error naming %q", v, c.want)
			}
			if got := r.Do("GET", "canary"); string(got.Str) != "alive" {
				t.Fatalf("the canary key is gone: %v", got)
			}
			if got := r.Do("DBSIZE"); got.Int != 2 {
				t.Fatalf("DBSIZE %v after the refused script; want the 2 keys it started with", got)
			}
			if got := r.Do("CONFIG", "GET", "maxmemory-policy"); string(got.Elems[1].Str) != "noeviction" {
				t.Fatalf("maxmemory-policy is %v", got)
			}
		})
	}
}
