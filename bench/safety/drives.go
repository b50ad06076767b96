package safety

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// acquireWithin retries until the client holds key or d has passed.
func acquireWithin(ctx context.Context, c *Client, key string, ttl, d time.Duration) (Lease, bool) {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if l, out := c.Acquire(key, ttl); out == OK {
			return l, true
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return Lease{}, false
}

// restartPlan shapes driveRestart.
type restartPlan struct {
	key string
	// phase is the fraction of a wall-clock second at which client A takes
	// the lock and the masters are restarted. Redis reports its uptime in
	// whole seconds (the difference of two truncated wall-clock times), so
	// where the restart falls in a second decides what the proxies read.
	phase float64
	// holeAcross black-holes the restarted masters' links until just after
	// the next wall-clock second begins, so that the proxies reconnect (and
	// read the masters' uptime) in a later second than the masters started
	// in: a master up for 0.2s then reports uptime_in_seconds:1.
	holeAcross bool
}

// driveRestart returns a Drive: client A takes a lock with the longest TTL
// allowed; a majority of masters is killed with -9 and restarted at once
// (they forget A's lock); once every proxy has reconnected to them, client
// B (on another proxy) tries to take the same lock until A's validity is
// over. With the restart quarantine working, B is refused; with it off (or
// ending too early), B gets the lock while A still holds it, which
// the windows and linearizability checkers (and usually the register checker) must report. The quarantine each proxy
// applied is noted. A round whose timing did not come out as planned (a
// very slow machine) proves nothing and is repeated, at most three times.
func driveRestart(plan restartPlan) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		ttl := e.C.Config.MaxTTL
		a, b, closeClients := e.holderAndRival(1000, 1)
		defer closeClients()
		k := e.C.Majority()
		for round := 1; round <= 3 && ctx.Err() == nil; round++ {
			// After a round with the quarantine on, wait for it to end.
			if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
				return fmt.Errorf("round %d: the masters never all counted again", round)
			}
			sleepUntilPhase(ctx, plan.phase)
			la, ok := acquireWithin(ctx, a, plan.key, ttl, time.Second)
			if !ok {
				continue
			}
			va, _ := a.Read(la) // no fenced register in this scenario
			e.Logf("round %d: client A (proxy 0) holds %s as %s until %s", round, plan.key, la.Token, e.H.rel(la.ValidUntil))
			ms := e.pick(k)
			before := make([][]uint64, e.C.NumProxies())
			for p := range before {
				for _, i := range ms {
					r, _, _ := e.C.restartsSeen(p, i)
					before[p] = append(before[p], r)
				}
			}
			if plan.holeAcross {
				for _, i := range ms {
					e.BlackHole(i, true)
				}
			}
			restarted := time.Now()
			second := restarted.Unix()
			var rwg sync.WaitGroup
			for _, i := range ms {
				rwg.Add(1)
				go func() {
					defer rwg.Done()
					e.Restart(i)
				}()
			}
			rwg.Wait()
			planned := true
			if plan.holeAcross {
				// The masters must have started within the second the
				// restart began in; the proxies reconnect in the next.
				planned = time.Now().Unix() == second
				sleepCtx(ctx, time.Until(time.Unix(second+1, 50e6)))
				for _, i := range ms {
					e.BlackHole(i, false)
				}
			}
			seen := waitRestartsSeen(ctx, e, ms, before, la.ValidUntil.Add(-300*time.Millisecond))
			if seen {
				e.noteQuarantines(round, ms, restarted)
			}
			inside := tryInside(ctx, e, b, plan.key, la, round)
			holderFinishes(ctx, e, a, la, va, inside)
			if inside || (seen && planned) {
				return nil
			}
			e.Logf("round %d proves nothing: the restarts did not happen as planned on this (slow?) machine; again", round)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("three rounds and the restarts never happened as planned")
	}
}

// sleepUntilPhase sleeps until the wall clock is at the given fraction of
// a second.
func sleepUntilPhase(ctx context.Context, phase float64) {
	frac := time.Duration(time.Now().UnixNano() % int64(time.Second))
	d := time.Duration(phase*float64(time.Second)) - frac
	if d < 0 {
		d += time.Second
	}
	sleepCtx(ctx, d)
}

// noteQuarantines notes how long each proxy keeps each restarted master out
// of its quorums, against what the contract asks: max_ttl + drift after the
// master came back (which was after restarted).
func (e *Env) noteQuarantines(round int, ms []int, restarted time.Time) {
	for _, p := range e.C.Running() {
		px := e.C.Proxy(p)
		if px == nil {
			continue
		}
		hs := px.Pool().Health()
		for _, i := range ms {
			q := hs[i].QuarantinedUntil.Sub(restarted)
			short := ""
			if e.C.Config.EffectiveQuarantine() == "off" {
				short = " (restart_quarantine off)"
			} else if q < e.C.Hold() {
				short = fmt.Sprintf(": %v SHORT of the %v the contract asks", (e.C.Hold() - q).Round(time.Millisecond), e.C.Hold())
			}
			e.Logf("round %d: proxy %d counts master %d again %v after its restart began%s", round, p, i, q.Round(time.Millisecond), short)
		}
	}
}

// waitRestartsSeen waits until every proxy has detected a restart of each
// master in ms (since the counts in before) and is connected to it, or the
// deadline passes.
func waitRestartsSeen(ctx context.Context, e *Env, ms []int, before [][]uint64, deadline time.Time) bool {
	for ctx.Err() == nil && time.Now().Before(deadline) {
		all := true
		for p := range before {
			if e.C.Proxy(p) == nil {
				continue
			}
			for j, i := range ms {
				if r, up, _ := e.C.restartsSeen(p, i); r <= before[p][j] || !up {
					all = false
				}
			}
		}
		if all {
			return true
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return false
}

// drivePause: client A takes a short lock and reads the register, then
// pauses (as in a GC pause) past its validity; client B takes the lock once
// it has expired, increments the register and releases; then A wakes up
// and writes its stale value without checking its validity again. The
// lock itself behaved (B got it only after A's validity), so the windows and
// linearizability checkers see nothing. On a plain register the register checker must see the lost update; on
// a fenced register A's write carries A's fencing number, lower than B's,
// and is refused: no update is lost.
func drivePause(ctx context.Context, e *Env) error {
	const key = "ctl:pause"
	ttl := 500 * time.Millisecond
	a, b, closeClients := e.holderAndRival(2000, 3)
	defer closeClients()
	for round := 1; round <= 3 && ctx.Err() == nil; round++ {
		la, ok := acquireWithin(ctx, a, key, ttl, 5*time.Second)
		if !ok {
			return fmt.Errorf("round %d: client A could not take %s", round, key)
		}
		va, ok := a.Read(la)
		if !ok {
			e.Logf("round %d: client A holds %s as %s with no fencing number (%d): the fenced register refused its read; again", round, key, la.Token, la.Fence)
			a.Release(la)
			continue
		}
		e.Logf("round %d: client A holds %s as %s (fencing number %d) until %s, read %d, and pauses", round, key, la.Token, la.Fence, e.H.rel(la.ValidUntil), va)
		wrote := false
		if lb, ok := acquireWithin(ctx, b, key, ttl, 5*time.Second); ok {
			wrote = b.Work(lb, 0, e.Workload.Margin)
			e.Logf("round %d: client B got %s (fencing number %d) at %s; its update written: %v", round, key, lb.Fence, e.H.rel(lb.Granted), wrote)
			b.Release(lb)
		}
		sleepCtx(ctx, time.Until(la.ValidUntil)) // B got it only after that anyway
		took := a.Write(la, va)                  // no second look at the validity: the pause
		e.Logf("round %d: client A wakes up at %s, past its validity, and writes %d with fencing number %d: taken %v", round, e.H.rel(time.Now()), va+1, la.Fence, took)
		a.Release(la)
		if wrote {
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("client B never got the lock (and wrote) after A's pause")
}

// driveProxyJoin returns a Drive for the first-seen hole, on 3 masters
// with a proxy slot left empty for a joiner: master 2 is killed; proxy 0
// restarts (so it starts while master 2 is down and has never seen its
// last run); client A takes the lock through proxy 0 with the longest TTL
// allowed (held on masters 0 and 1); master 2 starts again, empty; master
// 1 is killed and restarted at once (it forgets A's lock); a new proxy
// joins in the last slot, while the other proxies are stopped (it alone
// sees the masters' new runs); client C tries the lock through it until
// A's validity is over. Only master 0 still holds A's lock, so a proxy that
// counts the two fresh masters at once grants C the lock inside A's
// validity (the windows and linearizability checkers report it); one that keeps a master out for
// max_ttl + drift after it started refuses C.
func driveProxyJoin(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		n := e.C.NumBackends()
		if n != 3 || e.C.NumProxies() < 2 {
			return fmt.Errorf("proxy-join needs 3 masters and 2 proxy slots, has %d and %d", n, e.C.NumProxies())
		}
		const down, forgets = 2, 1
		joiner := e.C.NumProxies() - 1
		ttl := e.C.Config.MaxTTL
		a := NewClient(3000, 0, e.C, e.H, 5)
		c := NewClient(3001, joiner, e.C, e.H, 6)
		defer a.Close()
		defer c.Close()
		// Masters 0 and 1 must be old enough for a rule that keeps fresh
		// masters out to let the restarted proxy 0 count them.
		sleepCtx(ctx, time.Until(e.C.started.Add(e.C.Hold()+uptimeRounding)))
		for round := 1; round <= 3 && ctx.Err() == nil; round++ {
			if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
				return fmt.Errorf("round %d: the masters never all counted again", round)
			}
			e.Kill9(down)
			e.RestartProxy(0)
			if !e.C.waitSees(ctx, 0, []int{0, 1}, 5*time.Second) {
				e.Start(down)
				e.Logf("round %d: the restarted proxy 0 did not reach masters 0 and 1 in 5s; again", round)
				continue
			}
			// A fresh proxy counts a master once it has read the other
			// masters' records of it, or after 2 s when one of them is
			// down, as master 2 is here: A may wait that long.
			la, ok := acquireWithin(ctx, a, key, ttl, 3*time.Second)
			if !ok {
				e.Start(down)
				e.Logf("round %d: client A could not take %s through proxy 0; again", round, key)
				continue
			}
			va, _ := a.Read(la) // no fenced register in this scenario
			e.Logf("round %d: client A (proxy 0) holds %s as %s until %s", round, key, la.Token, e.H.rel(la.ValidUntil))
			// The joiner alone sees the masters' new runs: the other proxies
			// stop until C's tries are over, so that no loss they record on
			// the fresh masters decides for it (each proxy must decide on
			// its own, and a rule that trusts first sight then shows it).
			others := e.StopProxiesBut(joiner)
			e.Start(down)
			e.Restart(forgets)
			e.RestartProxy(joiner)
			planned := e.C.waitSees(ctx, joiner, []int{0, 1, 2}, time.Until(la.ValidUntil.Add(-300*time.Millisecond)))
			inside := tryInside(ctx, e, c, key, la, round)
			e.StartProxies(others)
			holderFinishes(ctx, e, a, la, va, inside)
			if inside || planned {
				return nil
			}
			e.Logf("round %d proves nothing: the joining proxy did not see the masters in time on this (slow?) machine; again", round)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("three rounds and the proxy never joined as planned")
	}
}

// drivePromote returns a Drive for the promoted-replica hole: the
// replication of a majority of masters is black-holed (their replicas
// lag); client A takes the lock with the longest TTL allowed (its token
// reaches the masters, not those replicas); those replicas are promoted
// and the proxies' relays moved to them, as a failover does; client C
// tries the lock through another proxy until A's validity is over. A
// majority of the masters the proxies now reach never saw A's lock, so a
// proxy that counts a promoted replica at once grants C the lock inside
// A's validity (the windows and linearizability checkers report it).
func drivePromote(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		if e.C.Replica(0) == nil {
			return errors.New("replica-promote needs a cluster with replicas")
		}
		n, k := e.C.NumBackends(), e.C.Majority()
		ttl := e.C.Config.MaxTTL
		a, c, closeClients := e.holderAndRival(4000, 7)
		defer closeClients()
		// The replicas must have been up longer than a restarted master's
		// hold (and uptime rounding), or a proxy that sees a promoted replica
		// as a restarted master would keep it out by accident of timing.
		sleepCtx(ctx, time.Until(e.C.started.Add(e.C.Hold()+uptimeRounding)))
		for round := 1; round <= 3 && ctx.Err() == nil; round++ {
			if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
				return fmt.Errorf("round %d: the masters never all counted again", round)
			}
			for i := 0; i < n; i++ {
				if err := e.C.WaitReplicaSynced(ctx, i, 10*time.Second); err != nil {
					return fmt.Errorf("round %d: %w", round, err)
				}
			}
			ms := e.pick(k)
			for _, i := range ms {
				e.ReplicationLag(i, true)
			}
			la, ok := acquireWithin(ctx, a, key, ttl, time.Second)
			if !ok {
				for _, i := range ms {
					e.ReplicationLag(i, false)
				}
				e.Logf("round %d: client A could not take %s; again", round, key)
				continue
			}
			va, _ := a.Read(la) // no fenced register in this scenario
			e.Logf("round %d: client A (proxy 0) holds %s as %s until %s; the replicas of masters %v lag", round, key, la.Token, e.H.rel(la.ValidUntil), ms)
			before := e.C.connects(ms)
			for _, i := range ms {
				e.Failover(i)
			}
			planned := e.C.waitReconnected(ctx, ms, before, time.Until(la.ValidUntil.Add(-300*time.Millisecond)))
			inside := tryInside(ctx, e, c, key, la, round)
			holderFinishes(ctx, e, a, la, va, inside)
			if inside || planned {
				return nil
			}
			e.Logf("round %d proves nothing: the proxies did not reach the promoted replicas in time on this (slow?) machine; again", round)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return errors.New("three rounds and the failover never happened as planned")
	}
}

// uptimeRounding is how much Redis's uptime_in_seconds can overstate an
// uptime, with room for the INFO round trip.
const uptimeRounding = 1500 * time.Millisecond

// tryInside has client c try to take key until la's validity is over
// (and a little after): it reports whether c got it inside that validity.
// A grant is used (the guarded update) and released.
func tryInside(ctx context.Context, e *Env, c *Client, key string, la Lease, round int) bool {
	for ctx.Err() == nil && time.Now().Before(la.ValidUntil.Add(200*time.Millisecond)) {
		lc, out := c.Acquire(key, 500*time.Millisecond)
		if out == OK {
			e.Logf("round %d: client %d (proxy %d) got %s at %s (A's validity ends %s)", round, c.ID, c.Proxy, key, e.H.rel(lc.Granted), e.H.rel(la.ValidUntil))
			c.Work(lc, 0, e.Workload.Margin)
			c.Release(lc)
			return lc.Granted.Before(la.ValidUntil)
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return false
}

// holderFinishes is a well-behaved holder's end: after a second holder it
// goes on working for a while (well inside its validity), then writes only
// if its validity allows, and releases.
func holderFinishes(ctx context.Context, e *Env, a *Client, la Lease, read int64, second bool) {
	if second {
		sleepCtx(ctx, min(200*time.Millisecond, time.Until(la.ValidUntil)/2))
	}
	if la.Valid(time.Now(), e.Workload.Margin) {
		a.Write(la, read)
	}
	a.Release(la)
}

// holderAndRival are the two clients of an orchestrated round: the holder
// on the first proxy and its rival on the last, with ids id and id+1 and
// random sources seed and seed+1; closeBoth closes both.
func (e *Env) holderAndRival(id int, seed uint64) (holder, rival *Client, closeBoth func()) {
	holder = NewClient(id, 0, e.C, e.H, seed)
	rival = NewClient(id+1, e.C.NumProxies()-1, e.C, e.H, seed+1)
	return holder, rival, func() { holder.Close(); rival.Close() }
}
