package spec

import (
	"fmt"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
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
	v, ok := sandbox.ParseInt(string(args[n.TTLArg]))
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

func (p NoticePart) text(nm Namer) string {
	switch {
	case p.Arg >= 0:
		return nm.Arg(p.Arg)
	case p.Key >= 0:
		return fmt.Sprintf("KEYS[%d]", p.Key+1)
	}
	return strconv.Quote(p.Const)
}

// partOf finds where v comes from in a call: an argument, else a lock
// key, else a constant.
func PartOf(keys, args []string, v string) NoticePart {
	p := NoticePart{Arg: -1, Key: -1, Const: v}
	if i := ArgsEqual(args, v); len(i) > 0 {
		p.Arg = i[0]
	} else if i := ArgsEqual(keys, v); len(i) > 0 {
		p.Key = i[0]
	}
	return p
}

// String writes the notice as the classification's spec does.
func (n *Notice) String(nm Namer) string {
	cmd := "PUBLISH"
	switch {
	case n.Shard:
		cmd = "SPUBLISH"
	case n.List:
		ttl := fmt.Sprintf("%d ms", n.TTLConst.Milliseconds())
		if n.TTLArg >= 0 {
			ttl = nm.Arg(n.TTLArg) + " " + unitName(n.TTLUnit)
		}
		return fmt.Sprintf("LPUSH %s %s for %s", n.Channel.text(nm), n.Payload.text(nm), ttl)
	}
	return fmt.Sprintf("%s %s %s", cmd, n.Channel.text(nm), n.Payload.text(nm))
}

// argsEqual lists the ARGV indexes holding v.
func ArgsEqual(argv []string, v string) []int {
	var out []int
	for i, a := range argv {
		if a == v {
			out = append(out, i)
		}
	}
	return out
}
