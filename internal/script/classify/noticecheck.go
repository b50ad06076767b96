package classify

import (
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// notice reads, from the battery's runs, what a release publishes: one
// message on every run that freed the lock, from the same argument or
// constant each time, and none on any other run. A script that publishes
// otherwise (when it does not free its lock, twice, or a message that
// follows no argument and no constant) is refused: its messages would
// mean something other than a release.
func (c *classifier) notice(cl *spec.Class, all []spec.Sample) *sandbox.Stop {
	var n *spec.Notice
	for _, s := range all {
		if len(s.Pub) == 0 {
			continue
		}
		switch {
		case cl.Role != spec.RoleRelease && cl.Role != spec.RoleDelete || cl.Keys != 1:
			return sandbox.Refuse(sandbox.RefuseOther, "%s it published on %s: only a release of one key may publish, when it frees its lock", s.Probe, strconv.Quote(sandbox.Short(s.Pub[0].Channel)))
		case !s.Freed:
			return sandbox.Refuse(sandbox.RefuseOther, "%s it published on %s without freeing its lock: a message that is not a release has no majority meaning", s.Probe, strconv.Quote(sandbox.Short(s.Pub[0].Channel)))
		case len(s.Pub) > 1:
			return sandbox.Refuse(sandbox.RefuseOther, "%s it published %d messages: a release publishes one", s.Probe, len(s.Pub))
		}
	}
	for _, s := range all {
		if len(s.Pub) == 0 {
			continue
		}
		m := s.Pub[0]
		if n == nil {
			// An argument, or a key's name, rather than a constant wherever
			// one holds it.
			n = &spec.Notice{Shard: m.Shard, List: m.List, Channel: spec.PartOf(s.Keys, s.Argv, m.Channel), Payload: spec.PartOf(s.Keys, s.Argv, m.Payload), TTLArg: -1}
		}
		keys, args := spec.StrArgs(s.Keys), spec.StrArgs(s.Argv)
		if m.Shard != n.Shard || m.List != n.List || m.Channel != string(n.ChannelOf(keys, args)) || m.Payload != string(n.PayloadOf(keys, args)) {
			return sandbox.Refuse(sandbox.RefuseOther, "%s it published %s on %s, which follows no argument, key name or constant", s.Probe, strconv.Quote(sandbox.Short(m.Payload)), strconv.Quote(sandbox.Short(m.Channel)))
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
		return sandbox.Refuse(sandbox.RefuseOther, "leaves its signal list without a TTL the proxy can keep it for")
	}
	for _, s := range all {
		if s.Freed && len(s.Pub) == 0 {
			return sandbox.Refuse(sandbox.RefuseOther, "%s it freed its lock without publishing, though other releases publish", s.Probe)
		}
	}
	cl.Notice = n
	return nil
}

// signalTTL reads a signal list's TTL from one run: the argument that
// gave it in every run so far (ms or s), or the same constant. The list
// must be the script's signal key (Layout: a key beside the lock keys),
// and must expire.
func (c *classifier) signalTTL(n *spec.Notice, s spec.Sample, m sandbox.Message) *sandbox.Stop {
	if n.Channel.Arg < 0 || n.Channel.Arg != c.signalArg() {
		return sandbox.Refuse(sandbox.RefuseOther, "%s it pushed onto %s, which is not a signal list beside its lock", s.Probe, strconv.Quote(sandbox.Short(m.Channel)))
	}
	if m.TTL <= 0 {
		return sandbox.Refuse(sandbox.RefuseOther, "%s it left its signal list %s without an expiry: the proxy keeps no key that never expires", s.Probe, strconv.Quote(sandbox.Short(m.Channel)))
	}
	var cands []ttlArg
	for _, t := range ttlArgs(s.Argv, m.TTL, c.now) {
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
		return sandbox.Refuse(sandbox.RefuseOther, "%s it kept its signal list for %d ms, which follows no argument", s.Probe, m.TTL)
	}
	return nil
}
