package netio

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// A Redis Cluster's slot map: read from the nodes, applied (a link per
// shard master, each shard's marker in a slot it owns), and the links of
// shards that left it retired once idle.

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

// refresh runs a round (see cluster_confirm.go): every master the last
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
