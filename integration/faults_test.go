package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// Liveness bounds below are generous on purpose: the machine is shared and
// noisy. They check that nothing hangs, not how fast it is.

func fastTimeout(cfg *config.Config) { cfg.BackendTimeout = 100 * time.Millisecond }

// With three of five masters hung (SIGSTOP), SET NX answers soon with no
// success and leaves no token on the masters it reached; with two hung it
// still succeeds.
func TestHungMasters(t *testing.T) {
	c := newCluster(t, 5, fastTimeout)
	ctx := context.Background()
	cl := c.client(2)
	paused := []int{}
	defer func() {
		for _, i := range paused {
			c.servers[i].Resume()
		}
	}()
	pause := func(i int) {
		if err := c.servers[i].Pause(); err != nil {
			t.Fatal(err)
		}
		paused = append(paused, i)
	}
	pause(0)
	pause(1)
	for i := 0; i < 5; i++ {
		key := uniqueKey("hung2")
		start := time.Now()
		ok, err := cl.SetNX(ctx, key, "tok", 10*time.Second).Result()
		if err != nil || !ok {
			t.Fatalf("with 2 of 5 hung: SET NX = %v, %v", ok, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("with 2 of 5 hung, SET NX took %v", d)
		}
	}
	pause(2)
	for i := 0; i < 5; i++ {
		key := uniqueKey("hung3")
		start := time.Now()
		ok, err := cl.SetNX(ctx, key, "tok", 10*time.Second).Result()
		if ok || err != nil {
			t.Fatalf("with 3 of 5 hung: SET NX = %v, %v; want a plain nil", ok, err)
		}
		if d := time.Since(start); d > 3*time.Second {
			t.Fatalf("with 3 of 5 hung, SET NX took %v: it must answer within about the backend timeout", d)
		}
		for _, j := range []int{3, 4} {
			waitFor(t, 3*time.Second, fmt.Sprintf("with 3 of 5 hung: the failed SET NX undone on reachable backend %d", j), func() error {
				v, _ := c.direct[j].Get(ctx, key).Result()
				return holds(v != "tok")
			})
		}
	}
}

// One hung master slows nobody: many clients keep locking concurrently.
func TestHungMasterDoesNotStallOthers(t *testing.T) {
	c := newCluster(t, 5, fastTimeout)
	if err := c.servers[4].Pause(); err != nil {
		t.Fatal(err)
	}
	defer c.servers[4].Resume()
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := c.client(2)
			for i := 0; i < 20; i++ {
				key := uniqueKey("busy")
				start := time.Now()
				ok, err := cl.SetNX(ctx, key, "t", 10*time.Second).Result()
				if err != nil || !ok {
					errs <- err
					return
				}
				if d := time.Since(start); d > 3*time.Second {
					errs <- errors.New("a lock took " + d.String() + " with one master hung")
					return
				}
				cl.Eval(ctx, seedRelease, []string{key}, "t")
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("with one of five hung: %v", err)
	}
}

// waitDown waits until the proxy has seen backend i go down. A command
// sent before it did reaches a dead socket, its outcome unknown: its undo
// then waits for a master that never comes back, and the shutdown reports
// it (rightly) as left.
func (c *cluster) waitDown(i int) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, fmt.Sprintf("backend %d to be seen down after it was killed", i), func() error {
		return holds(!c.app.Pool().Health()[i].Up)
	})
}

// waitRestarted waits until the proxy has reconnected to backend i and
// seen its new identity.
func (c *cluster) waitRestarted(i int, restarts uint64) {
	c.t.Helper()
	waitFor(c.t, 10*time.Second, fmt.Sprintf("backend %d's restart to be seen", i), func() error {
		if h := c.app.Pool().Health()[i]; !h.Up || h.Restarts < restarts {
			return fmt.Errorf("%+v", h)
		}
		return nil
	})
}

// A master that restarts has forgotten its locks. Its votes do not count
// until max_ttl + drift after it came back, from the first command on: a
// lock still held by a client cannot be granted again through it. With the
// quarantine off (the control), it is.
func TestRestartQuarantineKeepsLocksExclusive(t *testing.T) {
	waits(t)
	for _, mode := range []string{"strict", "run-id", "off"} {
		t.Run(mode, func(t *testing.T) {
			// TTLs long enough that A surely still holds its lock when B tries.
			c := newCluster(t, 3, func(cfg *config.Config) {
				cfg.MaxTTL = 5 * time.Second
				cfg.RestartQuarantine = mode
			})
			ctx := context.Background()
			cl := c.client(2)
			key := uniqueKey("restart")
			if mode == "strict" {
				// The fresh masters count once max_ttl + drift has passed.
				waitGrant(t, cl, uniqueKey("warm"), "w", time.Second, 15*time.Second)
			}
			heldUntil := time.Now().Add(5 * time.Second)
			if ok, err := cl.SetNX(ctx, key, "A", 5*time.Second).Result(); !ok || err != nil {
				t.Fatalf("A: SET NX = %v, %v", ok, err)
			}
			// Two of three masters crash and come straight back, empty.
			for _, i := range []int{0, 1} {
				if err := c.servers[i].Restart(); err != nil {
					t.Fatal(err)
				}
			}
			c.waitRestarted(0, 1)
			c.waitRestarted(1, 1)
			ok, err := cl.SetNX(ctx, key, "B", 2*time.Second).Result()
			if !time.Now().Before(heldUntil) {
				t.Fatalf("the machine was too slow: A's 5s lock ran out before B tried, so this run shows nothing")
			}
			switch mode {
			case "strict", "run-id":
				if ok || err != nil {
					t.Fatalf("B got %v, %v while A still held the lock: the restarted masters' votes counted", ok, err)
				}
				info, _ := cl.Info(ctx, "proxy").Result()
				if strings.Count(info, "state=quarantined") != 2 {
					t.Fatalf("INFO does not show the two restarted masters quarantined:\n%s", info)
				}
				c.checkGone(t, "after B's refused attempt", key, "B")
				// After the quarantine (and A's TTL), B gets it.
				waitFor(t, 15*time.Second, "B to get the lock after the quarantine", func() error {
					ok, _ := cl.SetNX(ctx, key, "B", 2*time.Second).Result()
					return holds(ok)
				})
			case "off":
				// The control: without the quarantine the forgetful masters
				// hand out a lock that is still held.
				if !ok || err != nil {
					t.Fatalf("control: with the quarantine off B should (unsafely) get the lock: %v, %v", ok, err)
				}
			}
		})
	}
}

// The strict rule also quarantines masters that are younger than the hold
// when the proxy first sees them: a proxy started with fresh masters
// refuses locks until then.
func TestStrictRestartRule(t *testing.T) {
	waits(t)
	// A hold of about 5s leaves a slow CI machine room to set the cluster up
	// before the first check.
	c := newCluster(t, 3, func(cfg *config.Config) {
		cfg.MaxTTL = 4 * time.Second
		cfg.BackendTimeout = 100 * time.Millisecond
		cfg.RestartQuarantine = "strict"
	})
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("strict")
	// The masters started moments ago, so at first no vote counts...
	h := c.app.Pool().Health()[0]
	if !time.Now().Before(h.QuarantinedUntil) {
		t.Fatalf("the masters are not quarantined at first (the hold passed during set-up?): %+v", h)
	}
	if ok, _ := cl.SetNX(ctx, key, "t", time.Second).Result(); ok {
		t.Fatalf("strict: a lock was granted by masters younger than the hold")
	}
	// ...and once they are older than max_ttl + drift, locks are granted.
	waitFor(t, 15*time.Second, "strict: a lock granted after the hold", func() error {
		ok, _ := cl.SetNX(ctx, key, "t", time.Second).Result()
		return holds(ok)
	})
}

// Several proxies over the same masters share nothing: a lock taken
// through one is refused through another, and released through either.
func TestTwoProxies(t *testing.T) {
	c := newCluster(t, 3)
	var addrs []string
	for _, s := range c.servers {
		addrs = append(addrs, s.Addr)
	}
	other, _ := startApp(t, addrs)
	ctx := context.Background()
	a, b := c.client(2), proxyClient(t, other.Addr(), 2)
	key := uniqueKey("two")
	if ok, _ := a.SetNX(ctx, key, "A", 10*time.Second).Result(); !ok {
		t.Fatalf("SET NX through proxy A failed")
	}
	if ok, _ := b.SetNX(ctx, key, "B", 10*time.Second).Result(); ok {
		t.Fatalf("proxy B granted a lock held through proxy A")
	}
	if n, _ := b.Eval(ctx, seedRelease, []string{key}, "A").Int(); n != 1 {
		t.Fatalf("release through proxy B = %d", n)
	}
	if ok, _ := b.SetNX(ctx, key, "B", 10*time.Second).Result(); !ok {
		t.Fatalf("proxy B could not take the released lock")
	}
	if v, err := a.Get(ctx, key).Result(); err != nil || v != "B" {
		t.Fatalf("proxy A reads %q, %v", v, err)
	}
}
