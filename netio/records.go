package netio

import (
	"fmt"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The link's side of the book (book.go): what each marker check of its
// master teaches the pool, and what the pool's other masters tell of it.

// vetRetry is how soon a master not yet vetted is checked again, and
// vetWait how long its vetting waits for the others' tables at most.
const (
	vetRetry = 25 * time.Millisecond
	vetWait  = 2 * time.Second
)

// markerReadLocked applies what a marker check read (h, mr) at now: an
// older copy of the data than one seen is noted as a loss and not taken as
// current; otherwise the continuity checks that follow compare it. It
// reports whether the data went back.
func (l *Link) markerReadLocked(h *handshake, mr *markerReply, now time.Time) (rolled bool) {
	b, f, m := l.opt.book, mr.cont, mr.id.Marker
	prev := l.cont.epoch
	if prev != "" && (f.run != l.cont.run && l.cont.run != "") {
		prev = "" // another run: its epochs are not this one's to compare
	}
	if m.Change == quorum.ReasonNone && (b.stale(f.epoch, mr.counts, h.sent) || (prev != "" && f.epoch != prev && epochBefore(f.epoch, prev)) ||
		(prev != "" && f.epoch == prev && f.seq < l.cont.seq)) {
		// What the master serves went back: the epoch a loss retired, or
		// fewer of some proxy's checks than seen. The next marker check
		// records it for every proxy; nothing counts until then.
		l.seeLossLocked(quorum.ReasonRolledBack)
		l.cont.broken = true
		rolled = true
	} else {
		if prev != "" && prev != f.epoch {
			b.retire(prev, now)
		}
		if l.opt.Veto {
			f.evicted = "*" // the old Redis's clients had that risk before
		}
		l.cont.expect(f)
	}
	for proxy, n := range mr.counts {
		b.seen(f.epoch, proxy, n, now)
	}
	b.table(mr.table, now)
	if !rolled {
		// Learned before any check sent from now on was: each is a write
		// the master answered before that check runs.
		l.cont.witnesses = b.witnesses(f.epoch, l.proxyID, maxWitnesses)
	}
	l.markerSeenLocked(h)
	l.keepBrokenWhileLossUnrecordedLocked()
	if f := l.follower; f != nil && f.connAddr == f.master && f.connEpoch == f.epoch {
		// The check ran on the master the Sentinels name, on a connection
		// made after the switches it counts: it recorded them (appendMarker).
		// A connection dialled to an address a newer round had replaced
		// records nothing for the master switched to.
		f.recorded = f.connSwitches
	}
	if !l.vetted {
		if l.vetSince.IsZero() {
			l.vetSince = h.sent
		}
		// Enough others' tables, or as many as could be read within
		// vetWait: a master that is down cannot tell, and must not keep
		// the others from counting.
		if b.tablesBefore(l.opt.Index, h.sent) >= l.tablesNeeded() || h.sent.Sub(l.vetSince) >= vetWait {
			l.vetted = true
		} else {
			// The others' tables are on their way (every link checks
			// its master as it connects): check again soon rather than
			// at the next period.
			l.vetTimer.Reset(vetRetry)
		}
	}
	if l.restore.epoch != "" && (mr.whole || l.restore.epoch != l.cont.epoch) {
		l.restore.epoch = ""
	}
	whole := mr.whole && m.Change == quorum.ReasonNone && !rolled && !l.cont.broken && l.lossWhy == quorum.ReasonNone && l.confirmedLocked(now)
	b.read(l.opt.Index, h.key, quorum.Reading{Sent: h.sent, Got: now, Left: mr.left, Whole: whole}, mr.settle)
	l.holdEndLocked(now, max(mr.settle, l.settle()), mr.whole)
	return rolled
}

// maxWitnesses bounds the other proxies' counts each continuity check
// compares (the ones learned last): a copy taken since some proxy's write
// lacks the writes of the proxies whose counts moved last.
const maxWitnesses = 4

// holdEndLocked ends the hold in force early when the other masters'
// records bound every lock this master may have held (quorum.RecordsEnd),
// and keeps that end to restore this master's own record with, unless it
// is whole.
func (l *Link) holdEndLocked(now time.Time, settle time.Duration, whole bool) {
	at, ok := l.watch.Anchor()
	if !ok || !now.Before(l.watch.Ceiling()) {
		return
	}
	end, ok := l.opt.book.end(l.opt.Index, at, settle)
	if !ok {
		return
	}
	wasEarly := l.watch.Early()
	l.watch.EndEarly(at, end)
	if !wasEarly && l.watch.Early() && now.Before(end) {
		l.log.Info("backend's hold ends early: the other masters' records show every lock it may have held expires by then",
			"counts_in", end.Sub(now).Round(time.Millisecond), "counts_at", end.Format(time.RFC3339Nano),
			"ceiling_in", l.watch.Ceiling().Sub(now).Round(time.Millisecond))
	}
	if !whole && l.cont.epoch != "" && !l.cont.broken {
		l.restore.epoch, l.restore.end = l.cont.epoch, end
	}
}

// tablesNeeded is how many other backends' tables a check must follow to
// vet this master: as many as bound a loss's hold, at most all others.
func (l *Link) tablesNeeded() int {
	if l.opt.book == nil {
		return 0
	}
	return min(quorum.ReadersNeeded(l.opt.book.n), l.opt.book.n-1)
}

// holdBound says what ends a hold in force: the locks the master may have
// held, as the other masters' records show, or nothing but the ceiling.
func holdBound(early bool, ceiling time.Duration) string {
	if early {
		return "; it counts again once the locks it may have held have expired, as the other masters' records show"
	}
	return fmt.Sprintf("; no record bounds the locks it may have held (too few other masters whole and reachable, or none used yet): it waits max_ttl + drift, %v left (an operator may VOUCH for brand-new masters)", ceiling.Round(time.Second))
}
