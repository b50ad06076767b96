package proxy

import (
	"slices"
	"strconv"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// commandDef is one entry of the command table. Arity follows Redis: n > 0
// means exactly n arguments (name included), n < 0 at least -n.
type commandDef struct {
	name   string
	arity  int
	flags  []string // as COMMAND reports them
	first  int      // first key position, for COMMAND
	last   int
	step   int
	noAuth bool     // allowed before AUTH
	lock   lockKind // what INFO's lock counters count it as (stats.go)
	fn     func(c *client, args [][]byte)
}

// commands is the command table: every command the proxy serves, by its
// lower-case name. Each family's file registers its own (cmds_*.go); a
// name registered twice panics at start-up. (It is filled by init because
// HELP and COMMAND read it.)
var commands map[string]*commandDef

func init() {
	commands = table(slices.Concat(lockCommands, semCommands, keyspaceCommands, scriptCommands, connectionCommands, serverCommands, pubsubCommands, signalCommands, aclCommands, vouchCommands)...)
	for _, r := range spec.Roles() {
		lockKinds[r.String()] = roleKind(r)
	}
	for name, c := range commands {
		if c.lock != kindOther {
			lockKinds[name] = c.lock
		}
	}
}

// table indexes the commands by name. A name registered twice is a
// programming error: it panics, at start-up, rather than let one
// registration silently win.
func table(cmds ...*commandDef) map[string]*commandDef {
	m := make(map[string]*commandDef, len(cmds))
	for _, c := range cmds {
		if _, dup := m[c.name]; dup {
			panic("proxy: command " + c.name + " registered twice")
		}
		m[c.name] = c
	}
	return m
}

// CommandNames lists every name the proxy reports commands under: the
// command table, the roles of lock scripts, and "vote" and "unknown". It
// bounds the label values of metrics.
func CommandNames() []string {
	names := []string{"unknown", "vote"}
	for n := range commands {
		names = append(names, n)
	}
	for _, r := range spec.Roles() {
		names = append(names, r.String())
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// lookup finds a command by name, in any case, without allocating.
func lookup(name []byte) *commandDef {
	var buf [24]byte
	if len(name) > len(buf) {
		return nil
	}
	return commands[string(resp.AppendLower(buf[:0], name))]
}

// exec runs one command, checking existence, arity and authentication in
// the order Redis does.
func (c *client) exec(args [][]byte) {
	c.s.stats.commands.Add(1)
	cmd := lookup(args[0])
	if cmd == nil {
		c.lastCmd = "unknown"
		if msg, ok := msgUnsafeDesign(args[0]); ok {
			c.replyErr(msg) // a design no majority makes safe: say why
			return
		}
		c.replyErr(msgUnknownCommand(args))
		return
	}
	c.lastCmd = cmd.name
	if (cmd.arity > 0 && len(args) != cmd.arity) || (cmd.arity < 0 && len(args) < -cmd.arity) {
		c.replyErr(msgWrongArgs(cmd.name))
		return
	}
	if !c.authed && !cmd.noAuth {
		c.replyErr(msgNoAuth)
		return
	}
	if c.acl != nil {
		if msg := c.aclRefusal(cmd, args); msg != "" {
			c.replyErr(msg)
			return
		}
	}
	if cmd.first > 0 && reservedKey(args, cmd.first, cmd.last, cmd.step) {
		c.replyErr(msgReservedKey)
		return
	}
	if c.subscriptions > 0 && !c.resp3.Load() && !subscribedAllowed(cmd.name) {
		c.replyErr(msgSubscribedContext(cmd.name))
		return
	}
	c.trackNext, c.cmdKeys = false, nil
	uncache := false
	if c.s.track.active.Load() > 0 {
		c.cmdKeys = commandKeys(cmd, args)
		if c.trk != nil {
			if len(c.cmdKeys) > 0 {
				c.trackNext = c.trackCommand(c.cmdKeys)
			} else {
				// CLIENT CACHING applies to the next command only; one
				// without keys ends it once it ran (CLIENT TRACKINGINFO
				// still shows it, as on Redis).
				uncache = !(cmd.name == "client" && len(args) > 1 && is(args[1], "caching"))
			}
		}
	}
	started, rejected := c.inflight, c.rejected
	cmd.fn(c, args)
	if uncache && c.trk != nil {
		c.trk.caching = 0
	}
	// Commands that started no op and were not rejected were answered here.
	if obs := c.s.cfg.Observer; obs != nil && c.inflight == started && c.rejected == rejected {
		obs.Command(cmd.name, ResultOK, 0)
	}
}

// is compares an argument to an ASCII word, ignoring case.
func is(a []byte, s string) bool { return resp.EqualFold(a, s) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// reservedPrefix starts the keys the proxy keeps on the backends for
// itself (the replication marker): no client command may touch them.
const reservedPrefix = "redlock-proxy:"

// reservedKey reports whether a key of a command (at first..last by step,
// last -1 meaning the last argument) is one of the proxy's own.
func reservedKey(args [][]byte, first, last, step int) bool {
	return anyKey(args, first, last, step, isReserved)
}

// anyKey reports whether is holds for a key of a command: the arguments at
// first..last by step, last -1 meaning the last argument.
func anyKey(args [][]byte, first, last, step int, is func([]byte) bool) bool {
	if last < 0 {
		last = len(args) + last
	}
	for i := first; i <= last && i < len(args); i += max(step, 1) {
		if is(args[i]) {
			return true
		}
	}
	return false
}

func isReserved(key []byte) bool {
	return len(key) >= len(reservedPrefix) && string(key[:len(reservedPrefix)]) == reservedPrefix
}
