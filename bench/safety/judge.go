package safety

import (
	"fmt"
	"sort"
	"time"
)

// check runs every checker on a finished run and compares what they found
// with what the scenario expects: the counts (tally), what helps a reader
// diagnose a run (diagnose), the checkers' findings (runCheckers) and the
// verdict (judge).
func check(sc Scenario, opt Options, env *Env, h *History, end time.Time, stalls, hiccups []Interval) (*Report, error) {
	q := env.C.Config.EffectiveQuarantine()
	if opt.Quarantine == "" {
		q += " (default)"
	}
	rep := &Report{
		Scenario: sc.Name, About: sc.About, Quarantine: q, Control: sc.Control(),
		Origin: h.Start, Duration: end.Sub(h.Start), Seed: opt.Seed,
		Backends: env.C.NumBackends(), Proxies: env.C.NumProxies(), Clients: opt.Clients, Keys: opt.Keys,
		Extenders: sc.Extenders, Pipeliners: sc.Pipeliners, FreeLockers: sc.FreeLockers, Replicas: sc.Replicas,
		Groups: sc.Groups, OldClients: sc.OldClients, UpgradeFrom: sc.UpgradeFrom,
	}
	tally(rep, h, stalls)
	diagnose(rep, h, env)
	if err := runCheckers(rep, sc, opt, env, h, stalls, hiccups); err != nil {
		return rep, err
	}
	judgeHolds(rep, env, h, end)
	judge(rep, sc, env, h)
	return rep, nil
}

// tally counts the history's operations by kind and outcome, and the
// grants in each second of the run.
func tally(rep *Report, h *History, stalls []Interval) {
	for _, op := range h.Ops() {
		switch {
		case op.Kind == Extend && op.Outcome == OK:
			rep.Extends++
		case op.Kind == Extend && op.Outcome == Refused:
			rep.ExtendsRefused++
		case op.Kind == Extend:
			rep.ExtendUnknowns++
		case op.Kind == Acquire && op.Outcome == OK:
			rep.Holds++
			if op.Direct {
				rep.DirectHolds++
			}
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
}

// diagnose records what a reader of a failed run needs first: the slowest
// operations, the relays' counters and the faults as they were injected.
func diagnose(rep *Report, h *History, env *Env) {
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
}

// runCheckers runs the seven checkers and records their findings.
func runCheckers(rep *Report, sc Scenario, opt Options, env *Env, h *History, stalls, hiccups []Interval) error {
	var ex []string
	rep.WindowViolations, ex = CheckWindows(h)
	rep.Examples = append(rep.Examples, ex...)
	rep.LostUpdates, rep.LostUpdatesPaused, ex = CheckRegisters(h)
	rep.Examples = append(rep.Examples, ex...)
	rep.NoMajorityGrants, ex = CheckNoMajorityGrants(h, env.intervals())
	rep.Examples = append(rep.Examples, ex...)
	rep.LateGrants, rep.LateGrantsStalled, ex = CheckLateGrants(h, hiccups)
	rep.Examples = append(rep.Examples, ex...)
	reported := env.reportedUndos()
	found := make(map[string]bool)
	for _, g := range ghostLocks(h, env.C.Majority(), undoWithin) {
		if sc.ReportedGhosts && reported[g.Op.Key] > 0 {
			// Left by a proxy stopped while masters hung, and reported by
			// it at its shutdown: expected.
			rep.ReportedGhosts++
			found[g.Op.Key] = true
			continue
		}
		note := ""
		if sc.ReportedGhosts {
			note = "; no proxy reported its undo left pending"
		}
		if rep.GhostLocks < maxExamples {
			rep.Examples = append(rep.Examples, g.String(h, note))
		}
		rep.GhostLocks++
	}
	if sc.ReportedGhosts {
		for _, key := range sortedKeys(reported) {
			if reported[key] >= env.C.Majority() && !found[key] {
				rep.ReportsUnfound = append(rep.ReportsUnfound, key)
			}
		}
	}
	var fs FenceStats
	rep.FenceViolations, fs, ex = CheckFences(h)
	rep.Examples = append(rep.Examples, ex...)
	rep.Fenced, rep.FenceNil, rep.FenceErrors, rep.FencedGrants = fs.Numbered, fs.Nil, fs.Errors, fs.Grants
	for _, w := range h.Writes() {
		if w.Refused {
			rep.StaleWritesRefused++
		}
	}
	for _, r := range h.Registers() {
		if r.Fenced {
			rep.FencedRefusals += r.Refused
		}
	}
	rep.Snapshots = len(h.Snapshots())
	rep.FreeRefusals, ex = CheckFreeRefusals(h, stalls)
	if sc.MajorityUp {
		rep.Examples = append(rep.Examples, ex...)
	}
	lin, err := CheckLinearizable(h, opt.LinTimeout, opt.VizDir)
	if err != nil {
		return err
	}
	rep.NonLinearizable, rep.Inconclusive = lin.Illegal, lin.Inconclusive
	rep.Examples = append(rep.Examples, lin.Examples...)
	rep.Visualized = lin.Visualized
	return nil
}

// judge compares the findings with what the scenario expects: a control
// must be caught by its checker and by no other, any other scenario must
// break no checker and keep granting while a majority is up.
func judge(rep *Report, sc Scenario, env *Env, h *History) {
	p := func(format string, a ...any) { rep.Problems = append(rep.Problems, fmt.Sprintf(format, a...)) }
	lockBroken := rep.Violations()
	switch {
	case sc.DetectLock:
		if rep.WindowViolations == 0 {
			p("control not detected by the windows checker: 0 overlapping holds")
		}
		if rep.NonLinearizable == 0 {
			p("control not detected by the linearizability checker: every key linearizable")
		}
	case sc.DetectLost:
		if rep.LostUpdates == 0 {
			p("control not detected by the register checker: no lost update")
		}
		if lockBroken > 0 {
			p("the lock itself must hold in this control, but %d window, %d linearizability, %d no-majority, %d late-grant, %d ghost-lock, %d fencing violations and %d lost updates without a paused writer were reported",
				rep.WindowViolations, rep.NonLinearizable, rep.NoMajorityGrants, rep.LateGrants, rep.GhostLocks, rep.FenceViolations, rep.LostUpdates-rep.LostUpdatesPaused)
		}
	case sc.DetectFence:
		if rep.FenceViolations == 0 {
			p("control not detected by the fencing checker: every grant's number in order (%d numbers on %d grants)", rep.Fenced, rep.FencedGrants)
		}
		if other := lockBroken - int64(rep.FenceViolations); other > 0 {
			p("the lock itself must hold in this control, but %d window, %d linearizability, %d no-majority, %d late-grant, %d ghost-lock violations and %d lost updates without a paused writer were reported",
				rep.WindowViolations, rep.NonLinearizable, rep.NoMajorityGrants, rep.LateGrants, rep.GhostLocks, rep.LostUpdates-rep.LostUpdatesPaused)
		}
	case sc.DetectGhost:
		if rep.GhostLocks == 0 {
			p("control not detected by the ghost-lock checker: no token of an acquire answered nil found on a majority (%d snapshots)", rep.Snapshots)
		}
		if other := lockBroken - int64(rep.GhostLocks); other > 0 {
			p("the lock itself must hold in this control, but %d window, %d linearizability, %d no-majority, %d late-grant, %d fencing violations and %d lost updates without a paused writer were reported",
				rep.WindowViolations, rep.NonLinearizable, rep.NoMajorityGrants, rep.LateGrants, rep.FenceViolations, rep.LostUpdates-rep.LostUpdatesPaused)
		}
	default:
		if lockBroken > 0 {
			p("SAFETY VIOLATED: %d overlapping windows, %d lost updates (%d of them by paused writers), %d keys not linearizable, %d grants without a majority, %d late grants, %d ghost locks, %d grants whose fencing numbers break the contract",
				rep.WindowViolations, rep.LostUpdates, rep.LostUpdatesPaused, rep.NonLinearizable, rep.NoMajorityGrants, rep.LateGrants, rep.GhostLocks, rep.FenceViolations)
		}
		if rep.Holds > 0 && rep.Fenced == 0 {
			p("no grant got a fencing number (%d nil, %d errors): the fencing checker saw nothing", rep.FenceNil, rep.FenceErrors)
		}
		if sc.ReportedGhosts {
			if rep.ReportedGhosts == 0 {
				p("no proxy stopped while masters hung left a ghost lock that it reported: the scenario showed nothing (%d snapshots)", rep.Snapshots)
			}
			if len(rep.ReportsUnfound) > 0 {
				p("keys a stopped proxy reported left pending on a majority were not found as ghost locks: %v", rep.ReportsUnfound)
			}
		}
		if sc.RefusesStale && rep.StaleWritesRefused == 0 {
			p("the fenced register refused no write: the paused holder's stale write was not stopped")
		}
		if rep.LostUpdatesPaused > 0 {
			// The machine paused one of our own well-behaved clients past its
			// validity margin between its check and its write: the case the
			// proxy documents it cannot prevent. Shown, not failed.
			rep.Examples = append(rep.Examples, fmt.Sprintf("register: %d lost updates on keys where the machine paused a holder past its validity between its check and its write (a client pause, as in control-pause; not the proxy's doing)", rep.LostUpdatesPaused))
		}
	}
	env.mu.Lock()
	rep.Problems = append(rep.Problems, env.problems...)
	env.mu.Unlock()
	if rep.Inconclusive > 0 {
		p("linearizability search inconclusive on %d keys (raise the budget)", rep.Inconclusive)
	}
	if sc.MajorityUp {
		if rep.Holds == 0 {
			p("no lock was granted")
		} else if rep.EmptySeconds > 0 {
			p("liveness: %d whole seconds without a grant while a majority was up (grants per second: %v)", rep.EmptySeconds, rep.GrantsPerSecond)
		}
		if rep.FreeRefusals > 0 {
			p("liveness: %d acquires of keys nobody else uses were not granted while a majority was healthy", rep.FreeRefusals)
		}
		if rep.StarvedSeconds > 0 {
			// Not a problem of the proxy's: the machine did not run us.
			rep.Examples = append(rep.Examples, fmt.Sprintf("liveness: %d seconds without a grant overlap stalls of the whole harness process (not counted): %v",
				rep.StarvedSeconds, rep.Stalls))
		}
	}
	if sc.Recovers {
		var last time.Time
		for _, iv := range env.intervals() {
			if iv.To.After(last) {
				last = iv.To
			}
		}
		if last.IsZero() {
			p("the fault schedule never took a majority down (run too short?)")
		} else {
			resumed := 0
			for _, op := range h.Ops() {
				if op.Kind == Acquire && op.Outcome == OK && !op.Direct && op.Call.After(last) {
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
}
