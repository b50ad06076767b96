package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/config"
)

// A master whose eviction policy removes keys that have a TTL forgets locks
// without restarting, being flushed or promoted: under memory pressure it
// evicts the lock with the nearest expiry first. The contract keeps every
// master that may have lost writes out of the quorum count, so a lock still
// held by one client must not be granted to another through masters that
// evicted it. Here two of three masters (maxmemory with volatile-ttl, the
// kind of policy managed Redis services default to) evict a held lock under
// unrelated writes, and a second client asks for it.
func TestMastersThatEvictLocksDoNotGrantAHeldLock(t *testing.T) {
	servers := startRedis(t, 3, "--maxmemory", "4mb", "--maxmemory-policy", "volatile-ttl")
	c := clusterOver(t, servers, func(cfg *config.Config) {
		cfg.RestartQuarantine = "strict" // the default rule
		cfg.MaxTTL = 3 * time.Second
	})
	ctx := context.Background()
	cl := c.client(2)
	// The fresh masters count once max_ttl + drift has passed.
	waitGrant(t, cl, uniqueKey("warm"), "w", time.Second, 15*time.Second)

	key := uniqueKey("evicted")
	heldUntil := time.Now().Add(3 * time.Second)
	if ok, err := cl.SetNX(ctx, key, "first", 3*time.Second).Result(); !ok || err != nil {
		t.Fatalf("first holder: SET NX = %v, %v", ok, err)
	}
	c.eventuallyHolders(key, "first", 3)
	filler := strings.Repeat("f", 64<<10)
	for _, i := range []int{0, 1} {
		for n := 0; len(c.holders(key, "first")) > 0 && contains(c.holders(key, "first"), i); n++ {
			if n == 2000 {
				t.Fatalf("master %d never evicted the lock", i)
			}
			if err := c.direct[i].Set(ctx, "filler:"+itoa(n), filler, time.Hour).Err(); err != nil {
				t.Fatalf("master %d: filler write: %v", i, err)
			}
		}
	}
	if h := c.holders(key, "first"); len(h) != 1 {
		t.Fatalf("after the memory pressure, masters %v hold the first lock; want only master 2", h)
	}
	ok, err := cl.SetNX(ctx, key, "second", time.Second).Result()
	if !time.Now().Before(heldUntil) {
		t.Fatalf("the machine was too slow: the first lock ran out before the second client tried, so this run shows nothing")
	}
	if ok || err != nil {
		t.Fatalf("a second client got %v, %v while the first still held the lock: masters that evicted it counted", ok, err)
	}
}

func contains(s []int, x int) bool {
	for _, v := range s {
		if v == x {
			return true
		}
	}
	return false
}
