package netio

import (
	"bytes"
	_ "embed"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// The continuity check. A vote counts only when the master's data went on
// without a break between a check that ran before the vote and one that
// ran after it, on the same connection. Redis runs one connection's
// commands in order, so whatever happened to the master between two checks
// (a flush, a failback, an eviction, a resync) shows in the second: the
// votes in between do not count, and the marker check that follows at once
// records the loss for every proxy.
//
// The link appends a check to every write that carries commands sent with
// the Checked flag (the grants: acquisitions), after them, and holds their
// replies until the check's reply arrives. The check compares what the
// connection's last marker check saw: the master's role and replication
// id, the marker's epoch (a new one with every recorded loss), the
// evicted_keys count, that the commands processed did not go back (a
// statistics reset hides evictions), and that no proxy's count of its
// checks in the marker went back: this proxy's own, and the latest counts
// of others it learned (an older copy of the data brought back, say by
// SWAPDB or DEBUG RELOAD, may lack only other proxies' writes: this
// proxy's own count is then as it was). Its cost is one script per write,
// not per command.

// contScript is the check itself (continuity.lua): it answers {the
// master's clock in ms, for the clock check; the marker's new sequence;
// the count of steps back of that clock and the latest one's size in ms}
// when the data went on unbroken since the marker check whose findings it
// is given, and records the deadline of the longest TTL before it.
//
//go:embed continuity.lua
var contBody []byte

// contLua is the check's text: the clock's step rule, then the check.
var contLua = withClockStep(contBody)

var contScript = resp.NewScript(contLua)

// contState is what the continuity checks of a link compare, from its
// last marker check, and the replies they hold. The link's mu protects it.
type contState struct {
	// From the last marker check. run and cmds outlive a connection: the
	// next connection's marker check compares them (a replaced server, a
	// statistics reset).
	run, replid, epoch, evicted string
	cmds                        int64
	// seq is the highest count of this proxy's checks the link saw
	// answered in this epoch: a check that finds it lower sees an older
	// copy.
	seq int64
	// witnesses are other proxies' counts in this epoch, learned by the
	// last marker check (records.go): a check that finds one lower sees an
	// older copy too, one that lacks only other proxies' writes.
	witnesses []witness

	armed   bool          // a marker check was read on this connection: checks can be sent
	cmd     []byte        // the last encoded check
	broken  bool          // a check failed: nothing counts until the next marker check
	pending int           // commands queued since the last check that wait for one
	until   time.Time     // the latest deadline among them: the check's own
	ttl     time.Duration // the longest TTL among them, whose deadline the check records
	held    []held        // replies waiting for the check queued after them
	breaks  uint64        // checks that failed, for Health
}

// held is a reply that waits for its continuity check, or (own) one that
// came behind such a reply and waits to keep the order, with its own
// counts.
type held struct {
	e      entry
	v      resp.Value
	own    bool
	counts bool
}

// expect takes the findings of a marker check as what the checks that
// follow compare, and ends a broken state.
func (c *contState) expect(f contState) {
	if f.epoch != c.epoch {
		c.seq = 0
	}
	c.run, c.replid, c.epoch, c.evicted, c.cmds = f.run, f.replid, f.epoch, f.evicted, f.cmds
	c.seq = max(c.seq, f.seq)
	c.armed, c.broken = true, false
}

// encode writes the check for key, by proxy, with the TTL whose deadline
// it records.
func (c *contState) encode(key, proxy string, ttl time.Duration) []byte {
	// Written argument by argument: one check goes with every write of
	// grants, and formatting its numbers as strings would allocate.
	b := resp.AppendArrayHeader(c.cmd[:0], 11+2*len(c.witnesses))
	for _, a := range [...]string{"EVALSHA", contScript.Sha, "1", key, c.replid, c.epoch, c.evicted} {
		b = resp.AppendBulkString(b, a)
	}
	b = resp.AppendBulkInt(b, c.cmds)
	b = resp.AppendBulkString(b, proxy)
	b = resp.AppendBulkInt(b, c.seq)
	b = resp.AppendBulkInt(b, ttl.Milliseconds())
	for _, w := range c.witnesses {
		b = resp.AppendBulkString(b, w.proxy)
		b = resp.AppendBulkInt(b, w.seq)
	}
	c.cmd = b
	return c.cmd
}

// witness is another proxy's count of its checks in an epoch, as learned
// (book.go).
type witness struct {
	proxy string
	seq   int64
}

// newConnection forgets what belonged to the last connection.
func (c *contState) newConnection() {
	c.armed, c.broken, c.pending, c.until, c.ttl, c.held = false, false, 0, time.Time{}, 0, nil
}

// appendCheckLocked queues a continuity check behind the commands that
// wait for one, when there are any: called as a write is taken.
func (l *Link) appendCheckLocked() {
	if l.cont.pending == 0 {
		return
	}
	until, ttl := l.cont.until, l.cont.ttl
	l.cont.pending, l.cont.until, l.cont.ttl = 0, time.Time{}, 0
	l.queueLocked(entry{rcv: contReceiver{l: l, gen: l.gen, sent: time.Now()}, deadline: until, script: contScript, cont: true},
		l.cont.encode(l.mkey, l.proxyID, ttl))
}

// contReceiver is the receiver of a continuity check's reply when it
// times out or its connection is lost: the replies it held go out, not
// counted.
type contReceiver struct {
	l    *Link
	gen  uint64
	sent time.Time // when the check was queued (for the clock check)
}

func (r contReceiver) Receive(int, Result) {
	l := r.l
	l.mu.Lock()
	var hs []held
	if r.gen == l.gen {
		hs, l.cont.held = l.cont.held, nil
	}
	l.mu.Unlock()
	l.deliverHeld(hs, false)
}

// checkedReplyLocked handles the reply to a continuity check, read at now,
// called by the reader with the lock held: it returns the replies the check
// releases and whether they count, whether a marker check must run at
// once, and how far the master's clock jumped ahead when it did.
func (l *Link) checkedReplyLocked(e entry, v resp.Value, counts bool, now time.Time) (hs []held, ok, recheck bool, ahead time.Duration) {
	hs, l.cont.held = l.cont.held, nil
	if e.expired {
		return hs, false, false, 0 // its receiver already released what it held
	}
	// Unbroken, the check answers the master's clock (ms), which the clock
	// check reads, this proxy's new count, and the clock's steps back.
	ok = v.Kind == resp.KindArray && len(v.Elems) == 4 && v.Elems[0].Int > 0
	if ok {
		l.cont.seq = max(l.cont.seq, v.Elems[1].Int)
		rcv, _ := e.rcv.(contReceiver)
		var jumped bool
		// The reader's instant may be older than this reply's last bytes
		// (it is taken once per read from the socket): the reading's end
		// is taken now.
		if ahead, jumped = l.clockReadLocked(l.cont.run, v.Elems[0].Int, backCount{n: v.Elems[2].Int, ms: v.Elems[3].Int, ok: true}, rcv.sent, time.Now()); jumped {
			ok = false
		}
	}
	if v.Kind == resp.KindError && bytes.HasPrefix(v.Str, []byte("NOSCRIPT")) {
		// The check did not run: its script was flushed (SCRIPT FLUSH),
		// which loses no data. A check sent again now, its script loaded
		// first, runs after every command it holds the replies of, so it
		// proves as much for them: they wait for it, within their
		// deadline. Past it, or once broken, they go out, not counted.
		if !l.cont.broken && l.cont.armed && now.Before(e.deadline) {
			clear(l.loaded)
			l.cont.held = hs // what came after them waits behind them
			l.queueLocked(entry{rcv: contReceiver{l: l, gen: l.gen, sent: now}, deadline: e.deadline, script: contScript, cont: true}, l.cont.cmd)
			return nil, false, false, 0
		}
		return hs, false, false, 0
	}
	if !ok && !l.cont.broken {
		l.cont.broken, recheck = true, true
		l.cont.breaks++
	}
	return hs, ok && counts && !l.cont.broken, recheck, ahead
}

// deliverHeld hands held replies to their receivers, in order: the grants
// with counts, the others with their own.
func (l *Link) deliverHeld(hs []held, counts bool) {
	for _, h := range hs {
		if h.own {
			deliver(h.e, h.v, h.counts)
			continue
		}
		h.e.rcv.Receive(h.e.tag, Result{V: h.v, Counts: counts})
	}
}
