package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/faultnet"
)

// A master whose eviction policy removes keys under memory pressure forgets
// locks without restarting, being flushed or promoted: under pressure it
// evicts the lock with the nearest expiry first, and nothing shows it. So
// such a master never counts: the identity check reads its maxmemory and
// maxmemory-policy, and the proxy says why in its own words. Two of three
// masters here run maxmemory with volatile-ttl (the kind of policy managed
// Redis services default to): no lock is granted, INFO and /readyz say why,
// and after the policy becomes noeviction the masters count.
func TestMastersThatMayEvictLocksDoNotCount(t *testing.T) {
	evicting := startRedis(t, 2, "--maxmemory", "64mb", "--maxmemory-policy", "volatile-ttl")
	plain := startRedis(t, 1)
	addrs := []string{evicting[0].Addr, evicting[1].Addr, plain[0].Addr}
	a, _ := startAppUp(t, addrs, 1, func(cfg *config.Config) { cfg.RestartQuarantine = "run-id" })
	cl := proxyClient(t, a.Addr(), 2)
	ctx := context.Background()
	waitFor(t, 5*time.Second, "INFO proxy to say the two masters may evict locks", func() error {
		if info, _ := cl.Info(ctx, "proxy").Result(); strings.Count(info, "maxmemory-policy volatile-ttl") != 2 {
			return fmt.Errorf("INFO proxy:\n%s", info)
		}
		return nil
	})
	if ok, err := cl.SetNX(ctx, uniqueKey("evict"), "t", time.Second).Result(); ok || err != nil {
		t.Fatalf("SET NX with two of three masters that may evict locks = %v, %v; want nil", ok, err)
	}
	if code, body := httpGet(t, "http://"+a.AdminAddr()+"/readyz"); code != 503 || !strings.Contains(body, "noeviction") {
		t.Fatalf("/readyz = %d %q; want 503 saying to set noeviction", code, body)
	}
	for _, s := range evicting {
		if _, err := s.Do("CONFIG", "SET", "maxmemory-policy", "noeviction"); err != nil {
			t.Fatal(err)
		}
	}
	waitGrant(t, cl, uniqueKey("evict"), "t", time.Second, 10*time.Second)
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
	r := retryThroughAnotherProxy(t, "same-token")
	heldUntil := r.retried.Add(10 * time.Second)
	// A delayed undo deletes a copy set before the failed attempt's reply
	// left, or within its last 10 ms (a late SET that a hung master runs
	// together with it): a retry granted in the 10 ms before the undo
	// reaches the master is the window that remains (docs/contract.md).
	r.healAndCheckThirdRefused(heldUntil, "while the retry held the lock")
}

// sameTokenRetry is a failed first try through a proxy cut off from two of
// three masters (which keeps their undos for its next connections), then
// the same token's retry granted through a second proxy.
type sameTokenRetry struct {
	t         *testing.T
	c         *cluster
	relays    []*faultnet.Relay
	first     *app.App
	viaSecond *redis.Client
	key       string
	retried   time.Time // when the retry was sent
}

func retryThroughAnotherProxy(t *testing.T, name string) *sameTokenRetry {
	c := newCluster(t, 3) // the second proxy, straight to the masters
	r := &sameTokenRetry{t: t, c: c, key: uniqueKey(name)}
	var relayed []string
	r.relays, _, relayed = relayEach(t, c.servers)
	r.first, _ = startApp(t, relayed, backendTimeout(50*time.Millisecond))
	ctx := context.Background()
	viaFirst := proxyClient(t, r.first.Addr(), 2)
	r.viaSecond = c.client(2)

	r.relays[0].BlackHole(true)
	r.relays[1].BlackHole(true)
	if ok, err := viaFirst.SetNX(ctx, r.key, "try", 10*time.Second).Result(); ok || err != nil {
		t.Fatalf("first try, with two masters cut off: %v, %v; want nil", ok, err)
	}
	waitFor(t, 10*time.Second, "the first proxy to keep an undo for each cut-off master", func() error {
		if h := r.first.Pool().Health(); h[0].UndoRetained == 0 || h[1].UndoRetained == 0 {
			return fmt.Errorf("%+v", h)
		}
		return nil
	})
	r.retried = time.Now()
	if ok, err := r.viaSecond.SetNX(ctx, r.key, "try", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("the retry through the second proxy: %v, %v", ok, err)
	}
	c.eventuallyHolders(r.key, "try", 3)
	return r
}

// healAndCheckThirdRefused reconnects the first proxy, waits until its
// kept undos ran, and checks that a third client is refused before
// heldUntil.
func (r *sameTokenRetry) healAndCheckThirdRefused(heldUntil time.Time, while string) {
	t := r.t
	time.Sleep(50 * time.Millisecond)
	before := r.c.holders(r.key, "try")
	r.relays[0].BlackHole(false)
	r.relays[1].BlackHole(false)
	waitFor(t, 10*time.Second, "the first proxy's undos to run", func() error {
		if h := r.first.Pool().Health(); h[0].UndoRetained+h[1].UndoRetained > 0 {
			return fmt.Errorf("%+v", h)
		}
		return nil
	})
	ok, err := r.viaSecond.SetNX(context.Background(), r.key, "third", time.Second).Result()
	if !time.Now().Before(heldUntil) {
		t.Fatalf("the machine was too slow: the holder's lock ran out before the third client tried, so this run shows nothing")
	}
	if ok || err != nil {
		t.Fatalf("a third client got %v, %v %s (masters %v hold the retry's token; before the heal %v)", ok, err, while, r.c.holders(r.key, "try"), before)
	}
}

// The same retry as above, whose holder then lengthens its lock (SET ...
// IFEQ with a longer PX; redis-py's extend adds to what is left in the same
// way). The first proxy's delayed undo sees a copy whose PTTL is above the
// failed attempt's TTL: re-armed since that attempt, so the holder's, and it
// must stay. The third client is refused while the holder's validity lasts.
func TestRetryWithTheSameTokenKeepsTheLockItLengthened(t *testing.T) {
	r := retryThroughAnotherProxy(t, "same-token-lengthened")
	heldUntil := time.Now().Add(20 * time.Second)
	if v, err := r.viaSecond.Do(context.Background(), "SET", r.key, "try", "IFEQ", "try", "PX", "20000").Result(); v != "OK" || err != nil {
		t.Fatalf("the holder lengthens its lock to 20 s: %v, %v", v, err)
	}
	r.healAndCheckThirdRefused(heldUntil, "while the holder held the lengthened lock")
}
