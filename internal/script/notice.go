package script

import (
	"fmt"
	"strconv"
	"time"
)

// Notice is what a release publishes when it frees its lock, for the
// clients waiting on it (Redisson's unlock message on the lock's channel):
// the proxy does not run the script's PUBLISH on the masters, it publishes
// the notice itself once a majority of masters released the lock (see the
// proxy's pub/sub), so that a waiter is woken once per release and never
// by a message no majority saw.
type Notice struct {
	Shard bool // SPUBLISH
	// List: the release pushes the message onto a signal list (Channel
	// names the list's key), which waiters take with BLPOP
	// (python-redis-lock); the proxy wakes the BLPOP waiters on that key
	// instead, and keeps the signal for waiters to come for its TTL.
	List bool
	// Channel and Payload are where the channel and the message come
	// from: an argument, a lock key's name, or a constant.
	Channel, Payload NoticePart
	// TTLArg is the argument that gives a signal list's TTL (-1: the
	// constant TTLConst), in TTLUnit.
	TTLArg   int
	TTLUnit  time.Duration
	TTLConst time.Duration
}

// SignalTTL returns how long a signal list's element stays for waiters to
// come, from a call's arguments.
func (n *Notice) SignalTTL(args [][]byte) time.Duration {
	if n.TTLArg < 0 || n.TTLArg >= len(args) {
		return n.TTLConst
	}
	v, ok := parseInt(string(args[n.TTLArg]))
	if !ok || v < 0 || v > int64(1<<62)/int64(n.TTLUnit) {
		return 0
	}
	return time.Duration(v) * n.TTLUnit
}

// NoticePart is where a notice's channel or message comes from.
type NoticePart struct {
	Arg   int    // 0-based argument (KEYS after the lock keys, then ARGV); -1: none
	Key   int    // 0-based lock key, when Arg is -1; -1: none
	Const string // when neither
}

// ChannelOf and PayloadOf return a call's channel and message, from its
// lock keys and arguments (as Class.Split gives them).
func (n *Notice) ChannelOf(keys, args [][]byte) []byte { return n.Channel.of(keys, args) }

// PayloadOf is ChannelOf for the message.
func (n *Notice) PayloadOf(keys, args [][]byte) []byte { return n.Payload.of(keys, args) }

func (p NoticePart) of(keys, args [][]byte) []byte {
	switch {
	case p.Arg >= 0 && p.Arg < len(args):
		return args[p.Arg]
	case p.Key >= 0 && p.Key < len(keys):
		return keys[p.Key]
	}
	return []byte(p.Const)
}

func (p NoticePart) text(nm namer) string {
	switch {
	case p.Arg >= 0:
		return nm.arg(p.Arg)
	case p.Key >= 0:
		return fmt.Sprintf("KEYS[%d]", p.Key+1)
	}
	return strconv.Quote(p.Const)
}

// partOf finds where v comes from in a call: an argument, else a lock
// key, else a constant.
func partOf(keys, args []string, v string) NoticePart {
	p := NoticePart{Arg: -1, Key: -1, Const: v}
	if i := argsEqual(args, v); len(i) > 0 {
		p.Arg = i[0]
	} else if i := argsEqual(keys, v); len(i) > 0 {
		p.Key = i[0]
	}
	return p
}

// String writes the notice as the classification's spec does.
func (n *Notice) String(nm namer) string {
	cmd := "PUBLISH"
	switch {
	case n.Shard:
		cmd = "SPUBLISH"
	case n.List:
		ttl := fmt.Sprintf("%d ms", n.TTLConst.Milliseconds())
		if n.TTLArg >= 0 {
			ttl = nm.arg(n.TTLArg) + " " + unitName(n.TTLUnit)
		}
		return fmt.Sprintf("LPUSH %s %s for %s", n.Channel.text(nm), n.Payload.text(nm), ttl)
	}
	return fmt.Sprintf("%s %s %s", cmd, n.Channel.text(nm), n.Payload.text(nm))
}

// notice reads, from the battery's runs, what a release publishes: one
// message on every run that freed the lock, from the same argument or
// constant each time, and none on any other run. A script that publishes
// otherwise (when it does not free its lock, twice, or a message that
// follows no argument and no constant) is refused: its messages would
// mean something other than a release.
func (c *classifier) notice(cl *Class, all []sample) *refusal {
	var n *Notice
	for _, s := range all {
		if len(s.pub) == 0 {
			continue
		}
		switch {
		case cl.Role != RoleRelease && cl.Role != RoleDelete || cl.Keys != 1:
			return refuse(refuseOther, "%s it published on %s: only a release of one key may publish, when it frees its lock", s.probe, strconv.Quote(short(s.pub[0].Channel)))
		case !s.freed:
			return refuse(refuseOther, "%s it published on %s without freeing its lock: a message that is not a release has no majority meaning", s.probe, strconv.Quote(short(s.pub[0].Channel)))
		case len(s.pub) > 1:
			return refuse(refuseOther, "%s it published %d messages: a release publishes one", s.probe, len(s.pub))
		}
	}
	for _, s := range all {
		if len(s.pub) == 0 {
			continue
		}
		m := s.pub[0]
		if n == nil {
			// An argument, or a key's name, rather than a constant wherever
			// one holds it.
			n = &Notice{Shard: m.Shard, List: m.List, Channel: partOf(s.keys, s.argv, m.Channel), Payload: partOf(s.keys, s.argv, m.Payload), TTLArg: -1}
		}
		keys, args := strArgs(s.keys), strArgs(s.argv)
		if m.Shard != n.Shard || m.List != n.List || m.Channel != string(n.ChannelOf(keys, args)) || m.Payload != string(n.PayloadOf(keys, args)) {
			return refuse(refuseOther, "%s it published %s on %s, which follows no argument, key name or constant", s.probe, strconv.Quote(short(m.Payload)), strconv.Quote(short(m.Channel)))
		}
		if m.List {
			if ref := c.signalTTL(n, s, m); ref != nil {
				return ref
			}
		}
	}
	if n == nil {
		return nil
	}
	if n.List && n.TTLArg < 0 && n.TTLConst <= 0 {
		return refuse(refuseOther, "leaves its signal list without a TTL the proxy can keep it for")
	}
	for _, s := range all {
		if s.freed && len(s.pub) == 0 {
			return refuse(refuseOther, "%s it freed its lock without publishing, though other releases publish", s.probe)
		}
	}
	cl.Notice = n
	return nil
}

// signalTTL reads a signal list's TTL from one run: the argument that
// gave it in every run so far (ms or s), or the same constant. The list
// must be the script's signal key (Layout: a key beside the lock keys),
// and must expire.
func (c *classifier) signalTTL(n *Notice, s sample, m Message) *refusal {
	if n.Channel.Arg < 0 || n.Channel.Arg != c.signalArg() {
		return refuse(refuseOther, "%s it pushed onto %s, which is not a signal list beside its lock", s.probe, strconv.Quote(short(m.Channel)))
	}
	if m.TTL <= 0 {
		return refuse(refuseOther, "%s it left its signal list %s without an expiry: the proxy keeps no key that never expires", s.probe, strconv.Quote(short(m.Channel)))
	}
	var cands []ttlArg
	for _, t := range ttlArgs(s.argv, m.TTL, c.now) {
		if !t.deadline {
			cands = append(cands, t)
		}
	}
	switch {
	case n.TTLArg >= 0 && containsTTL(cands, ttlArg{n.TTLArg, n.TTLUnit, false}):
	case n.TTLArg < 0 && n.TTLConst == 0 && len(cands) > 0:
		n.TTLArg, n.TTLUnit = cands[0].idx, cands[0].unit
	case n.TTLArg < 0 && n.TTLConst == 0:
		n.TTLConst = time.Duration(m.TTL) * time.Millisecond
	case n.TTLArg < 0 && n.TTLConst == time.Duration(m.TTL)*time.Millisecond:
	default:
		return refuse(refuseOther, "%s it kept its signal list for %d ms, which follows no argument", s.probe, m.TTL)
	}
	return nil
}
