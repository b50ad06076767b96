package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/config"
)

// extendOrAcquire extends the lock when it holds the caller's token and
// takes it when it is free: the shape of redsync's WithSetNXOnExtend,
// RedLock.net's extend and aioredlock's acquire.
const extendOrAcquire = `if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
elseif redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2], "NX") then
  return 1
else
  return 0
end`

func backendTimeout(d time.Duration) func(*config.Config) {
	return func(cfg *config.Config) { cfg.BackendTimeout = d }
}

// A failed extend-or-acquire leaves the holder's lock alone: with one of
// three masters down and another hung, the extend loses the round, and
// nothing may delete the holder's still-valid token afterwards.
func TestFailedExtendOrAcquireKeepsTheHoldersLock(t *testing.T) {
	c := newCluster(t, 3, backendTimeout(50*time.Millisecond))
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("eoa")
	if ok, err := cl.SetNX(ctx, key, "A", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	c.eventuallyHolders(key, "A", 3)
	c.servers[2].Kill()
	if err := c.servers[1].Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			c.servers[1].Resume()
		}
	}()
	got, err := cl.Eval(ctx, extendOrAcquire, []string{key}, "A", 10000).Result()
	if err != nil {
		t.Fatalf("extend-or-acquire: %v", err)
	}
	if got != int64(0) {
		t.Fatalf("extend-or-acquire with one master down and one hung = %v, want 0 (lost)", got)
	}
	time.Sleep(200 * time.Millisecond)
	c.servers[1].Resume()
	resumed = true
	if h := c.eventuallyHolders(key, "A", 2); len(h) != 2 {
		t.Fatalf("after the failed extend, masters %v hold A's token; want masters 0 and 1 (its lock has 9 s left)", h)
	}
	time.Sleep(300 * time.Millisecond) // let anything queued behind the extend run
	if h := c.holders(key, "A"); len(h) != 2 {
		t.Fatalf("after the failed extend, masters %v hold A's token; want masters 0 and 1", h)
	}
	if ok, err := c.client(2).SetNX(ctx, key, "C", 10*time.Second).Result(); ok || err != nil {
		t.Fatalf("a second client's SET NX = %v, %v while A's lock is valid; want nil", ok, err)
	}
}

// A grant is judged when its reply leaves the proxy: an OK that waits in a
// pipeline behind a slower command until its validity ran out is answered
// nil and undone, so the client is never told it holds a lock that another
// client may already hold.
func TestPipelinedGrantIsJudgedWhenItsReplyLeaves(t *testing.T) {
	c := newCluster(t, 3, backendTimeout(80*time.Millisecond))
	if err := c.servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer c.servers[2].Resume()
	key, other := uniqueKey("pipelined"), uniqueKey("slow")
	// PTTL waits for every backend, so for the hung one's timeout; the SET
	// before it is decided at once but its 30 ms are over by then.
	payload := "*6\r\n$3\r\nSET\r\n$" + itoa(len(key)) + "\r\n" + key + "\r\n$1\r\nA\r\n$2\r\nNX\r\n$2\r\nPX\r\n$2\r\n30\r\n" +
		"*2\r\n$4\r\nPTTL\r\n$" + itoa(len(other)) + "\r\n" + other + "\r\n"
	start := time.Now()
	reply, _ := exchange(t, c.app.Addr(), payload, time.Second)
	elapsed := time.Since(start)
	if elapsed < 30*time.Millisecond {
		t.Fatalf("the pipeline was answered in %v: the hung master did not hold it up, the test proves nothing", elapsed)
	}
	if !strings.HasPrefix(reply, "$-1\r\n") {
		t.Fatalf("pipelined SET NX PX 30 answered %q after %v: a grant whose validity ended before its reply left must be nil", reply, elapsed)
	}
	if h := c.eventuallyHolders(key, "A", 0); len(h) != 0 {
		t.Fatalf("the revoked grant was not undone: masters %v hold its token", h)
	}
}

// TTL never reports more validity than remains: it rounds down.
func TestTTLNeverReportsMoreThanRemains(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("ttl")
	if ok, err := cl.SetNX(ctx, key, "A", 1800*time.Millisecond).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	pttl, err := cl.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := cl.Do(ctx, "TTL", key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(ttl)*time.Second > pttl {
		t.Fatalf("TTL = %d s while PTTL = %v: TTL reports more validity than remains", ttl, pttl)
	}
	if ttl != 1 {
		t.Fatalf("TTL = %d, want 1 (1.8 s less drift and elapsed, rounded down)", ttl)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
