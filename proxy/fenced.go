package proxy

import (
	"bytes"
	"strconv"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// Grants numbered by a counter (spec.Counter: Redisson's RFencedLock
// takes its token with INCR of a key beside the lock, and reads it back
// with GET of that key). The masters never run the increment: a count moved
// on the masters that saw each call has no majority meaning, and the
// largest count a majority report is not monotonic (a later grant may read
// a majority that missed the earlier one's increment). The proxy answers
// the grant's FENCE number instead, which strictly increases across grants
// through any proxy (fence.go): a grant whose reply shows the count gets a
// FENCE of the lock for its token before the reply leaves, and a GET of
// the counter's name answers the FENCE number of the lock's holder.

// chainKind is the FENCE that follows an op before its reply leaves.
type chainKind uint8

const (
	chainNone   chainKind = iota
	chainGrant            // a grant whose reply shows its number (spec.SrcFence)
	chainHolder           // GET of a counter's name: the number of the lock's holder
)

// startChains starts the FENCE of every chained slot whose op is decided
// (flush waits for them before any reply leaves). An op's reply is taken
// now, as it would leave: a grant whose validity ran out is answered as a
// failure and gets no number.
func (c *client) startChains() {
	c.chains = 0
	for i := range c.slots {
		sl := &c.slots[i]
		if sl.chain == chainNone {
			continue
		}
		sl.first = sl.op.final(time.Now())
		switch o := sl.op; sl.chain {
		case chainGrant:
			cl := o.sc.class
			if o.sc.success && cl.Replies[o.sc.caseAt].Fenced() {
				sl.fence = startFence(c, o.sc.keys[0], o.sc.argv[cl.Tokens[0]])
			}
		case chainHolder:
			if sl.first.Kind == resp.KindBulk {
				sl.fence = startFence(c, sl.key, sl.first.Str)
			}
		}
	}
}

// chained is a chained slot's reply as it leaves at now.
func (sl *slot) chained(now time.Time) resp.Value {
	if sl.fence == nil {
		if sl.chain == chainHolder {
			return resp.Nil // no holder: no number
		}
		return sl.first
	}
	n := sl.fence.final(now)
	switch {
	case n.Kind != resp.KindInt && sl.chain == chainHolder:
		return resp.Nil
	case n.Kind != resp.KindInt:
		return resp.ErrorValue(msgNoFenceForGrant)
	case sl.chain == chainHolder:
		return resp.BulkValue(strconv.AppendInt(nil, n.Int, 10))
	}
	o := sl.op
	return o.sc.class.Replies[o.sc.caseAt].Refence(sl.first, n.Int)
}

// msgNoFenceForGrant answers a grant whose number could not be agreed
// before its validity ran out (or under contention): the client must not
// rely on the lock, which expires with its TTL.
const msgNoFenceForGrant = "ERR redlock-proxy: the lock was granted, but its fencing number could not be agreed before its validity ran out: do not rely on it (it expires with its TTL)"

// counterNames are the names a counter key takes beside its lock key, as
// the calls of counted scripts showed them (the lock's name with a prefix
// and a suffix: Redisson's "redisson_lock_token:{" and "}"), so that a GET
// of a counter's name is answered with its lock's number. At most
// maxCounterNames are kept.
type counterNames struct {
	mu    sync.Mutex
	names [][2]string
}

const maxCounterNames = 16

// learn records the form of a counter's name from a call: its lock key
// within it.
func (cn *counterNames) learn(counter, lock []byte) {
	i := bytes.Index(counter, lock)
	if i < 0 || len(lock) == 0 {
		return
	}
	form := [2]string{string(counter[:i]), string(counter[i+len(lock):])}
	if form == ([2]string{}) {
		return
	}
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, f := range cn.names {
		if f == form {
			return
		}
	}
	if len(cn.names) < maxCounterNames {
		cn.names = append(cn.names, form)
	}
}

// lockOf returns the lock key whose counter key is named so, if any form
// learnt matches.
func (cn *counterNames) lockOf(key []byte) ([]byte, bool) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	for _, f := range cn.names {
		if len(key) > len(f[0])+len(f[1]) && bytes.HasPrefix(key, []byte(f[0])) && bytes.HasSuffix(key, []byte(f[1])) {
			return key[len(f[0]) : len(key)-len(f[1])], true
		}
	}
	return nil, false
}

// startHolderNumber answers GET of a counter's name: the lock's holder (a
// hash lock's one field, as a majority hold it), then its FENCE number.
func startHolderNumber(c *client, lock []byte) {
	c.reserveRead()
	o := c.s.eng.newOp("get", ruleGet, c.done)
	c.cmd = appendBoundedRead(c.cmd[:0], holderScript, lock, c.s.cfg.Limits.MaxToken)
	c.noteTracking(o, c.cmdKeys)
	c.s.eng.start(o, c.cmd, holderScript)
	c.slots = append(c.slots, slot{op: o, chain: chainHolder, key: append([]byte(nil), lock...), resp3: c.resp3.Load()})
	c.inflight++
	c.chains++
}

// noteFenced learns the name of a counted script's counter (a later GET
// of it answers the holder's number, whether or not this call shows it),
// and reports whether the op's grant shows its number.
func (c *client) noteFenced(cl *spec.Class, keys, argv [][]byte) bool {
	if cl.Counter == nil {
		return false
	}
	c.s.counters.learn(argv[cl.Counter.Arg], keys[0])
	return cl.Fenced()
}
