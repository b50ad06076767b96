package safety

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"
)

// Env is what a fault schedule or a control driver acts on: the cluster,
// the history (for notes), a seeded random source, and the instant by which
// every fault must be healed.
type Env struct {
	C        *Cluster
	H        *History
	Deadline time.Time // faults end by then; the run goes on healed for a while after
	Workload WorkloadConfig
	// ProbeSlot is the proxy slot no workload client uses, for the fault
	// schedule's own probes (-1: none).
	ProbeSlot int

	rngMu sync.Mutex
	rng   *rand.Rand

	mu         sync.Mutex
	noMajority []Interval
	busyUntil  []time.Time // per master: faulted (or quarantined) until
	progress   func(string)
	// reported counts, per key, the masters on which a stopped proxy
	// reported the key's undo left pending (see reportUndos).
	reported map[string]int
	problems []string // expectations a schedule found unmet
	losses   []*loss  // the mixed-TTL nemesis's losses, for judgeHolds

	wg sync.WaitGroup // fault goroutines started with Go
}

func newEnv(c *Cluster, h *History, seed uint64, deadline time.Time, progress func(string)) *Env {
	return &Env{
		C: c, H: h, Deadline: deadline, ProbeSlot: -1,
		rng:       rand.New(rand.NewPCG(seed, 0x5afe7)),
		busyUntil: make([]time.Time, c.NumBackends()),
		progress:  progress,
	}
}

// Intn returns a random int in [0, n).
func (e *Env) Intn(n int) int {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.IntN(n)
}

// Between returns a random duration in [lo, hi).
func (e *Env) Between(lo, hi time.Duration) time.Duration {
	if hi <= lo {
		return lo
	}
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return lo + time.Duration(e.rng.Int64N(int64(hi-lo)))
}

// Logf notes a fault event in the history and reports it as progress.
func (e *Env) Logf(format string, a ...any) {
	text := e.H.Notef(format, a...)
	if e.progress != nil {
		e.progress(fmt.Sprintf("  %s %s", e.H.rel(time.Now()), text))
	}
}

// Left is the time until the deadline.
func (e *Env) Left() time.Duration { return time.Until(e.Deadline) }

// Go runs f on a goroutine that the run waits for before checking.
func (e *Env) Go(f func()) {
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		f()
	}()
}

// Problemf records an expectation the schedule found unmet: the run
// fails with it.
func (e *Env) Problemf(format string, a ...any) {
	text := fmt.Sprintf(format, a...)
	e.Logf("PROBLEM: %s", text)
	e.mu.Lock()
	e.problems = append(e.problems, text)
	e.mu.Unlock()
}

// NoMajority records an interval in which no majority of masters can vote:
// a grant that begins and ends inside it is a violation.
func (e *Env) NoMajority(from, to time.Time, why string) {
	e.mu.Lock()
	e.noMajority = append(e.noMajority, Interval{From: from, To: to, Why: why})
	e.mu.Unlock()
}

func (e *Env) intervals() []Interval {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]Interval(nil), e.noMajority...)
}

// pick returns k distinct masters at random.
func (e *Env) pick(k int) []int {
	e.rngMu.Lock()
	defer e.rngMu.Unlock()
	return e.rng.Perm(e.C.NumBackends())[:k]
}

// reserve marks up to n free masters busy until the given instant and
// returns them; it never lets more than maxBusy masters be busy at once.
func (e *Env) reserve(n, maxBusy int, until time.Time) []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := time.Now()
	var free []int
	busy := 0
	for i, t := range e.busyUntil {
		if now.Before(t) {
			busy++
		} else {
			free = append(free, i)
		}
	}
	n = min(n, maxBusy-busy, len(free))
	if n <= 0 {
		return nil
	}
	e.rngMu.Lock()
	e.rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	e.rngMu.Unlock()
	picked := free[:n]
	for _, i := range picked {
		e.busyUntil[i] = until
	}
	return picked
}

// extend keeps master i busy until at least t.
func (e *Env) extend(i int, t time.Time) {
	e.mu.Lock()
	if t.After(e.busyUntil[i]) {
		e.busyUntil[i] = t
	}
	e.mu.Unlock()
}

// reconnectAllowance covers a proxy's redial backoff (up to 1s) after a
// master comes back, so that a restarted master is not counted as healthy
// before the proxies could possibly see it again.
const reconnectAllowance = 1200 * time.Millisecond

// The fault primitives. Each logs what it does; errors are logged, not
// returned: a fault that could not be injected weakens a run, it does not
// invalidate its history.

// Kill9 ends master i with SIGKILL.
func (e *Env) Kill9(i int) {
	e.C.Server(i).Kill()
	e.Logf("kill -9 master %d", i)
}

// Start brings master i back after Kill9 (a fresh process: no data).
func (e *Env) Start(i int) {
	if err := e.C.Server(i).Restart(); err != nil {
		e.Logf("restart master %d FAILED: %v", i, err)
		return
	}
	if e.C.Config.Durable {
		e.Logf("master %d started again (new run_id; it reloads its append-only file)", i)
		return
	}
	e.Logf("master %d started again (new run_id, no data)", i)
}

// Restart kills master i with SIGKILL and starts it again at once.
func (e *Env) Restart(i int) {
	if err := e.C.Server(i).Restart(); err != nil {
		e.Logf("kill -9 + restart master %d FAILED: %v", i, err)
		return
	}
	e.Logf("kill -9 + immediate restart of master %d", i)
}

// Pause stops master i (SIGSTOP).
func (e *Env) Pause(i int) {
	if err := e.C.Server(i).Pause(); err != nil {
		e.Logf("SIGSTOP master %d FAILED: %v", i, err)
		return
	}
	e.Logf("SIGSTOP master %d", i)
}

// Resume continues master i (SIGCONT).
func (e *Env) Resume(i int) {
	if err := e.C.Server(i).Resume(); err != nil {
		e.Logf("SIGCONT master %d FAILED: %v", i, err)
		return
	}
	e.Logf("SIGCONT master %d", i)
}

// BlackHole starts or ends a black hole on master i's link.
func (e *Env) BlackHole(i int, on bool) {
	e.C.Relays[i].BlackHole(on)
	if on {
		e.Logf("black hole on master %d's link", i)
	} else {
		e.Logf("black hole on master %d's link healed", i)
	}
}

// Delay sets the latency of master i's link.
func (e *Env) Delay(i int, d time.Duration) {
	e.C.Relays[i].Delay(d)
	e.Logf("master %d's link delayed by %v each way", i, d)
}

// Cut resets every connection on master i's link.
func (e *Env) Cut(i int) {
	e.C.Relays[i].Cut()
	e.Logf("connections to master %d cut", i)
}

// RestartProxy replaces the proxy in slot p, if one runs, by a fresh one
// (see Cluster.RestartProxy), or starts one in an empty slot.
func (e *Env) RestartProxy(p int) {
	running := e.C.Proxy(p) != nil
	if err := e.C.RestartProxy(p); err != nil {
		e.Logf("restart proxy %d FAILED: %v", p, err)
		return
	}
	if running {
		e.Logf("proxy %d replaced by a fresh one (it has never seen the masters; the old one shuts down meanwhile)", p)
	} else {
		e.Logf("proxy %d started (it has never seen the masters)", p)
	}
}

// StopProxiesBut stops every running proxy but keep, and returns the
// slots it stopped, for StartProxies (see Cluster.stopDetached for the
// undos a proxy with a short shutdown_grace leaves).
func (e *Env) StopProxiesBut(keep int) []int {
	var stopped []int
	for p := 0; p < e.C.NumProxies(); p++ {
		if p != keep && e.C.Proxy(p) != nil {
			e.C.StopProxy(p)
			stopped = append(stopped, p)
		}
	}
	e.Logf("proxies %v stopped", stopped)
	return stopped
}

// StartProxies starts fresh proxies in slots ps.
func (e *Env) StartProxies(ps []int) {
	for _, p := range ps {
		if err := e.C.StartProxy(p); err != nil {
			e.Logf("start proxy %d FAILED: %v", p, err)
		}
	}
	e.Logf("proxies %v started again", ps)
}

// ReplicationLag black-holes (on) or heals (off) master i's replication
// link: its replica stops receiving what the master writes.
func (e *Env) ReplicationLag(i int, on bool) {
	e.C.ReplRelays[i].BlackHole(on)
	if on {
		e.Logf("replication of master %d black-holed: its replica lags", i)
	} else {
		e.Logf("replication of master %d healed", i)
	}
}

// Failover promotes master i's replica in its place (see Cluster.Failover).
func (e *Env) Failover(i int) {
	if err := e.C.Failover(i); err != nil {
		e.Logf("failover of master %d FAILED: %v", i, err)
		return
	}
	e.Logf("failover: master %d's replica promoted (REPLICAOF NO ONE), its relay moved to it, the old master now replicates from it", i)
}

// Snapshot reads every key (but the greedy client's large values) on every
// master directly, past relays and proxies, and records what each holds.
func (e *Env) Snapshot(why string) {
	if e.C.rc != nil {
		e.snapshotRedisClusters(why)
		return
	}
	s := Snapshot{At: time.Now(), Why: why, Values: map[string][]string{}}
	n := e.C.NumBackends()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		rdb := direct(e.C.Server(i).Addr)
		var keys []string
		err := rdb.Keys(ctx, "*").ScanSlice(&keys)
		var vals []any
		if err == nil {
			keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasPrefix(k, greedyPrefix) })
			if len(keys) > 0 {
				vals, err = rdb.MGet(ctx, keys...).Result()
			}
		}
		rdb.Close()
		if err != nil {
			s.Unread = append(s.Unread, i)
			continue
		}
		for j, k := range keys {
			if s.Values[k] == nil {
				s.Values[k] = make([]string, n)
			}
			if v, ok := vals[j].(string); ok {
				s.Values[k][i] = v
			}
		}
	}
	if e.C.Old != nil {
		octx, ocancel := context.WithTimeout(context.Background(), time.Second)
		s.Old = readAll(octx, e.C.Old.Addr)
		ocancel()
	}
	e.H.AddSnapshot(s)
	if len(s.Unread) > 0 {
		e.Logf("snapshot (%s): masters %v could not be read", why, s.Unread)
	}
}

// readAll reads every key (but the greedy client's large values) of the
// redis-server at addr directly; nil when it cannot be read.
func readAll(ctx context.Context, addr string) map[string]string {
	rdb := direct(addr)
	defer rdb.Close()
	var keys []string
	if err := rdb.Keys(ctx, "*").ScanSlice(&keys); err != nil {
		return nil
	}
	keys = slices.DeleteFunc(keys, func(k string) bool { return strings.HasPrefix(k, greedyPrefix) })
	out := make(map[string]string, len(keys))
	if len(keys) == 0 {
		return out
	}
	vals, err := rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil
	}
	for j, k := range keys {
		if v, ok := vals[j].(string); ok {
			out[k] = v
		}
	}
	return out
}

// hold sleeps for d or until ctx is done (the fault is then healed early).
func (e *Env) hold(ctx context.Context, d time.Duration) { sleepCtx(ctx, d) }

// Schedules: each runs faults until ctx is done or the deadline is near,
// and leaves every master running and every link healthy when it returns.

func scheduleNone(ctx context.Context, e *Env) {}

// scheduleKill9 kills one master at a time, keeps it down for 0.5-1.5s,
// then starts it again and waits out its quarantine before the next.
func scheduleKill9(ctx context.Context, e *Env) {
	for sleepCtx(ctx, e.Between(200*time.Millisecond, 600*time.Millisecond)) {
		down := e.Between(500*time.Millisecond, 1500*time.Millisecond)
		if e.Left() < down {
			return
		}
		i := e.Intn(e.C.NumBackends())
		e.Kill9(i)
		e.hold(ctx, down)
		e.Start(i)
		e.hold(ctx, e.C.Hold()+reconnectAllowance)
	}
}

// scheduleKill9Restart kills a master and restarts it at once, then waits
// out its quarantine before the next.
func scheduleKill9Restart(ctx context.Context, e *Env) {
	for sleepCtx(ctx, e.Between(200*time.Millisecond, 600*time.Millisecond)) {
		if e.Left() < 500*time.Millisecond {
			return
		}
		e.Restart(e.Intn(e.C.NumBackends()))
		e.hold(ctx, e.C.Hold()+reconnectAllowance)
	}
}

// scheduleSigstop stops one or two masters for 0.3-1.5s, then continues
// them.
func scheduleSigstop(ctx context.Context, e *Env) {
	for sleepCtx(ctx, e.Between(200*time.Millisecond, 700*time.Millisecond)) {
		d := e.Between(300*time.Millisecond, 1500*time.Millisecond)
		if e.Left() < d {
			return
		}
		ms := e.reserve(1+e.Intn(2), 2, time.Now().Add(d))
		for _, i := range ms {
			e.Pause(i)
		}
		e.hold(ctx, d)
		for _, i := range ms {
			e.Resume(i)
		}
	}
}

// scheduleBlackHole black-holes one or two links for 0.3-1.5s.
func scheduleBlackHole(ctx context.Context, e *Env) {
	for sleepCtx(ctx, e.Between(200*time.Millisecond, 700*time.Millisecond)) {
		d := e.Between(300*time.Millisecond, 1500*time.Millisecond)
		if e.Left() < d {
			return
		}
		ms := e.reserve(1+e.Intn(2), 2, time.Now().Add(d))
		for _, i := range ms {
			e.BlackHole(i, true)
		}
		e.hold(ctx, d)
		for _, i := range ms {
			e.BlackHole(i, false)
		}
	}
}

// scheduleDelay delays one or two links by 30-100ms each way for 0.5-2s.
func scheduleDelay(ctx context.Context, e *Env) {
	for sleepCtx(ctx, e.Between(100*time.Millisecond, 500*time.Millisecond)) {
		d := e.Between(500*time.Millisecond, 2*time.Second)
		if e.Left() < d {
			return
		}
		ms := e.reserve(1+e.Intn(2), 2, time.Now().Add(d))
		for _, i := range ms {
			e.Delay(i, e.Between(30*time.Millisecond, 100*time.Millisecond))
		}
		e.hold(ctx, d)
		for _, i := range ms {
			e.Delay(i, 0)
		}
	}
}

// scheduleMixed injects random faults of every kind, each on its own
// goroutine, never on more than two masters at once (a restarted master
// counts as faulted until its quarantine is over).
func scheduleMixed(ctx context.Context, e *Env) {
	for sleepCtx(ctx, e.Between(100*time.Millisecond, 400*time.Millisecond)) {
		d := e.Between(300*time.Millisecond, 1500*time.Millisecond)
		if e.Left() < d {
			return
		}
		kind := e.Intn(6)
		until := time.Now().Add(d)
		if kind == 0 || kind == 1 { // restarts: quarantined after
			until = until.Add(e.C.Hold() + reconnectAllowance)
		}
		ms := e.reserve(1, 2, until)
		if len(ms) == 0 {
			continue
		}
		i := ms[0]
		e.Go(func() {
			switch kind {
			case 0:
				e.Kill9(i)
				e.hold(ctx, d)
				e.Start(i)
				e.extend(i, time.Now().Add(e.C.Hold()+reconnectAllowance))
			case 1:
				e.Restart(i)
				e.extend(i, time.Now().Add(e.C.Hold()+reconnectAllowance))
			case 2:
				e.Pause(i)
				e.hold(ctx, d)
				e.Resume(i)
			case 3:
				e.BlackHole(i, true)
				e.hold(ctx, d)
				e.BlackHole(i, false)
			case 4:
				e.Delay(i, e.Between(30*time.Millisecond, 100*time.Millisecond))
				e.hold(ctx, d)
				e.Delay(i, 0)
			case 5:
				e.Cut(i)
			}
		})
	}
}

// scheduleMajorityDown kills three of five masters (a majority) at once,
// keeps them down for 1.5s, then starts them again. While they are down,
// and until their quarantine ends, no lock may be granted.
func scheduleMajorityDown(ctx context.Context, e *Env) {
	n := e.C.NumBackends()
	k := e.C.Majority()
	for sleepCtx(ctx, 700*time.Millisecond) {
		down := 1500 * time.Millisecond
		// Leave time after the quarantine (up to a second longer than the
		// hold: uptime_in_seconds is whole seconds) for grants to resume.
		if e.Left() < down+e.C.Hold()+reconnectAllowance+2*time.Second {
			return
		}
		ms := e.reserve(k, n, time.Now().Add(down+e.C.Hold()+reconnectAllowance))
		if len(ms) < k {
			continue
		}
		for _, i := range ms {
			e.Kill9(i)
		}
		killed := time.Now()
		e.hold(ctx, down)
		var restarts []time.Time
		for _, i := range ms {
			restarts = append(restarts, time.Now())
			e.Start(i)
		}
		// The first master restarted is quarantined until at least its
		// start plus the hold (the proxies' estimate of its boot is never
		// earlier than the real one), and no majority counts before then.
		if e.C.Config.Quarantine != "off" {
			e.NoMajority(killed, restarts[0].Add(e.C.Hold()),
				fmt.Sprintf("%d of %d masters were down or quarantined", len(ms), n))
		} else {
			e.NoMajority(killed, restarts[0], fmt.Sprintf("%d of %d masters were down", len(ms), n))
		}
		e.hold(ctx, e.C.Hold()+reconnectAllowance)
	}
}
