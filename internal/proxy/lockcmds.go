package proxy

import (
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// startOp sends cmd to every backend for op o and queues its reply.
func (c *client) startOp(o *op, cmd []byte, sc *resp.Script) {
	c.noteTracking(o, c.cmdKeys)
	c.s.eng.start(o, cmd, sc)
	c.slots = append(c.slots, slot{op: o, resp3: c.resp3})
	c.inflight++
}

func cmdSet(c *client, args [][]byte) {
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
	o := c.s.eng.newOp("set", opAcquire, c.done)
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
	o := c.s.eng.newOp("set", opGet, c.done)
	o.pastAcquire = true
	c.cmd = appendBoundedRead(c.cmd[:0], getScript, key, c.s.cfg.Limits.MaxToken)
	c.startOp(o, c.cmd, getScript)
}

func cmdGet(c *client, args [][]byte) {
	c.reserveRead()
	o := c.s.eng.newOp("get", opGet, c.done)
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

func cmdPTTL(c *client, args [][]byte) { startTTL(c, args[1], "pttl", false) }
func cmdTTL(c *client, args [][]byte)  { startTTL(c, args[1], "ttl", true) }

func startTTL(c *client, key []byte, name string, seconds bool) {
	c.reserveRead()
	o := c.s.eng.newOp(name, opPTTL, c.done)
	o.seconds = seconds
	c.cmd = appendBoundedRead(c.cmd[:0], readScript, key, c.s.cfg.Limits.MaxToken)
	c.startOp(o, c.cmd, readScript)
}

// cmdDel is an operator's force-unlock: each key is deleted on every
// backend, and counts as deleted when a majority deleted it.
func cmdDel(c *client, args [][]byte) {
	keys := args[1:]
	c.reserve(len(keys))
	ops := make([]*op, len(keys))
	for i, k := range keys {
		ops[i] = c.s.eng.newOp("del", opDel, c.done)
		c.cmd = appendDelCmd(c.cmd[:0], k)
		if c.cmdKeys != nil {
			c.noteTracking(ops[i], keys[i:i+1])
		}
		c.s.eng.start(ops[i], c.cmd, delScript)
	}
	c.await(ops...)
}

// appendDelCmd encodes a forced delete of key and of its FENCE state, which
// lives exactly as long as its grant (as a release deletes it too).
func appendDelCmd(b []byte, key []byte) []byte {
	b = resp.AppendArrayHeader(b, 5)
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, delScript.Sha)
	b = resp.AppendBulkString(b, "2")
	b = resp.AppendBulk(b, key)
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(keyslot.CompanionLen(fenceStatePrefix, key)), 10)
	b = append(b, '\r', '\n')
	b = keyslot.Companion(b, fenceStatePrefix, key)
	return append(b, '\r', '\n')
}
