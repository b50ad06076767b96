package app

import (
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// A lost quorum looks, to a client, like contention: SET NX answers nil,
// GET nil, DEL 0. The operator learns it from the log: one WARN when fewer
// than a majority of backends count, one INFO when a majority counts again
// ("regained"), or for the first time ("reached": fresh masters wait out
// their quarantine at the first start).

const (
	// quorumPoll is how often the backends' health is read.
	quorumPoll = 100 * time.Millisecond
	// quorumStartGrace is how long the backends have to connect at start
	// before a missing quorum is reported.
	quorumStartGrace = 2 * time.Second
	// endedLag is how long after its quarantine ends a backend counts for
	// the log's quorum lines: each link logs the end of its quarantine at
	// its next health check, at most the links' health interval (1s, the
	// app keeps netio's default) after it, so the quorum line that
	// follows comes after those.
	endedLag = time.Second + quorumPoll
)

type quorumState uint8

const (
	quorumStarting quorumState = iota // nothing reported yet
	quorumHeld                        // a majority counts
	quorumLost                        // fewer than a majority count, after one did
	quorumNever                       // fewer than a majority have counted since the start
)

// quorumWatch follows whether a majority of backends count and logs each
// change once.
type quorumWatch struct {
	health  func() []netio.Health
	log     *slog.Logger
	started time.Time
	state   quorumState
	since   time.Time // when the quorum was lost
}

// quorumCount is what the backends' health says about the quorum at now:
// how many are in each state (netio.State).
type quorumCount struct {
	backends, need                                   int
	counting, down, quarantined, unconfirmed, unsure int
	// in is how long until a majority counts if the backends that are up
	// stay up: the quarantines that must end first; -1 if the backends that
	// are up are too few.
	in time.Duration
}

// countQuorum counts the backends at now; one whose quarantine ended less
// than lag ago counts as still quarantined.
func countQuorum(hs []netio.Health, now time.Time, lag time.Duration) quorumCount {
	q := quorumCount{backends: len(hs), need: quorum.Majority(len(hs))}
	var ends []time.Duration
	for _, h := range hs {
		switch state, _ := h.State(now); state {
		case netio.StateCounting:
			if h.Counts(now.Add(-lag)) {
				q.counting++
			} else {
				q.quarantined++ // it counts since less than lag
				ends = append(ends, 0)
			}
		case netio.StateQuarantined:
			q.quarantined++
			// Its end counts unless its Sentinels' confirmation lapses
			// before it.
			if then, _ := h.State(h.QuarantinedUntil); then != netio.StateUnconfirmed {
				ends = append(ends, h.QuarantinedUntil.Sub(now))
			}
		case netio.StateUnsure:
			q.unsure++
			ends = append(ends, 0) // the marker check that decides runs at once
		case netio.StateUnconfirmed:
			q.unconfirmed++
		default:
			q.down++
		}
	}
	q.in = -1
	if short := q.need - q.counting; short <= 0 {
		q.in = 0
	} else if short <= len(ends) {
		slices.Sort(ends)
		q.in = ends[short-1]
	}
	return q
}

// step reads the health once and logs a change of the quorum.
func (w *quorumWatch) step(now time.Time) {
	hs := w.health()
	q := countQuorum(hs, now, 0)
	have := q.counting >= q.need
	if have && (w.state == quorumLost || w.state == quorumNever) {
		// Back, or there for the first time, once the links have said
		// which quarantines ended.
		q = countQuorum(hs, now, endedLag)
		if have = q.counting >= q.need; !have {
			return
		}
	}
	switch {
	case have && w.state == quorumLost:
		w.log.Info(fmt.Sprintf("quorum regained: %d of %d backends count, %d needed; locks are granted again", q.counting, q.backends, q.need),
			"lost_for", now.Sub(w.since).Round(time.Millisecond))
	case have && w.state == quorumNever:
		w.log.Info(fmt.Sprintf("quorum reached: %d of %d backends count, %d needed; locks are granted", q.counting, q.backends, q.need),
			"since_start", now.Sub(w.started).Round(time.Millisecond))
	case have && w.state == quorumStarting:
		w.log.Info(fmt.Sprintf("quorum: %d of %d backends count, %d needed; locks are granted", q.counting, q.backends, q.need))
	case !have && w.state == quorumHeld:
		w.log.Warn(fmt.Sprintf("quorum lost: %d of %d backends count, %d needed; locks are refused", q.counting, q.backends, q.need), q.attrs()...)
		w.since = now
	case !have && w.state == quorumStarting && now.Sub(w.started) >= quorumStartGrace:
		w.log.Warn(fmt.Sprintf("no quorum yet: %d of %d backends count, %d needed; locks are refused", q.counting, q.backends, q.need), q.attrs()...)
		w.state = quorumNever
		return
	default:
		return
	}
	if have {
		w.state = quorumHeld
	} else {
		w.state = quorumLost
	}
}

// attrs say why backends do not count, and when a majority will.
func (q quorumCount) attrs() []any {
	a := []any{"down", q.down, "quarantined", q.quarantined}
	if q.unconfirmed > 0 {
		a = append(a, "unconfirmed", q.unconfirmed)
	}
	if q.unsure > 0 {
		a = append(a, "unsure", q.unsure)
	}
	if q.in > 0 {
		a = append(a, "quorum_in", q.in.Round(time.Second))
	}
	return a
}

// watchQuorum starts the watch; the returned function stops it and waits
// for its goroutine to end.
func (a *App) watchQuorum() (stop func()) {
	w := &quorumWatch{health: a.pool.Health, log: a.log, started: time.Now()}
	u := &upgradeWatch{a: a, hold: a.hold()}
	done, ended := make(chan struct{}), make(chan struct{})
	go func() { // owned by Run: stop ends it
		defer close(ended)
		t := time.NewTicker(quorumPoll)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case now := <-t.C:
				w.step(now)
				u.step(now)
			}
		}
	}()
	return func() {
		close(done)
		<-ended
	}
}
