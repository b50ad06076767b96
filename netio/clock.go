package netio

import (
	_ "embed"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The clock check. A master expires keys by its own clock: if that clock
// jumps ahead (an NTP step, a date set by hand, a virtual machine's clock
// corrected after a pause), every key on it expires early by the jump, in
// the proxy's time, and a lock granted for its whole validity may be gone
// while its holder still works under it. That is data going back in time
// like any other loss, and it is handled as one: the votes before the
// reading that shows the jump do not count, and a marker check at once
// records a loss ("clock") for every proxy, so the master stops counting
// for the hold.
//
// The marker check and every continuity check return the master's clock
// (ms). Each reading is bracketed by the proxy's monotonic clock: sent (the
// check was queued) and got (its reply was read), so the master read its
// clock at an instant in [sent, got]. Its offset from the proxy's clock was
// then between low = master - got and high = master - sent. A clock that
// never jumps ahead changes that offset by at most clockRate times the time
// between two readings, so between any earlier reading j and the latest i:
//
//	low_i - high_j <= clockRate * (got_i - sent_j) + clockSlack
//
// Rewritten as (low_i - clockRate*got_i) - (high_j - clockRate*sent_j), the
// check needs only the least high_j - clockRate*sent_j of all earlier
// readings (floor), kept in O(1): every earlier reading is compared at
// once, so a clock set back and later forward again (keys set meanwhile
// expire early by the step forward) is seen like a single jump.
//
// A clock that jumps back makes keys live longer, which is safe, and is
// not reported. But a clock set back and forward again between two
// readings of this link, while another proxy granted a lock meanwhile,
// expires that lock early, and this link's readings agree. So the
// master keeps its readings of its clock in the marker, written by every
// continuity check and marker check of every proxy, and counts its steps
// back (clockstep.lua: within an episode in which the clock is behind its
// highest reading, each reading more than 20 ms below the one before or
// below the lowest counted, so that small steps add up), with the depth.
// Both checks answer the count: when it moved since this link last read
// it and no reading of this link since was below the floor by half that
// depth or more (it never saw the clock set back), the clock went back
// and came forward again between its readings, which is taken as a jump
// ahead. A link reading the master for the first time has no readings
// to compare: it takes a clock the master found behind within the hold
// (the marker check answers the latest such reading) as a jump.
//
// What the check cannot see: a jump smaller than clockSlack plus
// clockRate of the time between readings (covered by the drift
// allowance of validity); a step back smaller than 20 ms, than the time
// since the master's previous reading by any proxy, or than about twice
// clockRate of the time between this link's readings, then undone; a jump
// on a master between its last reading and a loss of all its connections
// that is undone before the next reading (a restart in between is caught
// by the restart rule); a jump ahead with no step back before it, made
// before this link's first reading; and a master whose clock runs fast
// from the moment it starts.

// clockRate is the rate at which a master's clock may run ahead of the
// proxy's without being taken for a jump: the default drift allowance per
// unit of TTL. NTP slews clocks by at most 0.05%.
const clockRate = 0.01

// clockSlack covers the master's millisecond readings (each may be up to
// 1 ms below its clock).
const clockSlack = 2 * time.Millisecond

// clockWatch keeps what the clock check of one link compares. The link's mu
// protects it; it outlives connections (the master's clock and the proxy's
// monotonic clock go on across them) but not a new run of the master.
type clockWatch struct {
	run   string        // the run the readings are from
	known bool          // floor holds a reading of that run
	floor time.Duration // least high_j - clockRate*sent_j (as offsets from base)
	base  time.Time     // the proxy's instant that offsets are taken from
	last  time.Time     // the latest reading's sent: an older one is ignored
	// The marker's count of steps back as last read (backKnown: read in
	// this run), and the least margin (low - floor) of the readings since.
	backKnown bool
	back      int64
	least     time.Duration
	// behind is the master's latest reading found behind, as a marker
	// check last answered it (continuity checks do not answer it).
	behind int64
	// recent is how long after the master last found its clock behind a
	// link reading it for the first time takes that as a jump: the hold
	// (max_ttl + drift), as long as a lock granted then may last. unseen
	// says the last jump was taken so.
	recent time.Duration
	unseen bool
}

// backCount is the marker's count of steps back of the master's clock,
// the latest step's depth in ms and the latest reading found behind (ms
// since the epoch, 0: none; a marker check's answer only), as a check
// answered them (ok).
type backCount struct {
	n, ms, behind int64
	ok            bool
}

// clockStepLua is the master's record of its clock's steps back
// (clockstep.lua), which the continuity check and the marker check both
// run first.
//
//go:embed clockstep.lua
var clockStepLua []byte

// withClockStep is a script's text with the step rule before it.
func withClockStep(body []byte) []byte {
	out := append(append([]byte{}, clockStepLua...), '\n')
	return append(out, body...)
}

// observe takes a reading of the master's clock (ms since the epoch), taken
// by a check queued at sent whose reply was read at got, in the given run,
// with the marker's count of steps back that the check answered. It
// reports how far the master's clock is ahead of where it can have been
// without a jump, when it jumped; after a jump the readings start again
// from this one.
func (w *clockWatch) observe(run string, masterMs int64, b backCount, sent, got time.Time) (ahead time.Duration, jumped bool) {
	if masterMs <= 0 || sent.IsZero() {
		return 0, false
	}
	if !w.known || run != w.run {
		w.run, w.known, w.base, w.last, w.backKnown = run, true, sent, sent, false
		w.restart(masterMs, sent, b)
		if b.ok && b.behind > 0 && masterMs-b.behind < (w.recent+time.Duration(b.ms)*time.Millisecond).Milliseconds() {
			// This link has no earlier reading of this run, and the master
			// found its clock behind lately: set right again since (which
			// expires the keys written while it was behind) or not, this
			// link cannot tell from time gone by, so it takes it as a jump.
			w.unseen = true
			return time.Duration(b.ms) * time.Millisecond, true
		}
		return 0, false
	}
	if sent.Before(w.last) {
		// Out of order (a reply of an older connection read late): the
		// bound holds only from an earlier reading to a later one.
		return 0, false
	}
	w.last = sent
	low := time.Duration(masterMs)*time.Millisecond - got.Sub(w.base) - scaled(got.Sub(w.base))
	margin := low - w.floor
	if ahead = margin - clockSlack; ahead > 0 {
		w.restart(masterMs, sent, b)
		return ahead, true
	}
	w.least = min(w.least, margin)
	// The count rose, or the master found its clock behind since this
	// link's last marker reading (the count alone does not say so when
	// the marker was written anew after a loss this link did not see).
	moved := b.n > w.back || (b.behind > 0 && b.behind != w.behind)
	if b.ok && w.backKnown && moved && w.least > -time.Duration(b.ms)*time.Millisecond/2 {
		// Set back and forward again since this link's last readings:
		// keys written meanwhile expire early by the step forward.
		w.restart(masterMs, sent, b)
		return time.Duration(b.ms) * time.Millisecond, true
	}
	w.floor = min(w.floor, w.high(masterMs, sent))
	if b.ok {
		w.back, w.backKnown, w.least = b.n, true, 0
		if b.behind > 0 {
			w.behind = b.behind
		}
	}
	return 0, false
}

// restart takes a reading as the only one the next are compared with.
func (w *clockWatch) restart(masterMs int64, sent time.Time, b backCount) {
	w.base = sent
	w.floor = w.high(masterMs, sent)
	w.least = 0
	if b.ok {
		w.back, w.backKnown = b.n, true
		if b.behind > 0 {
			w.behind = b.behind
		}
	}
}

// high is high_j - clockRate*sent_j of a reading, from the watch's base.
func (w *clockWatch) high(masterMs int64, sent time.Time) time.Duration {
	at := sent.Sub(w.base)
	return time.Duration(masterMs)*time.Millisecond - at - scaled(at)
}

// scaled is d times clockRate.
func scaled(d time.Duration) time.Duration { return time.Duration(float64(d) * clockRate) }

// clockReadLocked applies a reading of the master's clock (see clockWatch)
// when a restart rule applies. On a jump the link notes the loss, to be
// recorded by the next marker check, and nothing counts until then.
func (l *Link) clockReadLocked(run string, masterMs int64, b backCount, sent, got time.Time) (ahead time.Duration, jumped bool) {
	if !l.markerRule() {
		return 0, false
	}
	if ahead, jumped = l.clock.observe(run, masterMs, b, sent, got); jumped {
		l.seeLossLocked(quorum.ReasonClock)
		l.cont.broken = true
		l.health.ClockJumps++
	}
	return ahead, jumped
}

// clockJumped logs a jump of the master's clock and runs the marker check
// that records it for every proxy.
func (l *Link) clockJumped(ahead time.Duration) {
	l.mu.Lock()
	unseen := l.clock.unseen
	l.clock.unseen = false
	l.mu.Unlock()
	if unseen {
		l.log.Warn("backend's clock was found set back lately, before this proxy's first reading of its current run: if it was set right again since, keys written meanwhile expired early, which this proxy cannot tell, so it takes it as a jump: its votes stop counting for the hold",
			"behind_by", ahead.Round(time.Millisecond))
		l.check()
		return
	}
	l.log.Warn("backend's clock jumped ahead, which expires its keys early: the grants before the reading do not count, and its votes stop counting for the hold",
		"ahead", ahead.Round(time.Millisecond))
	l.check()
}
