package netio

import (
	"fmt"
	"net"
	"time"
)

// deadline is one queued command's deadline, by its sequence number.
type deadline struct {
	at  time.Time
	seq uint64
}

// deadlines orders the deadlines of queued commands, earliest first,
// whatever order they were queued in: a 5 ms deadline queued behind a 1 s
// one fires at 5 ms. Deadlines that arrive in order (the common case: every
// command of a link has the same timeout) go to a FIFO, whose answered
// entries leave from the front as their replies arrive; one earlier than
// the last in the FIFO goes to a heap, whose answered entries stay until
// they reach the top, where the sweep drops them.
type deadlines struct {
	fifo ring[deadline]
	heap deadlineHeap
}

func (d *deadlines) push(x deadline) {
	if n := d.fifo.len(); n == 0 || !x.at.Before(d.fifo.at(n-1).at) {
		d.fifo.push(x)
		return
	}
	d.heap.push(x)
}

// answered drops the FIFO's front entries of commands answered already
// (sequence numbers below popped).
func (d *deadlines) answered(popped uint64) {
	for d.fifo.len() > 0 && d.fifo.at(0).seq < popped {
		d.fifo.pop()
	}
}

// earliest returns the earliest deadline of a command not answered yet,
// after dropping the answered ones in its way; ok is false when there is
// none.
func (d *deadlines) earliest(popped uint64) (x deadline, ok bool) {
	d.answered(popped)
	for len(d.heap) > 0 && d.heap[0].seq < popped {
		d.heap.pop()
	}
	switch {
	case d.fifo.len() > 0 && (len(d.heap) == 0 || !d.heap[0].at.Before(d.fifo.at(0).at)):
		return *d.fifo.at(0), true
	case len(d.heap) > 0:
		return d.heap[0], true
	}
	return deadline{}, false
}

// popEarliest removes the deadline earliest returned.
func (d *deadlines) popEarliest() {
	if d.fifo.len() > 0 && (len(d.heap) == 0 || !d.heap[0].at.Before(d.fifo.at(0).at)) {
		d.fifo.pop()
		return
	}
	d.heap.pop()
}

// deadlineHeap is a binary heap of deadlines, earliest on top.
type deadlineHeap []deadline

func (h *deadlineHeap) push(d deadline) {
	*h = append(*h, d)
	s := *h
	for i := len(s) - 1; i > 0; {
		p := (i - 1) / 2
		if !s[i].at.Before(s[p].at) {
			break
		}
		s[i], s[p] = s[p], s[i]
		i = p
	}
}

func (h *deadlineHeap) pop() {
	s := *h
	n := len(s) - 1
	s[0] = s[n]
	s = s[:n]
	for i := 0; ; {
		l, r, m := 2*i+1, 2*i+2, i
		if l < n && s[l].at.Before(s[m].at) {
			m = l
		}
		if r < n && s[r].at.Before(s[m].at) {
			m = r
		}
		if m == i {
			break
		}
		s[i], s[m] = s[m], s[i]
		i = m
	}
	*h = s
}

// sweep runs when the earliest deadline may have passed: it answers every
// expired command with ErrTimeout (their entries stay queued so that late
// replies are matched and dropped), and disconnects a backend whose oldest
// reply is DeadAfter late.
func (l *Link) sweep() {
	now := time.Now()
	var expired []entry
	var kill net.Conn
	l.mu.Lock()
	l.armedAt = time.Time{}
	var next time.Time
	for {
		top, ok := l.deadlines.earliest(l.popped)
		if !ok {
			break
		}
		if top.at.After(now) {
			next = top.at
			break
		}
		l.deadlines.popEarliest()
		if e := l.q.at(int(top.seq - l.popped)); !e.expired {
			e.expired = true
			expired = append(expired, *e)
		}
	}
	if l.q.len() > 0 {
		dead := l.q.at(0).deadline.Add(l.opt.DeadAfter)
		if !dead.After(now) && l.conn != nil {
			kill = l.conn
			l.health.LastError = fmt.Sprintf("stopped answering: no reply for %v past a command's timeout; disconnected", l.opt.DeadAfter)
		} else if next.IsZero() || dead.Before(next) {
			next = dead
		}
	}
	l.health.Timeouts += uint64(len(expired))
	if !next.IsZero() {
		l.armLocked(next)
	}
	l.mu.Unlock()
	for _, e := range expired {
		if l.opt.Events != nil {
			l.opt.Events.Timeout(l.opt.Index)
		}
		e.rcv.Receive(e.tag, Result{Err: l.errTimeout, Later: true})
	}
	if kill != nil {
		l.log.Warn("backend stopped answering; disconnecting", "late", l.opt.DeadAfter)
		kill.Close()
	}
}
