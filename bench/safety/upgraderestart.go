package safety

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// The upgrade's old Redis loses its data under an old client's lock: it
// runs without persistence and is killed (-9) and started again empty, or
// another redis-server comes to answer at its address (the proxies' relay
// to it retargeted). The old client still believes it holds the lock, so
// the veto must grant nothing for max_ttl + drift after the loss, as a
// vote would count nothing. The other direction (a proxy client holds the
// lock, the old Redis forgets it, an old client takes it directly) is
// beyond any proxy's reach: no old client locks on the old Redis in these
// scenarios but the round's own.

// oldLoss is how the old Redis loses its data in a round.
type oldLoss int

const (
	oldRestarted oldLoss = iota // kill -9, started again empty
	oldReplaced                 // the relay retargeted to an empty server, up for a while
	oldStandby                  // the relay retargeted to a server up for a while, holding a copy of the old Redis's marker taken before the old client's lock
)

func (l oldLoss) String() string {
	switch l {
	case oldRestarted:
		return "killed (-9) and started again empty"
	case oldReplaced:
		return "replaced at its address by an empty redis-server up for a while"
	}
	return "replaced at its address by a redis-server up for a while that holds a copy of the old Redis's marker taken before the old client's lock"
}

// upgradeRestartRound is round n's loss: one of each in turn, then at
// random.
func (e *Env) upgradeRestartRound(n int) oldLoss {
	if n <= 3 {
		return oldLoss(n - 1)
	}
	return oldLoss(e.Intn(3))
}

// driveUpgradeRestart returns a Drive for the old Redis (without
// persistence, named as upgrade_from) losing its data under an old
// client's lock: an old client O takes the lock on the old Redis directly
// with the longest TTL allowed; the old Redis is killed (-9) and started
// again empty (at once or 0.2-0.8s later), or the proxies' relay to it is
// moved to a spare redis-server (empty, or holding a copy of the old
// Redis's marker taken before O's lock), up since before the round; client
// C tries the lock through a proxy while O's validity lasts and must be
// refused.
func driveUpgradeRestart(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		if e.C.OldRelay == nil || !e.C.Config.OldVolatile {
			return errors.New("upgrade-restart needs an old Redis without persistence named as upgrade_from")
		}
		ttl := e.C.Config.MaxTTL
		c := NewClient(5701, e.C.NumProxies()-1, e.C, e.H, 27)
		defer c.Close()
		spare, err := e.C.startSpare()
		if err != nil {
			return err
		}
		spareSince := time.Now()
		defer func() { spare.Stop() }()
		need := ttl + e.C.Hold() + reconnectAllowance + time.Second
		return repeatRounds(ctx, e, need, func(round int) (bool, error) {
			if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) || !e.C.waitVetoCounting(ctx, 2*e.C.Hold()+5*time.Second) {
				return false, errors.New("the masters and the old Redis never all counted again")
			}
			loss := e.upgradeRestartRound(round)
			old := e.C.Old
			if loss != oldRestarted {
				// The spare has been up longer than the hold (and the
				// rounding of its uptime): a loss dated at its start would
				// be over.
				sleepCtx(ctx, time.Until(spareSince.Add(e.C.Hold()+uptimeRounding)))
			}
			if loss == oldStandby {
				copied, err := copyKey(ctx, old.Addr, spare.Addr, netio.MarkerKey)
				if err != nil {
					return false, err
				}
				e.Logf("round %d: the old Redis's marker copied to the spare redis-server (up since %s): %v", round, e.H.rel(spareSince), copied)
			}
			o := NewOldClient(oldClientIDs+100+round, e.C, e.H, 28+uint64(round))
			defer o.Close()
			lo, ok := acquireWithin(ctx, o, key, ttl, time.Second)
			if !ok {
				return false, nil
			}
			vo, _ := o.Read(lo) // no fenced register in this scenario
			e.Logf("round %d: old client O holds %s on the old Redis directly as %s until %s", round, key, lo.Token, e.H.rel(lo.ValidUntil))
			before := e.C.vetoConnects()
			lost := time.Now()
			switch loss {
			case oldRestarted:
				old.Kill()
				e.Logf("round %d: kill -9 the old Redis (no persistence)", round)
				if e.Intn(2) == 0 {
					e.hold(ctx, e.Between(200*time.Millisecond, 800*time.Millisecond))
				}
				if err := old.Restart(); err != nil {
					return false, fmt.Errorf("starting the old Redis again: %w", err)
				}
				e.Logf("round %d: the old Redis started again, empty", round)
			default:
				e.C.OldRelay.Retarget(spare.Addr)
				e.Logf("round %d: the old Redis %s: the proxies' relay moved to it (connections cut); O still reaches the old Redis, which holds its lock", round, loss)
			}
			back := time.Now()
			if e.quarantines() {
				e.vetoOut(lost, back.Add(e.C.Hold()), "lost its data: its grants do not count for max_ttl + drift")
			} else {
				e.vetoOut(lost, back, "down")
			}
			planned := e.C.waitVetoReconnected(ctx, before, time.Until(lo.ValidUntil.Add(-300*time.Millisecond)))
			e.Logf("round %d: every proxy reached the old Redis's address again: %v", round, planned)
			inside := tryInside(ctx, e, c, key, lo, round)
			holderFinishes(ctx, e, o, lo, vo, inside)
			e.noteVetoHolds(round, back)
			if loss != oldRestarted {
				// The spare answers at the old Redis's address from now on;
				// the server it replaced stops, and a new spare waits.
				old.Stop()
				e.C.Old = spare
				if spare, err = e.C.startSpare(); err != nil {
					return false, err
				}
				spareSince = time.Now()
			}
			return inside || planned, nil
		})
	}
}

// startSpare starts a redis-server like the old Redis (without
// persistence), for the old Redis's address to be moved to.
func (c *Cluster) startSpare() (*redisproc.Server, error) {
	s, err := redisproc.Start(c.Config.Dir, masterArgs...)
	if err != nil {
		return nil, fmt.Errorf("safety: a spare redis-server: %w", err)
	}
	return s, nil
}

// copyKey copies key from the redis-server at from to the one at to
// (DUMP, RESTORE ... REPLACE), and reports whether there was one to copy
// (no marker is kept under restart_quarantine off).
func copyKey(ctx context.Context, from, to, key string) (bool, error) {
	src, dst := direct(from), direct(to)
	defer src.Close()
	defer dst.Close()
	b, err := src.Dump(ctx, key).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("DUMP %s on %s: %w", key, from, err)
	}
	if err := dst.RestoreReplace(ctx, key, 0, b).Err(); err != nil {
		return false, fmt.Errorf("RESTORE %s on %s: %w", key, to, err)
	}
	return true, nil
}

// waitVetoCounting waits until every running proxy counts the old Redis's
// answers (named as upgrade_from).
func (c *Cluster) waitVetoCounting(ctx context.Context, d time.Duration) bool {
	return c.waitAll(ctx, d, func(_ int, a *app.App, now time.Time) bool {
		h, ok := a.Pool().VetoHealth()
		return ok && h.Counts(now)
	})
}

// vetoConnects is, per proxy slot, how many connections it has made to
// the old Redis.
func (c *Cluster) vetoConnects() []uint64 {
	out := make([]uint64, c.NumProxies())
	for p := range out {
		if a := c.Proxy(p); a != nil {
			h, _ := a.Pool().VetoHealth()
			out[p] = h.Connects
		}
	}
	return out
}

// waitVetoReconnected waits until every running proxy has made a new
// connection to the old Redis's address (since the counts in before) and
// is up on it.
func (c *Cluster) waitVetoReconnected(ctx context.Context, before []uint64, d time.Duration) bool {
	return c.waitAll(ctx, d, func(p int, a *app.App, _ time.Time) bool {
		h, _ := a.Pool().VetoHealth()
		return h.Up && h.Connects > before[p]
	})
}

// noteVetoHolds logs, for every running proxy, why it does not count the
// old Redis's answers and until when (relative to since), or that it does.
func (e *Env) noteVetoHolds(round int, since time.Time) {
	now := time.Now()
	e.C.eachProxy(func(p int, a *app.App) {
		h, _ := a.Pool().VetoHealth()
		if h.Counts(now) {
			e.Logf("round %d: proxy %d counts the old Redis's answers (%v after the loss)", round, p, now.Sub(since).Round(time.Millisecond))
			return
		}
		e.Logf("round %d: proxy %d does not count the old Redis's answers until %v after the loss: %s", round, p, h.QuarantinedUntil.Sub(since).Round(time.Millisecond), h.QuarantineReason)
	})
}
