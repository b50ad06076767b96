package netio

import (
	"net"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// deadline is one queued command's deadline, by its sequence number.
type deadline struct {
	at  time.Time
	seq uint64
}

// deadlineHeap orders the deadlines of queued commands, earliest first,
// whatever order they were queued in: a 5 ms deadline queued behind a 1 s
// one fires at 5 ms. Entries of commands already answered stay until they
// reach the top, where the sweep drops them.
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

// armLocked makes sure the sweep timer fires no later than t.
func (l *Link) armLocked(t time.Time) {
	if l.armedAt.IsZero() || t.Before(l.armedAt) {
		l.armedAt = t
		l.timer.Reset(time.Until(t))
	}
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
	for len(l.deadlines) > 0 {
		top := l.deadlines[0]
		if top.seq < l.popped { // answered already
			l.deadlines.pop()
			continue
		}
		if top.at.After(now) {
			next = top.at
			break
		}
		l.deadlines.pop()
		if e := l.q.at(int(top.seq - l.popped)); !e.expired {
			e.expired = true
			expired = append(expired, *e)
		}
	}
	if l.q.len() > 0 {
		dead := l.q.at(0).deadline.Add(l.opt.DeadAfter)
		if !dead.After(now) && l.conn != nil {
			kill = l.conn
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
		e.rcv.Receive(e.tag, resp.Result{Err: l.errTimeout, Later: true})
	}
	if kill != nil {
		l.log.Warn("backend stopped answering; disconnecting", "late", l.opt.DeadAfter)
		kill.Close()
	}
}
