package proxy

import (
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// pubsubCommands let clients that open a subscription connection (for
// their lock's release notices) connect; nothing is ever published.
var pubsubCommands = []*command{
	{name: "subscribe", arity: -2, flags: []string{"pubsub"}, fn: cmdSubscribe},
	{name: "psubscribe", arity: -2, flags: []string{"pubsub"}, fn: cmdSubscribe},
	{name: "unsubscribe", arity: -1, flags: []string{"pubsub"}, fn: cmdUnsubscribe},
	{name: "punsubscribe", arity: -1, flags: []string{"pubsub"}, fn: cmdUnsubscribe},
	{name: "publish", arity: 3, flags: []string{"pubsub", "fast"}, fn: cmdPublish},
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
	b = resp.AppendPushHeader(b, 3, c.resp3.Load())
	b = resp.AppendBulkString(b, kind)
	if ch == nil {
		b = resp.AppendNull(b, c.resp3.Load())
	} else {
		b = resp.AppendBulk(b, ch)
	}
	return resp.AppendInt(b, n)
}

// subscribedAllowed lists what Redis allows a RESP2 client in subscribed mode.
func subscribedAllowed(name string) bool {
	switch name {
	case "subscribe", "psubscribe", "unsubscribe", "punsubscribe", "ping", "quit", "reset":
		return true
	}
	return false
}

func cmdPublish(c *client, args [][]byte) { c.replyErr(msgPublish) }
