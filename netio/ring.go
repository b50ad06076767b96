package netio

import (
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// entry is one command waiting for its reply.
type entry struct {
	rcv      resp.Receiver
	tag      int
	sent     time.Time
	deadline time.Time
	script   *resp.Script // set for EVALSHA, so a NOSCRIPT reply unloads it
	expired  bool         // the receiver already got ErrTimeout
}

// ring is a FIFO of entries that grows as needed.
type ring struct {
	buf  []entry
	head int
	n    int
}

func (r *ring) len() int { return r.n }

func (r *ring) push(e entry) {
	if r.n == len(r.buf) {
		nb := make([]entry, max(16, 2*len(r.buf)))
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = e
	r.n++
}

func (r *ring) at(i int) *entry { return &r.buf[(r.head+i)%len(r.buf)] }

func (r *ring) pop() entry {
	e := r.buf[r.head]
	r.buf[r.head] = entry{}
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return e
}
