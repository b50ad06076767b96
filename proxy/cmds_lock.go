package proxy

import (
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// lockCommands are the lock commands, fanned out to every backend: the
// acquire (SET NX PX), the reads, the force-unlock (DEL), FENCE
// (fence.go), and Valkey 9's and Redis 8.4's release primitives, served on
// Redis 7 backends.
var lockCommands = []*commandDef{
	{name: "set", arity: -3, flags: []string{"write", "denyoom"}, first: 1, last: 1, step: 1, lock: kindAcquire, fn: handleSet},
	{name: "get", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, fn: handleGet},
	{name: "del", arity: -2, flags: []string{"write"}, first: 1, last: -1, step: 1, lock: kindRelease, fn: handleDel},
	{name: "pttl", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, fn: handlePTTL},
	{name: "ttl", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, fn: handleTTL},
	{name: "hget", arity: 3, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, fn: handleHGet},
	{name: "hexists", arity: 3, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, fn: handleHExists},
	{name: "fence", arity: 3, flags: []string{"write"}, first: 1, last: 1, step: 1, fn: handleFence},
	{name: "delifeq", arity: 3, flags: []string{"write"}, first: 1, last: 1, step: 1, lock: kindRelease, fn: handleDelIfEq},
	{name: "delex", arity: -2, flags: []string{"write"}, first: 1, last: 1, step: 1, lock: kindRelease, fn: handleDelEx},
}

// startOp sends cmd to every backend for op o and queues its reply.
func (c *client) startOp(o *op, cmd []byte, sc *resp.Script) {
	c.noteTracking(o, c.cmdKeys)
	c.s.eng.start(o, cmd, sc)
	c.slots = append(c.slots, slot{op: o, resp3: c.resp3.Load()})
	c.inflight++
}

func handleSet(c *client, args [][]byte) {
	req, msg := parseSet(args, time.Now(), c.s.cfg.MaxTTL)
	if msg != "" {
		c.replyErr(msg)
		return
	}
	if len(req.value) > c.s.cfg.Limits.MaxToken {
		c.replyErr(msgTokenTooLong(len(req.value), c.s.cfg.Limits.MaxToken))
		return
	}
	switch {
	case req.past && req.ifEq:
		// An extend to a passed deadline fails and leaves the lock as it
		// was, as every extend through the proxy does (one Redis would
		// delete the key).
		c.reply(resp.Nil)
		return
	case req.past:
		startPastAcquire(c, req.key)
		return
	case req.ifEq:
		startSetIfEq(c, req)
		return
	}
	c.reserve(1)
	o := c.s.eng.newOp("set", ruleAcquire, c.done)
	o.ttl = req.ttl
	o.undoCmd = appendUndoCmd(o.undoBuf[:0], undoScript, args[1:2], [][]byte{req.value}, req.ttl)
	b := resp.AppendArrayHeader(c.cmd[:0], 6)
	b = resp.AppendBulkString(b, "SET")
	b = resp.AppendBulk(b, req.key)
	b = resp.AppendBulk(b, req.value)
	b = resp.AppendBulkString(b, "NX")
	b = resp.AppendBulkString(b, "PX")
	b = resp.AppendBulkInt(b, req.ttl.Milliseconds())
	c.cmd = b
	c.startOp(o, b, nil)
}

// startPastAcquire answers SET key value NX PXAT (or EXAT) of a time
// already passed as one Redis does: OK where the key is free, nil where it
// is held, and nothing written anywhere: no lock is held either way. The
// key's state is read as GET reads it.
func startPastAcquire(c *client, key []byte) {
	c.reserveRead()
	o := c.s.eng.newOp("set", rulePastAcquire, c.done)
	c.cmd = appendBoundedRead(c.cmd[:0], getScript, key, c.s.cfg.Limits.MaxToken)
	c.startOp(o, c.cmd, getScript)
}

func handleGet(c *client, args [][]byte) {
	if lock, ok := c.s.counters.lockOf(args[1]); ok {
		// A counter of grants: the holder's number (fenced.go), a FENCE of
		// the lock, which the user must be allowed.
		if msg := c.aclRefusal(commands["fence"], [][]byte{[]byte("fence"), lock, nil}); msg != "" {
			c.replyErr(msg)
			return
		}
		startHolderNumber(c, lock)
		return
	}
	c.reserveRead()
	o := c.s.eng.newOp("get", ruleGet, c.done)
	c.cmd = appendBoundedRead(c.cmd[:0], getScript, args[1], c.s.cfg.Limits.MaxToken)
	c.startOp(o, c.cmd, getScript)
}

// appendBoundedRead encodes EVALSHA of a read script bounded by max_token.
func appendBoundedRead(b []byte, sc *resp.Script, key []byte, maxToken int) []byte {
	b = resp.AppendArrayHeader(b, 5)
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, sc.Sha)
	b = resp.AppendBulkString(b, "1")
	b = resp.AppendBulk(b, key)
	return resp.AppendBulkInt(b, int64(maxToken))
}

func handlePTTL(c *client, args [][]byte) { startTTL(c, args[1], "pttl", rulePTTL) }
func handleTTL(c *client, args [][]byte)  { startTTL(c, args[1], "ttl", ruleTTL) }

func startTTL(c *client, key []byte, name string, r rules) {
	c.reserveRead()
	o := c.s.eng.newOp(name, r, c.done)
	c.cmd = appendBoundedRead(c.cmd[:0], readScript, key, c.s.cfg.Limits.MaxToken)
	c.startOp(o, c.cmd, readScript)
}

// handleHGet and handleHExists read a hash lock's field (kind_read.go).
func handleHGet(c *client, args [][]byte)    { startHashField(c, args, "hget", ruleHGet) }
func handleHExists(c *client, args [][]byte) { startHashField(c, args, "hexists", ruleHExists) }

func startHashField(c *client, args [][]byte, name string, r rules) {
	c.reserveRead()
	o := c.s.eng.newOp(name, r, c.done)
	b := resp.AppendArrayHeader(c.cmd[:0], 6)
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, hashFieldScript.Sha)
	b = resp.AppendBulkString(b, "1")
	b = resp.AppendBulk(b, args[1])
	b = resp.AppendBulk(b, args[2])
	c.cmd = resp.AppendBulkInt(b, int64(c.s.cfg.Limits.MaxToken))
	c.startOp(o, c.cmd, hashFieldScript)
}

// handleDel is an operator's force-unlock: each key is deleted on every
// backend, and counts as deleted when a majority deleted it.
func handleDel(c *client, args [][]byte) {
	keys := args[1:]
	c.reserve(len(keys))
	ops := make([]*op, len(keys))
	for i, k := range keys {
		ops[i] = c.s.eng.newOp("del", ruleDel, c.done)
		ops[i].forcedBy, ops[i].forcedKey = c, append([]byte(nil), k...)
		c.cmd = appendDelCmd(c.cmd[:0], k, c.s.cfg.Limits.MaxToken)
		if c.cmdKeys != nil {
			c.noteTracking(ops[i], keys[i:i+1])
		}
		c.s.eng.start(ops[i], c.cmd, delScript)
	}
	c.await(ops...)
}

// appendDelCmd encodes a forced delete of key, of its FENCE state, which
// lives exactly as long as its grant (as a release deletes it too), and of
// a semaphore's permits kept under that key (kind_sem.go).
func appendDelCmd(b []byte, key []byte, maxToken int) []byte {
	b = resp.AppendArrayHeader(b, 7)
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, delScript.Sha)
	b = resp.AppendBulkString(b, "3")
	b = resp.AppendBulk(b, key)
	b = keyslot.BulkCompanion(b, fenceStatePrefix, key)
	b = keyslot.BulkCompanion(b, semPrefix, key)
	return resp.AppendBulkInt(b, int64(maxToken))
}

// The newer release primitives of Valkey 9 (DELIFEQ) and Redis 8.4 (DELEX
// IFEQ, SET IFEQ), run as compare-and-delete and compare-and-extend on
// Redis 7 backends.

// compareDelete is DELIFEQ / DELEX IFEQ as a release: 1 deleted, 0 not.
var compareDelete = spec.Must("release keys=1 args=1 token=1; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0")

// setIfEq is SET key value IFEQ value PX ms as an extend: re-arm the TTL
// of a lock that holds the caller's value (and of its fencing state, as
// every extend does); OK, or nil.
var setIfEq = spec.Must("extend keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: nil; own: +OK; own-no-ttl: +OK; other: nil; other-no-ttl: nil")

// startSetIfEq extends a lock as SET key token IFEQ token PX ms: OK when a
// majority re-armed it with validity left, nil otherwise, as Redis 8.4.
func startSetIfEq(c *client, req setRequest) {
	ttl := []byte(strconv.FormatInt(req.ttl.Milliseconds(), 10))
	startClassOp(c, "set", setIfEq, [][]byte{req.key}, [][]byte{req.value, ttl})
}

// handleDelIfEq is Valkey 9's DELIFEQ key value: delete the key if it holds
// value. It runs as a compare-and-delete on every backend.
func handleDelIfEq(c *client, args [][]byte) { startCompareDelete(c, "delifeq", args[1], args[2]) }

func startCompareDelete(c *client, name string, key, value []byte) {
	startClassOp(c, name, compareDelete, [][]byte{key}, [][]byte{value})
}

// handleDelEx is Redis 8.4's DELEX key [IFEQ value]: with IFEQ a
// compare-and-delete, without a condition a force DEL.
func handleDelEx(c *client, args [][]byte) {
	switch {
	case len(args) == 2:
		handleDel(c, args)
	case len(args) == 4 && is(args[2], "ifeq"):
		startCompareDelete(c, "delex", args[1], args[3])
	case len(args) == 4 && (is(args[2], "ifne") || is(args[2], "ifdeq") || is(args[2], "ifdne")):
		c.replyErr(msgDelexIfEqOnly)
	default:
		c.replyErr(msgSyntax)
	}
}
