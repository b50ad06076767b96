package netio

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Options configure one backend link. Zero values mean the default written
// on the field.
type Options struct {
	Addr  string // host:port
	Index int    // the backend's position in the pool, passed back in errors

	Username string      // AUTH user for the backend (default: none)
	Password string      // AUTH password for the backend (default: none)
	TLS      *tls.Config // dial with TLS when set

	DialTimeout    time.Duration // default 1s; also bounds the INFO handshake
	Timeout        time.Duration // per-command timeout for the link's own commands (default 50ms)
	DeadAfter      time.Duration // disconnect when a reply is this late (default max(1s, 20*Timeout))
	HealthInterval time.Duration // PING period while idle or busy (default 1s)
	MaxPending     int           // commands waiting for replies before sends fail (default 1<<16)
	// BatchesInFlight is how many written batches may await their replies
	// before the writer holds new commands back: commands that arrive
	// meanwhile share the next write, so a loaded link makes few large
	// writes while an idle one writes at once (default 1; negative: no
	// limit, one write per wake-up).
	BatchesInFlight int

	Restart quorum.RestartRule // when a restarted backend's votes count again
	// InProcess marks a backend that lives in the proxy's own process (the
	// embedded demo): it cannot restart on its own, so its lack of a run_id
	// is not worth a warning.
	InProcess bool
	Logger    *slog.Logger // default slog.Default()
	Events    Events       // optional hooks for metrics
}

// Events receives what a link observes, for metrics. Methods are called from
// link goroutines and must not block. Nil means no hooks.
type Events interface {
	Reply(node int, latency time.Duration, isError bool)
	Timeout(node int)
	StateChange(node int, up bool)
	Restarted(node int, quarantinedUntil time.Time)
	Reconnect(node int)
}

func (o *Options) defaults() {
	if o.DialTimeout <= 0 {
		o.DialTimeout = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 50 * time.Millisecond
	}
	if o.DeadAfter <= 0 {
		o.DeadAfter = max(time.Second, 20*o.Timeout)
	}
	if o.HealthInterval <= 0 {
		o.HealthInterval = time.Second
	}
	if o.MaxPending <= 0 {
		o.MaxPending = 1 << 16
	}
	if o.BatchesInFlight == 0 {
		o.BatchesInFlight = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// Tags of the link's own commands (it is their Receiver).
const (
	tagAuth = iota
	tagInfo
	tagPing
	tagScriptLoad
)

// Link is one backend: a shared, pipelined connection that redials itself.
// Writes happen in the goroutine that queued the bytes, or in the reader
// when an answered batch releases what queued behind it: no goroutine
// hand-off per command.
type Link struct {
	opt Options
	log *slog.Logger

	errDown, errTimeout, errLost, errOverloaded, errClosed *BackendError

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	conn     net.Conn // nil while down
	writing  bool     // a goroutine is writing to the current connection
	spare    []byte   // the other write buffer
	wbuf     []byte
	q        ring[entry]
	loaded   map[string]bool // scripts loaded on the current connection
	timer    *time.Timer
	armedAt  time.Time // when timer fires; zero when not armed
	verified bool      // the current connection told the backend's identity
	watch    quorum.Watch
	health   Health

	// Write batching on the current connection: commands queued, replies
	// read, and the queued count at the end of each written batch whose
	// replies are not all in.
	queued    uint64
	replied   uint64
	batchEnds []batch
	sentMark  uint64 // queued count at the last write, for Health.Sent

	// Deadlines: every queued command has a sequence number (pushed counts
	// them, popped counts those answered or dropped); each deadline class
	// keeps its commands' numbers in sending order for the sweep.
	pushed, popped uint64
	byDeadline     [2]ring[uint64]
}

// batch is a write awaiting its replies: the queued count at its end, and
// when it was written (reply latency is measured from there).
type batch struct {
	end uint64
	at  time.Time
}

// Health is a snapshot of a backend's state.
type Health struct {
	Node             int
	Addr             string
	Up               bool          // connected and identity verified
	Latency          time.Duration // smoothed reply latency
	LastError        string
	RunID            string
	QuarantinedUntil time.Time // votes do not count before this instant
	Connects         uint64    // connections established
	Restarts         uint64    // restarts detected
	Timeouts         uint64    // commands that got no reply in time
	Errors           uint64    // error replies and failed sends
	Writes           uint64    // write calls to the backend
	Sent             uint64    // commands written (Sent/Writes is the mean batch)
	Since            time.Time // when Up last changed
}

// Counts reports whether the backend's votes count at now.
func (h Health) Counts(now time.Time) bool { return h.Up && !now.Before(h.QuarantinedUntil) }

// NewLink prepares a link; Start connects it.
func NewLink(opt Options) *Link {
	opt.defaults()
	l := &Link{opt: opt, log: opt.Logger.With("backend", opt.Index, "addr", opt.Addr)}
	mk := func(err error) *BackendError { return &BackendError{Node: opt.Index, Addr: opt.Addr, Err: err} }
	l.errDown, l.errTimeout, l.errLost, l.errOverloaded, l.errClosed =
		mk(ErrDown), mk(ErrTimeout), mk(ErrConnLost), mk(ErrOverloaded), mk(ErrClosed)
	l.watch.Rule = opt.Restart
	l.health = Health{Node: opt.Index, Addr: opt.Addr, Since: time.Now()}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.timer = time.AfterFunc(time.Hour, l.sweep)
	l.timer.Stop()
	return l
}

// Start launches the goroutines that connect, redial and health-check the
// backend. Close stops them.
func (l *Link) Start() {
	l.wg.Add(2)
	go l.run()
	go l.pinger()
}

// Addr is the backend's address.
func (l *Link) Addr() string { return l.opt.Addr }

// Health returns a snapshot of the backend's state.
func (l *Link) Health() Health {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.health
	h.Up = l.conn != nil && l.verified
	h.RunID = l.watch.RunID()
	h.QuarantinedUntil = l.watch.QuarantinedUntil()
	return h
}

// Send queues cmd (one or more encoded commands' worth of bytes forming
// exactly one command) for the backend. When script is set, cmd is an
// EVALSHA of it and the script is loaded first on a connection that has not
// seen it. rcv.Receive(tag, ...) is called exactly once: with the reply, or
// with an error at deadline, on connection loss, or at once when the
// backend is down.
func (l *Link) Send(cmd []byte, script *resp.Script, rcv resp.Receiver, tag int, deadline time.Time) {
	l.mu.Lock()
	if l.conn == nil {
		l.health.Errors++
		l.mu.Unlock()
		rcv.Receive(tag, resp.Result{Err: l.errDown})
		return
	}
	if l.q.len() >= l.opt.MaxPending {
		l.health.Errors++
		l.mu.Unlock()
		rcv.Receive(tag, resp.Result{Err: l.errOverloaded})
		return
	}
	if script != nil && !l.loaded[script.Sha] {
		l.loaded[script.Sha] = true
		l.wbuf = resp.AppendArrayHeader(l.wbuf, 3)
		l.wbuf = resp.AppendBulkString(l.wbuf, "SCRIPT")
		l.wbuf = resp.AppendBulkString(l.wbuf, "LOAD")
		l.wbuf = resp.AppendBulk(l.wbuf, script.Body)
		l.pushLocked(entry{rcv: l, tag: tagScriptLoad, deadline: deadline})
	}
	l.wbuf = append(l.wbuf, cmd...)
	l.pushLocked(entry{rcv: rcv, tag: tag, deadline: deadline, script: script})
	l.armLocked(deadline)
	c, buf := l.takeWriteLocked()
	l.mu.Unlock()
	l.write(c, buf)
}

// pushLocked queues e, whose bytes are already in wbuf.
func (l *Link) pushLocked(e entry) {
	l.q.push(e)
	class := 0
	if l.longDeadline(e.deadline) {
		class = 1
	}
	l.byDeadline[class].push(l.pushed)
	l.pushed++
	l.queued++
}

// longDeadline tells the undo and handshake deadlines (seconds) from the
// per-command ones (tens of milliseconds): each class's deadlines come in
// the order commands are queued.
func (l *Link) longDeadline(d time.Time) bool {
	return time.Until(d) > 4*l.opt.Timeout
}

// popLocked removes the oldest queued command.
func (l *Link) popLocked() entry {
	l.popped++
	return l.q.pop()
}

// takeWriteLocked hands the queued bytes to the caller to write, when no
// one else is writing and fewer than BatchesInFlight written batches await
// their replies; otherwise the bytes wait and join a later, larger write
// (made by whoever finishes the current write, or by the reader when a
// batch is answered). It returns a nil buffer when there is nothing to do.
func (l *Link) takeWriteLocked() (net.Conn, []byte) {
	if l.writing || l.conn == nil || len(l.wbuf) == 0 {
		return nil, nil
	}
	if k := l.opt.BatchesInFlight; k > 0 && len(l.batchEnds) >= k {
		return nil, nil
	}
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
func (l *Link) write(c net.Conn, buf []byte) {
	for buf != nil {
		c.SetWriteDeadline(time.Now().Add(l.opt.DeadAfter))
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
	for c := range l.byDeadline {
		dq := &l.byDeadline[c]
		for dq.len() > 0 {
			seq := *dq.at(0)
			if seq < l.popped { // answered already
				dq.pop()
				continue
			}
			e := l.q.at(int(seq - l.popped))
			if !e.expired && e.deadline.After(now) {
				if next.IsZero() || e.deadline.Before(next) {
					next = e.deadline
				}
				break
			}
			if !e.expired {
				e.expired = true
				expired = append(expired, *e)
			}
			dq.pop()
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
		e.rcv.Receive(e.tag, resp.Result{Err: l.errTimeout})
	}
	if kill != nil {
		l.log.Warn("backend stopped answering; disconnecting", "late", l.opt.DeadAfter)
		kill.Close()
	}
}

// run dials, serves and redials until Close. A connection that lived a
// while after its identity was verified is redialled at once; a failed dial,
// and a connection that failed its handshake or died young (something that
// accepts and closes, such as a load balancer in front of a dead Redis),
// waits a backoff that doubles up to a second.
func (l *Link) run() {
	defer l.wg.Done()
	const minBackoff, maxBackoff = 10 * time.Millisecond, time.Second
	backoff := minBackoff
	for l.ctx.Err() == nil {
		c, err := l.dial()
		if err == nil {
			start := time.Now()
			verified := l.serve(c)
			if verified && time.Since(start) > 5*time.Second {
				backoff = minBackoff
				continue
			}
		} else {
			l.noteDown(err)
		}
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

func (l *Link) dial() (net.Conn, error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.opt.DialTimeout)
	defer cancel()
	var c net.Conn
	var err error
	if l.opt.TLS != nil {
		d := tls.Dialer{Config: l.opt.TLS}
		c, err = d.DialContext(ctx, "tcp", l.opt.Addr)
	} else {
		var d net.Dialer
		c, err = d.DialContext(ctx, "tcp", l.opt.Addr)
	}
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w", l.opt.Addr, err)
	}
	return c, nil
}

func (l *Link) noteDown(err error) {
	l.mu.Lock()
	changed := l.health.LastError != err.Error()
	l.health.LastError = err.Error()
	l.mu.Unlock()
	if changed {
		l.log.Warn("backend unreachable", "err", err)
	}
}

// serve runs one connection until it fails or the link closes, and reports
// whether the connection's identity was verified.
func (l *Link) serve(c net.Conn) (verified bool) {
	now := time.Now()
	l.mu.Lock()
	if l.ctx.Err() != nil {
		l.mu.Unlock()
		c.Close()
		return false
	}
	l.conn, l.writing = c, false
	l.loaded = make(map[string]bool)
	l.verified = false
	l.wbuf = l.wbuf[:0]
	l.queued, l.replied, l.batchEnds, l.sentMark = 0, 0, l.batchEnds[:0], 0
	l.health.Connects++
	hs := now.Add(l.opt.DialTimeout)
	if l.opt.Password != "" {
		if l.opt.Username != "" {
			l.wbuf = resp.AppendCommand(l.wbuf, "AUTH", l.opt.Username, l.opt.Password)
		} else {
			l.wbuf = resp.AppendCommand(l.wbuf, "AUTH", l.opt.Password)
		}
		l.pushLocked(entry{rcv: l, tag: tagAuth, deadline: hs})
	}
	l.wbuf = resp.AppendCommand(l.wbuf, "INFO", "server")
	l.pushLocked(entry{rcv: l, tag: tagInfo, deadline: hs})
	l.armLocked(hs)
	wc, buf := l.takeWriteLocked()
	l.mu.Unlock()
	l.write(wc, buf)
	if l.opt.Events != nil {
		l.opt.Events.Reconnect(l.opt.Index)
	}

	err := l.readLoop(c)
	c.Close()

	l.mu.Lock()
	wasUp := l.verified
	l.conn, l.verified = nil, false
	l.wbuf = l.wbuf[:0]
	var lost []entry
	for l.q.len() > 0 {
		if e := l.popLocked(); !e.expired {
			lost = append(lost, e)
		}
	}
	l.health.LastError = err.Error() // readLoop only ends on an error
	l.health.Since = time.Now()
	l.mu.Unlock()
	for _, e := range lost {
		e.rcv.Receive(e.tag, resp.Result{Err: l.errLost})
	}
	if wasUp && l.ctx.Err() == nil {
		l.log.Warn("backend connection lost", "err", err)
		if l.opt.Events != nil {
			l.opt.Events.StateChange(l.opt.Index, false)
		}
	}
	return wasUp
}

// readLoop matches replies to queued commands, in order.
func (l *Link) readLoop(c net.Conn) error {
	rd := resp.NewReader(bufio.NewReaderSize(c, 64<<10), resp.ReaderLimits{})
	var now time.Time
	for {
		// One clock reading per read from the socket: replies that arrived
		// together share it.
		fresh := rd.Buffered() == 0
		v, err := rd.Read()
		if err != nil {
			return err
		}
		if fresh || now.IsZero() {
			now = time.Now()
		}
		l.mu.Lock()
		if l.q.len() == 0 {
			l.mu.Unlock()
			return errors.New("reply with no command waiting for it")
		}
		e := l.popLocked()
		l.replied++
		var lat time.Duration
		if len(l.batchEnds) > 0 {
			lat = now.Sub(l.batchEnds[0].at)
		}
		var wc net.Conn
		var wbuf []byte
		if len(l.batchEnds) > 0 && l.batchEnds[0].end <= l.replied {
			// A batch is answered: what queued meanwhile goes out now, from
			// this goroutine.
			n := copy(l.batchEnds, l.batchEnds[1:])
			l.batchEnds = l.batchEnds[:n]
			wc, wbuf = l.takeWriteLocked()
		}
		counts := l.verified && l.watch.Counts(now)
		isErr := v.Kind == resp.KindError
		if isErr {
			l.health.Errors++
			if e.script != nil && bytes.HasPrefix(v.Str, []byte("NOSCRIPT")) {
				delete(l.loaded, e.script.Sha) // flushed behind our back: load again next time
			}
		}
		if l.health.Latency == 0 {
			l.health.Latency = lat
		} else {
			l.health.Latency += (lat - l.health.Latency) / 8
		}
		l.mu.Unlock()
		l.write(wc, wbuf)
		if l.opt.Events != nil {
			l.opt.Events.Reply(l.opt.Index, lat, isErr)
		}
		if e.expired {
			continue
		}
		e.rcv.Receive(e.tag, resp.Result{V: v, Counts: counts})
	}
}

// Receive handles the replies to the link's own commands.
func (l *Link) Receive(tag int, r resp.Result) {
	switch tag {
	case tagAuth:
		if r.Err == nil && r.V.Kind == resp.KindError {
			l.log.Error("backend refused the proxy's credentials", "reply", string(r.V.Str))
			l.dropConn()
		}
	case tagInfo:
		l.identify(r)
	case tagScriptLoad, tagPing:
	}
}

// identify processes the INFO server reply that opens every connection.
func (l *Link) identify(r resp.Result) {
	if r.Err != nil {
		l.log.Warn("backend did not answer the identity check", "err", r.Err)
		l.dropConn()
		return
	}
	id := quorum.Identity{Uptime: -1}
	if r.V.Kind == resp.KindBulk {
		id = parseIdentity(r.V.Str)
	}
	now := time.Now()
	l.mu.Lock()
	restarted := l.watch.Observe(id, now)
	until := l.watch.QuarantinedUntil()
	l.verified = true
	l.health.LastError = ""
	l.health.Since = now
	if restarted {
		l.health.Restarts++
	}
	l.mu.Unlock()
	if id.RunID == "" && !l.opt.InProcess {
		l.log.Warn("backend does not report run_id; a restart cannot be told from a reconnect, so every reconnect quarantines it")
	}
	if restarted {
		l.log.Warn("backend restarted: its votes do not count until every lock it forgot has expired",
			"run_id", id.RunID, "quarantined_until", until.Format(time.RFC3339Nano))
		if l.opt.Events != nil {
			l.opt.Events.Restarted(l.opt.Index, until)
		}
	} else if now.Before(until) {
		l.log.Warn("backend quarantined (restart rule)", "run_id", id.RunID, "quarantined_until", until.Format(time.RFC3339Nano))
	}
	l.log.Info("backend up", "run_id", id.RunID)
	if l.opt.Events != nil {
		l.opt.Events.StateChange(l.opt.Index, true)
	}
}

func (l *Link) dropConn() {
	l.mu.Lock()
	c := l.conn
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// parseIdentity reads run_id and uptime_in_seconds from INFO server.
func parseIdentity(info []byte) quorum.Identity {
	id := quorum.Identity{Uptime: -1}
	for _, line := range bytes.Split(info, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if v, ok := bytes.CutPrefix(line, []byte("run_id:")); ok {
			id.RunID = string(v)
		} else if v, ok := bytes.CutPrefix(line, []byte("uptime_in_seconds:")); ok {
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n >= 0 {
				id.Uptime = time.Duration(n) * time.Second
			}
		}
	}
	return id
}

var pingCmd = resp.AppendCommand(nil, "PING")

// pinger keeps latency fresh and lets an idle link notice a hung backend.
func (l *Link) pinger() {
	defer l.wg.Done()
	t := time.NewTicker(l.opt.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
			l.mu.Lock()
			up := l.conn != nil
			l.mu.Unlock()
			if up {
				l.Send(pingCmd, nil, l, tagPing, time.Now().Add(l.opt.Timeout))
			}
		}
	}
}

// Pending is the number of commands waiting for a reply.
func (l *Link) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for i := 0; i < l.q.len(); i++ {
		if !l.q.at(i).expired {
			n++
		}
	}
	return n
}

// Close disconnects and stops every goroutine of the link. Commands still
// waiting get ErrConnLost.
func (l *Link) Close() error {
	l.cancel()
	l.dropConn()
	l.wg.Wait()
	l.timer.Stop()
	return nil
}
