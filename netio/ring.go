package netio

import (
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// entry is one command waiting for its reply.
type entry struct {
	rcv      resp.Receiver
	tag      int
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

// seqRing is a FIFO of command sequence numbers: one per deadline class,
// so that the sweep finds expired commands from the front in amortized
// constant time (within a class, deadlines come in sending order).
type seqRing struct {
	buf  []uint64
	head int
	n    int
}

func (r *seqRing) len() int { return r.n }

func (r *seqRing) push(v uint64) {
	if r.n == len(r.buf) {
		nb := make([]uint64, max(16, 2*len(r.buf)))
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

func (r *seqRing) front() uint64 { return r.buf[r.head] }

func (r *seqRing) pop() {
	r.head = (r.head + 1) % len(r.buf)
	r.n--
}
