package quorum

import "time"

// Identity is what a backend says about itself on a connection.
type Identity struct {
	RunID  string        // INFO server run_id; "" when the backend does not say
	Uptime time.Duration // INFO server uptime_in_seconds; negative when unknown
	// Marker is the backend's answer to the replication-marker check, nil
	// when the check did not run (the run-id rule, or a backend that cannot
	// run it).
	Marker *Marker
}

// Marker is what a master reports through the replication marker that the
// proxies keep on it: when, by its own clock, it may last have lost writes.
// Every proxy reads the same marker, so every proxy reaches the same
// decision, whether it has watched the master for a year or started a
// second ago.
type Marker struct {
	// Change says why this check recorded a loss on the marker: ReasonNone
	// when it found the marker as it was left.
	Change Reason
	// Why is the reason recorded with the latest loss, by whichever check
	// recorded it: every proxy reports the same.
	Why Reason
	// LostAgo is how long ago, by the master's clock, it may last have lost
	// writes: the latest instant any proxy's check recorded on the marker.
	LostAgo time.Duration
	// StartedAgo is how long ago, by the master's clock, its current run
	// started, as recorded on the marker by the first check of the run (the
	// latest start its uptime allows): every proxy reads the same instant,
	// where uptime_in_seconds alone would differ by up to a second.
	StartedAgo time.Duration
	// Hold is the longest quarantine any proxy recorded on the marker: the
	// largest max_ttl + drift in the fleet.
	Hold time.Duration
	// LostAt and StartedAt are the two instants as recorded, in
	// milliseconds of the master's clock: they tell a new record from an
	// old one exactly, where LostAgo and StartedAgo move with each reply's
	// latency.
	LostAt, StartedAt int64
}

// RestartMode selects how a backend's losses are recognised.
type RestartMode uint8

// The restart rules.
const (
	// RuleStrict decides from what the backend reports: a master counts
	// only once Hold has passed since it started (its uptime) and since it
	// may last have lost writes (its marker: a restart, a promotion, a
	// resync, a flush, an eviction). Every proxy reaches the same decision.
	// The default.
	RuleStrict RestartMode = iota
	// RuleRunID is RuleStrict for everything that happens after this
	// proxy first saw the backend, and trusts what happened before: a
	// proxy that starts soon after a master restarted or lost writes may
	// count a master that forgot locks, unsafe in exactly that case.
	RuleRunID
)

// RestartRule configures the restart quarantine. A zero Hold turns it off.
type RestartRule struct {
	// Hold is how long a backend that may have lost writes stays out of
	// every quorum: max_ttl plus its drift, so that every lock it forgot
	// has expired everywhere else.
	Hold time.Duration
	Mode RestartMode
}

// Watch follows one backend's identity across connections and decides
// whether its votes count. The zero Watch (with a rule set) has seen nothing.
// A Watch is not safe for concurrent use.
type Watch struct {
	Rule RestartRule

	seen bool
	// trusted holds the marker's records at this Watch's first sight, which
	// RuleRunID trusts; set is false when there was no marker.
	trusted struct {
		set           bool
		lost, started int64
	}
	runID string
	boot  time.Time // estimated start of the backend's current run
	until time.Time // votes do not count before this instant (the ceiling); it only moves later, but for a vouched record
	from  time.Time // the loss (or start) the quarantine in force counts from
	why   Reason    // what the quarantine in force is for
	// runs reports that this Watch saw the backend in more than one run:
	// a vouched record then does not end its quarantine (a restart may
	// have lost what this proxy saw granted there).
	runs bool
	// marked reports that until comes from the marker's records (a loss or
	// a start), which the other masters' records may end early.
	marked bool
	anchor anchor
}

// anchor is the loss (or start) the marker records, which the hold runs
// from, and the end the other masters' records give it (see RecordsEnd).
type anchor struct {
	key   [2]int64  // the marker's LostAt and StartedAt: the same record
	at    time.Time // the latest it can have happened, in the proxy's time
	early time.Time // the records' end; zero while unknown
}

// uptimeSlack absorbs the truncation of uptime_in_seconds and the latency
// of the INFO round trip when comparing boot estimates.
const uptimeSlack = 2 * time.Second

// uptimeGrain is how much uptime_in_seconds can overstate the real uptime.
const uptimeGrain = time.Second

// bootAt is the latest the backend can have started, given what it
// reported at now. Redis computes uptime_in_seconds from two whole-second
// wall-clock readings, so it can overstate the real uptime by up to a
// second: a backend up for 0.2s may say 1. Estimating the boot a second
// later than the reported uptime says keeps the quarantine from ending early.
func bootAt(id Identity, now time.Time) time.Time {
	if id.Uptime < 0 {
		return now
	}
	boot := now.Add(-id.Uptime + uptimeGrain)
	if boot.After(now) {
		return now
	}
	return boot
}

// Observe records the identity a backend reported at now, and reports
// whether it restarted (or otherwise may have lost writes) since the last
// observation, or cannot be shown not to have. It may be called again on a
// live connection (a periodic check): the quarantine only ever grows,
// unless the marker now holds the record VOUCH wrote, which ends the
// quarantines of the records it replaced.
func (w *Watch) Observe(id Identity, now time.Time) (restarted bool) {
	boot := bootAt(id, now)
	defer func() {
		w.seen = true
		w.runID = id.RunID
		w.boot = boot
	}()
	if !w.seen && id.Marker != nil {
		w.trusted.set, w.trusted.lost, w.trusted.started = true, id.Marker.LostAt, id.Marker.StartedAt
	}
	if w.Rule.Hold <= 0 {
		return w.seen && w.changedRun(id, boot)
	}
	hold := w.Rule.Hold
	if id.Marker != nil && id.Marker.Hold > hold {
		hold = id.Marker.Hold
	}
	restarted = w.seen && w.changedRun(id, boot)
	if w.seen && id.RunID != w.runID {
		w.runs = true
	}
	m := id.Marker
	// since keeps the quarantine of a loss or a start the rule counts:
	// under RuleRunID only one recorded after this Watch first saw the
	// backend.
	since := func(at time.Time, rec, trusted int64, why Reason) {
		if w.Rule.Mode == RuleRunID && w.trusted.set && rec == trusted {
			return
		}
		if w.quarantine(now, at, at.Add(hold), why) {
			w.marked = true
		}
	}
	if m == nil {
		if w.Rule.Mode == RuleRunID {
			if restarted && w.quarantine(now, boot, boot.Add(hold), ReasonRestarted) {
				w.marked = false
			}
			return restarted
		}
		// Nothing says what happened to its data: assume it was lost now.
		if w.quarantine(now, now, now.Add(hold), ReasonUnmarked) {
			w.marked = false
		}
		return restarted
	}
	w.anchorAt(m, now)
	// The record VOUCH wrote, with no loss on top of it, replaces the
	// records before it (the operator vouched that the master never held
	// a lock): the quarantine they gave ends, and this Watch decides as one
	// that first sees the master now. Only the record's own loss and start
	// hold it, below. A quarantine no record gave (unmarked) stays, and so
	// does one of a Watch that saw another run of the master: a master
	// restarted empty writes no word of its grants, so what this proxy saw
	// there may be what the restart lost.
	if m.Why == ReasonVouched && m.Change == ReasonNone && w.marked && !w.runs {
		w.until, w.from, w.why = time.Time{}, time.Time{}, ReasonNone
	}
	// The recorded loss first: where the start ends the hold within a
	// second of it (a fresh master), the loss's reason is the one reported,
	// so that masters in the same state give the same reason.
	why := m.Change
	if why == ReasonNone {
		why = m.Why
	}
	if why == ReasonNone {
		why = ReasonMarked
	}
	// A loss recorded in the master's future (its clock went back since)
	// was no later than now, and may have been now.
	since(now.Add(-max(m.LostAgo, 0)), m.LostAt, w.trusted.lost, why)
	lossUntil, lossWhy := w.until, w.why
	since(now.Add(-m.StartedAgo), m.StartedAt, w.trusted.started, ReasonStarted)
	if w.why == ReasonStarted && lossWhy != ReasonNone && !w.until.After(lossUntil.Add(uptimeGrain)) {
		w.why = lossWhy
	}
	if m.Change != ReasonNone && m.Change != ReasonNew {
		restarted = true
	}
	return restarted
}

// changedRun reports whether id belongs to another run of the backend than
// the last one observed.
func (w *Watch) changedRun(id Identity, boot time.Time) bool {
	switch {
	case id.RunID != "" && w.runID != "":
		return id.RunID != w.runID
	case id.Uptime >= 0 && !w.boot.IsZero():
		return boot.After(w.boot.Add(uptimeSlack))
	}
	return true // nothing proves it is the same run
}

// quarantine keeps the backend out until then, for a loss at from,
// unless that is already past or a longer quarantine is in force. It
// reports whether it did.
func (w *Watch) quarantine(now, from, until time.Time, why Reason) bool {
	if until.After(now) && until.After(w.until) {
		w.until, w.from = until, from
		w.why = why
		return true
	}
	return false
}

// anchorAt follows the loss or start the marker records: the latest it
// can have happened, in the proxy's time (a master clock that runs fast by
// up to RecordRate makes LostAgo overstate the time since). A new record
// forgets the early end of the last one.
func (w *Watch) anchorAt(m *Marker, now time.Time) {
	ago := max(m.LostAgo, 0)
	if m.StartedAgo < ago {
		ago = max(m.StartedAgo, 0)
	}
	at := now.Add(-ago + time.Duration(float64(ago)*RecordRate) + RecordSlack)
	if at.After(now) {
		at = now
	}
	key := [2]int64{m.LostAt, m.StartedAt}
	if key != w.anchor.key || w.anchor.at.IsZero() {
		w.anchor = anchor{key: key, at: at}
	} else if at.Before(w.anchor.at) {
		w.anchor.at = at
	}
}

// Anchor is the instant the hold in force runs from (the latest loss or
// start the marker records), when the other masters' records may end it
// before its ceiling.
func (w *Watch) Anchor() (at time.Time, ok bool) {
	return w.anchor.at, w.marked && !w.anchor.at.IsZero()
}

// EndEarly ends the hold that runs from at (see Anchor) at end, when that
// is before its ceiling: the other masters' records show that every lock
// the backend may have held has expired by then (RecordsEnd). A hold from
// a later loss is not ended by it.
func (w *Watch) EndEarly(at, end time.Time) {
	if at.Equal(w.anchor.at) && (w.anchor.early.IsZero() || end.Before(w.anchor.early)) {
		w.anchor.early = end
	}
}

// Early reports whether the hold in force ends before its ceiling.
func (w *Watch) Early() bool {
	return w.marked && !w.anchor.early.IsZero() && w.anchor.early.Before(w.until)
}

// Counts reports whether the backend's votes count at now.
func (w *Watch) Counts(now time.Time) bool { return !now.Before(w.QuarantinedUntil()) }

// QuarantinedUntil is the instant the backend's votes start counting again
// (zero or past when they count): the ceiling, or the earlier end the
// other masters' records give (EndEarly).
func (w *Watch) QuarantinedUntil() time.Time {
	if w.Early() {
		return w.anchor.early
	}
	return w.until
}

// Ceiling is when the hold in force would end with no record to end it
// early.
func (w *Watch) Ceiling() time.Time { return w.until }

// LostAt is the instant the quarantine in force counts from: when the
// backend may last have lost writes (or started).
func (w *Watch) LostAt() time.Time { return w.from }

// Reason says what the quarantine in force is for (ReasonNone before any).
func (w *Watch) Reason() Reason { return w.why }

// RunID is the last run_id observed.
func (w *Watch) RunID() string { return w.runID }
