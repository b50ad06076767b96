package integration

import (
	"context"
	"testing"
	"time"
)

// A holder extends its lock through two proxies, one a few milliseconds
// further from the masters than the other (a connection pool spread over
// proxies behind a load balancer does this): first to 300 ms through the
// slow one, then to 2900 ms through the fast one. Whatever the slow proxy
// still sends for its extend arrives after the fast one's, and must not
// shorten the lock the later extend set: a second client is refused while
// the later extend's validity lasts, and every master keeps at least that.
func TestExtendsThroughTwoProxiesNeverShortenTheLaterOne(t *testing.T) {
	c := newCluster(t, 3) // the fast proxy, straight to the masters
	relays, _, relayed := relayEach(t, c.servers)
	slowApp, _ := startApp(t, relayed)
	for _, rl := range relays {
		rl.Delay(15 * time.Millisecond)
	}
	ctx := context.Background()
	slow, fast := proxyClient(t, slowApp.Addr(), 2), c.client(2)
	for trial := 0; trial < 5; trial++ {
		key := uniqueKey("two-proxy-extend")
		if ok, err := fast.SetNX(ctx, key, "tok", 2*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX = %v, %v", ok, err)
		}
		if n, err := slow.Eval(ctx, spacedExtend, []string{key}, "tok", "300").Int(); n != 1 || err != nil {
			t.Fatalf("extend to 300 ms through the slow proxy = %v, %v; want 1", n, err)
		}
		if n, err := fast.Eval(ctx, spacedExtend, []string{key}, "tok", "2900").Int(); n != 1 || err != nil {
			t.Fatalf("extend to 2900 ms through the fast proxy = %v, %v; want 1", n, err)
		}
		heldUntil := time.Now().Add(2800 * time.Millisecond)
		time.Sleep(600 * time.Millisecond) // past the first extend's 300 ms
		ok, err := fast.SetNX(ctx, key, "second", 10*time.Second).Result()
		if !time.Now().Before(heldUntil) {
			t.Fatalf("the machine was too slow: the later extend ran out before the second client tried")
		}
		if ok || err != nil {
			t.Fatalf("trial %d: a second client got the lock (%v, %v) with the later extend's validity left; PTTLs %v", trial, ok, err, c.pttls(key))
		}
		for i, d := range c.pttls(key) {
			if d < 2*time.Second {
				t.Fatalf("trial %d: master %d keeps the lock %v, less than the later extend's 2900 ms less the 600 ms waited", trial, i, d)
			}
		}
	}
}
