package netio

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
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

// ClusterOptions name a Redis Cluster backend.
type ClusterOptions struct {
	Seeds []string // any nodes of the cluster (host:port)
	// Refresh is how often every master is asked for its slot map (a
	// round, see clusterconfirm.go), and at once on a change (default
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

	// The rounds' query connections (clusterconfirm.go), by node address:
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
	// (clusterconfirm.go).
	conf  []slotConf
	held  []time.Time
	hist  []ownSnap       // the masters' slots as the rounds found them, for the hold
	named map[string]bool // the masters the last round's answers named: the next asks them
}

// slotMove keeps one slot's commands in order across a change of its
// master: the commands sent to the old master are redirected to the new
// one as their replies come, so a later command sent straight to the new
// master could run there before an earlier one. Until every command in
// flight at the old master (left) was answered (and, if redirected, sent
// on), the slot's new commands wait, in order; then they go to the
// slot's master of the moment.
//
// Its fields are under Cluster.mu, like the moving map that holds it: a
// first hop's answer (answered, on a link's goroutine) counts left down;
// the flush that running marks takes the waiting commands under the lock
// and sends them outside it, one flush at a time per slot.
type slotMove struct {
	left     int32
	waiting  []*routed
	flushing bool // left reached 0: the waiting commands go on
	running  bool // a flush is sending them (one at a time keeps the order)
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
	holdsRead bool         // the slot holds recorded on it were read (clusterconfirm.go)
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

func (c *Cluster) run() {
	defer c.wg.Done()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-c.ctx.Done():
			return
		case <-c.kick:
		case <-t.C:
		}
		c.refresh()
		next := c.copt.Refresh
		if c.holdsUnread() {
			// A master's replies count once its holds record was read:
			// a link that has just come up does not wait a whole round.
			next = min(next, 50*time.Millisecond)
		}
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// refreshSoon asks for a new slot map now.
func (c *Cluster) refreshSoon() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// slotRange is one range of CLUSTER SLOTS: its slots, its master and
// its replicas.
type slotRange struct {
	from, to int
	addr, id string
	replicas []string
}

// refresh runs a round (see clusterconfirm.go): every master the last
// slot maps named is asked for its slot map at once (the seeds too, when
// none of them answers). A slot goes to the owner a majority of the
// cluster's other masters confirm; a slot without one, to the owner the
// first node that answered names (the masters in address order, then the
// seeds), as a single read of the map would.
func (c *Cluster) refresh() {
	at := time.Now()
	c.mu.Lock()
	var addrs []string
	for a := range c.shards {
		addrs = append(addrs, a)
	}
	for a := range c.named {
		if c.shards[a] == nil {
			addrs = append(addrs, a)
		}
	}
	c.mu.Unlock()
	slices.Sort(addrs)
	answers := c.ask(addrs)
	if !answered(answers) && c.ctx.Err() == nil {
		var seeds []string
		for _, s := range c.copt.Seeds {
			if !slices.Contains(addrs, s) {
				seeds = append(seeds, s)
			}
		}
		answers = append(answers, c.ask(seeds)...)
	}
	c.closeQueries(answers)
	if c.ctx.Err() != nil {
		return
	}
	var errs []string
	for _, a := range answers {
		if a.err == nil {
			c.round(at, a.ranges, answers)
			return
		}
		errs = append(errs, a.addr+": "+a.err.Error())
	}
	why := "no node gave a slot map: " + strings.Join(errs, "; ")
	c.mu.Lock()
	changed := c.mapErr != why
	c.mapErr = why
	c.mu.Unlock()
	if changed {
		c.log.Warn("cluster: cannot read the slot map", "err", why)
	}
	c.retireIdle()
}

// dialNode opens a connection to a node for the rounds' questions, with
// TLS and AUTH as the shard links have them.
func (c *Cluster) dialNode(addr string) (*sentinelConn, error) {
	ctx, cancel := context.WithTimeout(c.ctx, c.opt.DialTimeout)
	defer cancel()
	nc, err := dialTLS(ctx, addr, c.opt.TLS, handshakeError)
	if err != nil {
		return nil, err
	}
	q := &sentinelConn{Conn: nc, rd: resp.NewReader(bufio.NewReader(nc), resp.ReaderLimits{MaxBulk: 1 << 20})}
	if c.opt.Password != "" {
		args := []string{"AUTH", c.opt.Password}
		if c.opt.Username != "" {
			args = []string{"AUTH", c.opt.Username, c.opt.Password}
		}
		dl, _ := ctx.Deadline()
		v, err := q.do(dl, args...)
		if err == nil && v.Kind == resp.KindError {
			err = fmt.Errorf("%s", v.Str)
		}
		if err != nil {
			nc.Close()
			return nil, err
		}
	}
	return q, nil
}

// askNode asks one node for CLUSTER SLOTS on q (dialled first when nil);
// it returns the connection to keep (nil after a failure).
func (c *Cluster) askNode(addr string, q *sentinelConn) (nodeAnswer, *sentinelConn) {
	a := nodeAnswer{addr: addr}
	if q == nil {
		if q, a.err = c.dialNode(addr); a.err != nil {
			return a, nil
		}
	}
	v, err := q.do(time.Now().Add(min(c.opt.DialTimeout, c.copt.Lease/4)), "CLUSTER", "SLOTS")
	if err == nil && v.Kind == resp.KindError {
		err = fmt.Errorf("%s", v.Str)
	}
	if err == nil {
		a.ranges, err = parseSlots(v, addr)
	}
	if a.err = err; err != nil {
		q.Close()
		return a, nil
	}
	return a, q
}

// parseSlots reads CLUSTER SLOTS: [from, to, [ip, port, id, ...], replicas...]
// per range; an empty ip is the node asked.
func parseSlots(v resp.Value, asked string) ([]slotRange, error) {
	if v.Kind != resp.KindArray {
		return nil, fmt.Errorf("CLUSTER SLOTS answered %s", v.String())
	}
	host, _, _ := net.SplitHostPort(asked)
	var out []slotRange
	for _, r := range v.Elems {
		if r.Kind != resp.KindArray || len(r.Elems) < 3 || r.Elems[2].Kind != resp.KindArray || len(r.Elems[2].Elems) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS: a range reads %s", r.String())
		}
		m := r.Elems[2].Elems
		ip := string(m[0].Str)
		if ip == "" || ip == "?" {
			ip = host
		}
		port := m[1].Int
		if m[1].Kind == resp.KindBulk {
			port, _ = strconv.ParseInt(string(m[1].Str), 10, 64)
		}
		sr := slotRange{from: int(r.Elems[0].Int), to: int(r.Elems[1].Int), addr: net.JoinHostPort(ip, strconv.FormatInt(port, 10))}
		if len(m) > 2 {
			sr.id = string(m[2].Str)
		}
		for _, rep := range r.Elems[3:] {
			if rep.Kind == resp.KindArray && len(rep.Elems) >= 2 {
				rip := string(rep.Elems[0].Str)
				if rip == "" || rip == "?" {
					rip = host
				}
				rport := rep.Elems[1].Int
				if rep.Elems[1].Kind == resp.KindBulk {
					rport, _ = strconv.ParseInt(string(rep.Elems[1].Str), 10, 64)
				}
				sr.replicas = append(sr.replicas, net.JoinHostPort(rip, strconv.FormatInt(rport, 10)))
			}
		}
		if sr.from < 0 || sr.to >= keyslot.Slots || sr.from > sr.to {
			return nil, fmt.Errorf("CLUSTER SLOTS: a range %d-%d", sr.from, sr.to)
		}
		out = append(out, sr)
	}
	return out, nil
}

// apply installs a slot map: a link for each master (kept from before, or
// made), the slots, and each shard's marker slot; masters that left are
// retired once idle.
func (c *Cluster) apply(m []slotRange) {
	type masterOf struct {
		id     string
		ranges [][2]int
	}
	masters := map[string]*masterOf{}
	for _, r := range m {
		mo := masters[r.addr]
		if mo == nil {
			mo = &masterOf{id: r.id}
			masters[r.addr] = mo
		}
		mo.ranges = append(mo.ranges, [2]int{r.from, r.to})
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	var started []*Link
	type move struct {
		l   *Link
		key string
	}
	var moves []move
	var added, gone []string
	slots := make([]*shard, keyslot.Slots)
	for addr, mo := range masters {
		sh := c.shards[addr]
		if sh == nil {
			for i, r := range c.retired {
				if r.addr == addr {
					sh = r
					c.retired = append(c.retired[:i], c.retired[i+1:]...)
					break
				}
			}
		}
		if sh == nil {
			sh = &shard{addr: addr, marker: -1, moved: map[int]bool{}}
			added = append(added, addr)
		}
		sh.id, sh.ranges, sh.count, sh.idleSince = mo.id, mo.ranges, 0, time.Time{}
		for _, r := range mo.ranges {
			for s := r[0]; s <= r[1]; s++ {
				slots[s] = sh
			}
			sh.count += r[1] - r[0] + 1
		}
		c.shards[addr] = sh
	}
	for addr, sh := range c.shards {
		if masters[addr] == nil {
			delete(c.shards, addr)
			sh.ranges, sh.count, sh.idleSince = nil, 0, time.Now()
			c.retired = append(c.retired, sh)
			gone = append(gone, addr)
		}
	}
	for _, sh := range c.shards {
		if sh.marker >= 0 && slots[sh.marker] == sh && !sh.moved[sh.marker] {
			continue // the marker stays where it is
		}
		s := markerSlot(sh, slots)
		if s < 0 {
			continue // every slot it owns was answered MOVED: the next map tells
		}
		sh.marker = s
		key := keyslot.InSlot(ClusterMarkerPrefix, uint16(s))
		if sh.link == nil {
			sh.link = c.newLink(sh.addr, key)
			started = append(started, sh.link)
		} else {
			moves = append(moves, move{sh.link, key})
		}
	}
	for i, sh := range slots {
		c.slotChangedLocked(uint16(i), c.slots[i], sh)
	}
	c.slots = slots
	c.known, c.mapErr = true, ""
	markers := make([]string, 0, len(c.shards))
	for _, sh := range c.shards {
		if sh.marker >= 0 {
			markers = append(markers, keyslot.InSlot(ClusterMarkerPrefix, uint16(sh.marker)))
		}
	}
	c.opt.book.setCluster(c.opt.Index, markers)
	c.mu.Unlock()
	for _, l := range started {
		l.Start()
	}
	for _, mv := range moves {
		mv.l.SetMarkerKey(mv.key)
	}
	if len(added) > 0 || len(gone) > 0 {
		c.log.Info("cluster: shard masters changed", "added", strings.Join(added, ","), "left", strings.Join(gone, ","), "masters", len(masters))
	}
	c.retireIdle()
}

// shardLinks is the link of every shard master.
func (c *Cluster) shardLinks() []*Link {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ls []*Link
	for _, sh := range c.shards {
		if sh.link != nil {
			ls = append(ls, sh.link)
		}
	}
	return ls
}

// markerSlot picks a shard's marker slot: the highest it owns whose key was
// never answered MOVED or ASK there; -1 when none.
func markerSlot(sh *shard, slots []*shard) int {
	for s := keyslot.Slots - 1; s >= 0; s-- {
		if slots[s] == sh && !sh.moved[s] {
			return s
		}
	}
	return -1
}

// newLink makes the link of a shard master, its marker in key.
func (c *Cluster) newLink(addr, key string) *Link {
	o := c.opt
	o.Addr, o.MarkerKey, o.ClusterNode = addr, key, true
	o.MarkerMoved = func(moved string) { c.markerMoved(addr, moved) }
	return NewLink(o)
}

// markerMoved notes a shard's marker answered MOVED or ASK: its slot is
// never again that shard's marker slot, and the map is read again.
func (c *Cluster) markerMoved(addr, key string) {
	c.mu.Lock()
	if sh := c.shards[addr]; sh != nil && sh.marker >= 0 && keyslot.InSlot(ClusterMarkerPrefix, uint16(sh.marker)) == key {
		sh.moved[sh.marker] = true
	}
	c.mu.Unlock()
	c.log.Warn("cluster: a shard's replication marker was redirected: its slot left the shard; the marker moves and the shard waits out the hold", "shard", addr, "marker", key)
	c.refreshSoon()
}

// retireIdle closes the links of masters that left the map once they have
// had nothing in flight and no undo waiting for a while.
func (c *Cluster) retireIdle() {
	now := time.Now()
	var closing []*shard
	c.mu.Lock()
	keep := c.retired[:0]
	for _, sh := range c.retired {
		switch {
		case sh.link == nil:
		case sh.link.Pending() > 0:
			sh.idleSince = now
			keep = append(keep, sh)
		case now.Sub(sh.idleSince) < 5*c.copt.Refresh:
			keep = append(keep, sh)
		default:
			closing = append(closing, sh)
		}
	}
	c.retired = keep
	c.mu.Unlock()
	for _, sh := range closing {
		sh.link.Close()
		c.mu.Lock()
		c.leftUndos = append(c.leftUndos, sh.link.LeftUndos()...)
		c.mu.Unlock()
	}
}

// linkFor is the link of the master of slot s, or nil.
func (c *Cluster) linkFor(s uint16) *Link {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sh := c.slots[s]; sh != nil {
		return sh.link
	}
	return nil
}

// linkAt is the link of the master at addr, current or retired, or nil.
func (c *Cluster) linkAt(addr string) *Link {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sh := c.shards[addr]; sh != nil {
		return sh.link
	}
	for _, sh := range c.retired {
		if sh.addr == addr {
			return sh.link
		}
	}
	return nil
}

// moved takes a MOVED reply's word for its slot's owner, when that node's
// link is known, and asks for a new map.
func (c *Cluster) moved(s int, addr string) {
	c.mu.Lock()
	if sh := c.shards[addr]; sh != nil && s >= 0 && s < keyslot.Slots {
		c.slotChangedLocked(uint16(s), c.slots[s], sh)
		c.slots[s] = sh
	}
	c.mu.Unlock()
	c.refreshSoon()
}

// Send queues cmd for the master of its keys' slot; see Link.Send.
func (c *Cluster) Send(cmd []byte, script *resp.Script, rcv Receiver, tag int, deadline time.Time) {
	c.SendWith(cmd, script, rcv, tag, deadline, 0)
}

// SendWith queues cmd for the master of its keys' slot, following MOVED and
// ASK; rcv gets exactly one result (and at most one Late), with Via set to
// the link it came from.
func (c *Cluster) SendWith(cmd []byte, script *resp.Script, rcv Receiver, tag int, deadline time.Time, flags SendFlags) {
	s, ok := CommandSlot(cmd)
	if !ok {
		rcv.Receive(tag, Result{Err: c.errNoSlot, Unsent: true})
		return
	}
	r := &routed{c: c, cmd: append([]byte(nil), cmd...), sc: script, rcv: rcv, tag: tag, deadline: deadline, flags: flags &^ Asking, slot: s}
	c.mu.Lock()
	if mv := c.moving[s]; mv != nil {
		mv.waiting = append(mv.waiting, r)
		c.mu.Unlock()
		return
	}
	l := c.firstHopLocked(r)
	c.mu.Unlock()
	if l == nil {
		rcv.Receive(tag, Result{Err: c.errNoSlot, Unsent: true})
		return
	}
	l.SendWith(r.cmd, script, r, 0, deadline, r.flags)
}

// firstHopLocked picks the link of r's slot's master and counts r in
// flight there; nil when no master is known.
func (c *Cluster) firstHopLocked(r *routed) *Link {
	sh := c.slots[r.slot]
	if sh == nil || sh.link == nil {
		return nil
	}
	c.flight[r.slot]++
	r.link, r.first = sh.link, true
	return sh.link
}

// slotChangedLocked notes that slot s's master changes from old to now:
// what is in flight at the old one keeps the slot's later commands
// waiting (see slotMove).
func (c *Cluster) slotChangedLocked(s uint16, old, now *shard) {
	if old == nil || old == now || c.flight[s] == 0 {
		return
	}
	switch mv := c.moving[s]; {
	case mv == nil:
		c.moving[s] = &slotMove{left: c.flight[s]}
	case mv.flushing:
		// It changed again while the waiting commands were going to the
		// last master: the rest wait for those too.
		mv.flushing, mv.left = false, c.flight[s]
	}
	// Otherwise nothing went to the last master since the move: the
	// commands in flight are the old master's, already counted.
}

// answered notes that a first hop to slot s's master was answered (and,
// if redirected, sent on): once a moved slot's old master answered all it
// had, the slot's waiting commands go on, in order.
func (c *Cluster) answered(s uint16, first bool) {
	if !first {
		return
	}
	c.mu.Lock()
	c.flight[s]--
	mv := c.moving[s]
	if mv == nil || mv.flushing {
		c.mu.Unlock()
		return
	}
	if mv.left--; mv.left > 0 {
		c.mu.Unlock()
		return
	}
	mv.flushing = true
	if mv.running {
		c.mu.Unlock()
		return // the flush under way goes on with the rest
	}
	mv.running = true
	c.mu.Unlock()
	c.flush(s, mv)
}

// flush sends a moved slot's waiting commands on, in order, then lets the
// slot's commands go straight to its master again.
func (c *Cluster) flush(s uint16, mv *slotMove) {
	type hop struct {
		r *routed
		l *Link
	}
	for {
		c.mu.Lock()
		if !mv.flushing {
			mv.running = false
			c.mu.Unlock()
			return // moved again: the last of those in flight sends the rest
		}
		batch := mv.waiting
		mv.waiting = nil
		if len(batch) == 0 {
			mv.running = false
			delete(c.moving, s)
			c.mu.Unlock()
			return
		}
		hops := make([]hop, len(batch))
		for i, r := range batch {
			hops[i] = hop{r, c.firstHopLocked(r)}
		}
		c.mu.Unlock()
		for _, h := range hops {
			if h.l == nil {
				h.r.rcv.Receive(h.r.tag, Result{Err: c.errNoSlot, Unsent: true})
				continue
			}
			h.l.SendWith(h.r.cmd, h.r.sc, h.r, 0, h.r.deadline, h.r.flags)
		}
	}
}

// via is where a command ran: the link, and whether it went after ASKING.
type via struct {
	link   *Link
	asking bool
}

// routed is one command sent to a cluster: it follows redirections and
// answers its receiver once.
//
// Its fields after flags change on the goroutines that deliver its
// replies (the links' readers and timeout sweeps), without a lock. That is
// safe because it is at one link at a time: only the delivery of its
// reply at that link (Receive, then at most one Late after a timeout)
// writes them, before sending it on to the next link, whose lock orders
// those writes before that link's delivery. Once sent on, Receive reads
// only the fields set at its creation (c, slot). firstHopLocked writes
// link and first under Cluster.mu, before the first send.
type routed struct {
	c        *Cluster
	cmd      []byte
	sc       *resp.Script
	rcv      Receiver
	tag      int
	deadline time.Time
	flags    SendFlags
	link     *Link
	asking   bool
	askedBy  *Link // the master that sent it on with ASK, when it did
	hops     int
	slot     uint16
	first    bool // its first hop is in flight (Cluster.flight)
}

func (r *routed) Receive(_ int, res Result) {
	// Read before the command is sent on: its next reply may come at once.
	first := r.first
	r.first = false
	if res.Err == nil && res.V.Kind == resp.KindError {
		if Redirect(res.V.Str) {
			ask, s, addr := parseRedirect(res.V.Str)
			if !ask {
				r.c.moved(s, addr)
			}
			if r.hops < maxRedirects {
				if l := r.c.linkAt(addr); l != nil {
					r.hops++
					r.askedBy = nil
					if ask {
						r.askedBy = r.link
					}
					r.link, r.asking = l, ask
					flags := r.flags
					if ask {
						flags |= Asking
					}
					l.SendWith(r.cmd, r.sc, r, 0, r.deadline, flags)
					r.c.answered(r.slot, first)
					return
				}
				r.c.refreshSoon()
			}
		}
		if notRun(res.V.Str) {
			res = Result{Err: r.c.notServed(res.V.Str), Unsent: true}
		}
	}
	res.Via = &via{link: r.link, asking: r.asking}
	// A reply counts only for the slot's confirmed owner, and not while
	// the slot is held (clusterconfirm.go).
	res.Counts = res.Counts && r.c.counts(r.slot, r.link, r.askedBy, time.Now())
	r.c.answered(r.slot, first)
	r.rcv.Receive(r.tag, res)
}

// Late passes on what became of a command after its timeout; a late
// redirection or refusal says it did not run (it is not sent again: its
// op has decided without it).
func (r *routed) Late(_ int, res Result) {
	lr, ok := r.rcv.(LateReceiver)
	if !ok {
		return
	}
	if res.Err == nil && res.V.Kind == resp.KindError && notRun(res.V.Str) {
		res = Result{Err: r.c.notServed(res.V.Str), Unsent: true}
	}
	res.Via = &via{link: r.link, asking: r.asking}
	lr.Late(r.tag, res)
}

func (c *Cluster) notServed(reply []byte) *BackendError {
	return &BackendError{Node: c.opt.Index, Addr: c.name, Err: fmt.Errorf("%w: %s", ErrNotServed, reply)}
}

// notRun reports whether an error reply of a cluster node means the
// command did not run there: a redirection, a multi-key command during a
// slot's migration (TRYAGAIN), a cluster down, keys of several slots.
func notRun(reply []byte) bool {
	return Redirect(reply) || bytes.HasPrefix(reply, []byte("TRYAGAIN")) || bytes.HasPrefix(reply, []byte("CLUSTERDOWN")) ||
		bytes.HasPrefix(reply, []byte("CROSSSLOT"))
}

// parseRedirect reads "MOVED slot host:port" or "ASK slot host:port".
func parseRedirect(reply []byte) (ask bool, slot int, addr string) {
	f := strings.Fields(string(reply))
	if len(f) < 3 {
		return false, -1, ""
	}
	slot, err := strconv.Atoi(f[1])
	if err != nil {
		slot = -1
	}
	addr = f[2]
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr // a node that does not know its own address
	}
	return f[0] == "ASK", slot, addr
}

// Undo queues an undo on the link where its command ran (u.Via), after
// it; without one, or when that link has closed, on the master of its
// keys' slot now, in its later form. A redirection of the undo sends it,
// in its later form, where the key is now. rcv gets one result.
func (c *Cluster) Undo(u UndoCmd, rcv Receiver, tag int) {
	ur := &routedUndo{c: c, u: u, rcv: rcv, tag: tag}
	if v, ok := u.Via.(*via); ok && v.link != nil && !v.link.isClosed() {
		ur.u.Asking = v.asking
		v.link.Undo(ur.u, ur, 0)
		return
	}
	ur.byKey()
}

// routedUndo is one undo sent to a cluster.
type routedUndo struct {
	c    *Cluster
	u    UndoCmd
	rcv  Receiver
	tag  int
	hops int
}

// byKey sends the undo, in its later form, to the master of its keys'
// slot now.
func (ur *routedUndo) byKey() {
	ur.u.LaterOnly, ur.u.Asking = true, false
	s, ok := CommandSlot(ur.u.Now)
	var l *Link
	if ok {
		l = ur.c.linkFor(s)
	}
	if l == nil {
		ur.c.mu.Lock()
		ur.c.leftUndos = append(ur.c.leftUndos, ur.u.Keys)
		ur.c.mu.Unlock()
		ur.c.log.Warn("cluster: an undo has no master to go to (no slot map): the partial acquisition stays until its TTL", "keys", ur.u.Keys)
		ur.rcv.Receive(ur.tag, Result{Err: &BackendError{Node: ur.c.opt.Index, Addr: ur.c.name, Err: ErrAbandoned}})
		return
	}
	l.Undo(ur.u, ur, 0)
}

func (ur *routedUndo) Receive(_ int, res Result) {
	switch {
	case res.Err == nil && res.V.Kind == resp.KindError && Redirect(res.V.Str) && ur.hops < maxRedirects:
		ask, s, addr := parseRedirect(res.V.Str)
		if !ask {
			ur.c.moved(s, addr)
		}
		if l := ur.c.linkAt(addr); l != nil {
			ur.hops++
			ur.u.LaterOnly, ur.u.Asking = true, ask
			l.Undo(ur.u, ur, 0)
			return
		}
	case errors.Is(res.Err, ErrClosed) && ur.hops < maxRedirects && !ur.c.isClosed():
		// Its link was retired (its master left the map) and closed:
		// the key is with the slot's master now.
		ur.hops++
		ur.byKey()
		return
	}
	ur.rcv.Receive(ur.tag, res)
}

func (c *Cluster) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// CommandSlot is the slot of an encoded command's first key: the first
// argument, or for EVAL and EVALSHA the first of their keys. ok is false
// when it has none.
func CommandSlot(cmd []byte) (uint16, bool) {
	var args [4][]byte
	n := 0
	p := cmd
	if len(p) == 0 || p[0] != '*' {
		return 0, false
	}
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		return 0, false
	}
	p = p[i+1:]
	for n < len(args) && len(p) > 0 && p[0] == '$' {
		j := bytes.IndexByte(p, '\r')
		if j < 0 {
			return 0, false
		}
		l, err := strconv.Atoi(string(p[1:j]))
		if err != nil || l < 0 || len(p) < j+2+l+2 {
			return 0, false
		}
		args[n] = p[j+2 : j+2+l]
		n++
		p = p[j+2+l+2:]
	}
	if n < 2 {
		return 0, false
	}
	if bytes.EqualFold(args[0], []byte("EVALSHA")) || bytes.EqualFold(args[0], []byte("EVAL")) {
		if n < 4 || string(args[2]) == "0" {
			return 0, false
		}
		return keyslot.Of(args[3]), true
	}
	return keyslot.Of(args[1]), true
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
