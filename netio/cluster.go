package netio

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
)

// A Redis Cluster as one backend: one vote, whose every key is answered by
// the master that owns the key's slot. Each shard's master has a Link of
// its own, with everything a Link does for one master: the identity check
// on every connection, the replication marker and its quarantine, the
// continuity check after grants, undos kept across lost connections. So a
// shard whose master restarted or whose replica was promoted does not
// count, for the hold, for the keys in its slots, while the other shards
// go on counting.
//
// Routing: a command goes to the master of its first key's slot (the
// proxy sends no command whose keys do not share a slot). A MOVED reply
// (the command did not run) updates the slot's owner, asks for a new slot
// map, and sends the command once more to the owner it names; an ASK reply
// sends it, after ASKING, to the node importing the slot. A command is
// redirected at most twice, and gets exactly one result: a redirection or
// a refusal before running (TRYAGAIN, CLUSTERDOWN, CROSSSLOT) comes back
// as an error that says it did not run. Each result names the link it came
// from (Result.Via), and the undo of that command goes to that link,
// so it runs after the command there; one that is redirected in turn
// follows the key, in its later form.
//
// Invariant: a slot's commands reach its master in the order they were
// sent. A link hands its replies on in order, so redirected commands go
// on in order; when a slot's master changes while commands are in flight
// at the old one, the slot's new commands wait for those (slotMove).
//
// The marker of a shard lives in a key of a slot the shard owns
// (redlock-proxy:marker:{TAG}, TAG the slot's hash tag), the highest one at
// the time its link is made; the link keeps it while the shard owns that
// slot. When the slot leaves the shard (a resharding), or the key is
// answered MOVED or ASK, the marker moves to the shard's highest slot
// left, and that move records a loss: what the shard's data went through
// since the last check of the old key cannot be told, so the shard waits
// out the hold. redis-cli --cluster reshard moves a source's lowest slots
// first, so a shard's marker moves only when all its other slots went
// before it, or by hand.
//
// The cluster uses only the shard links' exported methods. Its code is
// split by concern: cluster_map.go (the slot map), cluster_route.go
// (routing and redirections), cluster_moves.go (a slot's commands kept in
// order across a change of master), cluster_confirm.go (a shard's master
// confirmed by the others' maps, and the slot holds after a loss).

// ClusterOptions name a Redis Cluster backend.
type ClusterOptions struct {
	Seeds []string // any nodes of the cluster (host:port)
	// Refresh is how often every master is asked for its slot map (a
	// round, see cluster_confirm.go), and at once on a change (default
	// DefaultClusterInterval).
	Refresh time.Duration
	// Lease is how long a round in which a majority of the cluster's
	// other masters named a slot's owner lets that owner count for the
	// slot (default DefaultClusterLease). The app adds it to the hold.
	Lease time.Duration
}

// ClusterMarkerPrefix starts the key of each shard's marker.
const ClusterMarkerPrefix = MarkerKey + ":"

// maxRedirects bounds the redirections one command follows.
const maxRedirects = 2

// ErrNotServed is a Redis Cluster's refusal to run a command (a
// redirection not followed, TRYAGAIN, CLUSTERDOWN, CROSSSLOT, no master
// known for its slot): it did not run.
var ErrNotServed = errors.New("netio: the cluster did not run the command")

// ShardHealth is the state of one shard of a Redis Cluster backend.
type ShardHealth struct {
	ID         string // the master's node id
	Slots      string // the slots it owns, as ranges
	SlotCount  int
	MarkerSlot int // the slot of its marker's key
	Health         // its master's link (Addr is the master)
}

// Cluster is a Redis Cluster backend: a link per shard master, and the
// slot map.
type Cluster struct {
	opt   Options // each shard link's, but Addr, MarkerKey and Cluster
	copt  ClusterOptions
	name  string // the backend as configured
	log   *slog.Logger
	ctx   context.Context
	stop  context.CancelFunc
	wg    sync.WaitGroup
	kick  chan struct{}
	since time.Time

	errNoSlot *BackendError

	// The rounds' query connections (cluster_confirm.go), by node address:
	// the refresh goroutine's own (a round lends each to one goroutine per
	// node and waits for them), and Close's once that goroutine ended.
	queries map[string]*sentinelConn

	// mu guards every field below it, and each shard's fields: the map's
	// refresh and the rounds write them; SendWith, each routed command's
	// Receive (on the links' goroutines), Undo and Health read them. The
	// fields above are set before Start, but queries. Lock order: mu
	// before a link's own (Pending and LeftUndos are called under it);
	// links deliver replies with their lock released, so a Receive may
	// take mu, and links are started, moved and closed outside it.
	mu        sync.Mutex
	slots     []*shard // by slot; nil: no master known
	shards    map[string]*shard
	retired   []*shard // masters no longer in the map, kept while they have commands or undos
	known     bool     // a slot map was read
	mapErr    string   // why the last refresh failed, when it did
	closed    bool
	leftUndos []string

	// Per slot, the commands whose first hop went to the slot's master
	// and is not answered yet; and the slots whose master changed while
	// some were (see slotMove).
	flight []int32
	moving map[uint16]*slotMove

	// Which master counts for each slot, and until when a slot is held
	// (cluster_confirm.go).
	conf  []slotConf
	held  []time.Time
	hist  []ownSnap       // the masters' slots as the rounds found them, for the hold
	named map[string]bool // the masters the last round's answers named: the next asks them
}

// shard is one master of the slot map. Its fields are under Cluster.mu
// (Health copies them under it); link, once set, is never replaced, and
// has its own lock.
type shard struct {
	addr, id  string
	link      *Link
	ranges    [][2]int
	count     int
	marker    int
	moved     map[int]bool // marker slots answered MOVED or ASK: never again this shard's marker
	idleSince time.Time    // a retired shard's link: idle since
	holdsRead bool         // the slot holds recorded on it were read (cluster_confirm.go)
}

// NewCluster prepares a Redis Cluster backend; Start connects it. opt is
// the template of every shard's link; opt.Cluster names the cluster, and
// opt.Addr is its name in logs and errors.
func NewCluster(opt Options) *Cluster {
	c := &Cluster{opt: opt, copt: *opt.Cluster, name: opt.Addr, kick: make(chan struct{}, 1), since: time.Now()}
	c.opt.Cluster = nil
	if c.copt.Refresh <= 0 {
		c.copt.Refresh = DefaultClusterInterval
	}
	if c.copt.Lease <= 0 {
		c.copt.Lease = DefaultClusterLease
	}
	if c.opt.Logger == nil {
		c.opt.Logger = slog.Default()
	}
	if c.opt.DialTimeout <= 0 {
		c.opt.DialTimeout = time.Second
	}
	c.log = c.opt.Logger.With("backend", opt.Index, "cluster", c.name)
	c.opt.Logger = c.opt.Logger.With("cluster", c.name)
	c.errNoSlot = &BackendError{Node: opt.Index, Addr: c.name, Err: fmt.Errorf("%w: no master is known for the key's slot", ErrNotServed)}
	c.slots = make([]*shard, keyslot.Slots)
	c.flight = make([]int32, keyslot.Slots)
	c.moving = map[uint16]*slotMove{}
	c.conf = make([]slotConf, keyslot.Slots)
	c.held = make([]time.Time, keyslot.Slots)
	c.named = map[string]bool{}
	c.queries = map[string]*sentinelConn{}
	c.shards = map[string]*shard{}
	c.ctx, c.stop = context.WithCancel(context.Background())
	return c
}

// Start reads the slot map and connects the shards, in the background, and
// keeps the map fresh until Close.
func (c *Cluster) Start() {
	c.wg.Add(1)
	go c.run()
}

// Addr is the backend's name: the entry as configured.
func (c *Cluster) Addr() string { return c.name }

func (c *Cluster) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Health is the cluster as one backend: up when every slot has a master
// whose link is up, counting (see Health.Counts) when every shard counts,
// quarantined until the last shard's quarantine ends; Shards says each
// shard's state.
func (c *Cluster) Health() Health {
	c.mu.Lock()
	known, mapErr := c.known, c.mapErr
	var shards []shard // copies: the map's refresh changes them
	for _, sh := range c.shards {
		shards = append(shards, *sh)
	}
	uncovered := 0
	for _, sh := range c.slots {
		if sh == nil {
			uncovered++
		}
	}
	var retired []*Link
	for _, sh := range c.retired {
		if sh.link != nil {
			retired = append(retired, sh.link)
		}
	}
	unconfirmed, heldUntil, heldRange := c.confirmedHealthLocked(time.Now())
	c.mu.Unlock()
	slices.SortFunc(shards, func(a, b shard) int { return firstSlot(&a) - firstSlot(&b) })
	h := Health{Node: c.opt.Index, Addr: c.name, Up: known && uncovered == 0 && len(shards) > 0, Since: c.since}
	var down []string
	for _, sh := range shards {
		if sh.link == nil {
			h.Up = false
			continue
		}
		lh := sh.link.Health()
		if lh.Up && !sh.holdsRead && !c.off() {
			lh.Up, lh.LastError = false, "the slot holds recorded on it not read yet"
		}
		h.Shards = append(h.Shards, ShardHealth{ID: sh.id, Slots: rangesString(sh.ranges), SlotCount: sh.count, MarkerSlot: sh.marker, Health: lh})
		if !lh.Up {
			h.Up = false
			down = append(down, "shard "+sh.addr+" (slots "+rangesString(sh.ranges)+"): "+lh.LastError)
		}
		if lh.QuarantinedUntil.After(h.QuarantinedUntil) {
			h.QuarantinedUntil = lh.QuarantinedUntil
			h.QuarantineReason = "shard " + sh.addr + " (slots " + rangesString(sh.ranges) + "): " + lh.QuarantineReason
			h.QuarantineCause = lh.QuarantineCause
		}
		h.Unsure = h.Unsure || lh.Unsure
		h.Latency = max(h.Latency, lh.Latency)
		if lh.Since.After(h.Since) {
			h.Since = lh.Since
		}
		h.addCounts(lh)
	}
	for _, l := range retired {
		h.addCounts(l.Health())
	}
	if heldUntil.After(h.QuarantinedUntil) {
		h.QuarantinedUntil, h.QuarantineReason = heldUntil, holdWhy(heldRange)
	}
	if unconfirmed > 0 {
		h.Up = false
	}
	switch {
	case !known && mapErr != "":
		h.LastError = mapErr
	case !known:
		h.LastError = "no slot map read yet"
	case uncovered > 0:
		h.LastError = fmt.Sprintf("%d slots have no master in the slot map", uncovered)
	case unconfirmed > 0:
		h.LastError = fmt.Sprintf("%d slots have no owner that a majority of the cluster's other masters confirmed in the last %v", unconfirmed, c.copt.Lease)
	case len(down) > 0:
		h.LastError = strings.Join(down, "; ")
	}
	return h
}

// addCounts adds a shard link's counters to the cluster's.
func (h *Health) addCounts(s Health) {
	h.Connects += s.Connects
	h.Restarts += s.Restarts
	h.Breaks += s.Breaks
	h.ClockJumps += s.ClockJumps
	h.Timeouts += s.Timeouts
	h.Errors += s.Errors
	h.Writes += s.Writes
	h.Sent += s.Sent
	h.UndoRetained += s.UndoRetained
	h.UndoAbandoned += s.UndoAbandoned
	h.UndoExpired += s.UndoExpired
}

func firstSlot(sh *shard) int {
	if len(sh.ranges) == 0 {
		return keyslot.Slots
	}
	f := sh.ranges[0][0]
	for _, r := range sh.ranges {
		f = min(f, r[0])
	}
	return f
}

// rangesString writes slot ranges as CLUSTER NODES does: 0-5460,5462.
func rangesString(rs [][2]int) string {
	rs = slices.Clone(rs)
	slices.SortFunc(rs, func(a, b [2]int) int { return a[0] - b[0] })
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(r[0]))
		if r[1] != r[0] {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(r[1]))
		}
	}
	return b.String()
}

// Pending is the number of commands and undos waiting, over every shard.
func (c *Cluster) Pending() int {
	n := 0
	for _, l := range c.links() {
		n += l.Pending()
	}
	return n
}

// links is every shard link, current and retired.
func (c *Cluster) links() []*Link {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []*Link
	for _, sh := range c.shards {
		if sh.link != nil {
			out = append(out, sh.link)
		}
	}
	for _, sh := range c.retired {
		if sh.link != nil {
			out = append(out, sh.link)
		}
	}
	return out
}

// LeftUndos names the undos that had not run when their shard's link
// closed.
func (c *Cluster) LeftUndos() []string {
	c.mu.Lock()
	out := append([]string(nil), c.leftUndos...)
	c.mu.Unlock()
	return out
}

// Close stops the map's refresh and closes every shard's link.
func (c *Cluster) Close() error {
	c.stop()
	c.wg.Wait()
	for a, q := range c.queries {
		q.Close()
		delete(c.queries, a)
	}
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	ls := c.links()
	for _, l := range ls {
		l.Close()
	}
	c.mu.Lock()
	for _, l := range ls {
		for _, k := range l.LeftUndos() {
			c.leftUndos = append(c.leftUndos, "shard "+l.Addr()+": "+k)
		}
	}
	c.mu.Unlock()
	return nil
}
