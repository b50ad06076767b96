package proxy

import (
	"crypto/subtle"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/proxy/script"
	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// command is one entry of the command table. Arity follows Redis: n > 0
// means exactly n arguments (name included), n < 0 at least -n.
type command struct {
	name   string
	arity  int
	flags  []string // as COMMAND reports them
	first  int      // first key position, for COMMAND
	last   int
	step   int
	noAuth bool // allowed before AUTH
	fn     func(c *client, args [][]byte)
}

// commands is the command table: every command the proxy serves, by its
// lower-case name, registered here and nowhere else. (It is filled by init
// because HELP and COMMAND read it.)
var commands map[string]*command

func init() { commands = table(commandList()...) }

// commandList is every served command, by family.
func commandList() []*command {
	return []*command{
		// Lock commands, fanned out to every backend (lockcmds.go, scriptop.go,
		// primitives.go, fence.go).
		&command{name: "set", arity: -3, flags: []string{"write", "denyoom"}, first: 1, last: 1, step: 1, fn: cmdSet},
		&command{name: "get", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, fn: cmdGet},
		&command{name: "del", arity: -2, flags: []string{"write"}, first: 1, last: -1, step: 1, fn: cmdDel},
		&command{name: "pttl", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, fn: cmdPTTL},
		&command{name: "ttl", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, fn: cmdTTL},
		&command{name: "eval", arity: -3, flags: []string{"noscript", "movablekeys"}, fn: cmdEval},
		&command{name: "evalsha", arity: -3, flags: []string{"noscript", "movablekeys"}, fn: cmdEvalSha},
		&command{name: "script", arity: -2, flags: []string{"noscript"}, fn: cmdScript},
		&command{name: "fence", arity: 3, flags: []string{"write"}, first: 1, last: 1, step: 1, fn: cmdFence},
		// Valkey 9's and Redis 8.4's release primitives, for Redis 7 backends.
		&command{name: "delifeq", arity: 3, flags: []string{"write"}, first: 1, last: 1, step: 1, fn: cmdDelIfEq},
		&command{name: "delex", arity: -2, flags: []string{"write"}, first: 1, last: 1, step: 1, fn: cmdDelEx},
		// Connection commands: enough for every client's handshake (this file
		// and handshake.go).
		&command{name: "ping", arity: -1, flags: []string{"fast"}, fn: cmdPing},
		&command{name: "echo", arity: 2, flags: []string{"fast"}, fn: cmdEcho},
		&command{name: "quit", arity: -1, flags: []string{"fast", "no_auth"}, noAuth: true, fn: cmdQuit},
		&command{name: "select", arity: 2, flags: []string{"fast"}, fn: cmdSelect},
		&command{name: "client", arity: -2, flags: []string{"fast"}, fn: cmdClient},
		&command{name: "hello", arity: -1, flags: []string{"fast", "no_auth"}, noAuth: true, fn: cmdHello},
		&command{name: "auth", arity: -2, flags: []string{"fast", "no_auth"}, noAuth: true, fn: cmdAuth},
		&command{name: "reset", arity: 1, flags: []string{"fast", "no_auth"}, noAuth: true, fn: cmdReset},
		&command{name: "config", arity: -2, flags: []string{"admin"}, fn: cmdConfig},
		&command{name: "wait", arity: 3, flags: []string{}, fn: cmdWait},
		&command{name: "info", arity: -1, flags: []string{"fast"}, fn: cmdInfo},
		&command{name: "command", arity: -1, flags: []string{"fast"}, fn: cmdCommand},
		// Pub/sub, so that clients that open a subscription connection connect
		// (handshake.go); nothing is ever published (help.go).
		&command{name: "subscribe", arity: -2, flags: []string{"pubsub"}, fn: cmdSubscribe},
		&command{name: "psubscribe", arity: -2, flags: []string{"pubsub"}, fn: cmdSubscribe},
		&command{name: "unsubscribe", arity: -1, flags: []string{"pubsub"}, fn: cmdUnsubscribe},
		&command{name: "punsubscribe", arity: -1, flags: []string{"pubsub"}, fn: cmdUnsubscribe},
		&command{name: "publish", arity: 3, flags: []string{"pubsub", "fast"}, fn: cmdPublish},
		// For people at a prompt (help.go).
		&command{name: "help", arity: -1, flags: []string{"fast"}, fn: cmdHelp},
	}
}

// table indexes the commands by name. A name registered twice is a
// programming error: it panics, at start-up, rather than let one
// registration silently win.
func table(cmds ...*command) map[string]*command {
	m := make(map[string]*command, len(cmds))
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
	for _, r := range script.Roles() {
		names = append(names, r.String())
	}
	slices.Sort(names)
	return slices.Compact(names)
}

// lookup finds a command by name, in any case, without allocating.
func lookup(name []byte) *command {
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
	if cmd.first > 0 && reservedKey(args, cmd.first, cmd.last, cmd.step) {
		c.replyErr(msgReservedKey)
		return
	}
	if c.subscriptions > 0 && !c.resp3 && !subscribedAllowed(cmd.name) {
		c.replyErr(msgSubscribedContext(cmd.name))
		return
	}
	c.trackNext, c.cmdKeys = false, nil
	if c.s.track.active.Load() > 0 {
		c.cmdKeys = commandKeys(cmd, args)
		if c.trk != nil {
			if len(c.cmdKeys) > 0 {
				c.trackNext = c.trackCommand(c.cmdKeys)
			} else if !(cmd.name == "client" && len(args) > 1 && is(args[1], "caching")) {
				c.trk.caching = 0 // CLIENT CACHING applies to the next command only
			}
		}
	}
	started, rejected := c.inflight, c.rejected
	cmd.fn(c, args)
	// Commands that started no op and were not rejected were answered here.
	if obs := c.s.cfg.Observer; obs != nil && c.inflight == started && c.rejected == rejected {
		obs.Command(cmd.name, ResultOK, 0)
	}
}

// is compares an argument to an ASCII word, ignoring case.
func is(a []byte, s string) bool { return resp.EqualFold(a, s) }

func cmdPing(c *client, args [][]byte) {
	if c.subscriptions > 0 && !c.resp3 {
		msg := []byte{}
		if len(args) == 2 {
			msg = args[1]
		}
		c.reply(resp.Value{Kind: resp.KindArray, Elems: []resp.Value{resp.BulkValue([]byte("pong")), resp.BulkValue(msg)}})
		return
	}
	switch len(args) {
	case 1:
		c.replyRaw(rawPong)
	case 2:
		c.reply(resp.BulkValue(args[1]))
	default:
		c.replyErr(msgWrongArgs("ping"))
	}
}

func cmdEcho(c *client, args [][]byte) { c.reply(resp.BulkValue(args[1])) }

func cmdQuit(c *client, args [][]byte) {
	c.replyRaw(rawOK)
	c.closeAfter = true
}

func cmdSelect(c *client, args [][]byte) {
	n, ok := resp.ParseInt(args[1])
	switch {
	case !ok:
		c.replyErr(msgNotInteger)
	case n < 0 || n > 15:
		c.replyErr(msgDBRange)
	case n != 0:
		c.replyErr(msgOnlyDB0)
	default:
		c.replyRaw(rawOK)
	}
}

// validClientName is Redis's rule for CLIENT SETNAME.
func validClientName(b []byte) bool {
	for _, ch := range b {
		if ch < '!' || ch > '~' {
			return false
		}
	}
	return true
}

func cmdClient(c *client, args [][]byte) {
	sub := args[1]
	switch {
	case is(sub, "setname") && len(args) == 3:
		if !validClientName(args[2]) {
			c.replyErr(msgClientName)
			return
		}
		c.name = append(c.name[:0], args[2]...)
		c.replyRaw(rawOK)
	case is(sub, "getname") && len(args) == 2:
		if len(c.name) == 0 {
			c.reply(resp.Nil)
			return
		}
		c.reply(resp.BulkValue(c.name))
	case is(sub, "id") && len(args) == 2:
		c.reply(resp.IntValue(c.id))
	case is(sub, "setinfo") && len(args) == 4:
		switch {
		case is(args[2], "lib-name"):
			c.libName = append(c.libName[:0], args[3]...)
		case is(args[2], "lib-ver"):
			c.libVer = append(c.libVer[:0], args[3]...)
		default:
			c.replyErr(msgUnrecognizedOption(args[2]))
			return
		}
		c.replyRaw(rawOK)
	case is(sub, "info") && len(args) == 2:
		c.reply(resp.BulkValue([]byte(c.describe() + "\n")))
	case (is(sub, "no-evict") || is(sub, "no-touch")) && len(args) == 3:
		if !is(args[2], "on") && !is(args[2], "off") {
			c.replyErr(msgSyntax)
			return
		}
		c.replyRaw(rawOK)
	case is(sub, "tracking") && len(args) >= 3:
		cmdClientTracking(c, args)
	case is(sub, "caching") && len(args) == 3:
		cmdClientCaching(c, args)
	case is(sub, "trackinginfo") && len(args) == 2:
		c.reply(c.trackingInfo())
	case is(sub, "getredir") && len(args) == 2:
		switch {
		case c.trk == nil:
			c.reply(resp.IntValue(-1))
		default:
			c.reply(resp.IntValue(c.trk.redirect))
		}
	case is(sub, "help"):
		c.reply(helpReply("CLIENT", "GETNAME", "ID", "INFO", "SETINFO <LIB-NAME|LIB-VER> <value>", "SETNAME <name>", "TRACKING <ON|OFF> [REDIRECT id] [BCAST] [PREFIX p ...] [OPTIN|OPTOUT] [NOLOOP]", "CACHING <YES|NO>", "TRACKINGINFO", "GETREDIR"))
	case is(sub, "setname") || is(sub, "getname") || is(sub, "id") || is(sub, "setinfo") ||
		is(sub, "info") || is(sub, "no-evict") || is(sub, "no-touch"):
		c.replyErr(msgWrongArgs("client|" + strings.ToLower(string(sub))))
	default:
		c.replyErr(msgUnknownSubcommand(string(sub), "CLIENT"))
	}
}

// describe is the client's CLIENT INFO line.
func (c *client) describe() string {
	var b strings.Builder
	b.WriteString("id=")
	b.WriteString(itoa(c.id))
	b.WriteString(" addr=")
	b.WriteString(c.nc.RemoteAddr().String())
	b.WriteString(" laddr=")
	b.WriteString(c.nc.LocalAddr().String())
	b.WriteString(" name=")
	b.Write(c.name)
	b.WriteString(" age=")
	b.WriteString(itoa(int64(time.Since(c.created).Seconds())))
	b.WriteString(" db=0 resp=")
	if c.resp3 {
		b.WriteString("3")
	} else {
		b.WriteString("2")
	}
	b.WriteString(" lib-name=")
	b.Write(c.libName)
	b.WriteString(" lib-ver=")
	b.Write(c.libVer)
	return b.String()
}

func helpReply(cmd string, lines ...string) resp.Value {
	v := resp.Value{Kind: resp.KindArray}
	v.Elems = append(v.Elems, resp.Value{Kind: resp.KindSimple, Str: []byte(cmd + " <subcommand> [<arg> [value] [opt] ...]. Subcommands are:")})
	for _, l := range lines {
		v.Elems = append(v.Elems, resp.Value{Kind: resp.KindSimple, Str: []byte(l)})
	}
	v.Elems = append(v.Elems, resp.Value{Kind: resp.KindSimple, Str: []byte("HELP")})
	return v
}

func cmdHello(c *client, args [][]byte) {
	proto3 := c.resp3
	if len(args) >= 2 {
		v, ok := resp.ParseInt(args[1])
		if !ok {
			c.replyErr(msgProtoVersion)
			return
		}
		if v < 2 || v > 3 {
			c.replyErr(msgNoProto)
			return
		}
		proto3 = v == 3
	}
	var setname []byte
	for j := 2; j < len(args); j++ {
		more := len(args) - j - 1
		switch {
		case is(args[j], "auth") && more >= 2:
			if !c.s.checkAuth(args[j+1], args[j+2]) {
				c.replyErr(msgWrongPass)
				return
			}
			c.setAuthed(true)
			j += 2
		case is(args[j], "setname") && more >= 1:
			if !validClientName(args[j+1]) {
				c.replyErr(msgClientName)
				return
			}
			setname = args[j+1]
			j++
		default:
			c.replyErr(msgHelloOption(args[j]))
			return
		}
	}
	if !c.authed {
		c.replyErr(msgHelloNoAuth)
		return
	}
	if setname != nil {
		c.name = append(c.name[:0], setname...)
	}
	c.resp3 = proto3
	var b []byte
	if proto3 {
		b = append(b, "%7\r\n"...)
	} else {
		b = resp.AppendArrayHeader(b, 14)
	}
	b = resp.AppendBulkString(b, "server")
	b = resp.AppendBulkString(b, "redis")
	b = resp.AppendBulkString(b, "version")
	b = resp.AppendBulkString(b, redisVersion)
	b = resp.AppendBulkString(b, "proto")
	if proto3 {
		b = append(b, ":3\r\n"...)
	} else {
		b = append(b, ":2\r\n"...)
	}
	b = resp.AppendBulkString(b, "id")
	b = appendReply(b, resp.IntValue(c.id), false)
	b = resp.AppendBulkString(b, "mode")
	b = resp.AppendBulkString(b, "standalone")
	b = resp.AppendBulkString(b, "role")
	b = resp.AppendBulkString(b, "master")
	b = resp.AppendBulkString(b, "modules")
	b = resp.AppendArrayHeader(b, 0)
	c.replyRaw(b)
}

// passwordSet reports whether clients must authenticate.
func (s *Server) passwordSet() bool { return s.cfg.RequirePass != "" || len(s.cfg.Users) > 0 }

// checkAuth verifies client credentials. Without any password the default
// user accepts any password (Redis's nopass default user); with users
// configured and no RequirePass, the default user is disabled.
func (s *Server) checkAuth(user, pass []byte) bool {
	if !s.passwordSet() {
		return string(user) == "default"
	}
	want, ok := s.cfg.Users[string(user)]
	if string(user) == "default" {
		want, ok = s.cfg.RequirePass, s.cfg.RequirePass != ""
	}
	// Compare in constant time whether or not the user exists.
	eq := subtle.ConstantTimeCompare(pass, []byte(want)) == 1
	return ok && eq
}

// setAuthed records whether the connection is authenticated; the reader
// applies Redis's tighter pre-authentication limits until it is.
func (c *client) setAuthed(v bool) {
	c.authed = v
	c.rd.authed = v
}

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
