package proxy

import (
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/acl"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// pubsubCommands serve subscriptions: a client subscribed to a lock's
// channel (SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE) gets the release notice of a
// lock script (spec.Notice) once per release that a majority of masters
// decided, through whichever proxy the release went. Clients do not
// publish: PUBLISH is refused.
var pubsubCommands = []*commandDef{
	{name: "subscribe", arity: -2, flags: []string{"pubsub"}, fn: handleSubscribe},
	{name: "psubscribe", arity: -2, flags: []string{"pubsub"}, fn: handleSubscribe},
	{name: "ssubscribe", arity: -2, flags: []string{"pubsub"}, fn: handleSubscribe},
	{name: "unsubscribe", arity: -1, flags: []string{"pubsub"}, fn: handleUnsubscribe},
	{name: "punsubscribe", arity: -1, flags: []string{"pubsub"}, fn: handleUnsubscribe},
	{name: "sunsubscribe", arity: -1, flags: []string{"pubsub"}, fn: handleUnsubscribe},
	{name: "publish", arity: 3, flags: []string{"pubsub", "fast"}, fn: handlePublish},
}

// The release notices. A proxy that decided a release whose script
// publishes (its lock freed on a majority) publishes the notice itself,
// once, on every master, on netio.ReleaseChannel, tagged with an id no
// other notice has (appendNotice). Every proxy is subscribed to that
// channel on every master (netio's invalidation connection) and delivers a
// notice to its own subscribers when a majority of masters delivered it
// (Released), once per id. So a waiter is woken once per release whichever
// proxy it is subscribed through; a message that no majority of masters
// saw (a notice a minority got, a client's PUBLISH straight on a master's
// lock channel) wakes no one.

// subKind is a kind of subscription.
type subKind uint8

const (
	subChannel subKind = iota // SUBSCRIBE
	subPattern                // PSUBSCRIBE
	subShard                  // SSUBSCRIBE
	numSubKinds
)

var subNames = [numSubKinds]string{"subscribe", "psubscribe", "ssubscribe"}
var unsubNames = [numSubKinds]string{"unsubscribe", "punsubscribe", "sunsubscribe"}
var messageNames = [numSubKinds]string{"message", "pmessage", "smessage"}

func subKindOf(name string) subKind {
	switch strings.ToLower(name) {
	case "psubscribe", "punsubscribe":
		return subPattern
	case "ssubscribe", "sunsubscribe":
		return subShard
	}
	return subChannel
}

// subscriptions are every client's subscriptions, by kind and name; each
// client's own are in client.subs. mu protects both: the clients change
// them, the links' goroutines read them to deliver notices.
type subscriptions struct {
	mu    sync.Mutex
	index [numSubKinds]map[string]map[*client]bool // the clients subscribed, by kind and name
	// seen counts the masters that delivered each notice, by id, until it
	// is delivered or old (notices).
	seen map[string]*noticeSeen
	last time.Time // the last pruning of seen
}

// noticeSeen is one notice on its way: from which masters it came.
type noticeSeen struct {
	from      []bool
	n         int
	delivered bool
	at        time.Time
}

// noticeMemory is how long a notice's id is remembered: far longer than
// any master takes to deliver it. At most maxNotices are remembered: past
// that they are forgotten at once, which cannot deliver one twice (a
// delivered notice would need a majority of masters to deliver it again,
// and fewer than that are left), only miss one a majority had not yet
// delivered (its waiters fall back on their own timeouts).
const (
	noticeMemory = time.Minute
	maxNotices   = 1 << 16
)

func (ss *subscriptions) add(c *client, k subKind, name []byte) int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if c.subs[k] == nil {
		c.subs[k] = map[string]bool{}
	}
	if ss.index[k] == nil {
		ss.index[k] = map[string]map[*client]bool{}
	}
	key := string(name)
	c.subs[k][key] = true
	if ss.index[k][key] == nil {
		ss.index[k][key] = map[*client]bool{}
	}
	ss.index[k][key][c] = true
	return c.subCount(k)
}

func (ss *subscriptions) remove(c *client, k subKind, name string) int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.removeLocked(c, k, name)
	return c.subCount(k)
}

func (ss *subscriptions) removeLocked(c *client, k subKind, name string) {
	delete(c.subs[k], name)
	if m := ss.index[k][name]; m != nil {
		delete(m, c)
		if len(m) == 0 {
			delete(ss.index[k], name)
		}
	}
}

// names lists a client's subscriptions of a kind.
func (ss *subscriptions) names(c *client, k subKind) []string {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	out := make([]string, 0, len(c.subs[k]))
	for n := range c.subs[k] {
		out = append(out, n)
	}
	return out
}

// drop removes every subscription of a client (it left, or RESET).
func (ss *subscriptions) drop(c *client) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	for k := range c.subs {
		for n := range c.subs[k] {
			ss.removeLocked(c, subKind(k), n)
		}
	}
	c.subscriptions = 0
	c.pubsub.Store(false)
}

// subCount is what a (un)subscribe confirmation reports: the client's
// channels and patterns, or its shard channels.
func (c *client) subCount(k subKind) int {
	n := len(c.subs[subShard])
	if k != subShard {
		n = len(c.subs[subChannel]) + len(c.subs[subPattern])
	}
	c.subscriptions = len(c.subs[subChannel]) + len(c.subs[subPattern]) + len(c.subs[subShard])
	c.pubsub.Store(c.subscriptions > 0)
	return n
}

func handleSubscribe(c *client, args [][]byte) {
	k := subKindOf(string(args[0]))
	var b []byte
	for _, ch := range args[1:] {
		n := c.s.subs.add(c, k, ch)
		b = c.appendPush(b, subNames[k], ch, int64(n))
	}
	c.replyRaw(b)
}

func handleUnsubscribe(c *client, args [][]byte) {
	k := subKindOf(string(args[0]))
	var b []byte
	names := make([][]byte, 0, len(args)-1)
	names = append(names, args[1:]...)
	if len(args) == 1 {
		for _, n := range c.s.subs.names(c, k) {
			names = append(names, []byte(n))
		}
		if len(names) == 0 {
			b = c.appendPush(b, unsubNames[k], nil, int64(c.subCount(k)))
		}
	}
	for _, ch := range names {
		n := c.s.subs.remove(c, k, string(ch))
		b = c.appendPush(b, unsubNames[k], ch, int64(n))
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
	case "subscribe", "psubscribe", "ssubscribe", "unsubscribe", "punsubscribe", "sunsubscribe", "ping", "quit", "reset":
		return true
	}
	return false
}

func handlePublish(c *client, args [][]byte) { c.replyErr(msgPublish) }

// noticeKind is how a notice reaches waiters: a message on a channel, on
// a shard channel, or a signal for BLPOP waiters on a list's key
// (signals.go), whose message is its TTL in ms, a space and the element.
type noticeKind byte

const (
	noticeMessage noticeKind = '0'
	noticeShard   noticeKind = '1'
	noticeSignal  noticeKind = '2'
)

// appendNotice encodes the PUBLISH of a release notice on
// netio.ReleaseChannel: its id, its kind, its channel and its message.
func appendNotice(dst []byte, channel string, id string, kind noticeKind, ch, msg []byte) []byte {
	dst = resp.AppendArrayHeader(dst, 3)
	dst = resp.AppendBulkString(dst, "PUBLISH")
	dst = resp.AppendBulkString(dst, channel)
	head := id + " " + string(kind) + " " + strconv.Itoa(len(ch)) + " "
	dst = resp.AppendBulkHeader(dst, len(head)+len(ch)+len(msg))
	dst = append(dst, head...)
	dst = append(dst, ch...)
	dst = append(dst, msg...)
	return append(dst, '\r', '\n')
}

// parseNotice reads a notice's payload.
func parseNotice(p []byte) (id string, kind noticeKind, ch, msg []byte, ok bool) {
	s := string(p)
	id, s, ok1 := strings.Cut(s, " ")
	flag, s, ok2 := strings.Cut(s, " ")
	n, s, ok3 := strings.Cut(s, " ")
	l, err := strconv.Atoi(n)
	if !ok1 || !ok2 || !ok3 || err != nil || l < 0 || l > len(s) || id == "" || len(flag) != 1 || flag[0] < '0' || flag[0] > '2' {
		return "", 0, nil, nil, false
	}
	return id, noticeKind(flag[0]), []byte(s[:l]), []byte(s[l:]), true
}

// Released is called by the backends with a message of
// netio.ReleaseChannel from master node: a release notice, delivered to
// this proxy's subscribers once a majority of masters delivered it.
func (s *Server) Released(node int, payload []byte) {
	id, kind, ch, msg, ok := parseNotice(payload)
	if !ok || node < 0 || node >= s.eng.n {
		return
	}
	now := time.Now()
	ss := &s.subs
	ss.mu.Lock()
	if ss.seen == nil {
		ss.seen = map[string]*noticeSeen{}
	}
	if len(ss.seen) >= maxNotices {
		clear(ss.seen)
	}
	if now.Sub(ss.last) > noticeMemory/4 {
		for k, v := range ss.seen {
			if now.Sub(v.at) > noticeMemory {
				delete(ss.seen, k)
			}
		}
		ss.last = now
	}
	e := ss.seen[id]
	if e == nil {
		e = &noticeSeen{from: make([]bool, s.eng.n), at: now}
		ss.seen[id] = e
	}
	if e.from[node] || e.delivered {
		ss.mu.Unlock()
		return
	}
	e.from[node] = true
	e.n++
	if e.n < quorum.Majority(s.eng.n) {
		ss.mu.Unlock()
		return
	}
	e.delivered = true
	if kind == noticeSignal {
		ss.mu.Unlock()
		ms, elem, ok := strings.Cut(string(msg), " ")
		if n, err := strconv.ParseInt(ms, 10, 64); ok && err == nil {
			s.signals.deliver(ch, []byte(elem), time.Duration(n)*time.Millisecond)
		}
		return
	}
	type target struct {
		c    *client
		pat  string
		kind subKind
	}
	var to []target
	if kind == noticeShard {
		for c := range ss.index[subShard][string(ch)] {
			to = append(to, target{c, "", subShard})
		}
	} else {
		for c := range ss.index[subChannel][string(ch)] {
			to = append(to, target{c, "", subChannel})
		}
		for pat, cs := range ss.index[subPattern] {
			if acl.Match(pat, string(ch)) {
				for c := range cs {
					to = append(to, target{c, pat, subPattern})
				}
			}
		}
	}
	ss.mu.Unlock()
	for _, t := range to {
		var b []byte
		resp3 := t.c.resp3.Load()
		if t.kind == subPattern {
			b = resp.AppendPushHeader(b, 4, resp3)
			b = resp.AppendBulkString(b, messageNames[t.kind])
			b = resp.AppendBulkString(b, t.pat)
		} else {
			b = resp.AppendPushHeader(b, 3, resp3)
			b = resp.AppendBulkString(b, messageNames[t.kind])
		}
		b = resp.AppendBulk(b, ch)
		b = resp.AppendBulk(b, msg)
		t.c.push(b, !resp3)
	}
}
