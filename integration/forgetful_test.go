package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/config"
	"github.com/redlock-proxy/redlock-proxy/internal/faultnet"
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

// redsync, which the README lists as working through the proxy, retries a
// failed Lock with the same value (its default is 32 tries), and a client
// of a proxy fleet behind a load balancer may send the retry to another
// proxy. Here the first try goes through a proxy cut off from two of three
// masters: it fails, and that proxy keeps the undo of the two unanswered
// SETs for its next connections. The retry, through a second proxy, is
// granted everywhere. When the first proxy reaches the two masters again,
// its undo runs and deletes the retry's lock on them: the holder, told it
// holds a majority, holds one master, and a third client is granted the
// same lock. Mutual exclusion requires the third client to be refused
// while the holder's validity lasts. (docs/contract.md asks for a token
// unique per attempt and warns that an undo may remove a same-token copy;
// redsync's retries do not meet that, and with one proxy its link order
// keeps them safe, so the fleet is where the promise breaks.)
func TestRetryWithTheSameTokenThroughAnotherProxyKeepsTheLock(t *testing.T) {
	c := newCluster(t, 3) // the second proxy, straight to the masters
	var relayed []string
	var relays []*faultnet.Relay
	for _, s := range c.servers {
		r, err := faultnet.Listen(s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		relays = append(relays, r)
		relayed = append(relayed, r.Addr())
	}
	first, _ := startApp(t, relayed, backendTimeout(50*time.Millisecond))
	ctx := context.Background()
	viaFirst, viaSecond := proxyClient(t, first.Addr(), 2), c.client(2)
	key := uniqueKey("same-token")

	relays[0].BlackHole(true)
	relays[1].BlackHole(true)
	if ok, err := viaFirst.SetNX(ctx, key, "try", 10*time.Second).Result(); ok || err != nil {
		t.Fatalf("first try, with two masters cut off: %v, %v; want nil", ok, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for h := first.Pool().Health(); h[0].UndoRetained == 0 || h[1].UndoRetained == 0; h = first.Pool().Health() {
		if time.Now().After(deadline) {
			t.Fatalf("the first proxy keeps no undo for the cut-off masters: %+v", h)
		}
		time.Sleep(20 * time.Millisecond)
	}

	heldUntil := time.Now().Add(10 * time.Second)
	if ok, err := viaSecond.SetNX(ctx, key, "try", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("the retry through the second proxy: %v, %v", ok, err)
	}
	c.eventuallyHolders(key, "try", 3)
	relays[0].BlackHole(false)
	relays[1].BlackHole(false)
	deadline = time.Now().Add(10 * time.Second)
	for h := first.Pool().Health(); h[0].UndoRetained+h[1].UndoRetained > 0; h = first.Pool().Health() {
		if time.Now().After(deadline) {
			t.Fatalf("the first proxy's undos never ran: %+v", h)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ok, err := viaSecond.SetNX(ctx, key, "third", time.Second).Result()
	if !time.Now().Before(heldUntil) {
		t.Fatalf("the machine was too slow: the retry's lock ran out before the third client tried, so this run shows nothing")
	}
	if ok || err != nil {
		t.Fatalf("a third client got %v, %v while the retry held the lock (masters %v hold the retry's token)", ok, err, c.holders(key, "try"))
	}
}
