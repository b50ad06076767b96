package netio

import (
	"bytes"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// undoKeeper is the part of a Link that keeps what must reach the backend
// whatever happens to the connection: the undos waiting for a connection
// (retained), those waiting to be sent again after a curable error reply
// (retry), the earlier connections that may still run commands sent on
// them (suspects), and the keys of the undos left when the link closed.
// Link.mu protects it.
//
// Its invariants:
//   - an undo is in at most one place: the pipeline's queue, retained or
//     retry; Close empties retained and retry into leftUndos, after which
//     (closed) a new undo is left at once;
//   - retained holds at most max undos (Options.MaxRetained): the oldest
//     beyond it are abandoned, whichever way they came (capLocked is the
//     one place that says so);
//   - retained undos go out on a new connection only after the kills of
//     the suspects of the same server, so after anything those still held.
//
// Its hooks:
//   - onConnect (a new connection to server): forgets the suspects of
//     another server (a Sentinel-managed backend's earlier master: not a
//     client of this one) and keeps everything else, which the
//     connection's handshake sends first, patiently when any waited;
//   - onLost (the connection is lost): keeps the undos the pipeline gave
//     back, before those already kept, and the lost connection as a
//     suspect when it carried commands unanswered; fails (returns, to be
//     abandoned) the oldest undos beyond the cap.
type undoKeeper struct {
	max        int         // the most undos retained (Options.MaxRetained)
	suspects   []suspect   // earlier connections to kill before any undo (at most maxSuspects)
	retained   []entry     // undos waiting for a connection, oldest first
	retry      []entry     // undos that got an error reply, waiting to be sent again (undo.go)
	retryTimer *time.Timer // fires when the earliest retry is due
	leftUndos  []string    // keys of the undos that had not run when the link closed
	closed     bool        // Close has taken what waited: an undo now is left at once
	killWarn   string      // the last CLIENT KILL refusal logged
}

// maxSuspects bounds the earlier connections kept to kill: the oldest are
// forgotten first.
const maxSuspects = 64

// onConnect forgets the suspects that are not clients of server, and
// reports whether fates were open as the connection came (undos waiting,
// or suspects of any server): its handshake is then patient.
func (k *undoKeeper) onConnect(server string) (patient bool) {
	patient = len(k.retained) > 0 || len(k.suspects) > 0
	kept := k.suspects[:0]
	for _, s := range k.suspects {
		if s.server == server {
			kept = append(kept, s)
		}
	}
	k.suspects = kept
	return patient
}

// onLost keeps the undos a lost connection carried (kept, oldest first)
// ahead of those already waiting, and the connection itself (s) as a
// suspect when it left commands unanswered and its CLIENT ID is known. It
// returns the undos beyond the cap, for abandon.
func (k *undoKeeper) onLost(kept []entry, unanswered bool, s suspect) (dropped []entry) {
	if unanswered && s.id != 0 {
		// The backend may still run what it was sent (a hung master that
		// resumes): kill this connection from the next one before any undo.
		k.suspects = append(k.suspects, s)
		if len(k.suspects) > maxSuspects {
			k.suspects = k.suspects[1:]
		}
	}
	k.retained = append(kept, k.retained...)
	return k.capLocked()
}

// retainLocked keeps a durable entry, in its later form, for the next
// connection, and returns the oldest ones when too many wait.
func (k *undoKeeper) retainLocked(e entry) []entry {
	k.retained = append(k.retained, e)
	return k.capLocked()
}

// capLocked takes out the oldest retained undos beyond the cap.
func (k *undoKeeper) capLocked() (dropped []entry) {
	over := len(k.retained) - k.max
	if over <= 0 {
		return nil
	}
	dropped = append(dropped, k.retained[:over]...)
	k.retained = append(k.retained[:0], k.retained[over:]...)
	return dropped
}

// closeLocked takes every undo still waiting (retained, then retried) and
// names them in leftUndos: the link is closing, and none of them will run.
func (k *undoKeeper) closeLocked() (taken []entry) {
	k.closed = true
	taken = append(k.retained, k.retry...)
	k.retained, k.retry = nil, nil
	for _, e := range taken {
		if e.undo != nil {
			k.leftUndos = append(k.leftUndos, e.undo.keys)
		}
	}
	return taken
}

// waiting is how many undos wait for a connection or a retry.
func (k *undoKeeper) waiting() int { return len(k.retained) + len(k.retry) }

// undoFailedLocked handles an undo's error reply, called by the reader with
// the lock held: a reply a retry can cure, before the lock's TTL, sends it
// again (in its later form: a retry with the same token may have been
// granted since), and the reader must not deliver the reply.
func (k *undoKeeper) undoFailedLocked(e entry, reply []byte, now time.Time) (retried bool) {
	if e.undo == nil || !retryable(reply) || e.undo.expired(now) {
		return false
	}
	if e.undo.until.IsZero() && e.undo.ttl > 0 {
		// What it undoes ran before it on this connection: that lock is gone
		// by itself a TTL (and its drift) from now.
		e.undo.until = now.Add(e.undo.ttl + e.undo.ttl/100 + 10*time.Millisecond)
	}
	e.undo.tries++
	e.undo.due = now.Add(retryBackoff(e.undo.tries, reply))
	k.retry = append(k.retry, e)
	k.armRetryLocked(now)
	return true
}

// armRetryLocked arms the retry timer for the earliest due retry.
func (k *undoKeeper) armRetryLocked(now time.Time) {
	if len(k.retry) == 0 {
		return
	}
	next := k.retry[0].undo.due
	for _, e := range k.retry[1:] {
		if e.undo.due.Before(next) {
			next = e.undo.due
		}
	}
	k.retryTimer.Reset(max(next.Sub(now), 0))
}

// retryDue sends the undos whose retry is due (the retry timer's function):
// on the current connection when it is ready, else kept for the next one.
func (l *Link) retryDue() {
	if l.ctx.Err() != nil {
		return
	}
	now := time.Now()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return // Close took the retries
	}
	var dropped, expired []entry
	keep := l.retry[:0]
	for _, e := range l.retry {
		switch {
		case e.undo.expired(now):
			expired = append(expired, e)
		case e.undo.due.After(now):
			keep = append(keep, e)
		case l.conn == nil || !l.ready:
			dropped = append(dropped, l.retainLocked(e)...)
		default:
			e.deadline = now
			l.queueLocked(e, l.laterBytesLocked(e))
		}
	}
	l.retry = keep
	l.armRetryLocked(now)
	c, buf := l.takeWriteLocked()
	l.mu.Unlock()
	l.write(c, buf)
	l.expire(expired)
	l.abandon(dropped)
}

// killed handles the reply to CLIENT KILL ID of an earlier connection. Once
// the backend answered it, that connection can run nothing more (it is gone,
// or was just killed), so undos sent after it run after everything sent on it.
func (l *Link) killed(id int64, r Result) {
	if r.Err != nil {
		return // this connection is failing too; the next one tries again
	}
	l.mu.Lock()
	for i, s := range l.suspects {
		if s.id == id {
			l.suspects = append(l.suspects[:i], l.suspects[i+1:]...)
			break
		}
	}
	warn := ""
	if r.V.Kind == resp.KindError && !bytes.Contains(bytes.ToLower(r.V.Str), []byte("no such client")) && l.killWarn != string(r.V.Str) {
		l.killWarn = string(r.V.Str)
		warn = l.killWarn
	}
	l.mu.Unlock()
	if warn != "" {
		l.log.Warn("the backend refused CLIENT KILL of the proxy's earlier connection: an undo retried after a lost connection may run before the command it undoes; allow the proxy's user CLIENT KILL",
			"reply", warn)
	}
}

// suspect is an earlier connection that may still run commands sent on it:
// its CLIENT ID, its address as the backend sees it, and the address it
// was dialled to.
type suspect struct {
	id     int64
	addr   string
	server string
}

// sendRetainedLocked queues the undos that waited for a connection, in
// their later form, after whatever this connection already carries (the
// kills of earlier connections come first). It returns those whose lock
// has expired meanwhile, for l.expire.
func (l *Link) sendRetainedLocked() (expired []entry) {
	now := time.Now()
	for _, e := range l.retained {
		if e.undo != nil && e.undo.expired(now) {
			expired = append(expired, e)
			continue
		}
		e.deadline = now
		l.queueLocked(e, l.laterBytesLocked(e))
	}
	l.retained = nil
	return expired
}

// fatesOpen reports whether a lost connection left commands whose fate is
// open: suspects to kill, or undos kept for the next connection.
func (l *Link) fatesOpen() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.suspects) > 0 || len(l.retained) > 0
}

// undoReplyLocked is the reader's third step: an undo's error reply a
// retry can cure is kept to be sent again (retried), not delivered.
func (l *Link) undoReplyLocked(r *reply, now time.Time) {
	if r.isErr && r.e.durable && !r.e.expired {
		r.retried = l.undoFailedLocked(r.e, r.v.Str, now)
	}
}
