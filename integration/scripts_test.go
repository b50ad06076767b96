package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// Lock scripts the proxy knows by what they do, not by their text: each
// call is classified once, runs as its role's reference script on the five
// masters, and answers as the library's script would on one Redis.

// pttls returns each master's PTTL of key (-2 missing).
func (c *cluster) pttls(key string) []time.Duration {
	out := make([]time.Duration, len(c.direct))
	for i, d := range c.direct {
		out[i], _ = d.PTTL(context.Background(), key).Result()
	}
	return out
}

// checkPTTLs asserts that every master holds value under key with a PTTL
// in [lo, hi].
func (c *cluster) checkPTTLs(t *testing.T, step, key, value string, lo, hi time.Duration) {
	t.Helper()
	if h := c.eventuallyHolders(key, value, len(c.direct)); len(h) != len(c.direct) {
		t.Fatalf("%s: %q holds %q on masters %v; want all", step, key, value, h)
	}
	for i, p := range c.pttls(key) {
		if p < lo || p > hi {
			t.Fatalf("%s: master %d PTTL %v; want %v..%v (all: %v)", step, i, p, lo, hi, c.pttls(key))
		}
	}
}

// redis-py's Lock scripts, its exact text read from python3-redis, sent
// by go-redis as EVAL and EVALSHA.
func TestRedisPyLockScripts(t *testing.T) {
	scripts, err := libscripts.RedisPy()
	if err != nil {
		t.Fatal(err)
	}
	text := map[string]string{}
	for _, s := range scripts {
		text[strings.Fields(s.Name)[0]] = s.Text
	}
	release, extend, reacquire := text["Lock.LUA_RELEASE_SCRIPT"], text["Lock.LUA_EXTEND_SCRIPT"], text["Lock.LUA_REACQUIRE_SCRIPT"]
	c := newCluster(t, 5, func(cfg *config.Config) { cfg.MaxTTL = time.Minute })
	ctx := context.Background()
	cl := c.client(2)
	key, tok := uniqueKey("redis-py"), "9f3c1d2e6b7a48f0a1b2c3d4e5f60718"

	// Acquire as redis-py does: SET name token NX PX ms.
	if ok, err := cl.SetNX(ctx, key, tok, 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("acquire = %v, %v", ok, err)
	}
	c.checkPTTLs(t, "after acquire", key, tok, 9*time.Second, 10*time.Second)

	// extend(5s): adds to what is left (ARGV[3] "0"), by EVAL.
	if n, err := cl.Eval(ctx, extend, []string{key}, tok, 5000, "0").Int(); err != nil || n != 1 {
		t.Fatalf("extend adding 5000 = %d, %v; want 1", n, err)
	}
	c.checkPTTLs(t, "after extend adding 5s", key, tok, 14*time.Second, 15*time.Second)
	// extend(30s, replace_ttl=True), by EVALSHA (a library fact: no text
	// needed).
	sha := "a4e8783852e6b949f9ef3a97212805108459a890"
	if n, err := cl.EvalSha(ctx, sha, []string{key}, tok, 30000, "1").Int(); err != nil || n != 1 {
		t.Fatalf("extend replacing with 30000 = %d, %v; want 1", n, err)
	}
	c.checkPTTLs(t, "after extend replacing", key, tok, 29*time.Second, 30*time.Second)
	// Another token: 0, nothing changes.
	if n, err := cl.Eval(ctx, extend, []string{key}, "other", 5000, "0").Int(); err != nil || n != 0 {
		t.Fatalf("extend by another token = %d, %v; want 0", n, err)
	}
	// Adding past max_ttl (set to 60s here) is refused on every master: 0, unchanged.
	if n, err := cl.Eval(ctx, extend, []string{key}, tok, 40000, "0").Int(); err != nil || n != 0 {
		t.Fatalf("extend adding past max_ttl = %d, %v; want 0", n, err)
	}
	c.checkPTTLs(t, "after the refused extend", key, tok, 28*time.Second, 30*time.Second)
	// reacquire(): the TTL set back to the lock's timeout.
	if n, err := cl.Eval(ctx, reacquire, []string{key}, tok, 10000).Int(); err != nil || n != 1 {
		t.Fatalf("reacquire = %d, %v; want 1", n, err)
	}
	c.checkPTTLs(t, "after reacquire", key, tok, 9*time.Second, 10*time.Second)

	// release: another token leaves the lock; the owner's removes it.
	if n, err := cl.Eval(ctx, release, []string{key}, "other").Int(); err != nil || n != 0 {
		t.Fatalf("release by another token = %d, %v; want 0", n, err)
	}
	c.checkHeld(t, "after a wrong release", key, tok)
	if n, err := cl.EvalSha(ctx, "c3f8721cbb97f72bc19e972846bd7aaf91901658", []string{key}, tok).Int(); err != nil || n != 1 {
		t.Fatalf("release by EVALSHA = %d, %v; want 1", n, err)
	}
	c.checkGone(t, "after release", key, tok)
	if n, err := cl.Eval(ctx, release, []string{key}, tok).Int(); err != nil || n != 0 {
		t.Fatalf("second release = %d, %v; want 0", n, err)
	}
	if n, err := cl.Eval(ctx, extend, []string{key}, tok, 5000, "0").Int(); err != nil || n != 0 {
		t.Fatalf("extend of a released lock = %d, %v; want 0", n, err)
	}
	if h := c.holders(key, tok); len(h) != 0 {
		t.Fatalf("extend of a released lock re-created it on %v", h)
	}

	// A lock without TTL (written behind the proxy's back) is not extended
	// by adding: redis-py answers 0 there.
	key2 := uniqueKey("redis-py-nottl")
	for _, d := range c.direct {
		d.Set(ctx, key2, tok, 0)
	}
	if n, err := cl.Eval(ctx, extend, []string{key2}, tok, 5000, "0").Int(); err != nil || n != 0 {
		t.Fatalf("extend adding to a key without TTL = %d, %v; want 0", n, err)
	}
	for i, p := range c.pttls(key2) {
		if p != -1 {
			t.Fatalf("master %d PTTL %v after the refused extend; want -1", i, p)
		}
	}
}

// An extend that wants a least TTL left and replies {status, ttl} (in the
// style of redlock-universal), on five masters with two of them down.
func TestStatusTTLExtend(t *testing.T) {
	atomic := style(t, "redlock-universal", "ATOMIC_EXTEND_SCRIPT").Text
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(3)
	key, tok := uniqueKey("ru"), "9b2f3c4d5e6f"
	cl.SetNX(ctx, key, tok, 20*time.Second)
	c.checkHeld(t, "after acquire", key, tok)

	v, err := cl.Eval(ctx, atomic, []string{key}, tok, 1500, 30000).Int64Slice()
	if err != nil || len(v) != 2 || v[0] != 1 || v[1] > 20000 || v[1] < 19000 {
		t.Fatalf("extend = %v, %v; want [1, the validity left before, just under 20000]", v, err)
	}
	c.checkPTTLs(t, "after the extend", key, tok, 29*time.Second, 30*time.Second)

	// Held by another: [-1, its ttl], nothing changes.
	v, err = cl.Eval(ctx, atomic, []string{key}, "other", 1500, 30000).Int64Slice()
	if err != nil || v[0] != -1 || v[1] < 28000 {
		t.Fatalf("extend by another = %v, %v; want [-1, about 30000]", v, err)
	}
	// Too little time left on a majority: [0, ttl], not extended.
	key2 := uniqueKey("ru-low")
	for i, d := range c.direct {
		ttl := 1000 * time.Millisecond
		if i >= 3 {
			ttl = 20 * time.Second
		}
		d.Set(ctx, key2, tok, ttl)
	}
	v, err = cl.Eval(ctx, atomic, []string{key2}, tok, 1500, 30000).Int64Slice()
	if err != nil || v[0] != 0 || v[1] > 1000 {
		t.Fatalf("extend with too little left = %v, %v; want [0, under 1000]", v, err)
	}
	// (A failed extend is not undone: the two masters that had time left
	// were extended, the majority was not.)
	for i, p := range c.pttls(key2)[:3] {
		if p > time.Second {
			t.Fatalf("master %d was extended (%v)", i, p)
		}
	}
	// Missing: [-1, -2].
	if v, err := cl.Eval(ctx, atomic, []string{uniqueKey("ru-none")}, tok, 1500, 30000).Int64Slice(); err != nil || v[0] != -1 || v[1] != -2 {
		t.Fatalf("extend of a missing lock = %v, %v", v, err)
	}

	// Two masters down: a majority still extends it.
	c.servers[0].Stop()
	c.servers[1].Stop()
	v, err = cl.Eval(ctx, atomic, []string{key}, tok, 1500, 40000).Int64Slice()
	if err != nil || v[0] != 1 {
		t.Fatalf("extend with two masters down = %v, %v; want [1, ...]", v, err)
	}
	for i := 2; i < 5; i++ {
		if p := c.eventuallyPTTL(i, key); p < 39*time.Second {
			t.Fatalf("master %d PTTL %v after the extend; want about 40s", i, p)
		}
	}
}

// A multi-key acquire with a token per key (in the style of
// redlock-universal's batch acquire): all or nothing on each master, and
// a failed attempt leaves nothing behind.
func TestBatchAcquirePerKeyTokens(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)
	a, b := uniqueKey("batch-a"), uniqueKey("batch-b")
	v, err := cl.Eval(ctx, libscripts.BatchAcquire, []string{a, b}, "ta", "tb", 9000).Slice()
	if err != nil || len(v) != 2 || v[0] != int64(1) || v[1] != int64(2) {
		t.Fatalf("batch acquire = %v, %v; want [1 2]", v, err)
	}
	c.checkPTTLs(t, "after the batch acquire", a, "ta", 8*time.Second, 9*time.Second)
	c.checkPTTLs(t, "after the batch acquire", b, "tb", 8*time.Second, 9*time.Second)

	// b taken on three masters: refused, naming b; a is not left taken.
	x, y := uniqueKey("batch-x"), uniqueKey("batch-y")
	for i := 0; i < 3; i++ {
		c.direct[i].Set(ctx, y, "someone", 20*time.Second)
	}
	v, err = cl.Eval(ctx, libscripts.BatchAcquire, []string{x, y}, "tx", "ty", 9000).Slice()
	if err != nil || len(v) != 3 || v[0] != int64(0) || v[1] != int64(2) || v[2] != y {
		t.Fatalf("refused batch acquire = %v, %v; want [0 2 %s]", v, err, y)
	}
	c.checkGone(t, "after the refused batch acquire", x, "tx")
	c.checkGone(t, "after the refused batch acquire", y, "ty")
	if h := c.holders(y, "someone"); len(h) != 3 {
		t.Fatalf("the other owner's key is left on %v; want 0 1 2", h)
	}
}

// SCRIPT EXPLAIN, through a real client, and a refused script's error.
func TestScriptExplainThroughProxy(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	refresh := style(t, "redis-semaphore", "Mutex refresh")
	lines, err := cl.Do(ctx, "SCRIPT", "EXPLAIN", refresh.Text, 1, "k", "id", 10000).StringSlice()
	if err != nil || !strings.Contains(strings.Join(lines, "\n"), "role: extend (compare-and-extend, replacing the TTL)") {
		t.Fatalf("SCRIPT EXPLAIN = %q, %v", lines, err)
	}
	steal := `redis.call('set', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1`
	err = cl.Eval(ctx, steal, []string{"k"}, "me", 1000).Err()
	var rerr redis.Error
	if !errors.As(err, &rerr) || !strings.Contains(err.Error(), "refused") || !strings.Contains(err.Error(), "refused: with KEYS[1] holding") {
		t.Fatalf("a lock-stealing script: %v; want a refusal naming the probe", err)
	}
}

// A lock script given a TTL of 0, which would leave its lock without an
// expiry, is refused as SET without an expiry is, before and after a call
// with a TTL classified it, and no master holds anything.
func TestLockScriptWithTTLZeroIsRefusedAsSetIs(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)
	text := `if redis.call('SET', KEYS[1], ARGV[1], 'NX') then
  if tonumber(ARGV[2]) > 0 then redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
  return 1
end
return 0`
	const why = "the proxy never writes a lock that cannot expire"
	setErr := cl.SetArgs(ctx, uniqueKey("ttl0"), "tok", redis.SetArgs{Mode: "NX"}).Err()
	if setErr == nil || !strings.Contains(setErr.Error(), why) {
		t.Fatalf("SET NX without an expiry: %v", setErr)
	}
	for _, step := range []string{"first call", "after a call with a TTL"} {
		if step != "first call" {
			if n, err := cl.Eval(ctx, text, []string{uniqueKey("ttl0")}, "tok", 30000).Int(); n != 1 || err != nil {
				t.Fatalf("a call with a TTL: %v, %v", n, err)
			}
		}
		key := uniqueKey("ttl0")
		err := cl.Eval(ctx, text, []string{key}, "tok", 0).Err()
		if err == nil || !strings.Contains(err.Error(), "the lock script's TTL (ARGV[2]) must be above 0") || !strings.Contains(err.Error(), why) {
			t.Fatalf("%s, TTL 0: %v", step, err)
		}
		for i, d := range c.direct {
			if n, err := d.Exists(ctx, key).Result(); n != 0 || err != nil {
				t.Fatalf("%s: master %d holds %s (%v)", step, i, key, err)
			}
		}
	}
}
