package proxy

import (
	"crypto/subtle"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// connectionCommands are enough for every client's handshake, answered by
// the proxy itself as Redis answers them.
var connectionCommands = []*commandDef{
	{name: "ping", arity: -1, flags: []string{"fast"}, fn: handlePing},
	{name: "echo", arity: 2, flags: []string{"fast"}, fn: handleEcho},
	{name: "quit", arity: -1, flags: []string{"fast", "no_auth"}, noAuth: true, fn: handleQuit},
	{name: "select", arity: 2, flags: []string{"fast"}, fn: handleSelect},
	{name: "client", arity: -2, flags: []string{"fast"}, fn: handleClient},
	{name: "hello", arity: -1, flags: []string{"fast", "no_auth"}, noAuth: true, fn: handleHello},
	{name: "auth", arity: -2, flags: []string{"fast", "no_auth"}, noAuth: true, fn: handleAuth},
	{name: "reset", arity: 1, flags: []string{"fast", "no_auth"}, noAuth: true, fn: handleReset},
}

func handlePing(c *client, args [][]byte) {
	if c.subscriptions > 0 && !c.resp3.Load() {
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

func handleEcho(c *client, args [][]byte) { c.reply(resp.BulkValue(args[1])) }

func handleQuit(c *client, args [][]byte) {
	c.replyRaw(rawOK)
	c.closeAfter = true
}

func handleSelect(c *client, args [][]byte) {
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

func handleClient(c *client, args [][]byte) {
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
		handleClientTracking(c, args)
	case is(sub, "caching") && len(args) == 3:
		handleClientCaching(c, args)
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
		is(sub, "info") || is(sub, "no-evict") || is(sub, "no-touch") || is(sub, "tracking") ||
		is(sub, "caching") || is(sub, "trackinginfo") || is(sub, "getredir"):
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
	if c.resp3.Load() {
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

func handleHello(c *client, args [][]byte) {
	proto3 := c.resp3.Load()
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
			c.login(string(args[j+1]))
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
	c.resp3.Store(proto3)
	var b []byte
	b = resp.AppendMapHeader(b, 7, proto3)
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
	u, ok := s.cfg.Users[string(user)]
	want := u.Password
	if u.Rules != nil && u.Rules.Off {
		ok = false // a disabled user (off)
	}
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

// login authenticates the connection as user, under its rules.
func (c *client) login(user string) {
	c.user, c.acl = user, c.s.acls[user]
	c.setAuthed(true)
}

// The proxy has no users of its own unless a password is configured; the
// default user then accepts any password, as Redis's nopass default user.
func handleAuth(c *client, args [][]byte) {
	var user, pass []byte
	switch len(args) {
	case 2:
		if !c.s.passwordSet() {
			c.replyErr(msgAuthNotConfigured)
			return
		}
		user, pass = []byte("default"), args[1]
	case 3:
		user, pass = args[1], args[2]
	default:
		c.replyErr(msgSyntax)
		return
	}
	if !c.s.checkAuth(user, pass) {
		c.replyErr(msgWrongPass)
		return
	}
	c.login(string(user))
	c.replyRaw(rawOK)
}

// handleReset returns the connection to its initial state, as Redis's RESET.
func handleReset(c *client, args [][]byte) {
	c.resp3.Store(false)
	c.name = c.name[:0]
	if c.trk != nil {
		c.s.track.off(c)
		c.trk = nil
	}
	c.s.subs.drop(c)
	c.user, c.acl = "default", nil
	c.setAuthed(!c.s.passwordSet())
	c.replyRaw(rawReset)
}
