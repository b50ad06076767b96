package netio

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Routing a command to the master of its slot, following MOVED and ASK,
// and its undo to where it ran.

// Send queues cmd for the master of its keys' slot; see Link.Send.
func (c *Cluster) Send(cmd []byte, script *resp.Script, rcv Receiver, tag int, deadline time.Time) {
	c.SendWith(cmd, script, rcv, tag, deadline, 0)
}

// SendWith queues cmd for the master of its keys' slot, following MOVED and
// ASK; rcv gets exactly one result (and at most one Late), with Via set to
// the link it came from.
func (c *Cluster) SendWith(cmd []byte, script *resp.Script, rcv Receiver, tag int, deadline time.Time, flags SendFlags) {
	s, ok := CommandSlot(cmd)
	if !ok {
		rcv.Receive(tag, Result{Err: c.errNoSlot, Unsent: true})
		return
	}
	r := &routed{c: c, cmd: append([]byte(nil), cmd...), sc: script, rcv: rcv, tag: tag, deadline: deadline, flags: flags &^ Asking, slot: s}
	c.mu.Lock()
	if mv := c.moving[s]; mv != nil {
		mv.waiting = append(mv.waiting, r)
		c.mu.Unlock()
		return
	}
	l := c.firstHopLocked(r)
	c.mu.Unlock()
	if l == nil {
		rcv.Receive(tag, Result{Err: c.errNoSlot, Unsent: true})
		return
	}
	l.SendWith(r.cmd, script, r, 0, deadline, r.flags)
}

// firstHopLocked picks the link of r's slot's master and counts r in
// flight there; nil when no master is known.
func (c *Cluster) firstHopLocked(r *routed) *Link {
	sh := c.slots[r.slot]
	if sh == nil || sh.link == nil {
		return nil
	}
	c.flight[r.slot]++
	r.link, r.first = sh.link, true
	return sh.link
}

// via is where a command ran: the link, and whether it went after ASKING.
type via struct {
	link   *Link
	asking bool
}

// routed is one command sent to a cluster: it follows redirections and
// answers its receiver once.
//
// Its fields after flags change on the goroutines that deliver its
// replies (the links' readers and timeout sweeps), without a lock. That is
// safe because it is at one link at a time: only the delivery of its
// reply at that link (Receive, then at most one Late after a timeout)
// writes them, before sending it on to the next link, whose lock orders
// those writes before that link's delivery. Once sent on, Receive reads
// only the fields set at its creation (c, slot). firstHopLocked writes
// link and first under Cluster.mu, before the first send.
type routed struct {
	c        *Cluster
	cmd      []byte
	sc       *resp.Script
	rcv      Receiver
	tag      int
	deadline time.Time
	flags    SendFlags
	link     *Link
	asking   bool
	askedBy  *Link // the master that sent it on with ASK, when it did
	hops     int
	slot     uint16
	first    bool // its first hop is in flight (Cluster.flight)
}

// Late passes on what became of a command after its timeout; a late
// redirection or refusal says it did not run (it is not sent again: its
// op has decided without it).
func (r *routed) Late(_ int, res Result) {
	lr, ok := r.rcv.(LateReceiver)
	if !ok {
		return
	}
	if res.Err == nil && res.V.Kind == resp.KindError && notRun(res.V.Str) {
		res = Result{Err: r.c.notServed(res.V.Str), Unsent: true}
	}
	res.Via = &via{link: r.link, asking: r.asking}
	lr.Late(r.tag, res)
}

func (c *Cluster) notServed(reply []byte) *BackendError {
	return &BackendError{Node: c.opt.Index, Addr: c.name, Err: fmt.Errorf("%w: %s", ErrNotServed, reply)}
}

// notRun reports whether an error reply of a cluster node means the
// command did not run there: a redirection, a multi-key command during a
// slot's migration (TRYAGAIN), a cluster down, keys of several slots.
func notRun(reply []byte) bool {
	return Redirect(reply) || bytes.HasPrefix(reply, []byte("TRYAGAIN")) || bytes.HasPrefix(reply, []byte("CLUSTERDOWN")) ||
		bytes.HasPrefix(reply, []byte("CROSSSLOT"))
}

// parseRedirect reads "MOVED slot host:port" or "ASK slot host:port".
func parseRedirect(reply []byte) (ask bool, slot int, addr string) {
	f := strings.Fields(string(reply))
	if len(f) < 3 {
		return false, -1, ""
	}
	slot, err := strconv.Atoi(f[1])
	if err != nil {
		slot = -1
	}
	addr = f[2]
	if strings.HasPrefix(addr, ":") {
		addr = "127.0.0.1" + addr // a node that does not know its own address
	}
	return f[0] == "ASK", slot, addr
}

// Undo queues an undo on the link where its command ran (u.Via), after
// it; without one, or when that link has closed, on the master of its
// keys' slot now, in its later form. A redirection of the undo sends it,
// in its later form, where the key is now. rcv gets one result.
func (c *Cluster) Undo(u UndoCmd, rcv Receiver, tag int) {
	ur := &routedUndo{c: c, u: u, rcv: rcv, tag: tag}
	if v, ok := u.Via.(*via); ok && v.link != nil && !v.link.Closed() {
		ur.u.Asking = v.asking
		v.link.Undo(ur.u, ur, 0)
		return
	}
	ur.byKey()
}

// routedUndo is one undo sent to a cluster.
type routedUndo struct {
	c    *Cluster
	u    UndoCmd
	rcv  Receiver
	tag  int
	hops int
}

// byKey sends the undo, in its later form, to the master of its keys'
// slot now.
func (ur *routedUndo) byKey() {
	ur.u.LaterOnly, ur.u.Asking = true, false
	s, ok := CommandSlot(ur.u.Now)
	var l *Link
	if ok {
		l = ur.c.linkFor(s)
	}
	if l == nil {
		ur.c.mu.Lock()
		ur.c.leftUndos = append(ur.c.leftUndos, ur.u.Keys)
		ur.c.mu.Unlock()
		ur.c.log.Warn("cluster: an undo has no master to go to (no slot map): the partial acquisition stays until its TTL", "keys", ur.u.Keys)
		ur.rcv.Receive(ur.tag, Result{Err: &BackendError{Node: ur.c.opt.Index, Addr: ur.c.name, Err: ErrAbandoned}})
		return
	}
	l.Undo(ur.u, ur, 0)
}

// CommandSlot is the slot of an encoded command's first key: the first
// argument, or for EVAL and EVALSHA the first of their keys. ok is false
// when it has none.
func CommandSlot(cmd []byte) (uint16, bool) {
	var args [4][]byte
	n := 0
	p := cmd
	if len(p) == 0 || p[0] != '*' {
		return 0, false
	}
	i := bytes.IndexByte(p, '\n')
	if i < 0 {
		return 0, false
	}
	p = p[i+1:]
	for n < len(args) && len(p) > 0 && p[0] == '$' {
		j := bytes.IndexByte(p, '\r')
		if j < 0 {
			return 0, false
		}
		l, err := strconv.Atoi(string(p[1:j]))
		if err != nil || l < 0 || len(p) < j+2+l+2 {
			return 0, false
		}
		args[n] = p[j+2 : j+2+l]
		n++
		p = p[j+2+l+2:]
	}
	if n < 2 {
		return 0, false
	}
	if bytes.EqualFold(args[0], []byte("EVALSHA")) || bytes.EqualFold(args[0], []byte("EVAL")) {
		if n < 4 || string(args[2]) == "0" {
			return 0, false
		}
		return keyslot.Of(args[3]), true
	}
	return keyslot.Of(args[1]), true
}

func (r *routed) Receive(_ int, res Result) {
	// Read before the command is sent on: its next reply may come at once.
	first := r.first
	r.first = false
	if res.Err == nil && res.V.Kind == resp.KindError {
		if Redirect(res.V.Str) {
			ask, s, addr := parseRedirect(res.V.Str)
			if !ask {
				r.c.moved(s, addr)
			}
			if r.hops < maxRedirects {
				if l := r.c.linkAt(addr); l != nil {
					r.hops++
					r.askedBy = nil
					if ask {
						r.askedBy = r.link
					}
					r.link, r.asking = l, ask
					flags := r.flags
					if ask {
						flags |= Asking
					}
					l.SendWith(r.cmd, r.sc, r, 0, r.deadline, flags)
					r.c.answered(r.slot, first)
					return
				}
				r.c.refreshSoon()
			}
		}
		if notRun(res.V.Str) {
			res = Result{Err: r.c.notServed(res.V.Str), Unsent: true}
		}
	}
	res.Via = &via{link: r.link, asking: r.asking}
	// A reply counts only for the slot's confirmed owner, and not while
	// the slot is held (cluster_confirm.go).
	res.Counts = res.Counts && r.c.counts(r.slot, r.link, r.askedBy, time.Now())
	r.c.answered(r.slot, first)
	r.rcv.Receive(r.tag, res)
}

func (ur *routedUndo) Receive(_ int, res Result) {
	switch {
	case res.Err == nil && res.V.Kind == resp.KindError && Redirect(res.V.Str) && ur.hops < maxRedirects:
		ask, s, addr := parseRedirect(res.V.Str)
		if !ask {
			ur.c.moved(s, addr)
		}
		if l := ur.c.linkAt(addr); l != nil {
			ur.hops++
			ur.u.LaterOnly, ur.u.Asking = true, ask
			l.Undo(ur.u, ur, 0)
			return
		}
	case errors.Is(res.Err, ErrClosed) && ur.hops < maxRedirects && !ur.c.isClosed():
		// Its link was retired (its master left the map) and closed:
		// the key is with the slot's master now.
		ur.hops++
		ur.byKey()
		return
	}
	ur.rcv.Receive(ur.tag, res)
}
