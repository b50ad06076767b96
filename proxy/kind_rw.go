package proxy

import (
	"bytes"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Read-write locks (Redisson's RReadWriteLock, classify.RWCheck): many
// readers or one writer. Each master keeps the lock as Redisson does
// (luascripts_rw.go) and applies the rule on its own: a read hold only
// where no other holder has the write lock, a write hold only where the
// lock is free (or the caller's write lock). A grant needs a majority of
// counted masters within validity, as a SET NX does; so a write grant
// needs a majority with no reader and no other writer, a read grant a
// majority without another's writer, and any two majorities share a
// master, which never holds a write lock beside another's hold. A failed
// grant is undone where it took effect, only while that grant is the
// holder's last there (its nonce), so an undo takes off that hold and its
// lease and never another's. A release answers once every master answered
// or timed out: "freed" (and the release's message, published once by
// this proxy) only when a majority freed the lock; a writer is told its
// write lock is still held only when a majority still count a hold after
// it (in doubt it is released, never held). Renewals are extends: never
// undone, never shortening.

// rwCall is what a read-write lock op needs besides the op.
type rwCall struct {
	role classify.RWRole
	// channel and message of a release's notice, and whether it is sent
	// by SPUBLISH.
	channel, message []byte
	shard            bool
}

var ruleRW rules = rwRules{}

type rwRules struct{}

func (rwRules) effects(o *op) effect {
	switch o.rw.role {
	case classify.RWReadAcquire, classify.RWWriteAcquire:
		return effTakes | effValidity | effWrites
	case classify.RWReadRenew:
		return effValidity | effWrites
	}
	return effWrites
}

func (rwRules) vote(o *op, v resp.Value) quorum.Vote {
	switch o.rw.role {
	case classify.RWReadAcquire, classify.RWWriteAcquire:
		if v.Kind != resp.KindArray || len(v.Elems) != 3 || v.Elems[0].Kind != resp.KindInt || v.Elems[2].Kind != resp.KindInt {
			return quorum.Unknown
		}
		if v.Elems[0].Int == 1 {
			return quorum.Granted
		}
		return quorum.Refused
	}
	switch {
	case v.Kind != resp.KindInt:
		return quorum.Unknown
	case v.Int >= 1:
		return quorum.Granted
	}
	return quorum.Refused
}

func (rwRules) decide(o *op) bool { return o.decideByMajority() }

// reply: an acquire answers nil, or the PTTL a waiter waits at most (the
// longest a refusing master reported, at least 1 ms); a renewal 1 or 0; a
// release its answer once every master answered (refill).
func (r rwRules) reply(o *op, success bool) resp.Value {
	switch o.rw.role {
	case classify.RWReadAcquire, classify.RWWriteAcquire:
		if success {
			return resp.Nil
		}
		wait := int64(1)
		for i := 0; i < o.e.n; i++ {
			if v, _ := o.tally.Vote(i); v == quorum.Refused {
				wait = max(wait, o.replies[i].Elems[2].Int)
			}
		}
		return resp.IntValue(wait)
	case classify.RWReadRenew:
		if success {
			return resp.IntValue(1)
		}
		return resp.IntValue(0)
	}
	return r.releaseReply(o, success)
}

// releaseReply is a release's answer, as Redisson's: nil where the caller
// held nothing; 1 when the lock was freed (a write lock: its write hold
// gone); 0 when it is still locked.
func (rwRules) releaseReply(o *op, success bool) resp.Value {
	if !success {
		return resp.Nil
	}
	m := quorum.Majority(o.e.n)
	if o.rw.role == classify.RWReadRelease {
		if o.rwCodes(2) >= m {
			return resp.IntValue(1)
		}
		return resp.IntValue(0)
	}
	if o.rwCodes(1) >= m {
		return resp.IntValue(0) // write holds are left on a majority
	}
	return resp.IntValue(1)
}

func (r rwRules) refill(o *op, _ time.Time) resp.Value {
	if o.rw.role == classify.RWReadRelease || o.rw.role == classify.RWWriteRelease {
		return r.releaseReply(o, o.outcome == ResultGranted)
	}
	return o.result
}

func (rwRules) undoFate(_ *op, v quorum.Vote, r netio.Result) quorum.Fate { return fate(v, r) }

// rwCodes counts the counted masters whose release answered code.
func (o *op) rwCodes(code int64) int {
	n := 0
	for i := 0; i < o.e.n; i++ {
		if v, counts := o.tally.Vote(i); counts && v == quorum.Granted && o.replies[i].Int == code {
			n++
		}
	}
	return n
}

// rwNoticeLocked is the release's message, published by this proxy once a
// majority of masters freed the lock.
func (o *op) rwNoticeLocked() []byte {
	if o.rw.channel == nil || o.outcome != ResultGranted || o.rwCodes(2) < quorum.Majority(o.e.n) {
		return nil
	}
	kind := noticeMessage
	if o.rw.shard {
		kind = noticeShard
	}
	return appendNotice(nil, netio.ReleaseChannel, newNonce(), kind, o.rw.channel, o.rw.message)
}

// startRWScript runs a call of a read-write lock script.
func startRWScript(c *client, lay *classify.RWLock, keys, argv [][]byte) {
	if why := lay.Fits(keys, argv); why != "" {
		c.replyErr("ERR redlock-proxy: " + why)
		return
	}
	if c.s.eng.veto {
		c.replyErr(msgRWUpgrade)
		return
	}
	if lay.Role == classify.RWReadRenew {
		startRWRenew(c, keys, argv)
		return
	}
	key := keys[lay.Lock]
	if c.s.cfg.Cluster && !classify.RWLeasesInSlot(key) {
		c.replyErr(msgRWSlot)
		return
	}
	holder := argv[lay.Holder]
	if msg := c.rwName(holder); msg != "" {
		c.replyErr(msg)
		return
	}
	var ttl time.Duration
	if lay.TTL >= 0 {
		var msg string
		if ttl, msg = c.rwTTL(argv[lay.TTL], "ARGV["+itoa(int64(lay.TTL+1))+"]"); msg != "" {
			c.replyErr(msg)
			return
		}
	}
	rc := &rwCall{role: lay.Role}
	c.reserve(1)
	o := c.s.eng.newOp(lay.Role.String(), ruleRW, c.done)
	o.rw = rc
	var cmd []byte
	var sc *resp.Script
	switch lay.Role {
	case classify.RWReadAcquire, classify.RWWriteAcquire:
		o.ttl = ttl
		nonce := newNonce()
		kind := "r"
		if lay.Role == classify.RWReadAcquire {
			writer := argv[lay.Writer]
			if msg := c.rwName(writer); msg != "" {
				c.replyErr(msg)
				return
			}
			sc = rwReadAcquireScript
			cmd = appendEvalShaArgs(c.cmd[:0], sc, key, itoa(ttl.Milliseconds()), holder, writer, nonce)
		} else {
			// A re-entry adds its TTL to what is left, up to max_ttl.
			o.longest = c.s.cfg.MaxTTL
			kind = "w"
			sc = rwWriteAcquireScript
			cmd = appendEvalShaArgs(c.cmd[:0], sc, key, itoa(ttl.Milliseconds()), holder, nonce, itoa(c.s.cfg.MaxTTL.Milliseconds()))
		}
		o.undoCmd = appendEvalShaArgs(o.undoBuf[:0], rwUndoScript, key, holder, nonce, kind, undoAtZero)
		o.undoSc, o.laterSc = rwUndoScript, rwUndoScript
	default:
		latchTTL, ok := resp.ParseInt(argv[lay.LatchTTL])
		switch {
		case !ok || latchTTL <= 0:
			c.replyErr(msgNotInteger)
			return
		case latchTTL > c.s.cfg.MaxTTL.Milliseconds():
			c.replyErr(msgLatchTooLong(latchTTL, c.s.cfg.MaxTTL.Milliseconds()))
			return
		}
		rc.channel = append([]byte(nil), keys[lay.Channel]...)
		rc.message = append([]byte(nil), argv[lay.Message]...)
		rc.shard = bytes.EqualFold(argv[lay.Publish], []byte("spublish"))
		o.awaitAll = true
		latch := keys[lay.Latch]
		if lay.Role == classify.RWReadRelease {
			sc = rwReadReleaseScript
			cmd = appendEvalShaKeys(c.cmd[:0], sc, [][]byte{key, latch}, string(holder), itoa(latchTTL))
		} else {
			// Where write holds are left it re-arms the lock to its TTL:
			// that deadline is recorded as a grant's. A read release only
			// shortens the lock to leases already recorded.
			o.longest = ttl
			sc = rwWriteReleaseScript
			cmd = appendEvalShaKeys(c.cmd[:0], sc, [][]byte{key, latch}, string(holder), itoa(ttl.Milliseconds()), itoa(latchTTL))
		}
	}
	c.cmd = cmd
	c.startOp(o, cmd, sc)
}

// startRWRenew renews each lock of the call (Redisson's watchdog sends
// every read lock a client holds at once): an op per lock, answered
// together as an array of 1 (renewed) and 0.
func startRWRenew(c *client, keys, argv [][]byte) {
	ttl, msg := c.rwTTL(argv[0], "ARGV[1]")
	if msg != "" {
		c.replyErr(msg)
		return
	}
	for k := 0; k < len(keys); k += 2 {
		if c.s.cfg.Cluster && !classify.RWLeasesInSlot(keys[k]) {
			c.replyErr(msgRWSlot)
			return
		}
		if msg := c.rwName(argv[1+k/2]); msg != "" {
			c.replyErr(msg)
			return
		}
	}
	n := len(keys) / 2
	c.reserve(n) // room for every op: none flushes before the others start
	ops := make([]*op, 0, n)
	for k := 0; k < len(keys); k += 2 {
		o := c.s.eng.newOp(classify.RWReadRenew.String(), ruleRW, c.done)
		o.rw = &rwCall{role: classify.RWReadRenew}
		o.ttl = ttl
		cmd := appendEvalShaArgs(nil, rwReadRenewScript, keys[k], itoa(ttl.Milliseconds()), argv[1+k/2])
		c.noteTracking(o, keys[k:k+1])
		c.s.eng.start(o, cmd, rwReadRenewScript)
		ops = append(ops, o)
	}
	c.slots = append(c.slots, slot{ops: ops, each: true, resp3: c.resp3.Load()})
	c.inflight += n
}

// rwName checks a holder's or writer's name: a field of the lock's hash
// beside "mode".
func (c *client) rwName(name []byte) string {
	switch {
	case len(name) > c.s.cfg.Limits.MaxToken:
		return msgTokenTooLong(len(name), c.s.cfg.Limits.MaxToken)
	case len(name) == 0 || string(name) == "mode":
		return msgRWHolder
	}
	return ""
}

// rwTTL reads a TTL argument in ms: above 0, within max_ttl.
func (c *client) rwTTL(arg []byte, name string) (time.Duration, string) {
	ms, ok := resp.ParseInt(arg)
	switch {
	case !ok:
		return 0, msgNotInteger
	case ms <= 0:
		return 0, msgScriptNeedsExpiry(name)
	case ms > c.s.cfg.MaxTTL.Milliseconds():
		return 0, msgTTLTooLong(ms, c.s.cfg.MaxTTL.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, ""
}

const (
	msgRWUpgrade = "ERR redlock-proxy: read-write locks are refused while upgrade_from is set: the old Redis would grant them by its own rule, which the proxy's vote does not see"
	msgRWSlot    = "ERR redlock-proxy: a read-write lock's leases are keys named after its key, which must have a complete hash tag ({...}) on a Redis Cluster backend for them to be in the key's slot"
	msgRWHolder  = "ERR redlock-proxy: a read-write lock's holder must be a non-empty name other than \"mode\""
)
