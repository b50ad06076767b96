package proxy

import (
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// serverCommands describe the proxy: its configuration as clients probe
// it, INFO (info.go), COMMAND, and HELP for people at a prompt (help.go).
var serverCommands = []*commandDef{
	{name: "config", arity: -2, flags: []string{"admin"}, fn: handleConfig},
	{name: "wait", arity: 3, flags: []string{}, fn: handleWait},
	{name: "info", arity: -1, flags: []string{"fast"}, fn: handleInfo},
	{name: "command", arity: -1, flags: []string{"fast"}, fn: handleCommand},
	{name: "help", arity: -1, flags: []string{"fast"}, fn: handleHelp},
}

// configParams are the harmless answers to CONFIG GET that clients read
// while connecting (StackExchange.Redis reads timeout, databases,
// replica-read-only...).
func (s *Server) configParams() [][2]string {
	return [][2]string{
		{"timeout", strconv.Itoa(int(s.cfg.IdleTimeout.Seconds()))},
		{"databases", "1"},
		{"maxclients", strconv.Itoa(s.cfg.MaxClients)},
		{"save", ""},
		{"appendonly", "no"},
		{"slave-read-only", "yes"},
		{"replica-read-only", "yes"},
		{"maxmemory", "0"},
		{"maxmemory-policy", "noeviction"},
		{"proto-max-bulk-len", strconv.Itoa(s.cfg.Limits.MaxBulk)},
		{"cluster-enabled", "no"},
	}
}

func handleConfig(c *client, args [][]byte) {
	sub := args[1]
	switch {
	case is(sub, "get") && len(args) >= 3:
		var kv []resp.Value
		for _, p := range c.s.configParams() {
			for _, pat := range args[2:] {
				if ok, _ := path.Match(strings.ToLower(string(pat)), p[0]); ok {
					kv = append(kv, resp.BulkValue([]byte(p[0])), resp.BulkValue([]byte(p[1])))
					break
				}
			}
		}
		if c.resp3.Load() {
			b := resp.AppendMapHeader(nil, len(kv)/2, true)
			for _, v := range kv {
				b = appendReply(b, v, true)
			}
			c.replyRaw(b)
			return
		}
		c.reply(resp.Value{Kind: resp.KindArray, Elems: kv})
	case is(sub, "set") || is(sub, "rewrite") || is(sub, "resetstat"):
		c.replyErr(msgConfigUnsupported(sub))
	case is(sub, "help"):
		c.reply(helpReply("CONFIG", "GET <pattern>"))
	case is(sub, "get"):
		c.replyErr(msgWrongArgs("config|get"))
	default:
		c.replyErr(msgUnknownSubcommand(string(sub), "CONFIG"))
	}
}

// handleWait: the proxy's backends have no replicas, and every lock command
// already waited for a majority of masters.
func handleWait(c *client, args [][]byte) {
	if _, ok := resp.ParseInt(args[1]); !ok {
		c.replyErr(msgNotInteger)
		return
	}
	t, ok := resp.ParseInt(args[2])
	if !ok {
		c.replyErr(msgTimeoutNotInteger)
		return
	}
	if t < 0 {
		c.replyErr(msgTimeoutNegative)
		return
	}
	c.reply(resp.IntValue(0))
}

// handleCommand answers COMMAND, COMMAND COUNT, COMMAND INFO, COMMAND LIST
// and COMMAND DOCS from the command table and its documentation: enough
// for redis-cli and client libraries.
func handleCommand(c *client, args [][]byte) {
	if len(args) == 1 {
		c.reply(commandTable(sortedCommands()))
		return
	}
	sub := args[1]
	switch {
	case is(sub, "count") && len(args) == 2:
		c.reply(resp.IntValue(int64(len(commands))))
	case is(sub, "info"):
		var cmds []*commandDef
		for _, a := range args[2:] {
			cmds = append(cmds, lookup(a))
		}
		if len(args) == 2 {
			cmds = sortedCommands()
		}
		c.reply(commandTable(cmds))
	case is(sub, "docs"):
		// The served commands' own documentation (proxy/help.go): redis-cli
		// builds "help <command>", "help @lock" and its hints from it.
		names := sortedNames()
		if len(args) > 2 {
			names = names[:0]
			for _, a := range args[2:] {
				names = append(names, strings.ToLower(string(a)))
			}
		}
		c.replyRaw(appendDocs(nil, names, c.resp3.Load()))
	case is(sub, "list") && len(args) == 2:
		v := resp.Value{Kind: resp.KindArray}
		for _, cmd := range sortedCommands() {
			v.Elems = append(v.Elems, resp.BulkValue([]byte(cmd.name)))
		}
		c.reply(v)
	case is(sub, "help"):
		c.reply(helpReply("COMMAND", "COUNT", "DOCS [<command-name> ...]", "INFO [<command-name> ...]", "LIST"))
	default:
		c.replyErr(msgUnknownSubcommand(string(sub), "COMMAND"))
	}
}

func sortedCommands() []*commandDef {
	cmds := make([]*commandDef, 0, len(commands))
	for _, cmd := range commands {
		cmds = append(cmds, cmd)
	}
	sort.Slice(cmds, func(i, j int) bool { return cmds[i].name < cmds[j].name })
	return cmds
}

func commandTable(cmds []*commandDef) resp.Value {
	v := resp.Value{Kind: resp.KindArray, Elems: []resp.Value{}}
	for _, cmd := range cmds {
		if cmd == nil {
			v.Elems = append(v.Elems, resp.Nil)
			continue
		}
		flags := resp.Value{Kind: resp.KindArray, Elems: []resp.Value{}}
		for _, f := range cmd.flags {
			flags.Elems = append(flags.Elems, resp.Value{Kind: resp.KindSimple, Str: []byte(f)})
		}
		empty := resp.Value{Kind: resp.KindArray, Elems: []resp.Value{}}
		cats := resp.Value{Kind: resp.KindArray, Elems: []resp.Value{}}
		for _, cat := range aclCategories[cmd.name] {
			cats.Elems = append(cats.Elems, resp.Value{Kind: resp.KindSimple, Str: []byte("@" + cat)})
		}
		v.Elems = append(v.Elems, resp.Value{Kind: resp.KindArray, Elems: []resp.Value{
			resp.BulkValue([]byte(cmd.name)), resp.IntValue(int64(cmd.arity)), flags,
			resp.IntValue(int64(cmd.first)), resp.IntValue(int64(cmd.last)), resp.IntValue(int64(cmd.step)),
			cats, empty, empty, empty,
		}})
	}
	return v
}
