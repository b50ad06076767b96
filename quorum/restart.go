package quorum

import "time"

// Identity is what a backend says about itself on a new connection.
type Identity struct {
	RunID  string        // INFO server run_id; "" when the backend does not say
	Uptime time.Duration // INFO server uptime_in_seconds; negative when unknown
}

// RestartRule configures the restart quarantine.
type RestartRule struct {
	// Hold is how long a restarted backend stays out of every quorum after
	// it came back: max_ttl plus its drift, so that every lock it forgot
	// has expired everywhere else.
	Hold time.Duration
	// Strict also quarantines a backend seen for the first time when it has
	// been up for less than Hold (or does not say how long). A proxy that
	// starts together with fresh backends then refuses every lock for Hold.
	Strict bool
}

// Watch follows one backend's identity across connections and decides
// whether its votes count. The zero Watch (with a rule set) has seen nothing.
// A Watch is not safe for concurrent use.
type Watch struct {
	Rule RestartRule

	seen  bool
	runID string
	boot  time.Time // estimated start of the backend's current run
	until time.Time // votes do not count before this instant
}

// uptimeSlack absorbs the truncation of uptime_in_seconds and the latency
// of the INFO round trip when comparing boot estimates.
const uptimeSlack = 2 * time.Second

// uptimeGrain is how much uptime_in_seconds can overstate the real uptime.
const uptimeGrain = time.Second

// Observe records the identity a newly established connection reported at
// now, and reports whether the backend restarted since the last one (or
// cannot be shown not to have). A restarted backend is quarantined until
// Hold after it came back.
func (w *Watch) Observe(id Identity, now time.Time) (restarted bool) {
	// The latest the backend can have started. Redis computes
	// uptime_in_seconds from two whole-second wall-clock readings, so it can
	// overstate the real uptime by up to a second: a backend up for 0.2s may
	// say 1. Estimating the boot a second later than the reported uptime says
	// keeps the quarantine from ending early.
	boot := now
	if id.Uptime >= 0 {
		boot = now.Add(-id.Uptime + uptimeGrain)
		if boot.After(now) {
			boot = now
		}
	}
	defer func() {
		w.seen = true
		w.runID = id.RunID
		w.boot = boot
	}()
	if !w.seen {
		if w.Rule.Strict && (id.Uptime < 0 || boot.Add(w.Rule.Hold).After(now)) {
			w.quarantine(boot)
		}
		return false
	}
	switch {
	case id.RunID != "" && w.runID != "":
		restarted = id.RunID != w.runID
	case id.Uptime >= 0 && !w.boot.IsZero():
		restarted = boot.After(w.boot.Add(uptimeSlack))
	default:
		restarted = true // nothing proves it is the same run
	}
	if restarted {
		w.quarantine(boot)
	}
	return restarted
}

func (w *Watch) quarantine(boot time.Time) {
	until := boot.Add(w.Rule.Hold)
	if until.After(w.until) {
		w.until = until
	}
}

// Counts reports whether the backend's votes count at now.
func (w *Watch) Counts(now time.Time) bool { return !now.Before(w.until) }

// QuarantinedUntil is the instant the backend's votes start counting again
// (zero or past when they count).
func (w *Watch) QuarantinedUntil() time.Time { return w.until }

// RunID is the last run_id observed.
func (w *Watch) RunID() string { return w.runID }
