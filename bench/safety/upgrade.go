package safety

import (
	"context"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/faultnet"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The upgrade from a single Redis. The clients used to lock on one Redis
// (the old Redis); during the upgrade some still do, directly (go-redis:
// SET NX PX and the release script), while others already go through the
// proxies, on the same keys. With upgrade_from naming the old Redis, every
// grant through a proxy also needs the old Redis's grant (a veto, not a
// vote), so the two groups exclude each other; the checkers judge both
// groups' holds together. The old Redis is durable (appendonly yes,
// appendfsync always): the old clients' locks survive its restart, as
// their safety before the upgrade rested on; a Redis without persistence
// that restarts loses its clients' locks with or without the proxy.

// startOld starts the old Redis (durable unless OldVolatile) and, when it
// is to be named, the proxies' relay to it.
func (c *Cluster) startOld() error {
	args := masterArgs
	if !c.Config.OldVolatile {
		args = append(append([]string(nil), masterArgs...), durableArgs...)
	}
	s, err := redisproc.Start(c.Config.Dir, args...)
	if err != nil {
		return fmt.Errorf("safety: the old Redis: %w", err)
	}
	c.Old = s
	if c.Config.UpgradeFrom {
		if c.OldRelay, err = faultnet.Listen(s.Addr); err != nil {
			return fmt.Errorf("safety: relay to the old Redis: %w", err)
		}
	}
	return nil
}

// waitOldUp waits until every running proxy is connected to the old
// Redis.
func (c *Cluster) waitOldUp(ctx context.Context) error {
	for {
		all := true
		for _, p := range c.Running() {
			if a := c.Proxy(p); a != nil {
				h, ok := a.Pool().VetoHealth()
				all = all && ok && h.Up
			}
		}
		if all {
			return nil
		}
		if !sleepCtx(ctx, 10*time.Millisecond) {
			return fmt.Errorf("safety: the proxies are not connected to the old Redis (upgrade_from): %w", ctx.Err())
		}
	}
}

// oldClientIDs are the client ids of the clients that lock on the old
// Redis directly.
const oldClientIDs = 60000

// NewOldClient connects client id to the old Redis directly, as a client
// not yet moved to the proxy: it locks with SET NX PX and releases with
// the compare-and-delete script, as through a proxy, and asks for no
// fencing number (a plain Redis has no FENCE). Its operations are marked
// Direct.
func NewOldClient(id int, c *Cluster, h *History, seed uint64) *Client {
	cl := &Client{ID: id, Proxy: -1, direct: true, h: h, rng: rand.New(rand.NewPCG(seed, uint64(id)+1))}
	cl.rdb = redis.NewClient(&redis.Options{
		Addr: c.Old.Addr, Protocol: 2, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		MaxRetries:               -1, PoolSize: 2,
		DialTimeout: time.Second, ReadTimeout: opTimeout, WriteTimeout: opTimeout,
		OnConnect: cl.onConnect,
	})
	return cl
}

// vetoOut records an interval in which the old Redis, named as
// upgrade_from, could not answer the proxies: no grant through a proxy
// can have its veto's grant then. Without upgrade_from nothing is
// recorded (the proxies do not ask it).
func (e *Env) vetoOut(from, to time.Time, why string) {
	if e.C.Config.UpgradeFrom {
		e.NoMajority(from, to, "the old Redis (upgrade_from) "+why+": a grant needs its answer")
	}
}

// partitionMax bounds a black hole on the proxies' link to the old Redis:
// shorter than the proxies' dead-after (a reply a second late closes the
// connection), so that a proxy still waits on the connection that carried
// a SET when the partition heals and undoes it after its late reply. The
// contract leaves a late SET that arrives while no connection of the
// proxy waits on it (a longer partition) to expire by its TTL.
const partitionMax = 900 * time.Millisecond

// scheduleUpgrade faults the old Redis while the masters take the faults
// of mixed: every 0.3-0.8s it hangs (SIGSTOP) for 0.3-1.2s, the proxies'
// link to it is black-holed for 0.3-0.9s (its direct clients still reach
// it; see partitionMax), or it is killed (-9) and started again 0.3-1.2s
// later or at once (it reloads its append-only file); the first fault is a
// kill, the second a hang. While it hangs or is cut off, a probe acquires
// a fresh key with the longest TTL through a proxy: answered nil (no
// veto), and its SET reaches the old Redis once the fault heals; the undo
// time after that, the masters and the old Redis are read directly: no
// token of an acquire a proxy answered nil may stay on a majority or on
// the old Redis.
func scheduleUpgrade(ctx context.Context, e *Env) {
	e.Go(func() { scheduleMixed(ctx, e) })
	old := e.C.Old
	p := e.probe()
	defer p.Close()
	for n := 0; sleepCtx(ctx, e.Between(300*time.Millisecond, 800*time.Millisecond)); n++ {
		d := e.Between(300*time.Millisecond, 1200*time.Millisecond)
		if e.Left() < d+undoWithin {
			return
		}
		// A short run sees a kill, then a hang with its probe.
		kind := e.Intn(4)
		if n < 2 {
			kind = 2 - 2*n
		}
		var what string
		switch {
		case kind == 0:
			if err := old.Pause(); err != nil {
				e.Logf("SIGSTOP the old Redis FAILED: %v", err)
				continue
			}
			from := time.Now()
			e.Logf("SIGSTOP the old Redis")
			e.probeAcquire(p, n)
			e.hold(ctx, time.Until(from.Add(d)))
			to := time.Now()
			if err := old.Resume(); err != nil {
				e.Logf("SIGCONT the old Redis FAILED: %v", err)
			}
			e.Logf("SIGCONT the old Redis")
			e.vetoOut(from, to, "hung")
			what = "hung"
		case kind == 1 && e.C.OldRelay != nil:
			d = min(d, partitionMax)
			e.C.OldRelay.BlackHole(true)
			from := time.Now()
			e.Logf("black hole on the proxies' link to the old Redis (its direct clients still reach it)")
			e.probeAcquire(p, n)
			e.hold(ctx, time.Until(from.Add(d)))
			to := time.Now()
			e.C.OldRelay.BlackHole(false)
			e.Logf("black hole on the proxies' link to the old Redis healed")
			e.vetoOut(from, to, "was cut off from the proxies")
			what = "cut off from the proxies"
		default:
			old.Kill()
			from := time.Now()
			e.Logf("kill -9 the old Redis")
			if e.Intn(2) == 0 {
				e.hold(ctx, d)
			}
			to := time.Now()
			if err := old.Restart(); err != nil {
				e.Logf("starting the old Redis again FAILED: %v", err)
			}
			e.Logf("the old Redis started again (it reloads its append-only file)")
			e.vetoOut(from, to, "down")
			continue // no probe waits to be undone
		}
		e.hold(ctx, undoWithin)
		e.Snapshot(fmt.Sprintf("%v after the old Redis was %s", undoWithin, what))
	}
}
