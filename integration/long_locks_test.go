package integration

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// A loss costs only the locks the master may have held: its hold ends
// once the other masters' records of grant deadlines show they have all
// expired, and lasts max_ttl + drift only where no record can tell.

// vouched starts a proxy under rule over servers, with max_ttl (and what
// mutate sets besides), and vouches for the brand-new masters so that they
// count at once.
func vouched(t *testing.T, servers []*redisproc.Server, maxTTL time.Duration, rule string, mutate ...func(*config.Config)) *cluster {
	t.Helper()
	c := clusterOver(t, servers, append([]func(*config.Config){func(cfg *config.Config) {
		cfg.MaxTTL = maxTTL
		cfg.BackendTimeout = 200 * time.Millisecond
		cfg.RestartQuarantine = rule
	}}, mutate...)...)
	if rule != "off" {
		if err := c.client(2).Do(context.Background(), "VOUCH").Err(); err != nil {
			t.Fatalf("VOUCH over brand-new masters: %v", err)
		}
	}
	waitAllCount(t, c)
	return c
}

// counting reports whether master i counts now.
func (c *cluster) counting(i int) bool {
	return c.app.Pool().Health()[i].Counts(time.Now())
}

// restartEmpty kills master i (kill -9, no persistence) and starts it
// again, empty, on its port, and waits until the proxy is connected to it
// again.
func (c *cluster) restartEmpty(i int) {
	c.t.Helper()
	if err := c.servers[i].Restart(); err != nil {
		c.t.Fatal(err)
	}
	waitFor(c.t, 10*time.Second, fmt.Sprintf("the proxy to reach master %d again", i), func() error {
		h := c.app.Pool().Health()[i]
		return holds(h.Up && h.RunID != "" && h.Restarts > 0)
	})
}

// With only 2 s locks in use and max_ttl of 10 minutes, a master killed
// and restarted empty counts again within seconds: once every lock it may
// have held has expired, not after the ceiling.
func TestShortLocksLetARestartedMasterCountAgainWithinSeconds(t *testing.T) {
	waits(t)
	c := vouched(t, startRedis(t, 3), 10*time.Minute, "strict")
	ctx := context.Background()
	cl := c.client(2)
	var last time.Time
	for i := 0; i < 20; i++ {
		if ok, err := cl.SetNX(ctx, uniqueKey("short"), "tok", 2*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX PX 2000 = %v, %v", ok, err)
		}
		last = time.Now().Add(2 * time.Second)
	}
	restarted := time.Now()
	c.restartEmpty(0)
	if c.counting(0) {
		t.Fatal("the restarted master counts at once, while locks it may have held are still valid")
	}
	deadline := restarted.Add(15 * time.Second)
	for !c.counting(0) {
		if time.Now().After(deadline) {
			t.Fatalf("the restarted master still does not count 15 s after its restart (max_ttl is 10 min): %+v", c.app.Pool().Health()[0])
		}
		time.Sleep(20 * time.Millisecond)
	}
	if now := time.Now(); now.Before(last) {
		t.Fatalf("the restarted master counts %v before the last 2 s lock it may have held expired", last.Sub(now))
	}
	t.Logf("the restarted master counts again %v after its restart", time.Since(restarted).Round(time.Millisecond))
	if ok, err := cl.SetNX(ctx, uniqueKey("after"), "tok", 2*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX after the master counts again = %v, %v", ok, err)
	}
}

// A holds a 15 s lock on five masters; three of them restart empty, one
// after another. B never gets the lock while A's validity lasts, and the
// three count again soon after A's lock would have expired. The control
// (restart_quarantine off: no hold, no deadline read) shows the second
// holder.
func TestHeldLockOutlivesThreeMastersRestartedEmpty(t *testing.T) {
	waits(t)
	for _, rule := range []string{"strict", "off"} {
		t.Run(rule, func(t *testing.T) {
			c := vouched(t, startRedis(t, 5), 10*time.Minute, rule)
			ctx := context.Background()
			key := uniqueKey("outlives")
			const ttl = 15 * time.Second
			cl := c.client(2)
			if ok, err := cl.SetNX(ctx, key, "A", ttl).Result(); !ok || err != nil {
				t.Fatalf("A's SET NX = %v, %v", ok, err)
			}
			validUntil := time.Now().Add(ttl - 300*time.Millisecond)
			second := func() bool {
				ok, err := cl.SetNX(ctx, key, "B", ttl).Result()
				if err != nil && err != redis.Nil {
					t.Fatalf("B's SET NX: %v", err)
				}
				return ok && time.Now().Before(validUntil)
			}
			for i := 0; i < 3; i++ {
				c.restartEmpty(i)
				time.Sleep(1500 * time.Millisecond) // its hold computed, its record restored
				if second() {
					if rule == "off" {
						return // the control saw the second holder
					}
					t.Fatalf("B got L after %d masters restarted empty, while A's lock was valid", i+1)
				}
			}
			for time.Now().Before(validUntil) {
				if second() {
					if rule == "off" {
						return
					}
					t.Fatal("B got L while A's lock was valid")
				}
				time.Sleep(100 * time.Millisecond)
			}
			if rule == "off" {
				t.Fatal("control: with no hold B never got L while A held it; the test shows nothing")
			}
			waitFor(t, 10*time.Second, "the restarted masters to count after A's lock expired (max_ttl is 10 min)", func() error {
				if !(c.counting(0) && c.counting(1) && c.counting(2)) {
					return fmt.Errorf("%+v", c.app.Pool().Health()[:3])
				}
				return nil
			})
		})
	}
}

// Every master lost at once: no record is left anywhere, so each waits
// the ceiling, max_ttl + drift, although only 1 s locks were in use.
func TestEveryMasterLostAtOnceWaitsTheCeiling(t *testing.T) {
	waits(t)
	const maxTTL = 6 * time.Second
	c := vouched(t, startRedis(t, 3), maxTTL, "strict")
	ctx := context.Background()
	if ok, err := c.client(2).SetNX(ctx, uniqueKey("all-lost"), "tok", time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	lost := time.Now()
	for i := range c.servers {
		if err := c.servers[i].Restart(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the masters to be reached again", func() error {
		for _, h := range c.app.Pool().Health() {
			if !h.Up || h.Restarts == 0 {
				return fmt.Errorf("%+v", h)
			}
		}
		return nil
	})
	// /readyz and INFO say why, and how long is left.
	r, err := http.Get("http://" + c.app.AdminAddr() + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "waits max_ttl + drift") || !strings.Contains(string(body), "left") {
		t.Fatalf("/readyz %d while every master waits the ceiling: %s", r.StatusCode, body)
	}
	for time.Since(lost) < maxTTL-500*time.Millisecond {
		for i := range c.servers {
			if c.counting(i) {
				t.Fatalf("master %d counts %v after every master lost its data; want max_ttl + drift", i, time.Since(lost))
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	waitAllCount(t, c)
}

// VOUCH is refused, with nothing written, while any master holds a key or
// shows in its marker that a proxy used it: vouching for such a master
// would let it count at once although it may have lost locks. Over masters
// that are brand-new it is accepted, once.
func TestVouchIsRefusedOverMastersThatHoldKeysOrWereUsed(t *testing.T) {
	servers := startRedis(t, 3)
	c := clusterOver(t, servers, func(cfg *config.Config) {
		cfg.MaxTTL = time.Minute
		cfg.RestartQuarantine = "strict"
	})
	ctx := context.Background()
	px := c.client(2)
	vouch := func() error { return px.Do(ctx, "VOUCH").Err() }

	if err := c.direct[1].Set(ctx, "stray", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	err := vouch()
	if err == nil || !strings.Contains(err.Error(), "VOUCH refused, nothing written") || !strings.Contains(err.Error(), "holds 1 keys") {
		t.Fatalf("VOUCH over a master holding a key = %v; want a refusal naming its key", err)
	}
	for i := range servers {
		if c.counting(i) {
			t.Fatalf("master %d counts after a refused VOUCH", i)
		}
	}

	if err := c.direct[1].Del(ctx, "stray").Err(); err != nil {
		t.Fatal(err)
	}
	if err := vouch(); err != nil {
		t.Fatalf("VOUCH over brand-new masters: %v", err)
	}
	waitAllCount(t, c)
	key := uniqueKey("vouch")
	if ok, err := px.SetNX(ctx, key, "A", 5*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX after VOUCH = %v, %v", ok, err)
	}
	if err := releaseScript.Run(ctx, px, []string{key}, "A").Err(); err != nil {
		t.Fatal(err)
	}
	// Empty again, but used: the markers keep the proxy's checks and the
	// deadline of its grant.
	err = vouch()
	if err == nil || !strings.Contains(err.Error(), "its replication marker shows it was used") {
		t.Fatalf("VOUCH over masters a proxy has used = %v; want a refusal", err)
	}
	for i := range servers {
		if !c.counting(i) {
			t.Fatalf("master %d stopped counting after a refused VOUCH", i)
		}
	}
}

// VOUCH over brand-new masters makes every one of them count before it
// answers: a SET NX sent the moment it returns is granted on all of them,
// with no wait for a periodic check. Another proxy over the same masters,
// started before the VOUCH, takes the vouched record at its next check:
// the record of a long grant made since on the other masters does not hold
// a vouched master out. Each round starts fresh masters and proxies, since
// the order in which the links read their vouched markers varies.
func TestVouchedMastersCountWhenVouchAnswers(t *testing.T) {
	waits(t)
	const n, rounds, ttl = 3, 4, time.Minute
	strict := func(cfg *config.Config) { cfg.RestartQuarantine = "strict" }
	allCount := func(hs []netio.Health) error {
		for i, h := range hs {
			if !h.Counts(time.Now()) {
				return fmt.Errorf("master %d does not count: %+v", i, h)
			}
		}
		return nil
	}
	for round := range rounds {
		servers := startRedis(t, n)
		c := clusterOver(t, servers, strict)
		addrs := addrsOf(servers)
		other, stopOther := startApp(t, addrs, strict)
		ctx := context.Background()
		px := c.client(2)
		if err := px.Do(ctx, "VOUCH").Err(); err != nil {
			t.Fatalf("round %d: VOUCH over brand-new masters: %v", round, err)
		}
		if err := allCount(c.app.Pool().Health()); err != nil {
			t.Fatalf("round %d: when VOUCH answers, %v", round, err)
		}
		key := uniqueKey("vouch-at-once")
		if ok, err := px.SetNX(ctx, key, "A", ttl).Result(); !ok || err != nil {
			t.Fatalf("round %d: SET NX the moment VOUCH answered = %v, %v", round, ok, err)
		}
		if h := c.holders(key, "A"); len(h) != n {
			t.Fatalf("round %d: the grant is held on masters %v; want all %d", round, h, n)
		}
		// Well before the grant's deadline, which the other masters'
		// records hold.
		waitFor(t, ttl/4, "the other proxy's masters to count", func() error {
			return allCount(other.Pool().Health())
		})
		if err := allCount(c.app.Pool().Health()); err != nil {
			t.Fatalf("round %d: after the periodic checks, %v", round, err)
		}
		stopOther()
		c.stopApp()
	}
}
