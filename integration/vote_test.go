package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// Under unknown_scripts: vote a refused script runs on every master, but
// only through the guard: no script may FLUSHALL, CONFIG, SCRIPT FLUSH,
// reach a key it was not given or write one without an expiry, whatever
// its keys and however it tries. Each is refused and no master changes; a
// script that keeps to its keys is still voted.
func TestVoteModeGuard(t *testing.T) {
	c := newCluster(t, 3, func(cfg *config.Config) { cfg.UnknownScripts = "vote" })
	ctx := context.Background()
	cl := c.client(2)
	lock := uniqueKey("vote-lock")
	if err := cl.SetNX(ctx, lock, "tok", 30*time.Second).Err(); err != nil {
		t.Fatalf("SET NX PX: %v", err)
	}
	c.checkHeld(t, "the lock", lock, "tok")
	for i, d := range c.direct {
		d.Set(ctx, "canary", "alive", time.Minute)
		if err := d.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
			t.Fatalf("backend %d: %v", i, err)
		}
	}
	sizes := make([]int64, len(c.direct))
	for i, d := range c.direct {
		sizes[i] = d.DBSize(ctx).Val()
	}
	key := uniqueKey("vote")
	for _, s := range []struct {
		name, text string
		keys       []string
		want       string
	}{
		{"FLUSHALL with no keys", `return redis.call('flushall')`, nil, "flushall"},
		{"FLUSHALL caught by pcall", `redis.pcall('flushall') return 1`, []string{key}, "flushall"},
		{"FLUSHDB", `return redis.call('FLUSHDB')`, []string{key}, "flushdb"},
		{"CONFIG SET", `return redis.call('config', 'set', 'maxmemory-policy', 'allkeys-lru')`, nil, "config"},
		{"SCRIPT FLUSH", `return redis.call('script', 'flush')`, nil, "script"},
		{"a write with no keys", `return redis.call('set', 'vote:stray', 'v', 'PX', 60000)`, nil, "not in KEYS"},
		{"a write of the lock it was not given", `return redis.call('del', '` + lock + `')`, []string{key}, "not in KEYS"},
		{"a write without an expiry", `return redis.call('set', KEYS[1], 'v')`, []string{key}, "without an expiry"},
		{"a hash never given an expiry", `redis.call('hset', KEYS[1], 'f', 'v') return 1`, []string{key}, "without an expiry"},
		{"_G", `return _G.redis.call('flushall')`, nil, "_G"},
		{"rawget", `return rawget(_G, 'redis').call('flushall')`, nil, "rawget"},
		{"loadstring", `return loadstring("return redis.call('flushall')")()`, nil, "loadstring"},
		{"getmetatable", `local mt = getmetatable('') return mt`, nil, "getmetatable"},
	} {
		err := cl.Eval(ctx, s.text, s.keys).Err()
		if err == nil || !strings.Contains(err.Error(), "redlock-proxy") || !strings.Contains(err.Error(), s.want) {
			t.Errorf("%s: %v; want a refusal naming %q", s.name, err, s.want)
		}
		if err != nil && strings.Contains(err.Error(), "unknown_scripts: vote") {
			t.Errorf("%s: the refusal recommends the vote policy: %v", s.name, err)
		}
		for i, d := range c.direct {
			if n := d.DBSize(ctx).Val(); n != sizes[i] {
				t.Fatalf("%s: backend %d holds %d keys, %d before", s.name, i, n, sizes[i])
			}
			if v, _ := d.Get(ctx, "canary").Result(); v != "alive" {
				t.Fatalf("%s: backend %d lost its canary key", s.name, i)
			}
			if p, _ := d.ConfigGet(ctx, "maxmemory-policy").Result(); p["maxmemory-policy"] != "noeviction" {
				t.Fatalf("%s: backend %d maxmemory-policy %v", s.name, i, p)
			}
		}
		c.checkHeld(t, s.name, lock, "tok")
	}
	// The proxy's reference scripts are still loaded on every master: no
	// SCRIPT FLUSH ran.
	if err := cl.Eval(ctx, `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`, []string{lock}, "tok", 20000).Err(); err != nil {
		t.Fatalf("extend after the refused scripts: %v", err)
	}
	// A script that keeps to its keys, with expiries, is voted.
	counter := `local n = redis.call('incr', KEYS[1]) redis.call('pexpire', KEYS[1], 60000) return n`
	for want := int64(1); want <= 2; want++ {
		if n, err := cl.Eval(ctx, counter, []string{key}).Int64(); err != nil || n != want {
			t.Fatalf("a voted counter = %d, %v; want %d", n, err, want)
		}
	}
	for i, d := range c.direct {
		if p := d.PTTL(ctx, key).Val(); p <= 0 || p > time.Minute {
			t.Fatalf("backend %d: the voted key's PTTL %v", i, p)
		}
	}
}
