package netio

import (
	"bytes"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// verifier is the part of a Link that decides whether the master's replies
// count: the identity check that opens every connection (handshake.go),
// the replication marker and its periodic check (marker.go, marker.lua),
// the continuity check that follows grants (continuity.go), the clock
// check (clock.go) and what the marker's records and the other masters'
// tell (records.go, book.go). Link.mu protects it.
//
// Its invariants:
//   - gen counts connections, and ready is set only by the identity check
//     of connection gen (identify): a reply to an older connection's check
//     changes nothing;
//   - countsLocked is the one place that says whether a reply counts, and
//     nothing counts while ready is false, the master is quarantined
//     (watch), not vetted, the continuity is broken, or, for a
//     Sentinel-managed backend, its Sentinels no longer name it;
//   - a loss the link saw itself (lossWhy) keeps the continuity broken
//     until a marker check of the same key recorded it;
//   - the quarantine, the marker's findings about the run (cont.run,
//     cont.cmds) and the clock's readings outlive a connection: only a
//     new connection to another address (a Sentinel failover) forgets the
//     run and the clock, and its marker says what that master lost.
//
// Its hooks:
//   - onConnect (a new connection dialled to addr): a new generation, not
//     ready, its CLIENT ID unknown, the continuity check disarmed until the
//     connection's marker check; the run and clock forgotten when addr is
//     another server;
//   - onLost (the connection is lost): not ready; keeps the quarantine,
//     the findings and the connection's address and CLIENT ID (the undo
//     keeper's suspect); fails the replies held for a continuity check
//     that will not come (returned, delivered as not counting).
type verifier struct {
	gen        uint64 // counts connections: replies to an older one's identity check are ignored
	ready      bool   // the current connection passed its identity check: commands may be sent
	failed     uint64 // the gen of the last connection whose check failed (fail)
	connAddr   string // the address the current (or last) connection was dialled to
	clientID   int64  // the current connection's CLIENT ID; 0 when unknown
	clientAddr string // its address as the backend sees it

	watch   quorum.Watch
	mkey    string        // where the marker is kept (Options.MarkerKey, or SetMarkerKey's)
	lossWhy quorum.Reason // a loss the link saw itself (moved, clock): the next marker check records it
	cont    contState     // the continuity check (continuity.go)

	clock       clockWatch    // the clock check (clock.go)
	clockOffset time.Duration // the master's clock minus the proxy's, from TIME on the latest connection
	clockKnown  bool

	// vetted: a marker check of this master was sent after the tables of
	// enough other masters were read, so an older copy of its data would
	// have shown (book.go).
	vetted   bool
	proxyID  string      // this proxy's name in the marker's counts (the book's, or the link's own)
	vetTimer *time.Timer // checks again soon while not vetted
	vetSince time.Time   // when the first check to vet the master was sent
	// restore is the end the other masters' records gave the hold of this
	// master's current epoch: the next marker check writes it into the
	// master's own record, which is then whole again (book.go).
	restore struct {
		epoch string
		end   time.Time
	}

	counting bool // the votes counted at the last look, for the log
}

// onConnect starts the checks of a new connection dialled to addr.
func (v *verifier) onConnect(addr string) {
	v.gen++
	if v.connAddr != "" && addr != v.connAddr {
		// Another master of a Sentinel-managed backend: what the link knew
		// of the last one's clock, run and command count is not this one's.
		// Its own marker says what it lost (a promotion, a resync).
		v.clockKnown = false
		v.cont.run, v.cont.cmds = "", 0
	}
	v.connAddr = addr
	v.ready, v.clientID, v.clientAddr = false, 0, ""
	v.cont.newConnection()
}

// onLost ends the connection's verdict: it reports whether the connection
// was up (verified), and hands back the replies held for its continuity
// check, which will not come.
func (v *verifier) onLost() (wasUp bool, heldBack []held) {
	wasUp = v.ready
	v.ready = false
	heldBack, v.cont.held = v.cont.held, nil
	return wasUp, heldBack
}

// noteCounting logs the end of a quarantine, once.
func (l *Link) noteCounting(now time.Time) {
	l.mu.Lock()
	counts := l.conn != nil && l.ready && l.vetted && l.watch.Counts(now) && l.confirmedLocked(now)
	ended := counts && !l.counting
	l.counting = counts
	l.mu.Unlock()
	if ended {
		l.log.Info("backend's quarantine ended: its votes count")
	}
}

// countsLocked is the one place that decides whether a reply of this
// master counts toward a quorum at now. All four must hold:
//   - the connection is ready: the master's identity (run_id, replication
//     id, the marker) was read on it (handshake.go, the marker script);
//   - the master is out of quarantine: the watch's rule for a master that
//     is new, restarted, promoted or otherwise lost its data
//     (quorum.Watch, quorum/restart.go);
//   - the continuity check on this connection has not found the data
//     broken since (continuity.go), which also holds a grant's reply
//     until the check after it passes;
//   - for a Sentinel-managed group, the Sentinels' majority names this
//     master (sentinel.go).
//
// A reply that does not count is still delivered (for undos and reads)
// with Counts false.
func (l *Link) countsLocked(now time.Time) bool {
	return l.ready && l.vetted && l.watch.Counts(now) && !l.cont.broken && l.confirmedLocked(now)
}

// rolledBack logs an older copy of the master's data than one seen, and
// runs the marker check that records it for every proxy.
func (l *Link) rolledBack() {
	l.log.Warn("backend serves an older copy of its data than a proxy saw: the grants before it do not count, and its votes stop counting for the hold")
	l.check()
}

// verifyReplyLocked is the reader's second step: whether r's reply counts
// (countsLocked), a grant's held for the continuity check after it, a
// continuity check's verdict on the replies it held (spare is the buffer
// the next ones are held in), and a READONLY that ends the connection's
// verdict.
func (l *Link) verifyReplyLocked(r *reply, now time.Time, spare *[]held) {
	e := r.e
	r.counts = l.countsLocked(now)
	r.hold = e.hold && !e.expired
	switch {
	case e.cont:
		r.release, r.counts, r.recheck, r.ahead = l.checkedReplyLocked(e, r.v, r.counts, now)
		if l.cont.held == nil {
			l.cont.held, *spare = *spare, nil
		}
		if r.wc == nil {
			r.wc, r.wbuf = l.takeWriteLocked() // a check sent again (NOSCRIPT)
		}
	case r.hold:
		l.cont.held = append(l.cont.held, held{e: e, v: r.v})
	}
	if r.isErr {
		l.health.Errors++
		if bytes.HasPrefix(r.v.Str, []byte("NOSCRIPT")) {
			// The cache was emptied behind our back (SCRIPT FLUSH): every
			// script is loaded again before its next use.
			clear(l.loaded)
		}
		if bytes.HasPrefix(r.v.Str, []byte("READONLY")) && l.ready {
			// The master became a replica under this connection: nothing
			// it says counts until a new connection's identity check.
			l.ready, r.counts, r.demoted = false, false, true
		}
	}
}

// orderReplyLocked keeps the order of delivery: a reply that comes behind
// a held grant waits with it, with its own counts. A Cluster re-sends
// redirected commands in the order their replies arrive, so a release
// behind an acquisition must not overtake it. The link's own checks are
// applied as they are read, in the master's order: a marker check's
// findings applied after the continuity check behind it would undo that
// check's verdict.
func (l *Link) orderReplyLocked(r *reply) {
	e := r.e
	r.queued = !e.cont && !r.hold && !r.retried && len(l.cont.held) > 0 && !linkOwn(e.rcv)
	if r.queued {
		l.cont.held = append(l.cont.held, held{e: e, v: r.v, own: true, counts: r.counts})
	}
}
