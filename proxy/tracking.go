package proxy

import (
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Client-side caching (CLIENT TRACKING), as one Redis offers it. A client
// that turns tracking on is sent an invalidation for every key it read
// when that key changes:
//   - by a command through this proxy, its own included (unless NOLOOP):
//     the proxy invalidates as the masters grant it (changedLocked), when
//     it succeeded (as its reply leaves), and when it undoes a grant (the
//     undo's result), for the masters do not report the proxy's own
//     writes;
//   - through another proxy, or by expiry: every command of a tracking
//     client asks the masters to track its keys (netio's Tracked), and
//     their invalidations are forwarded;
//   - when the proxy may have missed one (a backend's connection lost):
//     every key ("invalidate" with a nil key), as Redis does on a flush.
// A key is tracked for a client from each command naming it (in OPTIN mode
// only after CLIENT CACHING YES, in OPTOUT mode unless CLIENT CACHING NO),
// until its invalidation. BCAST sends every change of a key under the
// client's prefixes. Invalidations go out as RESP3 pushes on the tracking
// connection or, with REDIRECT, to the client named: a RESP3 push again,
// or a __redis__:invalidate message to a RESP2 client while it is
// subscribed; a RESP2 client gets none otherwise, as with Redis.

// trackOpts is a client's CLIENT TRACKING settings. It belongs to the
// client's goroutine (which reads and changes it, CLIENT CACHING included);
// other goroutines never read it: the tracker keeps its own copy (trackSub).
type trackOpts struct {
	redirect      int64
	bcast         bool
	prefixes      []string
	optin, optout bool
	noloop        bool
	caching       int8 // CLIENT CACHING for the next command: 1 yes, -1 no
}

// trackSub is the tracker's copy of a tracking client's settings, taken
// under tracker.mu when tracking goes on and never changed: invalidations
// are sent from backend and op goroutines, while the client's own goroutine
// may turn tracking off, change it, or close.
type trackSub struct {
	redirect int64
	bcast    bool
	noloop   bool
	prefixes []string
}

// delivery is one invalidation to send: to the tracking client, or to the
// client it redirects to.
type delivery struct {
	c        *client
	redirect int64
}

// tracker is the server's table of tracked keys. Everything in it but
// active belongs to mu, which any client's goroutine takes (its own
// reads and writes, CLIENT TRACKING, its close); invalidations are
// collected under mu and sent after it, so no client's write lock (wmu)
// or push queue lock (pmu) is ever taken under mu. active is atomic so
// that the hooks skip mu when no client tracks.
type tracker struct {
	active atomic.Int32 // clients with tracking on: zero makes every hook a no-op

	mu   sync.Mutex
	keys map[string]map[*client]struct{}
	subs map[*client]trackSub // every client with tracking on
}

// on turns tracking on for c with settings o, or changes them (the keys
// tracked for c stay tracked).
func (t *tracker) on(c *client, o *trackOpts) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.keys == nil {
		t.keys, t.subs = map[string]map[*client]struct{}{}, map[*client]trackSub{}
	}
	if _, ok := t.subs[c]; !ok {
		t.active.Add(1)
	}
	t.subs[c] = trackSub{redirect: o.redirect, bcast: o.bcast, noloop: o.noloop, prefixes: slices.Clone(o.prefixes)}
}

// off forgets a client's tracking (CLIENT TRACKING OFF, or its close).
func (t *tracker) off(c *client) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.subs, c)
	for k, cs := range t.keys {
		if _, ok := cs[c]; ok {
			delete(cs, c)
			if len(cs) == 0 {
				delete(t.keys, k)
			}
		}
	}
	t.active.Add(-1)
}

// add tracks keys for c.
func (t *tracker) add(c *client, keys [][]byte) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, k := range keys {
		cs := t.keys[string(k)]
		if cs == nil {
			cs = map[*client]struct{}{}
			t.keys[string(k)] = cs
		}
		cs[c] = struct{}{}
	}
}

// invalidate sends the invalidation of key to the clients tracking it (but
// by, when it asked NOLOOP) and stops tracking it for them; a nil key
// invalidates every key of every tracking client.
func (t *tracker) invalidate(key []byte, by *client) {
	if t.active.Load() == 0 {
		return
	}
	var to []delivery
	t.mu.Lock()
	if key == nil {
		seen := map[*client]struct{}{}
		for _, cs := range t.keys {
			for c := range cs {
				seen[c] = struct{}{}
			}
		}
		for c, sub := range t.subs {
			if sub.bcast {
				seen[c] = struct{}{}
			}
		}
		for c := range seen {
			to = append(to, delivery{c, t.subs[c].redirect})
		}
		clear(t.keys)
	} else {
		for c := range t.keys[string(key)] {
			if sub := t.subs[c]; c != by || !sub.noloop {
				to = append(to, delivery{c, sub.redirect})
			}
		}
		delete(t.keys, string(key))
		for c, sub := range t.subs {
			if sub.bcast && (c != by || !sub.noloop) && sub.matches(key) {
				to = append(to, delivery{c, sub.redirect})
			}
		}
	}
	t.mu.Unlock()
	for _, d := range to {
		d.c.s.sendInvalidation(d, key)
	}
}

// matches reports whether a BCAST client's prefixes cover key.
func (o *trackSub) matches(key []byte) bool {
	if len(o.prefixes) == 0 {
		return true
	}
	for _, p := range o.prefixes {
		if len(key) >= len(p) && string(key[:len(p)]) == p {
			return true
		}
	}
	return false
}

// Invalidated is called by the backends with a key that changed on one of
// them after a tracked command read it (nil: any key may have).
func (s *Server) Invalidated(node int, key []byte) { s.track.invalidate(key, nil) }

// sendInvalidation queues key's invalidation for the client that tracks it,
// to it or to the client it redirects to, as Redis sends it: a RESP3
// client gets the invalidate push (redirected or not), a RESP2 client that
// is redirected to and subscribed gets a __redis__:invalidate message, and
// any other RESP2 client nothing, for whatever were written to it would be
// read as the reply to its next command.
func (s *Server) sendInvalidation(d delivery, key []byte) {
	to := d.c
	if d.redirect != 0 {
		s.mu.Lock()
		to = s.byID[d.redirect]
		s.mu.Unlock()
		if to == nil {
			return // the target is gone: Redis drops them too
		}
	}
	switch {
	case to.resp3.Load():
		to.push(appendInvalidatePush(nil, key), false)
	case d.redirect != 0:
		to.push(appendInvalidateMessage(nil, key), true)
	}
}

// appendInvalidatePush encodes the RESP3 push of an invalidation.
func appendInvalidatePush(b, key []byte) []byte {
	b = resp.AppendPushHeader(b, 2, true)
	b = resp.AppendBulkString(b, "invalidate")
	if key == nil {
		return resp.AppendNullArray(b, true)
	}
	b = resp.AppendArrayHeader(b, 1)
	return resp.AppendBulk(b, key)
}

// appendInvalidateMessage encodes an invalidation as a RESP2 message of the
// __redis__:invalidate channel, for a subscribed client redirected to.
func appendInvalidateMessage(b, key []byte) []byte {
	b = resp.AppendPushHeader(b, 3, false)
	b = resp.AppendBulkString(b, "message")
	b = resp.AppendBulkString(b, invalidateChannel)
	if key == nil {
		return resp.AppendNullArray(b, false)
	}
	b = resp.AppendArrayHeader(b, 1)
	return resp.AppendBulk(b, key)
}

// invalidateChannel is the channel of redirected invalidations.
const invalidateChannel = "__redis__:invalidate"

// pushQueue is how many pushes may wait for a client that does not read;
// beyond it the client is sent one invalidation of every key instead.
const pushQueue = 1024

// pushMsg is a queued push. sub marks a RESP2 message (pub/sub, or a
// redirected invalidation), which only a subscribed client may read: it is
// dropped if the client is no longer subscribed when it would be written.
type pushMsg struct {
	b   []byte
	sub bool
}

// push queues b (a whole push or message) for c, written by c's pusher
// between its replies. It never blocks.
func (c *client) push(b []byte, sub bool) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if c.pushClosed {
		return
	}
	if c.pushq == nil {
		c.pushq = make(chan pushMsg, pushQueue)
		c.pushWG.Add(1)
		go c.pusher() // owned by the client: serve closes the queue and waits for it
	}
	select {
	case c.pushq <- pushMsg{b, sub}:
	default:
		c.pushLost = true // the pusher sends one invalidation of everything instead
	}
}

// pusher writes c's pushes until its queue is closed.
func (c *client) pusher() {
	defer c.pushWG.Done()
	for m := range c.pushq {
		c.pmu.Lock()
		lost := c.pushLost
		c.pushLost = false
		c.pmu.Unlock()
		if lost {
			if c.resp3.Load() {
				m = pushMsg{appendInvalidatePush(nil, nil), false}
			} else {
				m = pushMsg{appendInvalidateMessage(nil, nil), true}
			}
		}
		if err := c.writePush(m); err != nil {
			c.nc.Close()
			for range c.pushq {
			}
			return
		}
	}
}

// writePush writes a push between replies. A RESP2 message is written only
// while the client is subscribed, checked under wmu: an UNSUBSCRIBE's
// reply, written under wmu too after the client left pub/sub mode, then
// comes after any message written, as on one Redis, and never before one
// the client would take for a command's reply.
func (c *client) writePush(m pushMsg) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if m.sub && !c.pubsub.Load() {
		return nil
	}
	return c.writeRaw(m.b)
}

// stopPushes closes c's push queue and waits for its pusher.
func (c *client) stopPushes() {
	c.pmu.Lock()
	c.pushClosed = true
	if c.pushq != nil {
		close(c.pushq)
	}
	c.pmu.Unlock()
	c.pushWG.Wait()
}

// trackCommand applies CLIENT CACHING and tracking to a command with keys
// about to run: it reports whether the backends should track them.
func (c *client) trackCommand(keys [][]byte) bool {
	o := c.trk
	if o == nil {
		return false
	}
	caching := o.caching
	o.caching = 0
	if o.bcast {
		return true
	}
	if (o.optin && caching != 1) || (o.optout && caching == -1) {
		return false
	}
	c.s.track.add(c, keys)
	return true
}

// handleClientTracking is CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p]...
// [BCAST] [OPTIN] [OPTOUT] [NOLOOP], with Redis's checks, in its order, and
// its errors. ON sent again while tracking changes the options but keeps
// the keys tracked, and adds the BCAST prefixes given to the client's
// (BCAST without a prefix adds the empty one, which covers every key), as
// Redis does: what the client cached before is still invalidated.
func handleClientTracking(c *client, args [][]byte) {
	o := &trackOpts{}
	var prefixes []string
	for i := 3; i < len(args); i++ {
		switch {
		case is(args[i], "redirect") && i+1 < len(args):
			id, ok := resp.ParseInt(args[i+1])
			if !ok {
				c.replyErr(msgNotInteger)
				return
			}
			c.s.mu.Lock()
			_, exists := c.s.byID[id]
			c.s.mu.Unlock()
			if !exists {
				c.replyErr(msgTrackingRedirect)
				return
			}
			// Its own id too, as on Redis: a RESP2 client then gets its
			// invalidations as messages once it subscribed.
			o.redirect = id
			i++
		case is(args[i], "prefix") && i+1 < len(args):
			prefixes = append(prefixes, string(args[i+1]))
			i++
		case is(args[i], "bcast"):
			o.bcast = true
		case is(args[i], "optin"):
			o.optin = true
		case is(args[i], "optout"):
			o.optout = true
		case is(args[i], "noloop"):
			o.noloop = true
		default:
			c.replyErr(msgSyntax)
			return
		}
	}
	switch {
	case is(args[2], "off"):
		if c.trk != nil {
			c.s.track.off(c)
			c.trk = nil
		}
		c.replyRaw(rawOK)
		return
	case !is(args[2], "on"):
		c.replyErr(msgSyntax)
		return
	}
	old := c.trk
	switch {
	case len(prefixes) > 0 && !o.bcast:
		c.replyErr(msgTrackingPrefixNoBcast)
		return
	case old != nil && old.bcast != o.bcast:
		c.replyErr(msgTrackingSwitchBcast)
		return
	case o.bcast && (o.optin || o.optout):
		c.replyErr(msgTrackingBcastOpt)
		return
	case o.optin && o.optout:
		c.replyErr(msgTrackingOptinOptout)
		return
	case old != nil && (o.optin && old.optout || o.optout && old.optin):
		c.replyErr(msgTrackingSwitchOpt)
		return
	}
	if o.bcast {
		if msg := prefixCollision(old, prefixes); msg != "" {
			c.replyErr(msg)
			return
		}
		if old != nil {
			o.prefixes = slices.Clone(old.prefixes)
		}
		if len(prefixes) == 0 {
			prefixes = []string{""}
		}
		for _, p := range prefixes {
			if !slices.Contains(o.prefixes, p) {
				o.prefixes = append(o.prefixes, p)
			}
		}
	}
	if old != nil {
		o.caching = old.caching
	}
	c.trk = o
	c.s.track.on(c, o)
	c.replyRaw(rawOK)
}

// prefixCollision is Redis's error for BCAST prefixes that overlap (one
// starts with the other): one given with one the client has, or two given.
func prefixCollision(old *trackOpts, prefixes []string) string {
	overlap := func(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }
	for i, p := range prefixes {
		if old != nil {
			for _, q := range old.prefixes {
				if overlap(q, p) {
					return "ERR Prefix '" + p + "' overlaps with an existing prefix '" + q + "'. Prefixes for a single client must not overlap."
				}
			}
		}
		for _, q := range prefixes[i+1:] {
			if overlap(p, q) {
				return "ERR Prefix '" + p + "' overlaps with another provided prefix '" + q + "'. Prefixes for a single client must not overlap."
			}
		}
	}
	return ""
}

// handleClientCaching is CLIENT CACHING YES|NO: whether the next command's
// keys are tracked, in OPTIN (YES) or OPTOUT (NO) mode.
func handleClientCaching(c *client, args [][]byte) {
	o := c.trk
	switch {
	case o == nil:
		c.replyErr(msgCachingNeedsMode)
	case is(args[2], "yes") && o.optin:
		o.caching = 1
		c.replyRaw(rawOK)
	case is(args[2], "no") && o.optout:
		o.caching = -1
		c.replyRaw(rawOK)
	case is(args[2], "yes"):
		c.replyErr(msgCachingYesNeedsOptin)
	case is(args[2], "no"):
		c.replyErr(msgCachingNoNeedsOptout)
	default:
		c.replyErr(msgSyntax)
	}
}

// trackingInfo is CLIENT TRACKINGINFO's reply.
func (c *client) trackingInfo() resp.Value {
	flags := []resp.Value{}
	redir := int64(-1)
	var prefixes []resp.Value
	if o := c.trk; o != nil {
		flags = append(flags, resp.BulkValue([]byte("on")))
		for _, f := range []struct {
			set  bool
			name string
		}{{o.bcast, "bcast"}, {o.optin, "optin"}, {o.optout, "optout"}, {o.caching == 1, "caching-yes"}, {o.caching == -1, "caching-no"}, {o.noloop, "noloop"}} {
			if f.set {
				flags = append(flags, resp.BulkValue([]byte(f.name)))
			}
		}
		redir = 0
		if o.redirect != 0 {
			redir = o.redirect
		}
		for _, p := range o.prefixes {
			prefixes = append(prefixes, resp.BulkValue([]byte(p)))
		}
	} else {
		flags = append(flags, resp.BulkValue([]byte("off")))
	}
	return resp.Value{Kind: resp.KindArray, Elems: []resp.Value{
		resp.BulkValue([]byte("flags")), {Kind: resp.KindArray, Elems: flags},
		resp.BulkValue([]byte("redirect")), resp.IntValue(redir),
		resp.BulkValue([]byte("prefixes")), {Kind: resp.KindArray, Elems: prefixes},
	}}
}

// commandKeys lists the keys a command names (for tracking).
func commandKeys(cmd *commandDef, args [][]byte) [][]byte {
	var out [][]byte
	switch {
	case cmd.name == "eval" || cmd.name == "evalsha":
		nk, ok := resp.ParseInt(args[2])
		if !ok || nk < 0 || nk > int64(len(args)-3) {
			return nil
		}
		out = append(out, args[3:3+nk]...)
	case cmd.first > 0:
		last := cmd.last
		if last < 0 {
			last = len(args) + last
		}
		for i := cmd.first; i <= last && i < len(args); i += max(cmd.step, 1) {
			out = append(out, args[i])
		}
	}
	return out
}

// noteTracking prepares an op of c for client-side caching: the backends
// track its keys when c tracks them, and a write that succeeds invalidates
// them for every client tracking them.
func (c *client) noteTracking(o *op, keys [][]byte) {
	if c.trackNext {
		o.flags |= netio.Tracked
	}
	if keys != nil && o.rules.effects(o)&effWrites != 0 {
		o.invKeys, o.invBy = cloneArgs(keys), c
	}
}

// changedLocked reports whether a master's reply (vote, late or not) to
// a write means its keys changed in a way the tracking clients must hear
// of now: the masters do not report the proxy's own writes (netio's
// tracking is NOLOOP). A master's grant before the op is decided is sent
// at once, not when the op's reply leaves: that reply may wait (behind a
// BLPOP in the same pipeline) while a majority holds the grant. A grant
// after a failure was decided is sent too: a release a hung master ran
// late may have freed the lock on a majority all the same. A grant after
// a success changes no majority's answer, and the success is sent when the
// reply leaves (invalidateWritten from final). Called with o.mu held.
func (o *op) changedLocked(vote quorum.Vote) bool {
	return vote == quorum.Granted && o.invKeys != nil && !(o.decided && o.outcome == ResultGranted)
}

// invalidateWritten sends the invalidations of a write that succeeded.
func (o *op) invalidateWritten() {
	for _, k := range o.invKeys {
		o.e.track.invalidate(k, o.invBy)
	}
}
