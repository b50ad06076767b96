package netio

import (
	"net"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// pipeline is the part of a Link that carries commands to the backend and
// matches replies to them: the connection, the queue of commands awaiting
// replies, the write buffers, the batches written and not yet answered,
// and the per-command deadlines (deadlines.go). Link.mu protects it.
//
// Its invariants:
//   - q holds the commands written (or in wbuf, about to be) on the current
//     connection, in the order they were queued, and the reader pops the
//     oldest for each reply: replies match commands by position;
//   - pushed and popped number every command ever queued and answered (or
//     dropped) across connections; the deadline heap refers to commands by
//     that number, so an answered one is skipped, never mistaken;
//   - at most one goroutine writes to a connection at a time (writing),
//     and at most BatchesInFlight written batches await their replies
//     (batchEnds), except under a negative BatchesInFlight;
//   - loaded names the scripts the current connection holds: a script is
//     loaded before its first EVALSHA on a connection.
//
// Its hooks:
//   - onConnect (a new connection c): empty buffers and batch counts, no
//     script loaded, no writer;
//   - onLost (the connection is lost): keeps the sequence numbers, the
//     deadline heap and the spare buffer; takes every queued command out
//     and hands it back by fate: undos (kept, for the undo keeper), those
//     still awaited (lost, failed with ErrConnLost) and those already
//     answered by their timeout (late).
type pipeline struct {
	conn      *linkConn // nil while down
	writing   bool      // a goroutine is writing to the current connection
	spare     []byte    // the other write buffer
	wbuf      []byte
	q         ring[entry]
	loaded    map[string]bool // scripts loaded on the current connection
	timer     *time.Timer     // the deadline sweep's (deadlines.go)
	armedAt   time.Time       // when timer fires; zero when not armed
	deadlines deadlines

	// Write batching on the current connection: commands queued, replies
	// read, and the queued count at the end of each written batch whose
	// replies are not all in.
	queued    uint64
	replied   uint64
	batchEnds []batch
	sentMark  uint64 // queued count at the last write, for Health.Sent

	// Every queued command has a sequence number: pushed counts them,
	// popped counts those answered or dropped.
	pushed, popped uint64
}

// onConnect makes c the connection, with nothing written on it yet.
func (p *pipeline) onConnect(c *linkConn) {
	p.conn, p.writing = c, false
	p.loaded = make(map[string]bool)
	p.wbuf = p.wbuf[:0]
	p.queued, p.replied, p.batchEnds, p.sentMark = 0, 0, p.batchEnds[:0], 0
}

// onLost drops the connection and takes out every queued command, sorted
// by fate; unanswered reports whether any was.
func (p *pipeline) onLost() (lost, late, kept []entry, unanswered bool) {
	p.conn = nil
	p.wbuf = p.wbuf[:0]
	for p.q.len() > 0 {
		e := p.popLocked()
		switch {
		case e.durable:
			kept = append(kept, e)
		case !e.expired:
			lost = append(lost, e)
		default:
			late = append(late, e)
		}
		unanswered = true
	}
	return lost, late, kept, unanswered
}

// batch is a write awaiting its replies: the queued count at its end, and
// when it was written (reply latency is measured from there).
type batch struct {
	end uint64
	at  time.Time
}

// queueLocked appends cmd to the write buffer and queues e for its reply,
// loading e's script first on a connection that has not seen it.
func (l *Link) queueLocked(e entry, cmd []byte) {
	if e.script != nil && !l.loaded[e.script.Sha] {
		l.loaded[e.script.Sha] = true
		l.wbuf = resp.AppendArrayHeader(l.wbuf, 3)
		l.wbuf = resp.AppendBulkString(l.wbuf, "SCRIPT")
		l.wbuf = resp.AppendBulkString(l.wbuf, "LOAD")
		l.wbuf = resp.AppendBulk(l.wbuf, e.script.Body)
		dl := e.deadline
		if e.durable {
			dl = time.Time{} // loading an undo's script is as patient as the undo
		}
		l.pushLocked(entry{rcv: discard{}, deadline: dl})
	}
	if e.track {
		l.trackLocked()
	}
	if e.asking {
		dl := e.deadline
		if e.durable {
			dl = time.Time{}
		}
		l.wbuf = append(l.wbuf, askingCmd...)
		l.pushLocked(entry{rcv: discard{}, deadline: dl})
	}
	l.wbuf = append(l.wbuf, cmd...)
	l.pushLocked(e)
}

var askingCmd = resp.AppendCommand(nil, "ASKING")

// pushLocked queues e, whose bytes are already in wbuf. Commands with a
// deadline enter the deadline heap; durable ones and the link's own
// patient commands (a zero deadline) do not.
func (p *pipeline) pushLocked(e entry) {
	if !e.durable && !e.deadline.IsZero() {
		p.deadlines.push(deadline{at: e.deadline, seq: p.pushed})
	}
	if e.deadline.IsZero() {
		e.deadline = time.Now() // for the dead-backend check: how late its reply is
	}
	p.q.push(e)
	p.pushed++
	p.queued++
}

// popLocked removes the oldest queued command.
func (p *pipeline) popLocked() entry {
	p.popped++
	p.deadlines.answered(p.popped)
	return p.q.pop()
}

// takeWriteLocked hands the queued bytes to the caller to write, when no
// one else is writing and fewer than BatchesInFlight written batches await
// their replies; otherwise the bytes wait and join a later, larger write
// (made by whoever finishes the current write, or by the reader when a
// batch is answered). It returns a nil buffer when there is nothing to do.
func (l *Link) takeWriteLocked() (*linkConn, []byte) {
	if l.writing || l.conn == nil || len(l.wbuf) == 0 {
		return nil, nil
	}
	if k := l.opt.BatchesInFlight; k > 0 && len(l.batchEnds) >= k {
		return nil, nil
	}
	l.appendCheckLocked()
	buf := l.wbuf
	l.wbuf = l.spare[:0]
	l.spare = nil
	l.writing = true
	l.batchEnds = append(l.batchEnds, batch{end: l.queued, at: time.Now()})
	l.health.Writes++
	l.health.Sent += l.queued - l.sentMark
	l.sentMark = l.queued
	return l.conn, buf
}

// write writes what takeWriteLocked handed over, in the caller's
// goroutine (no hand-off to a writer goroutine), then anything that may be
// written next. Writes to one connection never overlap, so commands reach
// the backend in the order they were queued.
func (l *Link) write(c *linkConn, buf []byte) {
	for buf != nil {
		// A write is cut when the backend has not taken its bytes for
		// DeadAfter/2 to DeadAfter (the deadline moves forward only when
		// less than half of it is left, not on every write).
		if now := time.Now(); c.until.Sub(now) < l.opt.DeadAfter/2 {
			c.until = now.Add(l.opt.DeadAfter)
			c.SetWriteDeadline(c.until)
		}
		_, err := c.Write(buf)
		if err != nil {
			c.Close() // the reader sees it and cleans up
		}
		written := buf
		l.mu.Lock()
		buf = nil
		if l.conn == c {
			// Only the current connection's writer may clear the flag: after a
			// reconnect it belongs to the new connection.
			l.writing = false
			if cap(written) <= 1<<20 && l.spare == nil { // keep no burst-sized buffer
				l.spare = written[:0]
			}
			if err == nil {
				c, buf = l.takeWriteLocked()
			}
		}
		l.mu.Unlock()
	}
}

// linkConn is a link's connection with the write deadline in force on it,
// which only the connection's writer of the moment touches (writes to one
// connection never overlap).
type linkConn struct {
	net.Conn
	until time.Time
}

// armLocked makes sure the sweep timer fires no later than t.
func (p *pipeline) armLocked(t time.Time) {
	if p.armedAt.IsZero() || t.Before(p.armedAt) {
		p.armedAt = t
		p.timer.Reset(time.Until(t))
	}
}

// popReplyLocked is the reader's first step: it matches r's reply to the
// oldest queued command, and, when that answers a written batch, takes
// what queued behind it for the reader to write.
func (l *Link) popReplyLocked(r *reply, now time.Time) {
	r.e = l.popLocked()
	r.isErr = r.v.Kind == resp.KindError
	l.replied++
	if len(l.batchEnds) > 0 {
		r.lat = now.Sub(l.batchEnds[0].at)
	}
	if len(l.batchEnds) > 0 && l.batchEnds[0].end <= l.replied {
		// A batch is answered: what queued meanwhile goes out now, from
		// this goroutine.
		n := copy(l.batchEnds, l.batchEnds[1:])
		l.batchEnds = l.batchEnds[:n]
		r.wc, r.wbuf = l.takeWriteLocked()
	}
	if l.health.Latency == 0 {
		l.health.Latency = r.lat
	} else {
		l.health.Latency += (r.lat - l.health.Latency) / 8
	}
}
