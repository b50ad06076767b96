package safety

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// The mixed-TTL nemesis: a long max_ttl (10 minutes), masters vouched for
// at the start (VOUCH), and locks of every length at once: the contenders'
// of 100ms to 2s, a holder that keeps locks of 3 to 12s for nearly all of
// their validity, and, late in the run, one lock of minutes. Masters are
// restarted empty (kill -9) and fail over to replicas that missed recent
// writes, one at a time or two at once, and their holds overlap. A loss
// costs only the locks the master may have held: its hold ends once the
// latest deadline the other masters recorded has passed, not after the
// ceiling (max_ttl + drift). The run judges both sides: no two holders,
// and every lost master counts again soon after the latest deadline of a
// lock sent before its loss (liveness), which the report shows against
// the ceiling for each loss.

// mixedMaxTTL is the proxies' max_ttl in the mixed-TTL scenarios: the
// ceiling a loss no record bounds costs.
const mixedMaxTTL = 10 * time.Minute

// Client ids of the mixed-TTL nemesis's holders.
const (
	longHolderID    = 50000
	minutesHolderID = 50001
)

// mixedLongMin and mixedLongMax bound the long holder's TTLs;
// mixedMinutesTTL is the lock of minutes.
const (
	mixedLongMin    = 3 * time.Second
	mixedLongMax    = 12 * time.Second
	mixedMinutesTTL = 2 * time.Minute
)

// holdSlack is how long after the latest deadline of a lock a lost master
// may have held (plus its drift) it may still be held out: a marker check
// (once a second) to read the records after the loss and the time the
// proxy waits for writes in flight to land (settle), another to see the
// end, and a reconnection.
const holdSlack = 2*time.Second + reconnectAllowance

// holdReads is how long after every proxy saw a loss they may read the
// other masters' records that bound its hold: readings sent at least the
// settle time after the loss, at marker checks once a second, from enough
// other masters.
const holdReads = 2500 * time.Millisecond

// loss is one master's loss in the mixed-TTL nemesis, as the harness saw
// it, for the liveness judgment.
type loss struct {
	master int
	what   string
	at     time.Time // when the fault began
	// detected is when every running proxy had seen the loss (zero: not
	// yet); bounded when each of them had bounded its hold by the other
	// masters' records, or counted the master again; counted when every
	// running proxy counted the master again after that (zero: not by the
	// end of the run).
	detected, bounded, counted time.Time
	// until is the latest end of the hold the proxies reported at the last
	// look that some proxy held the master out (QuarantinedUntil), why the
	// reason it gave.
	until time.Time
	why   string
	// next is when the master was lost again before it counted (zero:
	// not): the watch ends there, and the next loss's hold is its own.
	next time.Time
}

// scheduleMixedTTL runs the mixed-TTL nemesis's faults and its holders
// until the deadline.
func scheduleMixedTTL(ctx context.Context, e *Env) {
	e.Go(func() { e.longHolder(ctx) })
	e.Go(func() { e.minutesHolder(ctx) })
	n := e.C.NumBackends()
	// The first losses restart a majority empty, one after another, while
	// the holders' first locks run: the locks they held are gone from a
	// majority, which only the holds keep from a second holder.
	first := e.pick(e.C.Majority())
	for sleepCtx(ctx, e.Between(300*time.Millisecond, time.Second)) {
		if e.Left() < 2*time.Second {
			return
		}
		// Every loss needs enough other masters whose records are whole
		// (n - majority + 1) for its hold to be bounded by them: at most
		// two masters of five are lost and not yet restored at once.
		fresh := e.notWhole(ctx)
		if fresh >= n-(n-e.C.Majority()+1) {
			continue
		}
		k := 1
		if fresh == 0 && e.Intn(4) == 0 {
			k = 2 // two at once, or the second within the first's settle
		}
		ms, restart := e.pick(k), len(first) > 0
		if restart {
			ms, first = first[:1], first[1:]
		}
		for j, i := range ms {
			if j > 0 {
				e.hold(ctx, e.Between(0, 800*time.Millisecond))
			}
			e.lose(ctx, i, restart)
		}
	}
}

// notWhole counts the masters that are down, lost and not yet seen so by
// every proxy, or whose marker's record is not whole (read directly): a
// loss not yet restored. Under restart_quarantine off there is no marker:
// a master that answers counts as whole.
func (e *Env) notWhole(ctx context.Context) int {
	n := 0
	for i := 0; i < e.C.NumBackends(); i++ {
		if e.undetected(i) {
			n++
			continue
		}
		rdb := direct(e.C.Server(i).Addr)
		m, err := rdb.HMGet(ctx, netio.MarkerKey, "epoch", "whole").Result()
		rdb.Close()
		switch {
		case err != nil:
			n++
		case !e.quarantines():
		case m[0] == nil || m[0] != m[1]:
			n++
		}
	}
	return n
}

// undetected reports whether a loss of master i has not yet been seen by
// every proxy (its marker may still show the record it had).
func (e *Env) undetected(i int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range e.losses {
		if l.master == i && l.detected.IsZero() {
			return true
		}
	}
	return false
}

// lose restarts master i empty (kill -9, started again at once or after
// 0.2-1s) or, unless restart, fails it over to its replica after its
// replication lagged for 0.3-0.7s, and watches its hold (watchHold; none
// under restart_quarantine off).
func (e *Env) lose(ctx context.Context, i int, restart bool) {
	before := make([]uint64, e.C.NumProxies())
	for p := range before {
		before[p], _, _ = e.C.restartsSeen(p, i)
	}
	failover := !restart && e.Intn(2) == 0 && e.C.WaitReplicaSynced(ctx, i, 3*time.Second) == nil
	var l *loss
	if failover {
		e.ReplicationLag(i, true)
		e.hold(ctx, e.Between(300*time.Millisecond, 700*time.Millisecond))
		l = &loss{master: i, what: "failed over to a replica that missed recent writes", at: time.Now()}
		e.Failover(i)
	} else {
		l = &loss{master: i, what: "restarted empty", at: time.Now()}
		e.Kill9(i)
		if e.Intn(2) == 0 {
			e.hold(ctx, e.Between(200*time.Millisecond, time.Second))
		}
		e.Start(i)
	}
	if !e.quarantines() {
		return // no hold to watch
	}
	e.mu.Lock()
	for _, o := range e.losses {
		if o.master == i && o.counted.IsZero() && o.next.IsZero() {
			o.next = l.at
		}
	}
	e.losses = append(e.losses, l)
	e.mu.Unlock()
	e.Go(func() { e.watchHold(ctx, l, before) })
}

// watchHold follows loss l until every running proxy has seen it (a loss
// detected since the counts in before) and counts the master again, or
// until ctx is done, noting the end each proxy gives the hold meanwhile.
func (e *Env) watchHold(ctx context.Context, l *loss, before []uint64) {
	seen := make([]bool, len(before))
	defer func() {
		e.mu.Lock()
		if l.detected.IsZero() {
			l.detected = time.Now() // the run is over
		}
		e.mu.Unlock()
	}()
	for sleepCtx(ctx, 25*time.Millisecond) {
		now := time.Now()
		all, detected, bounded := true, true, true
		var until time.Time
		var why string
		e.C.eachProxy(func(p int, a *app.App) {
			h := a.Pool().Health()[l.master]
			seen[p] = seen[p] || h.Restarts > before[p]
			detected = detected && seen[p]
			if !seen[p] || !h.Counts(now) {
				all = false
			}
			// A hold no record bounds lasts the ceiling from the loss.
			bounded = bounded && seen[p] && (h.Counts(now) || h.QuarantinedUntil.Before(l.at.Add(e.C.Hold()/2)))
			if seen[p] && !h.Counts(now) && (why == "" || h.QuarantinedUntil.After(until)) {
				until, why = h.QuarantinedUntil, h.QuarantineReason
			}
		})
		e.mu.Lock()
		if !l.next.IsZero() {
			e.mu.Unlock()
			return // lost again: the next watch follows it
		}
		if detected && l.detected.IsZero() {
			l.detected = now
		}
		if bounded && l.bounded.IsZero() {
			l.bounded = now
		}
		if why != "" {
			l.until, l.why = until, why
		}
		e.mu.Unlock()
		if all {
			e.mu.Lock()
			l.counted = now
			e.mu.Unlock()
			e.Logf("master %d (%s at %s) counts again on every proxy %v after the loss (the ceiling is %v)",
				l.master, l.what, e.H.rel(l.at), now.Sub(l.at).Round(time.Millisecond), e.C.Hold().Round(time.Second))
			return
		}
	}
}

// longHolder takes a hot key for 3-12s (never past the deadline), keeps it
// until its validity is nearly over, does its guarded update and releases
// it, again and again.
func (e *Env) longHolder(ctx context.Context) {
	c := NewClient(longHolderID, e.Intn(e.C.NumProxies()), e.C, e.H, 31)
	defer c.Close()
	keys := e.Workload.Keys
	for ctx.Err() == nil {
		ttl := min(e.Between(mixedLongMin, mixedLongMax), e.Left()-time.Second).Round(time.Millisecond)
		if ttl < mixedLongMin/2 {
			return
		}
		l, out := c.Acquire(keys[e.Intn(len(keys))], ttl)
		if out != OK {
			sleepCtx(ctx, 50*time.Millisecond)
			continue
		}
		e.Logf("long holder: %s held as %s for %v, until %s", l.Key, l.Token, ttl, e.H.rel(l.ValidUntil))
		sleepCtx(ctx, time.Until(l.ValidUntil)-e.Workload.Margin-e.Workload.Think-200*time.Millisecond)
		c.Work(l, e.Workload.Think, e.Workload.Margin)
		c.Release(l)
		sleepCtx(ctx, e.Between(200*time.Millisecond, 2*time.Second))
	}
}

// minutesHolder takes one hot key for minutes late in the run (from then
// on every loss costs until its deadline, as the masters' records say)
// and keeps it until the run ends; in a run long enough, early enough for
// the masters lost meanwhile to be seen counting again after it expires.
func (e *Env) minutesHolder(ctx context.Context) {
	lead := 8 * time.Second
	if e.Left() > 2*mixedMinutesTTL {
		lead = mixedMinutesTTL + 30*time.Second
	}
	if !sleepCtx(ctx, e.Left()-lead) {
		return
	}
	c := NewClient(minutesHolderID, e.Intn(e.C.NumProxies()), e.C, e.H, 32)
	defer c.Close()
	key := e.Workload.Keys[0]
	for ctx.Err() == nil && e.Left() > 3*time.Second {
		l, out := c.Acquire(key, mixedMinutesTTL)
		if out != OK {
			sleepCtx(ctx, 50*time.Millisecond)
			continue
		}
		e.Logf("minutes holder: %s held as %s for %v, until %s", key, l.Token, mixedMinutesTTL, e.H.rel(l.ValidUntil))
		sleepCtx(ctx, min(time.Until(l.ValidUntil)-e.Workload.Margin-e.Workload.Think-200*time.Millisecond, e.Left()))
		c.Work(l, e.Workload.Think, e.Workload.Margin)
		c.Release(l)
		return
	}
}

// restoreHops says, for each loss, how many masters' clocks a reading of
// the records that bound its hold may have passed through, each with its
// own drift. Once the others' readings bound a lost master's hold, its
// own record is restored from them, and it stays on that master (also
// after it counts again) for later losses to read: its time left was
// converted at the drift rate when it was read, and is converted again
// when it is read from the master it was restored to, whose clock may run
// at another rate (the contract's records). So a loss counts one hop, plus
// the most any loss of another master bounded before this one's records
// were read counts.
func restoreHops(losses []loss) []int {
	read := make([]time.Time, len(losses))
	order := make([]int, len(losses))
	for i, l := range losses {
		read[i], order[i] = l.bounded, i
		if read[i].IsZero() {
			read[i] = l.detected.Add(holdReads + 2*holdSlack)
		}
	}
	// A loss read through another's restored record was read after that
	// one was bounded, that is after that one's own reading: in the order
	// of their readings, each one's hops are known before they are needed.
	sort.SliceStable(order, func(a, b int) bool { return read[order[a]].Before(read[order[b]]) })
	hops := make([]int, len(losses))
	for _, i := range order {
		hops[i] = 1
		for _, j := range order {
			o := losses[j]
			if j != i && o.master != losses[i].master && !o.bounded.IsZero() && o.bounded.Before(read[i]) {
				hops[i] = max(hops[i], hops[j]+1)
			}
		}
	}
	return hops
}

// judgeHolds compares each loss's hold with what the other masters'
// records can show: the latest deadline (return + TTL) of an acquire or
// extend sent through a proxy before the proxies bounded the hold by those
// records (records include the grants made after the loss meanwhile, which
// the other masters cannot tell apart). They must do so within holdReads
// and twice holdSlack of seeing the loss (marker checks sent at least the
// settle time after it). The master must count again by that deadline, its
// drift once per restored record the reading may have passed through
// (restoreHops) and holdSlack; one still held at the end of the run (or lost
// again) must not have been given a later end. Each loss is reported
// against the ceiling.
func judgeHolds(rep *Report, env *Env, h *History, end time.Time) {
	env.mu.Lock()
	losses := make([]loss, len(env.losses))
	for i, l := range env.losses {
		losses[i] = *l
	}
	env.mu.Unlock()
	if len(losses) == 0 {
		return
	}
	ops := h.Ops()
	ceiling := env.C.Hold()
	hops := restoreHops(losses)
	for i, l := range losses {
		late := l.detected.Add(holdReads + 2*holdSlack)
		bound, read := l.at, l.bounded
		if read.IsZero() || read.After(late) {
			read = late
		}
		for _, op := range ops {
			if (op.Kind == Acquire || op.Kind == Extend) && !op.Direct && op.Call.Before(read) {
				if d := op.Return.Add(op.TTL); d.After(bound) {
					bound = d
				}
			}
		}
		due := bound.Add(time.Duration(hops[i])*Drift(bound.Sub(l.at)) + holdSlack)
		line := fmt.Sprintf("master %d, %s at %s, seen by every proxy %v later: the latest deadline of a lock sent before the records were read %v after the loss",
			l.master, l.what, h.rel(l.at), l.detected.Sub(l.at).Round(time.Millisecond), bound.Sub(l.at).Round(time.Millisecond))
		if !l.bounded.IsZero() && l.bounded.After(late) {
			rep.Problems = append(rep.Problems, fmt.Sprintf("liveness: master %d, %s at %s: the proxies bounded its hold by the records only %v after they saw it",
				l.master, l.what, h.rel(l.at), l.bounded.Sub(l.detected).Round(time.Millisecond)))
		}
		switch {
		case !l.counted.IsZero():
			line += fmt.Sprintf("; counted again on every proxy %v after the loss (the ceiling is %v)", l.counted.Sub(l.at).Round(time.Millisecond), ceiling.Round(time.Second))
			if l.counted.After(due) {
				rep.Problems = append(rep.Problems, "liveness: "+line+fmt.Sprintf(": %v later than that deadline allows (%s)", l.counted.Sub(due).Round(time.Millisecond), l.why))
			}
		case l.until.IsZero():
			line += "; not counted again by the end of the run, and no proxy was seen holding it out"
			if end.After(due) {
				rep.Problems = append(rep.Problems, "liveness: "+line)
			}
		default:
			stop, at := end, "at the end of the run"
			if !l.next.IsZero() {
				stop, at = l.next, fmt.Sprintf("when it was lost again at %s", h.rel(l.next))
			}
			line += fmt.Sprintf("; still held out %s, until %v after the loss (the ceiling is %v): %s", at, l.until.Sub(l.at).Round(time.Millisecond), ceiling.Round(time.Second), l.why)
			switch {
			case l.bounded.IsZero() && stop.Before(late):
				// The end shown may be the ceiling until the records are
				// read: too early to judge.
				line += " (too soon after the loss to judge)"
			case stop.After(due) || l.until.After(due):
				rep.Problems = append(rep.Problems, "liveness: "+line)
			}
		}
		rep.Losses = append(rep.Losses, line)
	}
}
