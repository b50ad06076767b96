package netio

import (
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// entry is one command waiting for its reply.
type entry struct {
	rcv      Receiver
	tag      int
	deadline time.Time
	script   *resp.Script // set for EVALSHA, so a NOSCRIPT reply unloads it
	expired  bool         // the receiver already got ErrTimeout
	// hold marks a grant: its reply waits for the continuity check queued
	// after it, and counts only if that check passes. cont marks the check.
	hold, cont bool
	// durable marks an undo: it has no deadline of its own and is sent
	// again on the next connection when this one is lost before its reply.
	durable bool
	// later is what a durable command becomes when it must wait for a later
	// connection (see UndoCmd).
	later       func(offset time.Duration, known bool) []byte
	laterScript *resp.Script
	undo        *undoMeta // a durable entry's keys, expiry and retries (undo.go)
	asking      bool      // sent right after ASKING (a Redis Cluster's importing node)
	track       bool      // sent right after CLIENT CACHING YES (tracking.go)
}

// ring is a FIFO that grows as needed: the queue of commands awaiting
// replies.
type ring[T any] struct {
	buf  []T
	head int
	n    int
}

func (r *ring[T]) len() int { return r.n }

func (r *ring[T]) push(v T) {
	if r.n == len(r.buf) {
		nb := make([]T, max(16, 2*len(r.buf)))
		for i := 0; i < r.n; i++ {
			nb[i] = r.buf[(r.head+i)%len(r.buf)]
		}
		r.buf, r.head = nb, 0
	}
	r.buf[(r.head+r.n)%len(r.buf)] = v
	r.n++
}

func (r *ring[T]) at(i int) *T { return &r.buf[(r.head+i)%len(r.buf)] }

func (r *ring[T]) pop() T {
	var zero T
	v := r.buf[r.head]
	r.buf[r.head] = zero // drop references held by the slot
	r.head = (r.head + 1) % len(r.buf)
	r.n--
	return v
}
