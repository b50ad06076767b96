package script

import (
	"fmt"
	"strconv"
)

// Notice is what a release publishes when it frees its lock, for the
// clients waiting on it (Redisson's unlock message on the lock's channel):
// the proxy does not run the script's PUBLISH on the masters, it publishes
// the notice itself once a majority of masters released the lock (see the
// proxy's pub/sub), so that a waiter is woken once per release and never
// by a message no majority saw.
type Notice struct {
	Shard      bool   // SPUBLISH
	ChannelArg int    // 0-based argument (KEYS after the lock keys, then ARGV) holding the channel; -1: Channel
	Channel    string // the constant channel
	PayloadArg int    // the argument holding the message; -1: Payload
	Payload    string // the constant message
}

// ChannelOf and PayloadOf return a call's channel and message.
func (n *Notice) ChannelOf(args [][]byte) []byte { return noticePart(args, n.ChannelArg, n.Channel) }

// PayloadOf is ChannelOf for the message.
func (n *Notice) PayloadOf(args [][]byte) []byte { return noticePart(args, n.PayloadArg, n.Payload) }

func noticePart(args [][]byte, i int, c string) []byte {
	if i >= 0 && i < len(args) {
		return args[i]
	}
	return []byte(c)
}

// String writes the notice as the classification's spec does.
func (n *Notice) String(nm namer) string {
	part := func(i int, c string) string {
		if i >= 0 {
			return nm.arg(i)
		}
		return strconv.Quote(c)
	}
	cmd := "PUBLISH"
	if n.Shard {
		cmd = "SPUBLISH"
	}
	return fmt.Sprintf("%s %s %s", cmd, part(n.ChannelArg, n.Channel), part(n.PayloadArg, n.Payload))
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
			n = &Notice{Shard: m.Shard, ChannelArg: -1, Channel: m.Channel, PayloadArg: -1, Payload: m.Payload}
			// An argument rather than a constant wherever one holds it.
			if i := argsEqual(s.argv, m.Channel); len(i) > 0 {
				n.ChannelArg = i[0]
			}
			if i := argsEqual(s.argv, m.Payload); len(i) > 0 {
				n.PayloadArg = i[0]
			}
		}
		if m.Shard != n.Shard || m.Channel != string(n.ChannelOf(strArgs(s.argv))) || m.Payload != string(n.PayloadOf(strArgs(s.argv))) {
			return refuse(refuseOther, "%s it published %s on %s, which follows neither an argument nor a constant", s.probe, strconv.Quote(short(m.Payload)), strconv.Quote(short(m.Channel)))
		}
	}
	if n == nil {
		return nil
	}
	for _, s := range all {
		if s.freed && len(s.pub) == 0 {
			return refuse(refuseOther, "%s it freed its lock without publishing, though other releases publish", s.probe)
		}
	}
	cl.Notice = n
	return nil
}
