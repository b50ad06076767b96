package safety

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// Data that goes back within one run: a master keeps its run, its
// replication ids and its counters, but what it serves becomes an older
// copy of its data (a database holding a copy swapped in, a backup
// restored while it runs). The copy is the replication marker, copied to
// database 1 (COPY ... DB 1) before client A's grant; SWAPDB 0 1 brings it
// back after. Nothing INFO reports changes: only the marker's counts of
// each proxy's continuity checks, or its epoch, are older than what some
// proxy saw.

// rollbackPlan is one round's shape.
type rollbackPlan struct {
	// retired: a loss is recorded on those masters between the copy and
	// A's grant (an evicting memory policy seen, then reverted), so the
	// copy's epoch is one that loss retired.
	retired bool
	// fresh: every proxy (each of which saw the newer data) stops before
	// the swap, and fresh ones start after it: they never saw the newer
	// data and learn what it was from the masters that kept theirs.
	fresh bool
}

func (p rollbackPlan) String() string {
	var s []string
	if p.retired {
		s = append(s, "a loss recorded between the copy and the grant")
	}
	if p.fresh {
		s = append(s, "the proxies replaced by fresh ones across the swap")
	} else {
		s = append(s, "the proxies kept")
	}
	return strings.Join(s, ", ")
}

// rollbackRound is round n's plan: the first round replaces the proxies,
// the second retires the copy's epoch and keeps them, later rounds draw
// both at random.
func (e *Env) rollbackRound(n int) rollbackPlan {
	switch n {
	case 1:
		return rollbackPlan{fresh: true}
	case 2:
		return rollbackPlan{retired: true}
	}
	return rollbackPlan{retired: e.Intn(2) == 0, fresh: e.Intn(2) == 0}
}

// driveRollback returns a Drive for data that goes back within a run, on
// 3 masters: on a majority, the marker is copied to database 1 (what else
// database 1 held is flushed first); in some rounds an evicting memory
// policy is then switched on for 1.2-1.5s and off again on them (a loss
// recorded: the copy's epoch is retired) and the round waits until they
// count again; client A takes the lock (held on every master); in some
// rounds every proxy stops, once the master that keeps its data was told
// of counts newer than the copies'; SWAPDB 0 1 brings the copies back (A's
// lock leaves with the newer data); fresh proxies start in those rounds.
// Client C tries the lock through the last proxy while A's validity
// lasts: a master whose data went back does not count for the hold, and C
// must be refused.
func driveRollback(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		n := e.C.NumBackends()
		if n < 3 {
			return errors.New("rollback needs 3 masters or more")
		}
		ttl := e.C.Config.MaxTTL
		a, c, closeClients := e.holderAndRival(5600, 24)
		defer closeClients()
		k := e.C.Majority()
		// A round: a hold to wait out, in some rounds another for the
		// retired epoch, then A's lock.
		need := ttl + 2*e.C.Hold() + reconnectAllowance + time.Second
		return repeatRounds(ctx, e, need, func(round int) (bool, error) {
			if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
				return false, errors.New("the masters never all counted again")
			}
			plan := e.rollbackRound(round)
			ms := e.pick(k)
			keep := others(n, ms)
			e.Logf("round %d: %s; masters %v go back, %v keep their data", round, plan, ms, keep)
			for _, i := range ms {
				if err := copyMarker(ctx, e.C.Server(i).Addr); err != nil {
					return false, fmt.Errorf("master %d: %w", i, err)
				}
			}
			e.Logf("round %d: the marker of masters %v copied to database 1", round, ms)
			if plan.retired {
				if err := e.retireEpochs(ctx, round, ms); err != nil {
					return false, err
				}
			}
			if plan.fresh && e.quarantines() {
				// The fresh proxies can tell only once the masters that keep
				// their data were told of counts newer than the copies'.
				if !waitToldNewer(ctx, e, ms, keep, 5*time.Second) {
					e.Logf("round %d: the masters %v were not told of counts newer than the copies in 5s", round, keep)
					return false, nil
				}
			}
			la, ok := acquireWithin(ctx, a, key, ttl, time.Second)
			if !ok {
				return false, nil
			}
			va, _ := a.Read(la) // no fenced register in this scenario
			e.Logf("round %d: client A (proxy 0) holds %s as %s until %s", round, key, la.Token, e.H.rel(la.ValidUntil))
			var stopped []int
			if plan.fresh {
				stopped = e.StopProxiesBut(-1)
			} else {
				e.hold(ctx, e.Between(0, 500*time.Millisecond))
			}
			first := time.Now()
			for _, i := range ms {
				if err := swapBack(ctx, e.C.Server(i).Addr); err != nil {
					return false, fmt.Errorf("master %d: %w", i, err)
				}
			}
			swapped := time.Now()
			e.Logf("round %d: SWAPDB 0 1 on masters %v: their data went back to the copy taken before A's grant", round, ms)
			if e.quarantines() {
				e.NoMajority(swapped, first.Add(e.C.Hold()), fmt.Sprintf("masters %v went back to an older copy of their data: out for max_ttl + drift", ms))
			}
			planned := true
			if plan.fresh {
				e.StartProxies(stopped)
				for _, p := range stopped {
					planned = planned && e.C.waitSees(ctx, p, others(n, nil), time.Until(la.ValidUntil.Add(-500*time.Millisecond)))
				}
				e.Logf("round %d: the fresh proxies reach every master: %v", round, planned)
			}
			showed := e.rivalTries(ctx, round, ms, "gone with the newer data", a, c, la, va)
			e.noteHolds(round, ms, swapped)
			return showed && planned, nil
		})
	}
}

// noteHolds logs, for every running proxy, why it holds each master of ms
// out and until when (relative to since), or that it counts it.
func (e *Env) noteHolds(round int, ms []int, since time.Time) {
	now := time.Now()
	e.C.eachProxy(func(p int, a *app.App) {
		hs := a.Pool().Health()
		for _, i := range ms {
			if hs[i].Counts(now) {
				e.Logf("round %d: proxy %d counts master %d (%v after the fault)", round, p, i, now.Sub(since).Round(time.Millisecond))
				continue
			}
			e.Logf("round %d: proxy %d holds master %d out until %v after the fault: %s", round, p, i, hs[i].QuarantinedUntil.Sub(since).Round(time.Millisecond), hs[i].QuarantineReason)
		}
	})
}

// retireEpochs records a loss on masters ms with their data intact: an
// evicting memory policy for 1.2-1.5s (the proxies' periodic check sees
// it), then noeviction again; it waits until every proxy counts them again.
func (e *Env) retireEpochs(ctx context.Context, round int, ms []int) error {
	set := func(policy, maxmemory string) error {
		for _, i := range ms {
			s := e.C.Server(i)
			for _, args := range [][]string{{"CONFIG", "SET", "maxmemory-policy", policy}, {"CONFIG", "SET", "maxmemory", maxmemory}} {
				if r, err := s.Do(args...); err != nil || r != "OK" {
					return fmt.Errorf("%s on master %d: %q, %v", strings.Join(args, " "), i, r, err)
				}
			}
		}
		return nil
	}
	if err := set("allkeys-lru", "1gb"); err != nil {
		return err
	}
	first := time.Now()
	e.hold(ctx, e.Between(1200*time.Millisecond, 1500*time.Millisecond))
	if err := set("noeviction", "0"); err != nil {
		return err
	}
	if e.quarantines() {
		e.NoMajority(time.Now(), first.Add(e.C.Hold()), fmt.Sprintf("masters %v had an evicting memory policy: out for max_ttl + drift", ms))
	}
	e.Logf("round %d: an evicting memory policy on masters %v for a while, then noeviction again: a loss recorded, the copies' epochs retired", round, ms)
	if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
		return errors.New("the masters never counted again after the memory policy")
	}
	return nil
}

// copyMarker flushes database 1 of the master at addr and copies the
// marker there (when there is one: none under restart_quarantine off).
func copyMarker(ctx context.Context, addr string) error {
	db1 := directDB(addr, 1)
	defer db1.Close()
	if err := db1.FlushDB(ctx).Err(); err != nil {
		return fmt.Errorf("FLUSHDB of database 1: %w", err)
	}
	rdb := direct(addr)
	defer rdb.Close()
	if err := rdb.Do(ctx, "COPY", netio.MarkerKey, netio.MarkerKey, "DB", "1", "REPLACE").Err(); err != nil {
		return fmt.Errorf("COPY of the marker to database 1: %w", err)
	}
	return nil
}

// swapBack brings database 1 of the master at addr in place of database 0.
func swapBack(ctx context.Context, addr string) error {
	rdb := direct(addr)
	defer rdb.Close()
	if err := rdb.Do(ctx, "SWAPDB", 0, 1).Err(); err != nil {
		return fmt.Errorf("SWAPDB 0 1: %w", err)
	}
	return nil
}

// waitToldNewer waits until, for each master of ms, some master of keep
// was told (by a proxy's marker check) of a count of some proxy's checks
// in that master's marker above the count its copy in database 1 shows,
// or that the copy's epoch was retired: what a proxy that never saw the
// newer data needs to tell the copy is older.
func waitToldNewer(ctx context.Context, e *Env, ms, keep []int, d time.Duration) bool {
	copyOf := func(i int) map[string]string { return readMarker(ctx, directDB(e.C.Server(i).Addr, 1)) }
	return waitToldNewerThan(ctx, e, copyOf, ms, keep, d)
}

// toldNewer reports whether marker m was told of a count newer than one
// in copy cp, or that cp's epoch was retired.
func toldNewer(cp, m map[string]string) bool {
	epoch := cp["epoch"]
	if epoch == "" {
		return false
	}
	if m["s:"+epoch] == "R" {
		return true
	}
	for f, v := range cp {
		proxy, ok := strings.CutPrefix(f, "c:")
		if !ok {
			continue
		}
		had, _ := strconv.ParseInt(v, 10, 64)
		if seen, err := strconv.ParseInt(m["s:"+epoch+"|"+proxy], 10, 64); err == nil && seen > had {
			return true
		}
	}
	return false
}

// readMarker reads the marker with rdb, and closes it (nil when it
// cannot be read).
func readMarker(ctx context.Context, rdb *redis.Client) map[string]string {
	defer rdb.Close()
	m, err := rdb.HGetAll(ctx, netio.MarkerKey).Result()
	if err != nil {
		return nil
	}
	return m
}

// others is every master of n that is not in ms.
func others(n int, ms []int) []int {
	var out []int
	for i := 0; i < n; i++ {
		in := false
		for _, j := range ms {
			in = in || i == j
		}
		if !in {
			out = append(out, i)
		}
	}
	return out
}
