package safety

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"time"
)

// Scenario is a fault schedule (or an orchestrated control) and what the
// run must show.
type Scenario struct {
	Name  string
	About string
	// Quarantine is the proxies' restart_quarantine ("" means run-id).
	Quarantine string
	// Faults runs the fault schedule; it must heal every fault before it
	// returns and stop when ctx is done.
	Faults func(ctx context.Context, e *Env)
	// Drive, when set, orchestrates a specific interleaving with its own
	// clients while the workload runs; the run lasts until it returns.
	Drive func(ctx context.Context, e *Env) error
	// MajorityUp: a majority of masters always counts, so locks must keep
	// being granted: at least one grant in every whole second of the run.
	MajorityUp bool
	// Recovers: after the last interval without a majority, grants resume.
	Recovers bool
	// DetectLock: a control that breaks mutual exclusion; checkers 1 and 3
	// must both report it.
	DetectLock bool
	// DetectLost: a control that loses an update while the lock itself
	// holds; checker 2 must report it, checkers 1 and 3 must not.
	DetectLost bool
}

// Control reports whether the scenario is a control run (it must report
// violations).
func (s Scenario) Control() bool { return s.DetectLock || s.DetectLost }

// Scenarios returns every scenario: the fault scenarios first, then the
// controls.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "none", About: "baseline: no faults", Faults: scheduleNone, MajorityUp: true},
		{Name: "kill9", About: "kill -9 one master, start it again 0.5-1.5s later", Faults: scheduleKill9, MajorityUp: true},
		{Name: "kill9-restart", About: "kill -9 one master and restart it at once (restart quarantine at work)", Faults: scheduleKill9Restart, MajorityUp: true},
		{Name: "sigstop", About: "SIGSTOP one or two masters for 0.3-1.5s, then SIGCONT", Faults: scheduleSigstop, MajorityUp: true},
		{Name: "blackhole", About: "black-hole one or two masters' links for 0.3-1.5s", Faults: scheduleBlackHole, MajorityUp: true},
		{Name: "delay", About: "delay one or two masters' links by 30-100ms each way", Faults: scheduleDelay, MajorityUp: true},
		{Name: "mixed", About: "random faults of every kind, never more than 2 of 5 masters at once", Faults: scheduleMixed, MajorityUp: true},
		{Name: "majority-down", About: "kill -9 a majority for 1.5s, then start them again: refusals allowed, no grant without a majority", Faults: scheduleMajorityDown, Recovers: true},
		{Name: "restart-majority", About: "a majority restarts at once while a 2s lock is held (early in a wall-clock second); quarantine run-id: the lock must hold",
			Faults: scheduleNone, Drive: driveRestart(restartPlan{key: "ctl:restart", phase: 0.05})},
		{Name: "restart-uptime", About: "as restart-majority, late in a second, the proxies reconnecting just after it (uptime_in_seconds then reads 1 for a master up 0.2s): the lock must hold",
			Faults: scheduleNone, Drive: driveRestart(restartPlan{key: "ctl:uptime", phase: 0.80, holeAcross: true})},
		{Name: "control-quarantine-off", About: "CONTROL: as restart-majority with restart_quarantine off: a second holder must be seen",
			Quarantine: "off", Faults: scheduleNone, Drive: driveRestart(restartPlan{key: "ctl:restart", phase: 0.05}), DetectLock: true},
		{Name: "control-pause", About: "CONTROL: a holder pauses past its validity before writing: a lost update must be seen", Faults: scheduleNone, Drive: drivePause, DetectLost: true},
	}
}

// Lookup finds scenarios by name. "all" is every scenario, "faults" every
// non-control one, "controls" the controls; names may be comma-separated.
func Lookup(names string) ([]Scenario, error) {
	all := Scenarios()
	var out []Scenario
	seen := map[string]bool{}
	add := func(s Scenario) {
		if !seen[s.Name] {
			seen[s.Name] = true
			out = append(out, s)
		}
	}
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, s := range all {
			if n == "all" || n == s.Name || (n == "faults" && !s.Control()) || (n == "controls" && s.Control()) {
				add(s)
				found = true
			}
		}
		if !found {
			var known []string
			for _, s := range all {
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("safety: unknown scenario %q (known: all, faults, controls, %s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// Options shape a run. Zero values take the default written on the field.
type Options struct {
	Duration       time.Duration // workload time of a fault scenario (default 60s)
	Cooldown       time.Duration // faults are healed this long before the end (default 1s)
	Clients        int           // contending clients (default 16)
	Keys           int           // hot keys (default 3)
	Proxies        int           // proxies over the same masters (default 2)
	Backends       int           // masters (default 5)
	Seed           uint64        // random seed of faults and clients (default: from the clock)
	TTLMin, TTLMax time.Duration // workload TTLs (default 500ms-1s)
	MaxTTL         time.Duration // proxies' max_ttl (default 2s): the restart quarantine is this plus drift
	BackendTimeout time.Duration // proxies' backend_timeout (default 50ms)
	Think          time.Duration // a holder's work takes up to this (default 10ms)
	Margin         time.Duration // validity a holder keeps in hand before writing (default 100ms)
	RetryMax       time.Duration // a refused client waits up to this (default 10ms)
	LinTimeout     time.Duration // porcupine's budget per key (default 60s)
	VizDir         string        // write porcupine visualizations of illegal keys here
	Dir            string        // redis-server working directory (default: a temporary one)
	ProxyLog       io.Writer     // proxies' warnings (default: discarded)
	Progress       func(string)  // progress lines (default: none)
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Duration, 60*time.Second)
	def(&o.Cooldown, time.Second)
	def(&o.TTLMin, 500*time.Millisecond)
	def(&o.TTLMax, time.Second)
	def(&o.MaxTTL, 2*time.Second)
	def(&o.BackendTimeout, 50*time.Millisecond)
	def(&o.Think, 10*time.Millisecond)
	def(&o.Margin, 100*time.Millisecond)
	def(&o.RetryMax, 10*time.Millisecond)
	def(&o.LinTimeout, 60*time.Second)
	if o.Clients <= 0 {
		o.Clients = 16
	}
	if o.Keys <= 0 {
		o.Keys = 3
	}
	if o.Proxies <= 0 {
		o.Proxies = 2
	}
	if o.Backends <= 0 {
		o.Backends = 5
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.TTLMax < o.TTLMin {
		o.TTLMax = o.TTLMin
	}
}

func (o *Options) progress(format string, a ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, a...))
	}
}

// Run runs one scenario on a fresh cluster and checks its history. The
// error is for a run that could not be carried out (no redis-server, a
// proxy that would not start); violations are in the Report.
func Run(ctx context.Context, sc Scenario, opt Options) (rep *Report, err error) {
	opt.defaults()
	if opt.TTLMax > opt.MaxTTL {
		return nil, fmt.Errorf("safety: TTLMax %v exceeds MaxTTL %v", opt.TTLMax, opt.MaxTTL)
	}
	dir := opt.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "redlock-safety-"); err != nil {
			return nil, fmt.Errorf("safety: %w", err)
		}
		defer os.RemoveAll(dir)
	}
	q := sc.Quarantine
	if q == "" {
		q = "run-id"
	}
	opt.progress("%s: %s", sc.Name, sc.About)
	c, err := StartCluster(ClusterConfig{
		Dir: dir, Backends: opt.Backends, Proxies: opt.Proxies, Quarantine: q,
		MaxTTL: opt.MaxTTL, BackendTimeout: opt.BackendTimeout, Log: opt.ProxyLog,
	})
	if err != nil {
		return nil, err
	}
	defer func() {
		if cerr := c.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("safety: stopping the cluster: %w", cerr)
		}
	}()

	h := NewHistory()
	keys := make([]string, opt.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("hot:%d", i)
	}
	wl := WorkloadConfig{Keys: keys, TTLMin: opt.TTLMin, TTLMax: opt.TTLMax, Think: opt.Think, Margin: opt.Margin, RetryMax: opt.RetryMax}
	env := newEnv(c, h, opt.Seed, h.Start.Add(opt.Duration-opt.Cooldown), opt.Progress)
	env.Workload = wl

	// The workload.
	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	pick := rand.New(rand.NewPCG(opt.Seed, 0xc11e))
	var clients []*Client
	var cwg sync.WaitGroup
	for i := 0; i < opt.Clients; i++ {
		p := pick.IntN(len(c.Proxies))
		cl := NewClient(i, p, c.Proxies[p].Addr(), h, opt.Seed)
		clients = append(clients, cl)
		cwg.Add(1)
		go func() { // ends when the workload is stopped
			defer cwg.Done()
			cl.Loop(wctx, wl)
		}()
	}

	// Progress, once a second.
	pctx, stopProgress := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	if opt.Progress != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-t.C:
					opt.progress("  %s holds %d, refusals %d, unknowns %d", h.rel(time.Now()),
						h.LiveHolds.Load(), h.LiveRefusals.Load(), h.LiveUnknowns.Load())
				}
			}
		}()
	}

	// A stall monitor: a ticker in this process that notes when it could not
	// run for a while, i.e. when the machine starved the whole process
	// (clients, proxies and relays alike). Liveness is not judged there.
	var stalls []Interval
	sctx, stopStalls := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Add(1)
	go func() {
		defer swg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				now := time.Now()
				if now.Sub(last) > stallThreshold {
					stalls = append(stalls, Interval{From: last, To: now, Why: "the harness process did not run"})
				}
				last = now
			}
		}
	}()

	// The faults, and the orchestrated part of a control.
	fctx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	env.Go(func() { sc.Faults(fctx, env) })
	var driveErr error
	if sc.Drive != nil {
		driveErr = sc.Drive(ctx, env)
		sleepCtx(ctx, 300*time.Millisecond)
	} else {
		sleepCtx(ctx, time.Until(h.Start.Add(opt.Duration)))
	}
	stopFaults()
	env.wg.Wait()
	stopWorkload()
	cwg.Wait()
	end := time.Now()
	stopProgress()
	pwg.Wait()
	stopStalls()
	swg.Wait()
	for _, cl := range clients {
		cl.Close()
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("safety: %s interrupted: %w", sc.Name, err)
	}

	opt.progress("  checking %d operations", len(h.Ops()))
	rep, err = check(sc, opt, env, h, end, stalls)
	if err != nil {
		return rep, err
	}
	if driveErr != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the orchestrated part did not run as planned: %v", driveErr))
	}
	return rep, nil
}

// check runs every checker and compares with what the scenario expects.
func check(sc Scenario, opt Options, env *Env, h *History, end time.Time, stalls []Interval) (*Report, error) {
	rep := &Report{
		Scenario: sc.Name, About: sc.About, Quarantine: env.C.Config.Quarantine, Control: sc.Control(),
		Origin: h.Start, Duration: end.Sub(h.Start), Seed: opt.Seed,
		Backends: len(env.C.Servers), Proxies: len(env.C.Proxies), Clients: opt.Clients, Keys: opt.Keys,
	}
	for _, op := range h.Ops() {
		switch {
		case op.Kind == Acquire && op.Outcome == OK:
			rep.Holds++
			sec := int(op.Return.Sub(h.Start) / time.Second)
			for len(rep.GrantsPerSecond) <= sec {
				rep.GrantsPerSecond = append(rep.GrantsPerSecond, 0)
			}
			rep.GrantsPerSecond[sec]++
		case op.Kind == Acquire && op.Outcome == Refused:
			rep.Refusals++
		case op.Kind == Acquire:
			rep.Unknowns++
			if len(rep.UnknownErrors) < maxExamples {
				rep.UnknownErrors = append(rep.UnknownErrors, op.Err)
			}
		case op.Outcome == OK:
			rep.Releases++
		case op.Outcome == Refused:
			rep.ReleasesNotHeld++
		default:
			rep.ReleaseUnknowns++
		}
	}
	whole := int(rep.Duration / time.Second)
	for len(rep.GrantsPerSecond) < whole {
		rep.GrantsPerSecond = append(rep.GrantsPerSecond, 0)
	}
	for _, st := range stalls {
		rep.Stalls = append(rep.Stalls, fmt.Sprintf("%s to %s (%v)", h.rel(st.From), h.rel(st.To), st.To.Sub(st.From).Round(time.Millisecond)))
	}
	for i := 0; i < whole; i++ {
		g := rep.GrantsPerSecond[i]
		if g == 0 {
			from, to := h.Start.Add(time.Duration(i)*time.Second), h.Start.Add(time.Duration(i+1)*time.Second)
			starved := false
			for _, st := range stalls {
				starved = starved || (st.From.Before(to) && st.To.After(from))
			}
			if starved {
				rep.StarvedSeconds++
			} else {
				rep.EmptySeconds++
			}
		}
		if i == 0 || g < rep.MinGrantsPerSecond {
			rep.MinGrantsPerSecond = g
		}
	}
	for _, r := range h.Registers() {
		rep.Increments += r.Increments
	}
	ops := h.Ops()
	sort.Slice(ops, func(i, j int) bool { return ops[i].Return.Sub(ops[i].Call) > ops[j].Return.Sub(ops[j].Call) })
	for _, op := range ops[:min(len(ops), 3)] {
		if d := op.Return.Sub(op.Call); d > slowOp {
			rep.Slowest = append(rep.Slowest, fmt.Sprintf("%s %s %s by client %d via proxy %d took %v from %s: %v %s",
				op.Kind, op.Key, op.Token, op.Client, op.Proxy, d.Round(time.Millisecond), h.rel(op.Call), op.Outcome, op.Err))
		}
	}
	for i, r := range env.C.Relays {
		st := r.Stats()
		rep.Relays = append(rep.Relays, fmt.Sprintf("master %d's relay: %d connections, %d refused while the master was down, listened again %d times, last error %q",
			i, st.Accepted, st.Refused, st.Relistens, st.LastError))
	}
	for _, n := range h.Notes() {
		rep.Faults = append(rep.Faults, h.rel(n.At)+" "+n.Text)
	}

	var ex []string
	rep.WindowViolations, ex = CheckWindows(h)
	rep.Examples = append(rep.Examples, ex...)
	rep.LostUpdates, rep.LostUpdatesPaused, ex = CheckRegisters(h)
	rep.Examples = append(rep.Examples, ex...)
	ivs := env.intervals()
	rep.NoMajorityGrants, ex = CheckNoMajorityGrants(h, ivs)
	rep.Examples = append(rep.Examples, ex...)
	lin, err := CheckLinearizable(h, opt.LinTimeout, opt.VizDir)
	if err != nil {
		return rep, err
	}
	rep.NonLinearizable, rep.Inconclusive = lin.Illegal, lin.Inconclusive
	rep.Examples = append(rep.Examples, lin.Examples...)
	rep.Visualized = lin.Visualized

	// Expectations.
	p := func(format string, a ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, a...)) }
	lockBroken := int64(rep.WindowViolations+rep.NonLinearizable+rep.NoMajorityGrants) + rep.LostUpdates - rep.LostUpdatesPaused
	switch {
	case sc.DetectLock:
		if rep.WindowViolations == 0 {
			p("control not detected by checker 1 (windows): 0 overlapping holds")
		}
		if rep.NonLinearizable == 0 {
			p("control not detected by checker 3 (linearizability): every key linearizable")
		}
	case sc.DetectLost:
		if rep.LostUpdates == 0 {
			p("control not detected by checker 2 (register): no lost update")
		}
		if lockBroken > 0 {
			p("the lock itself must hold in this control, but %d window, %d linearizability, %d no-majority violations and %d lost updates without a paused writer were reported",
				rep.WindowViolations, rep.NonLinearizable, rep.NoMajorityGrants, rep.LostUpdates-rep.LostUpdatesPaused)
		}
	default:
		if lockBroken > 0 {
			p("SAFETY VIOLATED: %d overlapping windows, %d lost updates (%d of them by paused writers), %d keys not linearizable, %d grants without a majority",
				rep.WindowViolations, rep.LostUpdates, rep.LostUpdatesPaused, rep.NonLinearizable, rep.NoMajorityGrants)
		}
		if rep.LostUpdatesPaused > 0 {
			// The machine paused one of our own well-behaved clients past its
			// validity margin between its check and its write: the case the
			// proxy documents it cannot prevent. Shown, not failed.
			rep.Examples = append(rep.Examples, fmt.Sprintf("register: %d lost updates on keys where the machine paused a holder past its validity between its check and its write (a client pause, as in control-pause; not the proxy's doing)", rep.LostUpdatesPaused))
		}
	}
	if rep.Inconclusive > 0 {
		p("linearizability search inconclusive on %d keys (raise the budget)", rep.Inconclusive)
	}
	if sc.MajorityUp {
		if rep.Holds == 0 {
			p("no lock was granted")
		} else if rep.EmptySeconds > 0 {
			p("liveness: %d whole seconds without a grant while a majority was up (grants per second: %v)", rep.EmptySeconds, rep.GrantsPerSecond)
		}
		if rep.StarvedSeconds > 0 {
			// Not a problem of the proxy's: the machine did not run us.
			rep.Examples = append(rep.Examples, fmt.Sprintf("liveness: %d seconds without a grant overlap stalls of the whole harness process (not counted): %v",
				rep.StarvedSeconds, rep.Stalls))
		}
	}
	if sc.Recovers {
		var last time.Time
		for _, iv := range ivs {
			if iv.To.After(last) {
				last = iv.To
			}
		}
		if last.IsZero() {
			p("the fault schedule never took a majority down (run too short?)")
		} else {
			resumed := 0
			for _, op := range h.Ops() {
				if op.Kind == Acquire && op.Outcome == OK && op.Call.After(last) {
					resumed++
				}
			}
			rep.GrantsAfterRecovery = resumed
			if resumed == 0 {
				p("no grant after the majority came back at %s", h.rel(last))
			}
		}
	}
	if !sc.Control() && sc.Drive == nil && rep.Holds == 0 {
		p("no lock was granted")
	}
	return rep, nil
}

// stallThreshold is how late the stall monitor's 10ms tick must be to
// count as a stall of the whole process; slowOp is the latency from which
// an operation is listed among the slowest.
const (
	stallThreshold = 200 * time.Millisecond
	slowOp         = 500 * time.Millisecond
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
// checkers 1 and 3 (and usually 2) must report. The quarantine each proxy
// applied is noted. A round whose timing did not come out as planned (a
// very slow machine) proves nothing and is repeated, at most three times.
func driveRestart(plan restartPlan) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		ttl := e.C.Config.MaxTTL
		last := len(e.C.Proxies) - 1
		a := NewClient(1000, 0, e.C.Proxies[0].Addr(), e.H, 1)
		b := NewClient(1001, last, e.C.Proxies[last].Addr(), e.H, 2)
		defer a.Close()
		defer b.Close()
		n := len(e.C.Servers)
		k := n/2 + 1
		for round := 1; round <= 3 && ctx.Err() == nil; round++ {
			// After a round with the quarantine on, wait for it to end.
			if !waitCounting(ctx, e, 2*e.C.Hold()+5*time.Second) {
				return fmt.Errorf("round %d: the masters never all counted again", round)
			}
			sleepUntilPhase(ctx, plan.phase)
			la, ok := acquireWithin(ctx, a, plan.key, ttl, time.Second)
			if !ok {
				continue
			}
			va := a.Read(plan.key)
			e.Logf("round %d: client A (proxy 0) holds %s as %s until %s", round, plan.key, la.Token, e.H.rel(la.ValidUntil))
			ms := e.pick(k)
			before := make([][]uint64, len(e.C.Proxies))
			for p := range e.C.Proxies {
				for _, i := range ms {
					r, _ := e.C.restartsSeen(p, i)
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
			inside := false
			for ctx.Err() == nil && time.Now().Before(la.ValidUntil.Add(200*time.Millisecond)) {
				lb, out := b.Acquire(plan.key, 500*time.Millisecond)
				if out == OK {
					inside = lb.Granted.Before(la.ValidUntil)
					e.Logf("round %d: client B (proxy %d) got %s at %s (A's validity ends %s)", round, last, plan.key, e.H.rel(lb.Granted), e.H.rel(la.ValidUntil))
					b.Work(lb, 0, e.Workload.Margin)
					b.Release(lb)
					break
				}
				sleepCtx(ctx, 20*time.Millisecond)
			}
			// A, a well-behaved holder, goes on working for a while (still
			// well inside its validity), then writes only if its validity
			// allows.
			if inside {
				sleepCtx(ctx, min(200*time.Millisecond, time.Until(la.ValidUntil)/2))
			}
			if la.Valid(time.Now(), e.Workload.Margin) {
				a.Write(la, va)
			}
			a.Release(la)
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

// waitCounting waits until every proxy counts every master.
func waitCounting(ctx context.Context, e *Env, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		all := true
		now := time.Now()
		for _, p := range e.C.Proxies {
			for _, h := range p.Pool().Health() {
				all = all && h.Counts(now)
			}
		}
		if all {
			return true
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return false
}

// noteQuarantines notes how long each proxy keeps each restarted master out
// of its quorums, against what the contract asks: max_ttl + drift after the
// master came back (which was after restarted).
func (e *Env) noteQuarantines(round int, ms []int, restarted time.Time) {
	for p, px := range e.C.Proxies {
		hs := px.Pool().Health()
		for _, i := range ms {
			q := hs[i].QuarantinedUntil.Sub(restarted)
			short := ""
			if e.C.Config.Quarantine == "off" {
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
		for p := range e.C.Proxies {
			for j, i := range ms {
				if r, up := e.C.restartsSeen(p, i); r <= before[p][j] || !up {
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
// lock itself behaved (B got it only after A's validity), so checkers 1 and
// 3 see nothing, and checker 2 must see the lost update.
func drivePause(ctx context.Context, e *Env) error {
	const key = "ctl:pause"
	ttl := 500 * time.Millisecond
	last := len(e.C.Proxies) - 1
	a := NewClient(2000, 0, e.C.Proxies[0].Addr(), e.H, 3)
	b := NewClient(2001, last, e.C.Proxies[last].Addr(), e.H, 4)
	defer a.Close()
	defer b.Close()
	for round := 1; round <= 3 && ctx.Err() == nil; round++ {
		la, ok := acquireWithin(ctx, a, key, ttl, 5*time.Second)
		if !ok {
			return fmt.Errorf("round %d: client A could not take %s", round, key)
		}
		va := a.Read(key)
		e.Logf("round %d: client A holds %s as %s until %s, read %d, and pauses", round, key, la.Token, e.H.rel(la.ValidUntil), va)
		wrote := false
		if lb, ok := acquireWithin(ctx, b, key, ttl, 5*time.Second); ok {
			wrote = b.Work(lb, 0, e.Workload.Margin)
			e.Logf("round %d: client B got %s at %s and wrote %d", round, key, e.H.rel(lb.Granted), va+1)
			b.Release(lb)
		}
		sleepCtx(ctx, time.Until(la.ValidUntil)) // B got it only after that anyway
		a.Write(la, va)                          // no second look at the validity: the pause
		e.Logf("round %d: client A wakes up at %s, past its validity, and writes %d", round, e.H.rel(time.Now()), va+1)
		a.Release(la)
		if wrote {
			return nil
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return errors.New("client B never got the lock after A's pause")
}
