package proxy

import (
	"path"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/proxy/script"
)

// Commands that client libraries send while connecting, and the newer
// release primitives of Valkey 9 and Redis 8.4, translated for Redis 7
// backends.

func init() {
	register(
		&command{name: "auth", arity: -2, flags: []string{"fast", "no_auth"}, noAuth: true, fn: cmdAuth},
		&command{name: "config", arity: -2, flags: []string{"admin"}, fn: cmdConfig},
		&command{name: "reset", arity: 1, flags: []string{"fast", "no_auth"}, noAuth: true, fn: cmdReset},
		&command{name: "wait", arity: 3, flags: []string{}, fn: cmdWait},
		&command{name: "subscribe", arity: -2, flags: []string{"pubsub"}, fn: cmdSubscribe},
		&command{name: "psubscribe", arity: -2, flags: []string{"pubsub"}, fn: cmdSubscribe},
		&command{name: "unsubscribe", arity: -1, flags: []string{"pubsub"}, fn: cmdUnsubscribe},
		&command{name: "punsubscribe", arity: -1, flags: []string{"pubsub"}, fn: cmdUnsubscribe},
		&command{name: "delifeq", arity: 3, flags: []string{"write"}, first: 1, last: 1, step: 1, fn: cmdDelIfEq},
		&command{name: "delex", arity: -2, flags: []string{"write"}, first: 1, last: 1, step: 1, fn: cmdDelEx},
	)
}

// The proxy has no users of its own unless a password is configured; the
// default user then accepts any password, as Redis's nopass default user.
func cmdAuth(c *client, args [][]byte) {
	var user, pass []byte
	switch len(args) {
	case 2:
		if !c.s.passwordSet() {
			c.replyErr(msgAuthNotConfigured)
			return
		}
		user, pass = []byte("default"), args[1]
	case 3:
		user, pass = args[1], args[2]
	default:
		c.replyErr(msgSyntax)
		return
	}
	if !c.s.checkAuth(user, pass) {
		c.replyErr(msgWrongPass)
		return
	}
	c.setAuthed(true)
	c.replyRaw([]byte("+OK\r\n"))
}

// configParams are the harmless answers to CONFIG GET that clients read
// while connecting (StackExchange.Redis reads timeout, databases,
// replica-read-only...).
func (s *Server) configParams() [][2]string {
	return [][2]string{
		{"timeout", strconv.Itoa(int(s.cfg.IdleTimeout.Seconds()))},
		{"databases", "1"},
		{"maxclients", strconv.Itoa(s.cfg.MaxClients)},
		{"save", ""},
		{"appendonly", "no"},
		{"slave-read-only", "yes"},
		{"replica-read-only", "yes"},
		{"maxmemory", "0"},
		{"maxmemory-policy", "noeviction"},
		{"proto-max-bulk-len", strconv.Itoa(s.cfg.Limits.MaxBulk)},
		{"cluster-enabled", "no"},
	}
}

func cmdConfig(c *client, args [][]byte) {
	sub := args[1]
	switch {
	case is(sub, "get") && len(args) >= 3:
		var kv []resp.Value
		for _, p := range c.s.configParams() {
			for _, pat := range args[2:] {
				if ok, _ := path.Match(strings.ToLower(string(pat)), p[0]); ok {
					kv = append(kv, resp.BulkValue([]byte(p[0])), resp.BulkValue([]byte(p[1])))
					break
				}
			}
		}
		if c.resp3 {
			b := []byte("%" + strconv.Itoa(len(kv)/2) + "\r\n")
			for _, v := range kv {
				b = appendReply(b, v, true)
			}
			c.replyRaw(b)
			return
		}
		c.reply(resp.Value{Kind: resp.KindArray, Elems: kv})
	case is(sub, "set") || is(sub, "rewrite") || is(sub, "resetstat"):
		c.replyErr("ERR redlock-proxy: CONFIG " + strings.ToUpper(string(sub)) + " is not supported: the proxy is configured by its flags or YAML file")
	case is(sub, "help"):
		c.reply(helpReply("CONFIG", "GET <pattern>"))
	case is(sub, "get"):
		c.replyErr(msgWrongArgs("config|get"))
	default:
		c.replyErr(msgUnknownSubcommand(string(sub), "CONFIG"))
	}
}

// cmdReset returns the connection to its initial state, as Redis's RESET.
func cmdReset(c *client, args [][]byte) {
	c.resp3 = false
	c.name = c.name[:0]
	c.tracking = false
	c.subscriptions = 0
	c.setAuthed(!c.s.passwordSet())
	c.replyRaw([]byte("+RESET\r\n"))
}

// cmdWait: the proxy's backends have no replicas, and every lock command
// already waited for a majority of masters.
func cmdWait(c *client, args [][]byte) {
	if _, ok := resp.ParseInt(args[1]); !ok {
		c.replyErr(msgNotInteger)
		return
	}
	t, ok := resp.ParseInt(args[2])
	if !ok {
		c.replyErr("ERR timeout is not an integer or out of range")
		return
	}
	if t < 0 {
		c.replyErr("ERR timeout is negative")
		return
	}
	c.reply(resp.IntValue(0))
}

// Pub/sub: accepted so that clients that open a subscription connection
// (StackExchange.Redis) connect; the proxy never publishes anything.
func cmdSubscribe(c *client, args [][]byte) {
	kind := strings.ToLower(string(args[0]))
	var b []byte
	for _, ch := range args[1:] {
		c.subscriptions++
		b = c.appendPush(b, kind, ch, int64(c.subscriptions))
	}
	c.replyRaw(b)
}

func cmdUnsubscribe(c *client, args [][]byte) {
	kind := strings.ToLower(string(args[0]))
	var b []byte
	if len(args) == 1 {
		if c.subscriptions == 0 {
			b = c.appendPush(b, kind, nil, 0)
		}
		for c.subscriptions > 0 {
			c.subscriptions--
			b = c.appendPush(b, kind, nil, int64(c.subscriptions))
		}
	}
	for _, ch := range args[1:] {
		if c.subscriptions > 0 {
			c.subscriptions--
		}
		b = c.appendPush(b, kind, ch, int64(c.subscriptions))
	}
	c.replyRaw(b)
}

// appendPush encodes a pub/sub confirmation: a push in RESP3, an array in
// RESP2. A nil channel is encoded as a nil bulk.
func (c *client) appendPush(b []byte, kind string, ch []byte, n int64) []byte {
	if c.resp3 {
		b = append(b, ">3\r\n"...)
	} else {
		b = resp.AppendArrayHeader(b, 3)
	}
	b = resp.AppendBulkString(b, kind)
	if ch == nil {
		b = appendReply(b, resp.Nil, c.resp3)
	} else {
		b = resp.AppendBulk(b, ch)
	}
	return appendReply(b, resp.IntValue(n), false)
}

// subscribedAllowed lists what Redis allows a RESP2 client in subscribed mode.
func subscribedAllowed(name string) bool {
	switch name {
	case "subscribe", "psubscribe", "unsubscribe", "punsubscribe", "ping", "quit", "reset":
		return true
	}
	return false
}

// compareDelete is DELIFEQ / DELEX IFEQ as a release: 1 deleted, 0 not.
var compareDelete = script.MustSpec("release keys=1 args=1 token=1; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0")

// setIfEq is SET key value IFEQ value PX ms as an extend: re-arm the TTL
// of a lock that holds the caller's value (and of its fencing state, as
// every extend does); OK, or nil.
var setIfEq = script.MustSpec("extend keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: nil; own: +OK; own-no-ttl: +OK; other: nil; other-no-ttl: nil")

// startSetIfEq extends a lock as SET key token IFEQ token PX ms: OK when a
// majority re-armed it with validity left, nil otherwise, as Redis 8.4.
func startSetIfEq(c *client, req setRequest) {
	ttl := []byte(strconv.FormatInt(req.ttl.Milliseconds(), 10))
	startClassOp(c, "set", setIfEq, [][]byte{req.key}, [][]byte{req.value, ttl})
}

// cmdDelIfEq is Valkey 9's DELIFEQ key value: delete the key if it holds
// value. It runs as a compare-and-delete on every backend.
func cmdDelIfEq(c *client, args [][]byte) { startCompareDelete(c, "delifeq", args[1], args[2]) }

func startCompareDelete(c *client, name string, key, value []byte) {
	startClassOp(c, name, compareDelete, [][]byte{key}, [][]byte{value})
}

// cmdDelEx is Redis 8.4's DELEX key [IFEQ value]: with IFEQ a
// compare-and-delete, without a condition a force DEL.
func cmdDelEx(c *client, args [][]byte) {
	switch {
	case len(args) == 2:
		cmdDel(c, args)
	case len(args) == 4 && is(args[2], "ifeq"):
		startCompareDelete(c, "delex", args[1], args[3])
	case len(args) == 4 && (is(args[2], "ifne") || is(args[2], "ifdeq") || is(args[2], "ifdne")):
		c.replyErr("ERR redlock-proxy: DELEX supports IFEQ (compare-and-delete) only")
	default:
		c.replyErr(msgSyntax)
	}
}
