package proxy

import (
	"path"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Commands that client libraries send while connecting: answered by the
// proxy itself, as Redis answers them.

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
	c.replyRaw(rawOK)
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
		c.replyErr(msgConfigUnsupported(sub))
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
	if c.trk != nil {
		c.s.track.off(c)
		c.trk = nil
	}
	c.subscriptions = 0
	c.setAuthed(!c.s.passwordSet())
	c.replyRaw(rawReset)
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
		c.replyErr(msgTimeoutNotInteger)
		return
	}
	if t < 0 {
		c.replyErr(msgTimeoutNegative)
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
