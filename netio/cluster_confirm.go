package netio

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Which master of a Redis Cluster counts for a slot, and when a slot
// counts at all (under a restart rule; restart_quarantine off skips all of
// it).
//
// A round. Every Refresh, the cluster asks every master the last slot maps
// named for its map (CLUSTER SLOTS) at once. A slot's owner is confirmed
// by the round when more than half of the cluster's other masters name it:
// the masters any answer names as a slot's owner, less the slot's own
// shard (the masters and replicas any answer lists for it); a cluster of
// one shard has no other master, and its own nodes are asked instead. A
// master's reply counts for a slot only while a round that started less
// than Lease ago confirmed it as that slot's owner (or the owner that sent
// it there with ASK). Why the other masters: after a failover the old
// master and the promoted replica each name themselves, so two proxies
// that counted a shard's own word could each find a majority, one for the
// old master and one for the new; two majorities of the other masters
// share a master, whose view only moves to a higher config epoch, so every
// round that confirmed the old master asked that master before any round
// that confirmed the new one. The old master's replies stop counting, for
// every proxy, at most Lease after the first round that confirmed the new
// one, however long it goes on answering as a master beyond a partition
// (until its cluster-node-timeout, and longer with writes allowed).
//
// Which masters. Two majorities share a master when they are counted over
// one set of masters; the set the answers name changes, as a master gets
// its first slot or gives up its last, and a node knows of a new master
// only once it hears from it. A bus split in two halves, with new masters
// joined to one (CLUSTER MEET, and slots for them), leaves each half with
// a set of its own: B and C, all the other masters that A, B and C know,
// name A; D, E and F, three of the five other masters B, C, D, E and F,
// name A2. So the owner needs its majority in each answer's own map too
// (of the other masters that map names but the node that gave it, see
// inEveryMap): a round that reads a node of each half confirms neither
// owner, as a round that reads only A, B and C confirms A. What this
// cannot tell: a proxy that reads only A2's half is never shown that B
// and C name A (a record of the set of masters on the masters themselves,
// replaced only once a majority of the old set holds the new one, would
// tell it; none is kept), so the cluster's vote is one only while every
// proxy reads a node of each half, or no masters join a half cut off from
// the others.
//
// A takeover is a loss, dated when it is confirmed. A slot whose
// confirmed owner changes to a master that owned no confirmed slot before
// (a promoted replica, not a resharding between masters) makes that master
// record a loss ("takeover") with its next marker check, which is later
// than the round that confirmed it: its hold, max_ttl + drift + Lease
// (the app adds Lease), covers the last moment the old master counted
// anywhere. The marker records it for every proxy.
//
// A loss follows its data. The slots a shard owned when it may have lost
// data (from the loss its quarantine counts from, by the rounds' record of
// who owned what) stay out of the vote until its quarantine ends, wherever
// they move afterwards: a resharding, a migration or an ASK carries the
// keys there as they were after the loss. Every proxy records the slots it
// holds, with the time left, in a hash on every master (in the slot of
// that master's marker, see holdsScript), and reads what the others
// recorded there in every round: a proxy started after the resharding
// holds what the proxies before it held, and counts no reply of a master
// before it has read that master's record once.

// The defaults of ClusterOptions.
const (
	DefaultClusterInterval = 500 * time.Millisecond
	DefaultClusterLease    = 2 * time.Second
)

// ClusterHoldsPrefix starts the key of the slot holds each master keeps
// (see holdsScript), in the slot of its marker.
const ClusterHoldsPrefix = "redlock-proxy:slot-holds:"

// slotConf is which master counts for a slot, and until when.
type slotConf struct {
	addr  string
	until time.Time
}

// nodeAnswer is one node's slot map in a round, or why there is none.
type nodeAnswer struct {
	addr   string
	ranges []slotRange
	err    error
}

// ownSnap is the slots each master owned from at on, as a round found them.
type ownSnap struct {
	at     time.Time
	owners map[string][][2]int
}

// answered reports whether a node gave its map.
func answered(as []nodeAnswer) bool {
	for _, a := range as {
		if a.err == nil {
			return true
		}
	}
	return false
}

// ask asks the nodes at addrs at once, on the connections kept from the
// last rounds.
func (c *Cluster) ask(addrs []string) []nodeAnswer {
	out := make([]nodeAnswer, len(addrs))
	conns := make([]*sentinelConn, len(addrs))
	for i, a := range addrs {
		conns[i] = c.queries[a]
	}
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() { // owned by this round, which waits for it
			defer wg.Done()
			out[i], conns[i] = c.askNode(a, conns[i])
		}()
	}
	wg.Wait()
	for i, a := range addrs {
		if conns[i] != nil {
			c.queries[a] = conns[i]
		} else {
			delete(c.queries, a)
		}
	}
	return out
}

// closeQueries closes the connections to nodes the round did not ask.
func (c *Cluster) closeQueries(asked []nodeAnswer) {
	for a, q := range c.queries {
		if !slices.ContainsFunc(asked, func(n nodeAnswer) bool { return n.addr == a }) {
			q.Close()
			delete(c.queries, a)
		}
	}
}

// off reports whether no restart rule applies (restart_quarantine off):
// then the slot map of the first node that answers is taken at its word.
func (c *Cluster) off() bool { return c.opt.Restart.Hold <= 0 }

// round applies what a round's answers say: the routing map (first is the
// map of the first node that answered), the owners they confirm, the slots
// held, and the exchange of the holds with every master.
func (c *Cluster) round(at time.Time, first []slotRange, answers []nodeAnswer) {
	if c.off() {
		c.apply(first)
		return
	}
	conf, named, ids := tallyRound(answers)
	m := routing(first, conf, ids)
	c.apply(m)
	c.mu.Lock()
	c.named = named
	c.recordOwnersLocked(at, m)
	c.mu.Unlock()
	c.confirm(at, conf)
	c.holdLost(at)
	c.exchangeHolds()
}

// tallyRound finds, for every slot, the owner a majority of the cluster's
// other masters name (see the top of this file): conf holds those slots'
// ranges. named is every master some answer names as an owner, and ids
// their node ids.
func tallyRound(answers []nodeAnswer) (conf []slotRange, named map[string]bool, ids map[string]string) {
	named, ids = map[string]bool{}, map[string]string{}
	var views [][]slotRange       // the answers, each sorted by slot
	var from []string             // who gave each
	var members []map[string]bool // the masters each names
	bounds := []int{0, keyslot.Slots}
	for _, a := range answers {
		if a.err != nil {
			continue
		}
		rs := slices.Clone(a.ranges)
		sort.Slice(rs, func(i, j int) bool { return rs[i].from < rs[j].from })
		views, from = append(views, rs), append(from, a.addr)
		own := map[string]bool{}
		members = append(members, own)
		for _, r := range rs {
			named[r.addr] = true
			own[r.addr] = true
			if r.id != "" {
				ids[r.addr] = r.id
			}
			bounds = append(bounds, r.from, r.to+1)
		}
	}
	slices.Sort(bounds)
	bounds = slices.Compact(bounds)
	// Between two bounds every answer names the same owner for every slot.
	for b := 0; b+1 < len(bounds); b++ {
		lo, hi := bounds[b], bounds[b+1]-1
		seat := map[string]bool{}
		owner := make([]string, len(views))
		for i, rs := range views {
			j := sort.Search(len(rs), func(j int) bool { return rs[j].to >= lo })
			if j < len(rs) && rs[j].from <= lo {
				owner[i] = rs[j].addr
				seat[rs[j].addr] = true
				for _, r := range rs[j].replicas {
					seat[r] = true
				}
			}
		}
		voters := 0
		for a := range named {
			if !seat[a] {
				voters++
			}
		}
		alone := voters == 0 // one shard: its own nodes are asked instead
		if alone {
			voters = len(named)
		}
		votes := map[string]int{}
		for i, a := range from {
			if owner[i] != "" && named[a] && (alone || !seat[a]) {
				votes[owner[i]]++
			}
		}
		for addr, n := range votes {
			if n > voters/2 && (alone || inEveryMap(addr, members, seat, from, owner)) {
				if k := len(conf); k > 0 && conf[k-1].addr == addr && conf[k-1].to == lo-1 {
					conf[k-1].to = hi
				} else {
					conf = append(conf, slotRange{from: lo, to: hi, addr: addr})
				}
			}
		}
	}
	return conf, named, ids
}

// inEveryMap reports whether owner has, in every answer's own map, a
// majority of the other masters that map names (those not in the slot's
// seat), less the node that gave the map, among the answers that name
// owner (from[i] named owner[i]): the same majority, counted over each
// node's knowledge of the cluster's masters rather than only over their
// union. Leaving out the map's node keeps a node cut off from the bus,
// whose map and word are both stale, from vetoing with its own word what
// the masters it knows agree on since; a majority of a set less one
// master still shares a master with any majority of the whole. A map that
// names no other master says nothing.
func inEveryMap(owner string, members []map[string]bool, seat map[string]bool, from, owners []string) bool {
	for k, m := range members {
		voters, votes := 0, 0
		for a := range m {
			if !seat[a] && a != from[k] {
				voters++
			}
		}
		for i, a := range from {
			if m[a] && !seat[a] && a != from[k] && owners[i] == owner {
				votes++
			}
		}
		if voters > 0 && votes <= voters/2 {
			return false
		}
	}
	return true
}

// routing is the map commands follow: a slot's confirmed owner, else the
// owner the first answer names.
func routing(first, conf []slotRange, ids map[string]string) []slotRange {
	owner := make([]string, keyslot.Slots)
	for _, rs := range [][]slotRange{first, conf} {
		for _, r := range rs {
			for s := r.from; s <= r.to; s++ {
				owner[s] = r.addr
			}
		}
	}
	var out []slotRange
	for s := 0; s < keyslot.Slots; s++ {
		switch {
		case owner[s] == "":
		case len(out) > 0 && out[len(out)-1].addr == owner[s] && out[len(out)-1].to == s-1:
			out[len(out)-1].to = s
		default:
			out = append(out, slotRange{from: s, to: s, addr: owner[s], id: ids[owner[s]]})
		}
	}
	return out
}

// recordOwnersLocked keeps the round's map when it changed, for as long
// as a hold may reach back.
func (c *Cluster) recordOwnersLocked(at time.Time, m []slotRange) {
	owners := map[string][][2]int{}
	for _, r := range m {
		owners[r.addr] = append(owners[r.addr], [2]int{r.from, r.to})
	}
	if n := len(c.hist); n == 0 || !maps.EqualFunc(c.hist[n-1].owners, owners, slices.Equal[[][2]int]) {
		c.hist = append(c.hist, ownSnap{at: at, owners: owners})
	}
	keep := at.Add(-c.opt.Restart.Hold - 10*time.Second)
	for len(c.hist) > 1 && c.hist[1].at.Before(keep) {
		c.hist = c.hist[1:]
	}
}

// ownedSinceLocked is every slot range addr owned from a moment no later
// than from on, as far as the record goes.
func (c *Cluster) ownedSinceLocked(addr string, from time.Time) [][2]int {
	var out [][2]int
	for i, h := range c.hist {
		if i+1 < len(c.hist) && !c.hist[i+1].at.After(from) {
			continue // superseded before from
		}
		out = append(out, h.owners[addr]...)
	}
	return out
}

// confirm records the owners a round confirmed, from its start for Lease.
// A master confirmed for a slot that had another owner, and that owned no
// confirmed slot before, took it over: it records that loss before its
// replies may count for the slot.
func (c *Cluster) confirm(at time.Time, conf []slotRange) {
	c.mu.Lock()
	owners := map[string]bool{}
	for _, cf := range c.conf {
		owners[cf.addr] = true
	}
	type takeover struct{ addr, from string }
	var took []takeover
	for _, r := range conf {
		if owners[r.addr] || slices.ContainsFunc(took, func(t takeover) bool { return t.addr == r.addr }) {
			continue
		}
		for s := r.from; s <= r.to; s++ {
			if old := c.conf[s].addr; old != "" && old != r.addr {
				took = append(took, takeover{r.addr, old})
				break
			}
		}
	}
	c.mu.Unlock()
	for _, t := range took {
		if l := c.linkAt(t.addr); l != nil {
			l.NoteLoss(quorum.ReasonTakeover)
		}
		c.log.Warn("cluster: a majority of the other masters names a new master for a shard's slots (a failover): it counts after the hold",
			"from", t.from, "to", t.addr)
	}
	until := at.Add(c.copt.Lease)
	c.mu.Lock()
	for _, r := range conf {
		for s := r.from; s <= r.to; s++ {
			c.conf[s] = slotConf{addr: r.addr, until: until}
		}
	}
	c.mu.Unlock()
}

// holdLost holds the slots of every shard whose data may have gone back
// in time: those it owned from just before the loss its quarantine counts
// from, until that quarantine ends (the shard's own hold from the same
// loss), wherever they are now.
func (c *Cluster) holdLost(at time.Time) {
	type lost struct {
		addr        string
		from, until time.Time
	}
	var ls []lost
	for _, l := range c.links() {
		h := l.Health()
		if h.QuarantinedUntil.After(at) {
			ls = append(ls, lost{l.Addr(), h.LostAt, h.QuarantinedUntil})
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, x := range ls {
		// A round before the loss may have missed a move just before it.
		for _, r := range c.ownedSinceLocked(x.addr, x.from.Add(-2*c.copt.Refresh)) {
			for s := r[0]; s <= r[1]; s++ {
				if x.until.After(c.held[s]) {
					c.held[s] = x.until
				}
			}
		}
	}
}

// holdsScript keeps the slot holds on a master: a hash from "FROM-TO" (a
// slot range) to when its hold ends, by the master's clock. ARGV are pairs
// of a range and the ms left of its hold, recorded where they end later
// than what is there; it returns every hold not ended, as pairs of a range
// and the ms left, and lets the hash expire with the last.
var holdsScript = resp.NewScript([]byte(`local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for i = 1, #ARGV, 2 do
  local u = now + tonumber(ARGV[i + 1])
  if (tonumber(redis.call('HGET', KEYS[1], ARGV[i])) or 0) < u then
    redis.call('HSET', KEYS[1], ARGV[i], u)
  end
end
local all = redis.call('HGETALL', KEYS[1])
local out, last = {}, 0
for i = 1, #all, 2 do
  local u = tonumber(all[i + 1]) or 0
  if u <= now then
    redis.call('HDEL', KEYS[1], all[i])
  else
    out[#out + 1] = all[i]
    out[#out + 1] = u - now
    last = math.max(last, u)
  end
end
if last > 0 then redis.call('PEXPIREAT', KEYS[1], last) end
return out`))

// exchangeHolds records the slots this proxy holds on every master it is
// connected to, and reads back what every proxy recorded there.
func (c *Cluster) exchangeHolds() {
	now := time.Now()
	c.mu.Lock()
	args := []string{"EVALSHA", holdsScript.Sha, "1", ""}
	for s := 0; s < keyslot.Slots; {
		u := c.held[s]
		e := s
		for e+1 < keyslot.Slots && c.held[e+1].Equal(u) {
			e++
		}
		if u.After(now) {
			left := (u.Sub(now) + time.Millisecond - 1) / time.Millisecond
			args = append(args, strconv.Itoa(s)+"-"+strconv.Itoa(e), strconv.FormatInt(int64(left), 10))
		}
		s = e + 1
	}
	var shards []*shard
	for _, sh := range c.shards {
		if sh.link != nil && sh.marker >= 0 {
			shards = append(shards, sh)
		}
	}
	keys := make([]string, len(shards))
	for i, sh := range shards {
		keys[i] = keyslot.InSlot(ClusterHoldsPrefix, uint16(sh.marker))
	}
	c.mu.Unlock()
	deadline := now.Add(min(c.opt.DialTimeout, c.copt.Lease/4))
	for i, sh := range shards {
		args[3] = keys[i]
		sh.link.Send(resp.AppendCommand(nil, args...), holdsScript, holdsReply{c, sh, sh.link}, 0, deadline)
	}
}

// holdsUnread reports whether a shard's holds record was not read yet.
func (c *Cluster) holdsUnread() bool {
	if c.off() {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, sh := range c.shards {
		if !sh.holdsRead {
			return true
		}
	}
	return false
}

// holdsReply takes what a master's holds record says.
type holdsReply struct {
	c  *Cluster
	sh *shard
	l  *Link
}

func (h holdsReply) Receive(_ int, r Result) {
	if r.Err != nil || r.V.Kind != resp.KindArray {
		return // not read (down, redirected, refused): the next round asks again
	}
	now := time.Now()
	c := h.c
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := 0; i+1 < len(r.V.Elems); i += 2 {
		lo, hi, ok := strings.Cut(string(r.V.Elems[i].Str), "-")
		from, err1 := strconv.Atoi(lo)
		to, err2 := strconv.Atoi(hi)
		if !ok || err1 != nil || err2 != nil || from < 0 || to >= keyslot.Slots || from > to {
			continue
		}
		until := now.Add(time.Duration(r.V.Elems[i+1].Int) * time.Millisecond)
		for s := from; s <= to; s++ {
			if until.After(c.held[s]) {
				c.held[s] = until
			}
		}
	}
	if c.shards[h.sh.addr] == h.sh && h.sh.link == h.l {
		h.sh.holdsRead = true
	}
}

// counts reports whether a reply for slot s from link (sent there with
// ASK by asked, when set) counts at now, as far as the cluster goes: the
// slot is not held, its owner is confirmed and is that link's master (or
// the one that sent it there), and that master's holds record was read.
func (c *Cluster) counts(s uint16, link, asked *Link, now time.Time) bool {
	if c.off() {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	cf := c.conf[s]
	if now.Before(c.held[s]) || !now.Before(cf.until) {
		return false
	}
	if (link == nil || cf.addr != link.Addr()) && (asked == nil || cf.addr != asked.Addr()) {
		return false
	}
	sh := c.shards[cf.addr]
	return sh != nil && sh.holdsRead
}

// confirmedHealthLocked says, for Health, how many slots no owner counts
// for at now, and until when the latest held slot is held (with its
// range).
func (c *Cluster) confirmedHealthLocked(now time.Time) (unconfirmed int, heldUntil time.Time, heldRange string) {
	if c.off() {
		return 0, time.Time{}, ""
	}
	for s := range c.conf {
		if !now.Before(c.conf[s].until) {
			unconfirmed++
		}
	}
	for s := 0; s < keyslot.Slots; s++ {
		if !c.held[s].After(heldUntil) || !c.held[s].After(now) {
			continue
		}
		heldUntil = c.held[s]
		e := s
		for e+1 < keyslot.Slots && c.held[e+1].Equal(heldUntil) {
			e++
		}
		heldRange = rangesString([][2]int{{s, e}})
	}
	return unconfirmed, heldUntil, heldRange
}

// holdWhy explains a slot hold to an operator.
func holdWhy(ranges string) string {
	return fmt.Sprintf("slots %s: a shard that owned them may have lost data, and their hold follows them wherever they move", ranges)
}
