package netio

import (
	"bytes"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// The undo lifecycle. An undo (the compare-and-delete of a partial
// acquisition) must reach the backend after everything sent before it, and
// run, until the lock it undoes has expired by itself: it is sent with its
// script's text (EVAL: no script cache can be missing it), across lost
// connections (kept in its later form for the next one), after an error
// that a retry can cure (BUSY, LOADING, OOM...: sent again), and
// after its lock's TTL once what it undoes is known to have run (then
// nothing is left to undo). What could not be undone is logged with its keys
// and counted.

// UndoCmd is an undo in its two forms, with what it undoes.
type UndoCmd struct {
	// Now runs right after the command it undoes, on the same connection.
	Now       []byte
	NowScript *resp.Script
	// Later runs instead when Now cannot: the connection was lost before its
	// reply, the backend was unreachable, or Now got an error worth a retry.
	// It runs on a later connection, after the earlier connections were
	// killed (CLIENT KILL ID), so after anything they still held; it must
	// only remove what that moment can have produced (a hung master that
	// resumes and runs a late SET), never an older copy of the same token
	// that another attempt may have set. Later builds it when it is
	// written, given how far the master's clock is ahead of the proxy's
	// (offset), when known.
	Later       func(offset time.Duration, known bool) []byte
	LaterScript *resp.Script
	// Keys names the keys it undoes, for the log.
	Keys string
	// TTL is the lock's: once the undo got an error reply (so the command
	// it undoes has run), retries stop when the lock has expired by
	// itself (ErrExpired). An undo waiting for a connection has no such
	// bound: the command it undoes may still run when the backend resumes.
	TTL time.Duration
	// Via is where a Redis Cluster backend ran the command undone
	// (Result.Via): the undo goes there. A single link ignores it.
	Via any
	// LaterOnly sends Later even the first time (an undo that follows a
	// redirection to another server, where it does not run right after
	// the command). Asking sends it after ASKING (see SendFlags).
	LaterOnly, Asking bool
}

// evalForm turns cmd, an EVALSHA of sc, into the EVAL of sc's text: an
// undo carries its script, so a script cache emptied behind the proxy's
// back (SCRIPT FLUSH, a restart) never makes it fail with NOSCRIPT. A
// command of another form is returned as it is.
func evalForm(cmd []byte, sc *resp.Script) []byte {
	if sc == nil || !isEvalSHAOf(cmd, sc) {
		return cmd
	}
	return appendEvalForm(make([]byte, 0, len(cmd)+len(sc.Body)), cmd, sc)
}

// appendEvalForm appends to dst the EVAL form of cmd, an EVALSHA of sc
// (see evalForm), or cmd as it is when it is not one.
func appendEvalForm(dst, cmd []byte, sc *resp.Script) []byte {
	if !isEvalSHAOf(cmd, sc) {
		return append(dst, cmd...)
	}
	i := bytes.IndexByte(cmd, '\n') + 1
	dst = append(dst, cmd[:i]...)
	dst = resp.AppendBulkString(dst, "EVAL")
	dst = resp.AppendBulk(dst, sc.Body)
	return append(dst, cmd[i+evalSHAHeadLen:]...)
}

// evalSHAHeadLen is the length of the encoded EVALSHA and SHA1 that open
// an EVALSHA command after its array header.
var evalSHAHeadLen = len(resp.AppendBulkString(resp.AppendBulkString(nil, "EVALSHA"), strings.Repeat("0", 40)))

// isEvalSHAOf reports whether cmd is an EVALSHA of sc.
func isEvalSHAOf(cmd []byte, sc *resp.Script) bool {
	i := bytes.IndexByte(cmd, '\n') + 1
	if i <= 0 || len(cmd) < i+evalSHAHeadLen {
		return false
	}
	head := cmd[i : i+evalSHAHeadLen]
	return bytes.HasPrefix(head, []byte("$7\r\nEVALSHA\r\n$40\r\n")) && string(head[len(head)-42:len(head)-2]) == sc.Sha
}

// laterBytesLocked is a durable entry's later form, as an EVAL.
func (l *Link) laterBytesLocked(e entry) []byte {
	return evalForm(e.later(l.clockOffset, l.clockKnown), e.laterScript)
}

// undoMeta is what a durable entry carries besides its commands.
type undoMeta struct {
	keys  string
	ttl   time.Duration
	until time.Time // set at the first error reply: when the lock has expired by itself
	tries int       // error replies so far
	due   time.Time // when a retry is sent
}

// expired reports whether the lock the undo undoes has expired by now.
func (u *undoMeta) expired(now time.Time) bool { return !u.until.IsZero() && !now.Before(u.until) }

// Undo queues a command that must reach the backend after everything sent
// before it, even across a lost connection: the compare-and-delete that
// undoes a partial acquisition. When the connection is lost before its
// reply (or the backend is unreachable), u.Later is kept and sent on the
// next connection, after that connection has killed the earlier ones still
// known to the backend (CLIENT KILL ID); an error reply a retry can cure
// sends u.Later again. The commands must not be modified afterwards.
// rcv.Receive is called exactly once: with the reply, with ErrExpired when
// the lock expired before the undo could run, with ErrAbandoned when too
// many undos wait, or ErrClosed when the link closes first.
func (l *Link) Undo(u UndoCmd, rcv Receiver, tag int) {
	e := entry{rcv: rcv, tag: tag, durable: true, later: u.Later, laterScript: u.LaterScript,
		undo: &undoMeta{keys: u.Keys, ttl: u.TTL}, asking: u.Asking}
	l.mu.Lock()
	if l.closed {
		l.leftUndos = append(l.leftUndos, u.Keys)
		l.health.UndoAbandoned++
		l.mu.Unlock()
		rcv.Receive(tag, Result{Err: l.errClosed})
		return
	}
	if l.conn == nil || !l.ready {
		dropped := l.retainLocked(e)
		l.mu.Unlock()
		l.abandon(dropped)
		return
	}
	e.deadline = time.Now()
	if u.LaterOnly {
		l.queueLocked(e, l.laterBytesLocked(e))
	} else {
		l.queueLocked(e, evalForm(u.Now, u.NowScript))
	}
	c, buf := l.takeWriteLocked()
	l.mu.Unlock()
	l.write(c, buf)
}

// abandon tells the receivers of undos that will never be sent.
func (l *Link) abandon(es []entry) {
	if len(es) == 0 {
		return
	}
	l.mu.Lock()
	l.health.UndoAbandoned += uint64(len(es))
	l.mu.Unlock()
	l.log.Warn("undo abandoned: too many waiting for an unreachable backend; these locks stay on it until their TTL",
		"count", len(es), "keys", undoKeys(es))
	for _, e := range es {
		e.rcv.Receive(e.tag, Result{Err: l.errAbandoned})
	}
}

// expire hands back the undos whose locks have expired by themselves.
func (l *Link) expire(es []entry) {
	if len(es) == 0 {
		return
	}
	l.mu.Lock()
	l.health.UndoExpired += uint64(len(es))
	l.mu.Unlock()
	l.log.Debug("undo dropped: its lock expired before it could run", "count", len(es), "keys", undoKeys(es))
	for _, e := range es {
		e.rcv.Receive(e.tag, Result{Err: l.errExpired})
	}
}

// undoKeys lists the keys of some undos, for a log line: the first few and
// how many more.
func undoKeys(es []entry) string {
	var b strings.Builder
	for i, e := range es {
		if i == 8 {
			b.WriteString(" and " + itoa(len(es)-i) + " more")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		if e.undo != nil {
			b.WriteString(e.undo.keys)
		}
	}
	return b.String()
}

func itoa(n int) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
		if n == 0 {
			return string(b[i:])
		}
	}
}

// retryable reports whether an undo's error reply may go away if it is
// sent again: a busy or loading master, one out of memory or unable to
// persist, a replica for now, an ACL not yet granting (an undo carries its
// script's text, so it never meets NOSCRIPT). A syntax or type error never
// goes away. A Redis Cluster's redirection (MOVED, ASK) goes back to the
// receiver, which sends the undo where the key is now.
func retryable(reply []byte) bool {
	return !bytes.HasPrefix(reply, []byte("ERR")) && !bytes.HasPrefix(reply, []byte("WRONGTYPE")) && !Redirect(reply)
}

// Redirect reports whether an error reply is a Redis Cluster redirection:
// the command did not run there (MOVED: the slot is another node's; ASK:
// the key is on the node importing its slot).
func Redirect(reply []byte) bool {
	return bytes.HasPrefix(reply, []byte("MOVED ")) || bytes.HasPrefix(reply, []byte("ASK "))
}

// retryBackoff is how long an undo waits before its n-th retry: doubling
// from 20 ms up to a second.
func retryBackoff(n int, reply []byte) time.Duration {
	return min(20*time.Millisecond<<min(n-1, 6), time.Second)
}
