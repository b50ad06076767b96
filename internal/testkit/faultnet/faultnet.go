// Package faultnet injects network faults between two TCP endpoints without
// root: a Relay listens on a free loopback port and forwards every
// connection it accepts to a target address, and a test can make that link
// misbehave while the programs at both ends keep running.
//
// It promises:
//   - bytes are forwarded in order, never dropped, duplicated or reordered
//     within a connection (a fault on a TCP link delays or ends a stream; it
//     does not corrupt it);
//   - BlackHole(true) stops forwarding in both directions on every current
//     and future connection while keeping them open, as a network partition
//     does: what is sent meanwhile is held (the relay's queue, then the
//     kernel's buffers, then the senders block) and flows again, in order,
//     after BlackHole(false), unless the connection is closed first;
//   - Delay(d) holds every chunk read from then on for d before writing it
//     on (latency, not a bandwidth limit: chunks in flight overlap);
//   - when either end closes its connection, the relay writes on what it
//     already read from it (after any delay or black hole) and then closes
//     the other end too;
//   - Cut closes every current connection at both ends (a reset link);
//   - Retarget(addr) sends every later connection to addr and closes the
//     current ones at both ends, as a virtual IP or a DNS name moved to
//     another server (a failover) does: nothing queued for the old target
//     reaches the new one;
//   - when the target refuses a connection (its process is down), the relay
//     refuses too: it stops listening until the target accepts again, then
//     listens on the same address, so a client sees "connection refused" as
//     it would without the relay, not an accepted connection closed at once;
//   - Close stops every goroutine the relay started and waits for them.
package faultnet

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
	"time"
)

// ErrClosed is returned by operations on a closed Relay.
var ErrClosed = errors.New("faultnet: relay closed")

// Relay forwards connections from Addr to a target, with faults on demand.
type Relay struct {
	addr   string // the listening address, fixed for the relay's life
	target string

	dialTimeout time.Duration
	probeEvery  time.Duration

	mu        sync.Mutex
	ln        net.Listener // nil while the target refuses
	closed    bool
	blackhole bool
	delay     time.Duration
	changed   chan struct{} // closed and replaced whenever blackhole or delay changes
	conns     map[*pipe]struct{}
	stats     Stats

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// Stats counts what a relay did.
type Stats struct {
	Accepted  uint64 // connections accepted and forwarded
	Refused   uint64 // connections closed because the target refused them
	Relistens uint64 // times the relay listened again after the target came back
	BytesUp   uint64 // bytes written to the target
	BytesDown uint64 // bytes written back to clients
	Open      int    // connections open now
	LastError string
}

// Listen starts a relay on a free loopback port that forwards to target.
func Listen(target string) (*Relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("faultnet: listen: %w", err)
	}
	r := &Relay{
		addr:        ln.Addr().String(),
		target:      target,
		dialTimeout: time.Second,
		probeEvery:  10 * time.Millisecond,
		ln:          ln,
		changed:     make(chan struct{}),
		conns:       make(map[*pipe]struct{}),
		done:        make(chan struct{}),
	}
	r.wg.Add(1)
	go r.serve(ln) // stopped by Close (closes the listener, signals done)
	return r, nil
}

// Addr is the address clients connect to.
func (r *Relay) Addr() string { return r.addr }

// Target is the address the relay forwards to.
func (r *Relay) Target() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.target
}

// Retarget forwards every connection accepted from now on to target, and
// closes every current connection at both ends (what was queued for the
// old target is dropped). A relay that stopped listening because the old
// target refused connections listens again once the new one accepts.
func (r *Relay) Retarget(target string) {
	r.mu.Lock()
	r.target = target
	r.mu.Unlock()
	r.Cut()
}

// BlackHole starts (on) or ends (off) holding every byte in both directions.
func (r *Relay) BlackHole(on bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.blackhole != on {
		r.blackhole = on
		r.notifyLocked()
	}
}

// Delay sets the latency added to each chunk read from now on (0: none).
func (r *Relay) Delay(d time.Duration) {
	if d < 0 {
		d = 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.delay != d {
		r.delay = d
		r.notifyLocked()
	}
}

func (r *Relay) notifyLocked() {
	close(r.changed)
	r.changed = make(chan struct{})
}

// Cut closes every current connection at both ends. New connections are
// accepted as usual.
func (r *Relay) Cut() {
	r.mu.Lock()
	ps := make([]*pipe, 0, len(r.conns))
	for p := range r.conns {
		ps = append(ps, p)
	}
	r.mu.Unlock()
	for _, p := range ps {
		p.close()
	}
}

// Stats returns a snapshot of the relay's counters.
func (r *Relay) Stats() Stats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := r.stats
	s.Open = len(r.conns)
	return s
}

// Close stops listening, closes every connection and waits for every
// goroutine the relay started. It is safe to call more than once.
func (r *Relay) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		r.wg.Wait()
		return nil
	}
	r.closed = true
	close(r.done)
	if r.ln != nil {
		r.ln.Close()
	}
	r.mu.Unlock()
	r.Cut()
	r.wg.Wait()
	return nil
}

func (r *Relay) isClosed() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func (r *Relay) noteError(err error) {
	r.mu.Lock()
	r.stats.LastError = err.Error()
	r.mu.Unlock()
}

// serve accepts connections until Close. While the target refuses
// connections it stops listening and probes the target instead.
func (r *Relay) serve(ln net.Listener) {
	defer r.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			if r.isClosed() {
				return
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			// The listener failed on its own: try to get it back.
			r.noteError(fmt.Errorf("faultnet: accept: %w", err))
			ln.Close()
			if ln = r.relisten(); ln == nil {
				return
			}
			continue
		}
		target := r.Target()
		up, err := net.DialTimeout("tcp", target, r.dialTimeout)
		if err != nil {
			c.Close()
			r.mu.Lock()
			r.stats.Refused++
			r.mu.Unlock()
			r.noteError(fmt.Errorf("faultnet: dial %s: %w", target, err))
			if !errors.Is(err, syscall.ECONNREFUSED) {
				continue // a slow target: keep listening, the client saw a closed connection
			}
			// Refuse like the target does: stop listening until it is back.
			r.mu.Lock()
			if r.ln == ln {
				r.ln = nil
			}
			r.mu.Unlock()
			ln.Close()
			if !r.waitTarget() {
				return
			}
			if ln = r.relisten(); ln == nil {
				return
			}
			continue
		}
		r.start(c, up, target)
	}
}

// waitTarget probes the target until it accepts a connection (true) or the
// relay is closed (false).
func (r *Relay) waitTarget() bool {
	t := time.NewTicker(r.probeEvery)
	defer t.Stop()
	for {
		select {
		case <-r.done:
			return false
		case <-t.C:
		}
		c, err := net.DialTimeout("tcp", r.Target(), r.dialTimeout)
		if err == nil {
			c.Close()
			return true
		}
	}
}

// relisten listens on the relay's address again, retrying while the port is
// briefly unavailable. It returns nil when the relay is closed or the port
// stays taken.
func (r *Relay) relisten() net.Listener {
	deadline := time.Now().Add(10 * time.Second)
	for {
		ln, err := net.Listen("tcp", r.addr)
		if err == nil {
			r.mu.Lock()
			if r.closed {
				r.mu.Unlock()
				ln.Close()
				return nil
			}
			r.ln = ln
			r.stats.Relistens++
			r.mu.Unlock()
			return ln
		}
		r.noteError(fmt.Errorf("faultnet: listen again on %s: %w", r.addr, err))
		if time.Now().After(deadline) {
			return nil
		}
		select {
		case <-r.done:
			return nil
		case <-time.After(r.probeEvery):
		}
	}
}

// pipe is one relayed connection: down is the client's side, up the target's.
type pipe struct {
	down, up net.Conn
	done     chan struct{}
	once     sync.Once
}

func (p *pipe) close() {
	p.once.Do(func() {
		close(p.done)
		p.down.Close()
		p.up.Close()
	})
}

// chunk is a piece of the stream with the instant it may be written on.
type chunk struct {
	b       []byte
	release time.Time
}

// queueLen bounds the chunks held per direction; beyond it the reader stops
// reading and the kernel's buffers, then the sender, take the back-pressure.
const queueLen = 16

func (r *Relay) start(down, up net.Conn, target string) {
	p := &pipe{down: down, up: up, done: make(chan struct{})}
	r.mu.Lock()
	if r.closed || r.target != target { // closed, or retargeted while dialling
		r.mu.Unlock()
		p.close()
		return
	}
	r.conns[p] = struct{}{}
	r.stats.Accepted++
	r.mu.Unlock()

	var dirs sync.WaitGroup
	for _, d := range []struct {
		src, dst net.Conn
		count    *uint64
	}{{down, up, &r.stats.BytesUp}, {up, down, &r.stats.BytesDown}} {
		q := make(chan chunk, queueLen)
		dirs.Add(2)
		r.wg.Add(2)
		go func() { // reader: ends at EOF, error or pipe close
			defer r.wg.Done()
			defer dirs.Done()
			r.read(p, d.src, q)
		}()
		go func() { // writer: ends when the queue is drained or the pipe closes
			defer r.wg.Done()
			defer dirs.Done()
			r.write(p, d.dst, q, d.count)
		}()
	}
	r.wg.Add(1)
	go func() { // unregisters the pipe once all four goroutines are done
		defer r.wg.Done()
		dirs.Wait()
		p.close()
		r.mu.Lock()
		delete(r.conns, p)
		r.mu.Unlock()
	}()
}

// read moves chunks from src to q, stamping each with its release time.
// At EOF or error it closes q, so the writer flushes what is held and then
// ends the connection.
func (r *Relay) read(p *pipe, src net.Conn, q chan<- chunk) {
	defer close(q)
	for {
		buf := make([]byte, 32<<10)
		n, err := src.Read(buf)
		if n > 0 {
			r.mu.Lock()
			rel := time.Now().Add(r.delay)
			r.mu.Unlock()
			select {
			case q <- chunk{b: buf[:n], release: rel}:
			case <-p.done:
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// write sends each chunk to dst once its release time has come and no black
// hole is on. When q is closed and drained it closes the whole pipe.
func (r *Relay) write(p *pipe, dst net.Conn, q <-chan chunk, count *uint64) {
	defer p.close()
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	for {
		var c chunk
		var ok bool
		select {
		case c, ok = <-q:
			if !ok {
				return
			}
		case <-p.done:
			return
		}
		for {
			r.mu.Lock()
			hole, changed := r.blackhole, r.changed
			r.mu.Unlock()
			wait := time.Until(c.release)
			if !hole && wait <= 0 {
				break
			}
			var tick <-chan time.Time
			if !hole {
				if timer == nil {
					timer = time.NewTimer(wait)
				} else {
					timer.Reset(wait)
				}
				tick = timer.C
			}
			select {
			case <-changed:
			case <-tick:
			case <-p.done:
				return
			}
		}
		if _, err := dst.Write(c.b); err != nil {
			return
		}
		r.mu.Lock()
		*count += uint64(len(c.b))
		r.mu.Unlock()
	}
}
