package proxy

import (
	"fmt"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/proxy/script"
)

// startOp sends cmd to every backend for op o and queues its reply.
func (c *client) startOp(o *op, cmd []byte, sc *resp.Script) {
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
	if req.ifEq {
		startSetIfEq(c, req)
		return
	}
	c.reserve(1)
	o := c.s.eng.newOp("set", opAcquire, c.done)
	o.ttl = req.ttl
	o.undoCmd = appendUndoCmd(o.undoBuf[:0], args[1:2], req.value)
	o.undoLater = appendUndoLater(nil, args[1:2], req.value, req.ttl)
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

func appendKeyCmd(b []byte, name string, key []byte) []byte {
	b = resp.AppendArrayHeader(b, 2)
	b = resp.AppendBulkString(b, name)
	return resp.AppendBulk(b, key)
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
		c.cmd = appendKeyCmd(c.cmd[:0], "DEL", k)
		c.s.eng.start(ops[i], c.cmd, nil)
	}
	c.await(ops...)
}

func cmdEval(c *client, args [][]byte) {
	if len(args[1]) > c.s.cfg.Limits.MaxBulk {
		c.replyErr("ERR redlock-proxy: script too long")
		return
	}
	k := c.s.cfg.Scripts.Lookup(args[1])
	runScript(c, k, args)
}

func cmdEvalSha(c *client, args [][]byte) {
	k := c.s.cfg.Scripts.BySha(args[1])
	if k == nil {
		c.replyErr(msgNoScript)
		return
	}
	runScript(c, k, args)
}

// msgUnknownScript refuses a script the registry does not know.
func msgUnknownScript(sha string) string {
	return "ERR redlock-proxy: unknown script " + sha + ": only recognised lock scripts run through the proxy; " +
		"register it under 'scripts:' in the configuration (sha1 or text, with its role and argument layout), " +
		"or set unknown_scripts: vote to run it on every backend and reply what a majority answer"
}

// runScript runs a known lock script on every backend: args is EVAL or
// EVALSHA with its numkeys, keys and arguments.
func runScript(c *client, k *script.Known, args [][]byte) {
	numkeys, ok := resp.ParseInt(args[2])
	switch {
	case !ok:
		c.replyErr(msgNotInteger)
		return
	case numkeys < 0:
		c.replyErr(msgNumkeysNegative)
		return
	case numkeys > int64(len(args)-3):
		c.replyErr(msgNumkeysTooBig)
		return
	}
	if reservedKey(args, 3, 2+int(numkeys), 1) {
		c.replyErr(msgReservedKey)
		return
	}
	spec := k.Spec
	if spec == nil {
		if !c.s.cfg.VoteUnknownScripts {
			c.replyErr(msgUnknownScript(k.Script.Sha))
			return
		}
		c.s.cfg.Scripts.Remember(k)
		c.reserve(1)
		o := c.s.eng.newOp("vote", opVote, c.done)
		c.cmd = appendEvalSha(c.cmd[:0], k.Script.Sha, args[2:])
		c.startOp(o, c.cmd, k.Script)
		return
	}
	keys := args[3 : 3+numkeys]
	argv := args[3+numkeys:]
	if (spec.Keys > 0 && len(keys) != spec.Keys) || len(keys) == 0 {
		c.replyErr(fmt.Sprintf("ERR redlock-proxy: script %q (%s) takes %s, got %d", spec.Name, k.Script.Sha, keysWanted(spec), len(keys)))
		return
	}
	if spec.TokenArg >= len(argv) || spec.TTLArg >= len(argv) {
		c.replyErr(fmt.Sprintf("ERR redlock-proxy: script %q (%s) needs at least %d arguments after its keys", spec.Name, k.Script.Sha, max(spec.TokenArg, spec.TTLArg)+1))
		return
	}
	if spec.DBArg > 0 && (spec.DBArg > len(argv) || string(argv[spec.DBArg-1]) != "0") {
		c.replyErr(msgOnlyDB0)
		return
	}
	var ttl time.Duration
	if spec.TTLArg >= 0 {
		n, ok := resp.ParseInt(argv[spec.TTLArg])
		if !ok || n <= 0 {
			c.replyErr(msgNotInteger)
			return
		}
		if n > int64(c.s.cfg.MaxTTL/spec.TTLUnit) {
			c.replyErr(msgTTLTooLong(n*spec.TTLUnit.Milliseconds(), c.s.cfg.MaxTTL.Milliseconds()))
			return
		}
		ttl = time.Duration(n) * spec.TTLUnit
	}
	c.reserve(1)
	o := c.s.eng.newOp(spec.Role.String(), opScript, c.done)
	o.spec = spec
	o.nkeys = len(keys)
	o.ttl = ttl
	// Only a pure acquire is undone: an extend-or-acquire may have extended
	// the caller's still-valid lock on some nodes, and a compare-and-delete
	// cannot tell those from the nodes where it acquired.
	if spec.Role == script.RoleAcquire {
		o.undoCmd = appendUndoCmd(o.undoBuf[:0], keys, argv[spec.TokenArg])
		o.undoLater = appendUndoLater(nil, keys, argv[spec.TokenArg], ttl)
	}
	// The registered reference text runs, not the client's bytes.
	c.cmd = appendEvalSha(c.cmd[:0], k.Run.Sha, args[2:])
	c.startOp(o, c.cmd, k.Run)
}

// appendEvalSha encodes EVALSHA sha followed by numkeys, keys and args.
func appendEvalSha(b []byte, sha string, rest [][]byte) []byte {
	b = resp.AppendArrayHeader(b, 2+len(rest))
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, sha)
	for _, a := range rest {
		b = resp.AppendBulk(b, a)
	}
	return b
}

func keysWanted(s *script.Spec) string {
	if s.Keys == 0 {
		return "one or more keys"
	}
	if s.Keys == 1 {
		return "1 key"
	}
	return fmt.Sprintf("%d keys", s.Keys)
}

func cmdScript(c *client, args [][]byte) {
	sub := args[1]
	switch {
	case is(sub, "load") && len(args) == 3:
		k := c.s.cfg.Scripts.Lookup(args[2])
		if k.Spec == nil && !c.s.cfg.VoteUnknownScripts {
			c.replyErr(msgUnknownScript(k.Script.Sha))
			return
		}
		c.s.cfg.Scripts.Remember(k)
		c.reply(resp.BulkValue([]byte(k.Script.Sha)))
	case is(sub, "exists") && len(args) >= 3:
		v := resp.Value{Kind: resp.KindArray, Elems: make([]resp.Value, 0, len(args)-2)}
		for _, sha := range args[2:] {
			n := int64(0)
			if k := c.s.cfg.Scripts.BySha(sha); k != nil && (k.Spec != nil || c.s.cfg.VoteUnknownScripts) {
				n = 1
			}
			v.Elems = append(v.Elems, resp.IntValue(n))
		}
		c.reply(v)
	case is(sub, "flush") && len(args) <= 3:
		c.replyRaw([]byte("+OK\r\n")) // the proxy's cache only holds scripts it can run
	case is(sub, "kill") && len(args) == 2:
		c.replyErr("NOTBUSY No scripts in execution right now.")
	case is(sub, "help"):
		c.reply(helpReply("SCRIPT", "EXISTS <sha1> [<sha1> ...]", "FLUSH [ASYNC|SYNC]", "KILL", "LOAD <script>"))
	case is(sub, "load") || is(sub, "exists") || is(sub, "flush") || is(sub, "kill"):
		c.replyErr(msgWrongArgs("script|" + string(toLower(sub))))
	default:
		c.replyErr(msgUnknownSubcommand(string(sub), "SCRIPT"))
	}
}

func toLower(b []byte) []byte {
	out := make([]byte, len(b))
	for i, ch := range b {
		if ch >= 'A' && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		out[i] = ch
	}
	return out
}
