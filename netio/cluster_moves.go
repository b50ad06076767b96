package netio

import "github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"

// A slot whose master changes while commands are in flight at the old one:
// its new commands wait for those, so that the slot's commands reach its
// master in the order they were sent (slotMove).

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
