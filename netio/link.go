package netio

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Options configure one backend link. Zero values mean the default written
// on the field.
type Options struct {
	Addr  string // host:port
	Index int    // the backend's position in the pool, passed back in errors

	Username string      // AUTH user for the backend (default: none)
	Password string      // AUTH password for the backend (default: none)
	DB       int         // the database every connection SELECTs (default 0: the upgrade's old Redis may name another)
	TLS      *tls.Config // dial with TLS when set

	DialTimeout    time.Duration // default 1s; also bounds the identity check
	Timeout        time.Duration // per-command timeout for the link's own commands (default 50ms)
	DeadAfter      time.Duration // disconnect when a reply is this late (default max(1s, 20*Timeout))
	HealthInterval time.Duration // period of the health check: PING, or the marker check under the strict rule (default 1s)
	MaxPending     int           // commands waiting for replies before sends fail (default 1<<16)
	MaxRetained    int           // undos kept for the next connection while the backend is unreachable (default 1<<14)
	MaxReply       int           // largest reply accepted from the backend, in bytes (default 4 MiB)
	// BatchesInFlight is how many written batches may await their replies
	// before the writer holds new commands back: commands that arrive
	// meanwhile share the next write, so a loaded link makes few large
	// writes while an idle one writes at once (default 1; negative: no
	// limit, one write per wake-up).
	BatchesInFlight int

	Restart quorum.RestartRule // when a backend that may have lost writes counts again
	// InProcess marks a backend that lives in the proxy's own process (the
	// embedded demo): it cannot restart on its own, so it is never
	// quarantined and needs no marker.
	InProcess bool
	Logger    *slog.Logger // default slog.Default()
	Events    Events       // optional hooks for metrics
	// Claim, when set, is asked before a connection's votes may count, with
	// the server's run_id: it refuses (naming the other backend) a server
	// another backend of the pool already reaches; an empty run_id gives
	// the claim up when the connection is lost. The pool sets it.
	Claim func(node int, runID string) (other int, ok bool)
	// Veto marks the upgrade's old Redis (see quorum.WithVeto): a master, but
	// not a vote, so a memory policy that may evict keys does not keep it
	// out (its clients had that risk before the proxy).
	Veto bool
	// WatchClients looks at the backend's clients every HealthInterval:
	// Health reports how many are not the proxies' and since when there has
	// been none (the veto of an upgrade, see direct.go).
	WatchClients bool
	// Sentinel names a master that a group of Sentinels manages (see
	// sentinel.go): the link dials the master a majority of them names, and
	// Addr is only the backend's name in errors and logs (the configured
	// entry). Nil: Addr is the master.
	Sentinel *SentinelOptions
	// Invalidated receives the keys that changed on the backend after a
	// Tracked command read them (nil: any key may have). Called from link
	// goroutines; it must not block. Nil: no tracking.
	Invalidated func(node int, key []byte)
	// Released receives the messages the backend delivers on
	// ReleaseChannel (a lock's release notice, published by a proxy once a
	// majority decided it), on the invalidation connection. Called from a
	// link goroutine; it must not block. Nil: not subscribed.
	Released func(node int, payload []byte)

	// MarkerKey is where the replication marker is kept (default
	// MarkerKey). A shard of a Redis Cluster keeps it in a slot it owns
	// (see cluster.go), and ClusterNode makes the marker record the node's
	// cluster id: a record another node wrote (its slot moved here, or a
	// replica took over) is a loss.
	MarkerKey   string
	ClusterNode bool
	// MarkerMoved is told, when the marker's key is answered MOVED or ASK
	// (its slot left this server), that key. It must not block.
	MarkerMoved func(key string)
	// book is what the pool's links learn from each other's masters
	// (book.go); the pool sets it. Nil: a link alone (tests).
	book *book
	// Cluster makes the backend a Redis Cluster (see cluster.go): Addr is
	// then its name in logs and errors, and the other options are each
	// shard link's.
	Cluster *ClusterOptions
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
		o.Timeout = quorum.DefaultNodeTimeout
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
	if o.MaxRetained <= 0 {
		o.MaxRetained = 1 << 14
	}
	if o.MaxReply <= 0 {
		o.MaxReply = 4 << 20
	}
	if o.BatchesInFlight == 0 {
		o.BatchesInFlight = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MarkerKey == "" {
		o.MarkerKey = MarkerKey
	}
	if o.InProcess {
		o.Restart = quorum.RestartRule{}
	}
}

// Link is one backend: a shared, pipelined connection that redials itself.
// Writes happen in the goroutine that queued the bytes, or in the reader
// when an answered batch releases what queued behind it: no goroutine
// hand-off per command.
type Link struct {
	opt Options
	log *slog.Logger

	errDown, errTimeout, errLost, errOverloaded, errClosed, errAbandoned, errExpired *BackendError

	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	follower *follower     // the Sentinels of a Sentinel-managed backend; nil for a plain one
	redial   chan struct{} // cuts the redial backoff short (a new master to dial)

	// mu protects every field below, and the parts' (pipeline, verifier,
	// undoKeeper): the connection and its write buffers, the queue of
	// commands awaiting replies (in the order they were written: the
	// reader pops the oldest for each reply), the deadlines, the
	// quarantine (watch) and the continuity, tracking and undo state. It
	// is never held while writing to the socket or calling a receiver.
	mu     sync.Mutex
	track  trackState  // client-side caching at the backend (tracking.go)
	direct directState // the backend's direct clients, under WatchClients (direct.go)
	health Health

	// Why the backend is unusable, as last logged, and how often it was
	// seen since: a reason that keeps coming back is summarised.
	lastLogged   string
	lastLoggedAt time.Time
	repeats      int

	pipeline   // the connection, its queue, buffers, batches and deadlines (pipeline.go)
	verifier   // what the master is and whether its votes count (verifier.go)
	undoKeeper // undos kept across connections and retries (undokeeper.go)
}

// Health is a snapshot of a backend's state; State says whether its votes
// count at an instant, and if not, why.
type Health struct {
	Node             int
	Addr             string
	Up               bool          // connected and identity verified
	Latency          time.Duration // smoothed reply latency
	LastError        string        // why it is down or not verified, in the backend's own words where it gave any
	RunID            string
	QuarantinedUntil time.Time     // votes do not count before this instant
	QuarantineReason string        // what the quarantine is for, for an operator (QuarantineCause explained)
	QuarantineCause  quorum.Reason // what the quarantine is for (ReasonNone when there is none)
	LostAt           time.Time     // the loss the quarantine counts from (see quorum.Watch.LostAt)
	Connects         uint64        // connections established
	Restarts         uint64        // restarts (or other losses of writes) detected
	Breaks           uint64        // continuity checks that failed: grants before them did not count
	ClockJumps       uint64        // readings of the master's clock that showed it jumped ahead (clock.go)
	Unsure           bool          // a continuity check failed (or the tables are not checked yet) and the marker check that follows has not answered yet
	Invalidations    bool          // the connection that receives the backend's invalidations (client-side caching) is up
	// Shards is set for a Redis Cluster backend: each shard's state, by
	// its first slot (see Cluster.Health).
	Shards []ShardHealth
	// Under WatchClients: the clients at the last look that are not the
	// proxies', since when there has been none (zero while some are seen,
	// or before the first look), and when one was last seen (zero: not
	// since the proxy started).
	DirectClients      int
	NoDirectSince      time.Time
	DirectLastSeen     time.Time
	DirectClientsKnown bool
	Timeouts           uint64    // commands that got no reply in time
	Errors             uint64    // error replies and failed sends
	Writes             uint64    // write calls to the backend
	Sent               uint64    // commands written (Sent/Writes is the mean batch)
	UndoRetained       int       // undos waiting for the next connection
	UndoAbandoned      uint64    // undos given up (too many waiting, or the link closed)
	UndoExpired        uint64    // undos dropped because their lock expired before they could run
	Since              time.Time // when Up last changed
	// Sentinel is set for a Sentinel-managed backend: its Sentinels' view,
	// and until when their answer lets the master count. Addr is then the
	// master connected to (or last named).
	Sentinel *SentinelHealth
}

// NewLink prepares a link; Start connects it.
func NewLink(opt Options) *Link {
	opt.defaults()
	l := &Link{opt: opt, log: opt.Logger.With("backend", opt.Index, "addr", opt.Addr)}
	mk := func(err error) *BackendError { return &BackendError{Node: opt.Index, Addr: opt.Addr, Err: err} }
	l.errDown, l.errTimeout, l.errLost, l.errOverloaded, l.errClosed, l.errAbandoned, l.errExpired =
		mk(ErrDown), mk(ErrTimeout), mk(ErrConnLost), mk(ErrOverloaded), mk(ErrClosed), mk(ErrAbandoned), mk(ErrExpired)
	l.watch.Rule = opt.Restart
	l.clock.recent = opt.Restart.Hold
	l.redial = make(chan struct{}, 1)
	if opt.Sentinel != nil {
		l.follower = newFollower(*opt.Sentinel)
	}
	l.mkey = opt.MarkerKey
	l.vetted = l.tablesNeeded() == 0
	l.proxyID = newProxyID()
	if opt.book != nil {
		l.proxyID = opt.book.id
	}
	l.health = Health{Node: opt.Index, Addr: opt.Addr, Since: time.Now()}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	l.timer = time.AfterFunc(time.Hour, l.sweep)
	l.timer.Stop()
	l.undoKeeper.max = opt.MaxRetained
	l.retryTimer = time.AfterFunc(time.Hour, l.retryDue)
	l.retryTimer.Stop()
	l.vetTimer = time.AfterFunc(time.Hour, l.check)
	l.vetTimer.Stop()
	return l
}

// Start launches the goroutines that connect, redial and health-check the
// backend. Close stops them.
func (l *Link) Start() {
	l.wg.Add(2)
	go l.run()
	go l.pinger()
	if l.opt.Invalidated != nil && !l.opt.InProcess {
		l.wg.Add(1)
		go l.invalidations()
	}
	if l.follower != nil {
		l.wg.Add(1 + len(l.follower.opt.Addrs))
		go l.follow()
		for i := range l.follower.opt.Addrs {
			go l.subscribe(i)
		}
	}
}

// Addr is the backend's address.
func (l *Link) Addr() string { return l.opt.Addr }

// Health returns a snapshot of the backend's state.
func (l *Link) Health() Health {
	l.mu.Lock()
	defer l.mu.Unlock()
	h := l.health
	h.Up = l.conn != nil && l.ready
	h.RunID = l.watch.RunID()
	h.QuarantinedUntil = l.watch.QuarantinedUntil()
	h.QuarantineReason = l.watch.Reason().Explain()
	if now := time.Now(); now.Before(h.QuarantinedUntil) {
		h.QuarantineReason += holdBound(l.watch.Early(), l.watch.Ceiling().Sub(now))
	}
	h.QuarantineCause = l.watch.Reason()
	h.LostAt = l.watch.LostAt()
	h.Breaks, h.Unsure = l.cont.breaks, l.cont.broken || !l.vetted
	h.Invalidations = l.track.redir != 0
	h.DirectClients, h.NoDirectSince, h.DirectLastSeen, h.DirectClientsKnown = l.direct.clients, l.direct.since, l.direct.last, l.direct.looked
	if l.follower != nil {
		h.Sentinel = l.sentinelHealthLocked(time.Now())
		if h.Addr = l.follower.connAddr; h.Addr == "" || (l.conn == nil && l.follower.master != "") {
			h.Addr = l.follower.master
		}
	}
	h.UndoRetained = l.waiting()
	for i := 0; i < l.q.len(); i++ {
		if l.q.at(i).durable {
			h.UndoRetained++
		}
	}
	return h
}

// Send queues cmd (the bytes of exactly one command) for the backend. When
// script is set, cmd is an EVALSHA of it and the script is loaded first on
// a connection that has not seen it. rcv.Receive(tag, ...) is called
// exactly once: with the reply, or with an error at deadline, on
// connection loss, or at once when the backend is down or not yet verified.
func (l *Link) Send(cmd []byte, script *resp.Script, rcv Receiver, tag int, deadline time.Time) {
	l.send(cmd, script, rcv, tag, deadline, 0)
}

// SendFlags ask more of a command than its reply. Besides the flags below
// they may carry the TTL a grant sets (Records), whose deadline the
// continuity check after it records on the master.
type SendFlags uint64

const (
	// Checked marks a grant: under a restart rule its reply counts only if
	// the continuity check that follows it on the connection shows that the
	// master's data went on unbroken since the check before it (see
	// continuity.go). Its reply comes with that check's.
	Checked SendFlags = 1 << iota
	// Tracked asks the backend to track the keys the command reads, for
	// clients' caches: their later changes reach Options.Invalidated (see
	// tracking.go).
	Tracked
	// Asking sends ASKING right before the command: a Redis Cluster node
	// importing the command's slot serves it (the ASK redirection).
	Asking
)

// recordsShift is where a Checked command's TTL sits in its flags.
const recordsShift = 8

// Records is the flag that carries the TTL (ms) a Checked command sets on
// its keys: the continuity check after it records its deadline on the
// master, so that a loss of another master can be bounded by it (see
// book.go).
func Records(ttl time.Duration) SendFlags {
	if ttl <= 0 {
		return 0
	}
	return SendFlags(ttl.Milliseconds()) << recordsShift
}

// records is the TTL the flags carry.
func (f SendFlags) records() time.Duration {
	return time.Duration(f>>recordsShift) * time.Millisecond
}

// SendWith is Send with flags.
func (l *Link) SendWith(cmd []byte, script *resp.Script, rcv Receiver, tag int, deadline time.Time, flags SendFlags) {
	l.send(cmd, script, rcv, tag, deadline, flags)
}

func (l *Link) send(cmd []byte, script *resp.Script, rcv Receiver, tag int, deadline time.Time, flags SendFlags) {
	l.mu.Lock()
	if l.conn == nil || !l.ready {
		l.health.Errors++
		l.mu.Unlock()
		rcv.Receive(tag, Result{Err: l.errDown, Unsent: true})
		return
	}
	if l.q.len() >= l.opt.MaxPending {
		l.health.Errors++
		l.mu.Unlock()
		rcv.Receive(tag, Result{Err: l.errOverloaded, Unsent: true})
		return
	}
	e := entry{rcv: rcv, tag: tag, deadline: deadline, script: script, asking: flags&Asking != 0}
	// CLIENT CACHING YES applies to the command right after it, and ASKING
	// too: Redis clears each flag when another command runs between, so a
	// command sent under ASK is not tracked (a limit named in tracking.go).
	e.track = flags&Tracked != 0 && !e.asking && l.opt.Invalidated != nil && !l.opt.InProcess
	if flags&Checked != 0 && l.markerRule() && l.cont.armed {
		e.hold = true
		l.cont.pending++
		if deadline.After(l.cont.until) {
			l.cont.until = deadline
		}
		l.cont.ttl = max(l.cont.ttl, flags.records())
	}
	l.queueLocked(e, cmd)
	l.armLocked(deadline)
	c, buf := l.takeWriteLocked()
	l.mu.Unlock()
	l.write(c, buf)
}

// readLoop matches replies to queued commands, in order. Each reply takes
// four steps, the first three under the lock: pop (the pipeline matches it
// to its command and releases what its batch held back), verify (the
// verifier says whether it counts, and a continuity check's reply releases
// or fails the replies it held), undo (the undo keeper keeps an undo's
// curable error for a retry), then deliver: in order behind any held
// reply (orderReplyLocked, still under the lock), then to the receivers,
// outside it.
func (l *Link) readLoop(c net.Conn, rd *resp.Reader) error {
	var now time.Time
	// spare is the buffer of the held replies last delivered, emptied:
	// the next ones are held in it, not in a newly grown one per check.
	var spare []held
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
		r := reply{v: v}
		l.popReplyLocked(&r, now)
		l.verifyReplyLocked(&r, now, &spare)
		l.undoReplyLocked(&r, now)
		l.orderReplyLocked(&r)
		l.mu.Unlock()
		spare = l.deliverReply(c, &r, spare)
	}
}

// reply is one reply on its way through the reader's steps, with what
// each step made of it. It lives on the reader's stack.
type reply struct {
	e     entry
	v     resp.Value
	isErr bool
	lat   time.Duration // since its batch was written
	// A write the reply released (its batch answered, or a continuity
	// check sent again), made before it is delivered.
	wc   *linkConn
	wbuf []byte

	counts  bool          // it counts toward a quorum (verifier)
	demoted bool          // it said READONLY: the connection is closed
	hold    bool          // a grant's: it waits for the continuity check after it
	release []held        // a continuity check's: the replies it held, now out
	recheck bool          // that check failed: a marker check runs at once
	ahead   time.Duration // that check saw the master's clock jump ahead
	retried bool          // an undo's curable error: sent again, not delivered (undo keeper)
	queued  bool          // behind a held reply: delivered with it, in order
}

// deliverReply ends a reply's way, outside the lock: the write it
// released, the metrics, then its receiver (or, for a continuity check's,
// the receivers of the replies it held). It returns the spare buffer for
// the next held replies.
func (l *Link) deliverReply(c net.Conn, r *reply, spare []held) []held {
	l.write(r.wc, r.wbuf)
	if l.opt.Events != nil {
		l.opt.Events.Reply(l.opt.Index, r.lat, r.isErr)
	}
	if r.demoted {
		l.log.Warn("backend answered READONLY: it is a replica now; its votes stop counting until it is a master again", "reply", string(r.v.Str))
		c.Close()
	}
	e := r.e
	if e.cont {
		l.deliverHeld(r.release, r.counts)
		if cap(r.release) <= 1024 { // keep no burst-sized buffer
			clear(r.release)
			spare = r.release[:0]
		}
		switch {
		case r.ahead > 0:
			l.clockJumped(r.ahead)
		case r.recheck && r.isErr && writeRefusal(scriptReply(string(r.v.Str))) != "":
			// Refused, not failed: a master that refuses writes (out of
			// memory, say) refuses every check until it accepts them, and
			// is logged as unusable, once a minute while it stays so.
			l.noteFailure(writeRefusal(scriptReply(string(r.v.Str))))
			l.check()
		case r.recheck:
			l.log.Warn("backend's continuity check failed: its data may have gone back since the last check (a flush, a failover, an eviction); the grants before it do not count, and it is checked again now")
			l.check()
		}
		return spare
	}
	if r.hold || r.retried {
		return spare // its reply goes out with the continuity check's, or it is sent again
	}
	if e.durable && r.isErr && !e.expired && !Redirect(r.v.Str) {
		l.log.Warn("undo failed: the partial acquisition stays on this backend until its TTL", "keys", e.undo.keys, "reply", string(r.v.Str))
	}
	if !r.queued {
		deliver(e, r.v, r.counts)
	}
	return spare
}

// linkOwn reports whether rcv is one of the link's own: an identity or
// marker check, a script load, a tracking set-up.
func linkOwn(rcv Receiver) bool {
	switch rcv.(type) {
	case *handshake, contReceiver, discard, trackReceiver:
		return true
	}
	return false
}

// deliver hands a reply to its receiver: Late when its command timed out.
func deliver(e entry, v resp.Value, counts bool) {
	if e.expired {
		if lr, ok := e.rcv.(LateReceiver); ok {
			lr.Late(e.tag, Result{V: v, Counts: counts})
		}
		return
	}
	e.rcv.Receive(e.tag, Result{V: v, Counts: counts})
}

// dropConn closes the connection in use, if any: its reader sees the loss
// and the link redials (or ends, once closed).
func (l *Link) dropConn() {
	l.mu.Lock()
	c := l.conn
	l.mu.Unlock()
	if c != nil {
		c.Close()
	}
}

// Pending is the number of commands waiting for a reply, undos included
// (those waiting for a connection or a retry too).
func (l *Link) Pending() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	// Every queued command counts, timed out or not: the fate of a timed-out
	// grant (a late reply, or the loss of the connection) decides an undo.
	return l.waiting() + l.q.len()
}

// Close disconnects and stops every goroutine of the link. Commands still
// waiting get ErrConnLost; undos still waiting get ErrClosed, and LeftUndos
// names them.
func (l *Link) Close() error {
	l.cancel()
	l.dropConn()
	l.mu.Lock()
	if l.track.conn != nil {
		l.track.conn.Close()
	}
	l.mu.Unlock()
	if l.follower != nil {
		l.closeSubscriptions()
	}
	l.wg.Wait()
	if l.follower != nil {
		l.closeQueries()
	}
	l.timer.Stop()
	l.retryTimer.Stop()
	l.vetTimer.Stop()
	l.mu.Lock()
	retained := l.undoKeeper.closeLocked()
	l.health.UndoAbandoned += uint64(len(retained))
	l.mu.Unlock()
	for _, e := range retained {
		e.rcv.Receive(e.tag, Result{Err: l.errClosed})
	}
	return nil
}

// Closed reports whether Close has run.
func (l *Link) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// LeftUndos names the keys of the undos that had not run when the link
// closed.
func (l *Link) LeftUndos() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.leftUndos...)
}
