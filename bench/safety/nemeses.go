package safety

import (
	"context"
	"fmt"
	"time"
)

// The schedules of the nemeses that go past a single master's faults:
// proxies that start, restart and join while masters restart; failovers to
// lagging replicas; extends under partial failure; links cut mid-command;
// a greedy client. Like the others, each heals every fault before it
// returns.

// scheduleProxyChurn: on 3 masters, proxies restart and join while masters
// are killed and restarted. Each cycle kills master a and restarts a proxy
// (which so starts while a is down); 0.4-0.8s later (long holders have
// taken locks on the two others meanwhile) a starts again, empty, master b
// is killed and restarted at once (it forgets those locks), and another
// proxy restarts or joins an empty slot. Until a has been up for max_ttl +
// drift only the third master may count: no majority.
func scheduleProxyChurn(ctx context.Context, e *Env) {
	n := e.C.NumBackends()
	for sleepCtx(ctx, e.Between(200*time.Millisecond, 500*time.Millisecond)) {
		down := e.Between(400*time.Millisecond, 800*time.Millisecond)
		if e.Left() < down+e.C.Hold()+reconnectAllowance {
			return
		}
		ms := e.pick(2)
		a, b := ms[0], ms[1]
		e.Kill9(a)
		e.RestartProxy(e.Intn(e.C.NumProxies()))
		e.hold(ctx, down)
		started := time.Now()
		e.Start(a)
		e.Kill9(b)
		killed := time.Now()
		e.Start(b)
		e.RestartProxy(e.joinSlot())
		if n-2 < e.C.Majority() {
			e.NoMajority(killed, started.Add(e.C.Hold()),
				fmt.Sprintf("master %d killed and started again, master %d started anew: out for max_ttl + drift after they started", b, a))
		}
		e.hold(ctx, e.C.Hold()+reconnectAllowance)
	}
}

// joinSlot picks a slot for a proxy to start in: an empty one (a proxy
// joins) when there is one, else any (a proxy restarts).
func (e *Env) joinSlot() int {
	running := map[int]bool{}
	for _, p := range e.C.Running() {
		running[p] = true
	}
	for p := 0; p < e.C.NumProxies(); p++ {
		if !running[p] {
			return p
		}
	}
	return e.Intn(e.C.NumProxies())
}

// scheduleFailover: the replication of a majority of masters is
// black-holed for 0.3-0.7s (long holders take locks their replicas never
// see), then those masters fail over to their replicas (promoted, the
// proxies' relays moved to them, the old masters replicating from them).
// A promoted replica must not count for max_ttl + drift: no majority from
// the last failover until then. The first failover waits until the
// replicas have been up longer than that hold: a rule that sees a promoted
// replica as a restarted master keeps a young one out by accident of
// timing, not by design.
func scheduleFailover(ctx context.Context, e *Env) {
	k := e.C.Majority()
	sleepCtx(ctx, time.Until(e.C.started.Add(e.C.Hold()+uptimeRounding)))
	for sleepCtx(ctx, e.Between(200*time.Millisecond, 500*time.Millisecond)) {
		lag := e.Between(300*time.Millisecond, 700*time.Millisecond)
		if e.Left() < lag+e.C.Hold()+reconnectAllowance {
			return
		}
		ms := e.pick(k)
		synced := true
		for _, i := range ms {
			if err := e.C.WaitReplicaSynced(ctx, i, 5*time.Second); err != nil {
				e.Logf("no failover this time: %v", err)
				synced = false
				break
			}
		}
		if !synced {
			continue
		}
		for _, i := range ms {
			e.ReplicationLag(i, true)
		}
		e.hold(ctx, lag)
		first := time.Now()
		for _, i := range ms {
			e.Failover(i)
		}
		e.NoMajority(time.Now(), first.Add(e.C.Hold()),
			fmt.Sprintf("masters %v failed over to replicas that missed recent writes: out for max_ttl + drift", ms))
		e.hold(ctx, e.C.Hold()+reconnectAllowance)
	}
}

// scheduleExtendPartial: two masters go down (kill -9, or their links
// black-holed) for 0.6-1s, and meanwhile a third hangs (SIGSTOP) for
// 200ms: extends sent then cannot win (two answers of five) and must
// leave the holder's lock as it was. After a black hole the next cycle
// follows at once; after a kill, once the restarted masters count again.
func scheduleExtendPartial(ctx context.Context, e *Env) {
	for sleepCtx(ctx, e.Between(300*time.Millisecond, 600*time.Millisecond)) {
		d := e.Between(600*time.Millisecond, time.Second)
		if e.Left() < d+500*time.Millisecond {
			return
		}
		// Killed masters come back quarantined: kill only when the run
		// leaves time for that.
		kill := e.Intn(2) == 0 && e.Left() > d+500*time.Millisecond+e.C.Hold()+reconnectAllowance
		ms := e.pick(3)
		out, hung := ms[:2], ms[2]
		from := time.Now()
		for _, i := range out {
			if kill {
				e.Kill9(i)
			} else {
				e.BlackHole(i, true)
			}
		}
		e.hold(ctx, e.Between(100*time.Millisecond, d-300*time.Millisecond))
		e.Pause(hung)
		paused := time.Now()
		e.hold(ctx, 200*time.Millisecond)
		resumed := time.Now()
		e.Resume(hung)
		e.NoMajority(paused, resumed, fmt.Sprintf("masters %v down or black-holed and master %d hung", out, hung))
		e.hold(ctx, time.Until(from.Add(d)))
		for _, i := range out {
			if kill {
				e.Start(i)
			} else {
				e.BlackHole(i, false)
			}
		}
		if kill {
			e.hold(ctx, e.C.Hold()+reconnectAllowance)
		}
	}
}

// probe is the fault schedule's own client, on the probe slot when the
// scenario has one (else on slot 0); Close hands its operations to the
// history.
func (e *Env) probe() *Client {
	slot := e.ProbeSlot
	if slot < 0 {
		slot = 0
	}
	return NewClient(probeIDs, slot, e.C, e.H, 9)
}

// probeIDs is the probe client's id.
const probeIDs = 40000

// probeAcquire has the probe take a fresh key with the longest TTL allowed
// and logs the answer.
func (e *Env) probeAcquire(p *Client, n int) {
	key := fmt.Sprintf("probe:%d", n)
	l, out := p.Acquire(key, e.C.Config.MaxTTL)
	e.Logf("probe: SET %s %s NX PX %d answered %v after %v", key, l.Token, e.C.Config.MaxTTL.Milliseconds(), out, l.Granted.Sub(l.T0).Round(time.Millisecond))
}

// scheduleGhostPause: a majority of masters hangs (SIGSTOP) for 1.2-1.6s,
// long enough for the proxies to give up on their connections; at once the
// probe (alone on its proxy, so its command is the first each hung master
// is sent) acquires a fresh key, and the workload goes on acquiring. Then
// the masters continue and run what waited in their sockets. After the
// undo time the masters are read directly: no token of an acquire answered
// nil may be on a majority.
func scheduleGhostPause(ctx context.Context, e *Env) {
	k := e.C.Majority()
	p := e.probe()
	defer p.Close()
	for n := 0; sleepCtx(ctx, e.Between(300*time.Millisecond, 600*time.Millisecond)); n++ {
		d := e.Between(1200*time.Millisecond, 1600*time.Millisecond)
		if e.Left() < d+undoWithin+200*time.Millisecond {
			return
		}
		ms := e.pick(k)
		for _, i := range ms {
			e.Pause(i)
		}
		from := time.Now()
		e.probeAcquire(p, n)
		e.hold(ctx, time.Until(from.Add(d)))
		to := time.Now()
		for _, i := range ms {
			e.Resume(i)
		}
		e.NoMajority(from, to, fmt.Sprintf("masters %v hung", ms))
		e.hold(ctx, undoWithin)
		e.Snapshot(fmt.Sprintf("%v after masters %v continued", undoWithin, ms))
	}
}

// scheduleGhostCut: the links of a majority are cut (reset) mid-command,
// with the probe's acquire (alone on its proxy) caught in the middle and
// the workload acquiring around it. Either the masters hang (SIGSTOP), the
// probe acquires, the links are cut 0.2-0.6s later and the masters
// continue; or the links are slowed by d = 60-120ms each way (past the
// backend timeout: every acquire through them fails and is undone), the
// probe acquires, and the links are cut 1.5d later: the probe's SET has
// reached the masters, its reply and its undo have not. After the undo time
// the masters are read directly: no token of an acquire answered nil may be
// on a majority.
func scheduleGhostCut(ctx context.Context, e *Env) {
	k := e.C.Majority()
	p := e.probe()
	defer p.Close()
	for n := 0; sleepCtx(ctx, e.Between(300*time.Millisecond, 600*time.Millisecond)); n++ {
		if e.Left() < time.Second+undoWithin+200*time.Millisecond {
			return
		}
		ms := e.pick(k)
		var from, to time.Time
		how := "hung, cut"
		if e.Intn(2) == 0 {
			for _, i := range ms {
				e.Pause(i)
			}
			from = time.Now()
			e.probeAcquire(p, n)
			e.hold(ctx, time.Until(from.Add(e.Between(200*time.Millisecond, 600*time.Millisecond))))
			for _, i := range ms {
				e.Cut(i)
			}
			e.hold(ctx, e.Between(50*time.Millisecond, 200*time.Millisecond))
			to = time.Now()
			for _, i := range ms {
				e.Resume(i)
			}
		} else {
			how = "slowed, cut"
			d := e.Between(60*time.Millisecond, 120*time.Millisecond)
			for _, i := range ms {
				e.Delay(i, d)
			}
			from = time.Now()
			e.probeAcquire(p, n)
			e.hold(ctx, time.Until(from.Add(d*3/2)))
			for _, i := range ms {
				e.Cut(i)
			}
			to = time.Now()
			for _, i := range ms {
				e.Delay(i, 0)
			}
		}
		e.NoMajority(from, to, fmt.Sprintf("masters %v %s", ms, how))
		e.hold(ctx, undoWithin)
		e.Snapshot(fmt.Sprintf("%v after the links of masters %v were %s", undoWithin, ms, how))
	}
}

// scheduleGreedy plants the greedy client's large values on every master
// and runs the greedy client until the faults' deadline.
func scheduleGreedy(ctx context.Context, e *Env) {
	g := GreedyConfig{}
	g.defaults()
	if err := PlantLargeValues(ctx, e.C, g); err != nil {
		e.Logf("greedy client not started: %v", err)
		return
	}
	e.Logf("greedy client: %d connections, each writing %d GETs of %d KiB values at once", g.Conns, g.Pipeline, g.Size>>10)
	gctx, cancel := context.WithDeadline(ctx, e.Deadline)
	defer cancel()
	n := Greedy(gctx, e.C, g, uint64(e.Intn(1<<30)))
	e.Logf("greedy client stopped: %d GETs answered", n)
}
