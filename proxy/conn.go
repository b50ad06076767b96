package proxy

import (
	"crypto/tls"
	"errors"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// maxBatch is how many pipelined commands of one client run concurrently
// before their replies are written.
const maxBatch = 64

// maxReads is how many reads (GET, PTTL, TTL) of one client run
// concurrently: a client that pipelines reads waits for its own replies
// rather than filling the shared backend links ahead of other clients'
// lock commands.
const maxReads = 8

// slot is one command's place in the reply order: an answer already
// encoded in scratch[a:b], or the results of ops still deciding.
type slot struct {
	op    *op      // the reply is op's result...
	ops   []*op    // ...or the sum of these ops' integer results (DEL of several keys)...
	fence *fenceOp // ...or a FENCE's number
	a, b  int
	resp3 bool
	wait  *signalWait // ...or a BLPOP's signal (signals.go)
	each  bool        // ops: their results as an array (a script's keys each on its own)
	// chain, with op: a FENCE that follows op before the reply leaves
	// (fenced.go); first is op's reply, key the lock a holder read is of.
	chain chainKind
	first resp.Value
	key   []byte
}

// client is one connection. Its goroutine reads a batch of pipelined
// commands, starts them all (lock commands run concurrently on the
// backends), then writes their replies in order.
//
// Its fields belong to that goroutine, except: resp3 (atomic: read by the
// pusher and by invalidations sent from other goroutines, its own or a
// client redirecting to it); the push queue's state (pmu) and the writes
// to nc (wmu), shared with the pusher; subs, which only its goroutine
// touches, but under the server's subscriptions.mu, which publishers hold
// while they walk the subscribers; and s, nc, id, set before the
// goroutine starts (Shutdown reads nc under Server.mu to wake or close
// it). The tracker reads none of the tracking settings (trk): it keeps its
// own copy, taken under its lock.
type client struct {
	s   *Server
	nc  net.Conn
	rd  *reader
	id  int64
	out []byte

	name          []byte
	libName       []byte
	libVer        []byte
	resp3         atomic.Bool // RESP3 (HELLO 3); see above for who reads it
	authed        bool
	user          string   // the user it authenticated as ("default" until AUTH)
	acl           *userACL // that user's rules (nil: everything allowed)
	closeAfter    bool
	subscriptions int // channels, patterns and shard channels subscribed to (subs)
	// pubsub is subscriptions > 0, for the pusher and the invalidations
	// sent from other goroutines (a RESP2 message is for subscribers only).
	pubsub atomic.Bool
	// subs are the client's subscriptions by kind (cmds_pubsub.go; the
	// server's subscriptions.mu protects them).
	subs [numSubKinds]map[string]bool

	// Client-side caching (tracking.go): the settings, whether the command
	// being run has its keys tracked, and the keys of that command when
	// some client tracks (for the invalidations of a write).
	trk       *trackOpts
	trackNext bool
	cmdKeys   [][]byte

	// Pushes (invalidations) written between replies by the pusher, which
	// wmu keeps from interleaving with the client goroutine's writes; pmu
	// protects the queue's state.
	wmu        sync.Mutex
	pmu        sync.Mutex
	pushq      chan pushMsg
	pushLost   bool
	pushClosed bool
	pushWG     sync.WaitGroup

	done     chan struct{} // one signal per decided op
	inflight int
	chains   int // slots with a chained FENCE to start (fenced.go)
	reads    int // reads among the ops in flight
	slots    []slot
	scratch  []byte
	cmd      []byte // encoding buffer for backend commands
	created  time.Time
	lastCmd  string

	rejected      int       // error replies given, to tell answered commands apart
	partialSince  time.Time // when the command being read started arriving
	deadline      time.Time // the read deadline in force
	writeDeadline time.Time // the write deadline in force
}

func newClient(s *Server, nc net.Conn) *client {
	c := &client{
		s: s, nc: nc, id: s.nextID.Add(1), done: make(chan struct{}, maxBatch+s.cfg.Limits.MaxArgs),
		authed: !s.passwordSet(), user: "default", created: time.Now(),
	}
	c.rd = newReader(nc, &s.cfg.Limits)
	c.rd.authed = c.authed
	return c
}

func (c *client) serve() {
	defer func() {
		if c.trk != nil {
			c.s.track.off(c)
			c.trk = nil
		}
		c.s.subs.drop(c)
		c.nc.Close()
		c.stopPushes()
	}()
	for {
		needMore := true
		for n := 0; n < maxBatch && !c.closeAfter; n++ {
			args, err := c.rd.next()
			if err != nil {
				c.flush()
				c.write(appendReply(nil, resp.ErrorValue(msgProtocol(err)), false))
				return
			}
			if args == nil {
				break
			}
			c.exec(args)
			if n == maxBatch-1 {
				needMore = false
			}
		}
		if err := c.flush(); err != nil || c.closeAfter {
			return
		}
		if !needMore {
			continue
		}
		c.setReadDeadline()
		// Checked after the deadline is set: a Shutdown that set its own
		// (wake-up) deadline before ours is seen here, one after it wakes
		// the read.
		select {
		case <-c.s.shutdown:
			return
		default:
		}
		if err := c.rd.fill(); err != nil {
			if ne, ok := err.(net.Error); ok && ne.Timeout() && !c.partialSince.IsZero() {
				msg := msgCommandTimeout(c.s.cfg.CommandTimeout)
				select {
				case <-c.s.shutdown: // Shutdown's wake-up deadline, not command_timeout
					msg = msgShutdownPartial
				default:
				}
				c.write(appendReply(nil, resp.ErrorValue(msg), false))
			}
			c.s.notePlainText(c, err)
			return
		}
	}
}

// notePlainText logs, once per process, a client that spoke plain text to
// the TLS listener: its connection fails the handshake and closes, and
// without the log nothing would say why.
func (s *Server) notePlainText(c *client, err error) {
	var rec tls.RecordHeaderError
	if !errors.As(err, &rec) || !s.plainTextSeen.CompareAndSwap(false, true) {
		return
	}
	s.cfg.Logger.Warn("a client spoke plain text to the TLS listener; its connection is closed (clients must use TLS, as redis-cli --tls does; logged once)",
		"client", c.nc.RemoteAddr().String())
}

// setReadDeadline bounds the next read: a command already started must be
// complete within CommandTimeout (a client cannot hold a connection and its
// buffer by dripping a command in), an idle connection is closed after
// IdleTimeout. Deadlines are only touched when they change.
func (c *client) setReadDeadline() {
	var d time.Time
	if c.rd.buffered() {
		if c.partialSince.IsZero() {
			c.partialSince = time.Now()
		}
		d = c.partialSince.Add(c.s.cfg.CommandTimeout)
	} else {
		c.partialSince = time.Time{}
		if t := c.s.cfg.IdleTimeout; t > 0 {
			d = time.Now().Add(t)
		}
	}
	if !d.Equal(c.deadline) {
		c.nc.SetReadDeadline(d)
		c.deadline = d
	}
}

// flush waits for the batch's ops, then writes every reply in order.
func (c *client) flush() error {
	for ; c.inflight > 0; c.inflight-- {
		<-c.done
	}
	if c.chains > 0 {
		c.startChains()
		for ; c.inflight > 0; c.inflight-- {
			<-c.done
		}
	}
	c.reads = 0
	now := time.Now() // the replies leave now: grants and TTLs are judged at this instant
	for _, sl := range c.slots {
		switch {
		case sl.chain != chainNone:
			c.out = appendReply(c.out, sl.chained(now), sl.resp3)
		case sl.op != nil:
			c.out = appendReply(c.out, sl.op.final(now), sl.resp3)
		case sl.fence != nil:
			c.out = appendReply(c.out, sl.fence.final(now), sl.resp3)
		case sl.wait != nil:
			c.out = appendWaitReply(c.out, sl.wait, sl.resp3)
		case sl.each:
			v := resp.Value{Kind: resp.KindArray, Elems: make([]resp.Value, len(sl.ops))}
			for i, o := range sl.ops {
				v.Elems[i] = o.final(now)
			}
			c.out = appendReply(c.out, v, sl.resp3)
		case len(sl.ops) > 0:
			var sum int64
			for _, o := range sl.ops {
				sum += o.final(now).Int
			}
			c.out = appendReply(c.out, resp.IntValue(sum), sl.resp3)
		default:
			c.out = append(c.out, c.scratch[sl.a:sl.b]...)
		}
	}
	c.slots = c.slots[:0]
	c.scratch = c.scratch[:0]
	if len(c.out) == 0 {
		return nil
	}
	err := c.write(c.out)
	if cap(c.out) > 1<<20 {
		c.out = nil
	} else {
		c.out = c.out[:0]
	}
	return err
}

// write writes b with the connection to itself (see wmu).
func (c *client) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.writeRaw(b)
}

// writeRaw writes b within WriteTimeout. The deadline is moved forward
// only when less than half of it is left, not on every write: a client
// that stops reading is still dropped within WriteTimeout, and the common
// case does not pay for a timer update per reply.
func (c *client) writeRaw(b []byte) error {
	now := time.Now()
	if t := c.s.cfg.WriteTimeout; c.writeDeadline.Sub(now) < t/2 {
		c.writeDeadline = now.Add(t)
		c.nc.SetWriteDeadline(c.writeDeadline)
	}
	_, err := c.nc.Write(b)
	return err
}

// reply queues an immediate answer, after any earlier command still deciding.
func (c *client) reply(v resp.Value) {
	if len(c.slots) == 0 {
		c.out = appendReply(c.out, v, c.resp3.Load())
		return
	}
	a := len(c.scratch)
	c.scratch = appendReply(c.scratch, v, c.resp3.Load())
	c.slots = append(c.slots, slot{a: a, b: len(c.scratch)})
}

// replyRaw queues an answer already encoded.
func (c *client) replyRaw(b []byte) {
	if len(c.slots) == 0 {
		c.out = append(c.out, b...)
		return
	}
	a := len(c.scratch)
	c.scratch = append(c.scratch, b...)
	c.slots = append(c.slots, slot{a: a, b: len(c.scratch)})
}

func (c *client) replyErr(msg string) {
	c.rejected++
	c.s.stats.rejected.Add(1)
	if c.s.cfg.Observer != nil {
		c.s.cfg.Observer.Command(c.lastCmd, ResultError, 0)
	}
	c.reply(resp.ErrorValue(msg))
}

// reserve makes room for k more ops in flight: done must never be full,
// or a backend goroutine signalling it would block.
func (c *client) reserve(k int) {
	if c.inflight+k > cap(c.done) {
		c.flush()
	}
}

// reserveRead makes room for one more read in flight (see maxReads).
func (c *client) reserveRead() {
	if c.reads >= maxReads {
		c.flush()
	}
	c.reserve(1)
	c.reads++
}

// await queues the reply of ops already started.
func (c *client) await(ops ...*op) {
	c.slots = append(c.slots, slot{ops: ops, resp3: c.resp3.Load()})
	c.inflight += len(ops)
}
