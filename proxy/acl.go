package proxy

import (
	"slices"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/acl"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Users with Redis ACL rules (config users[].rules): which commands a user
// may run and which keys it may read or write, checked as Redis checks
// them, after authentication and before the command runs, and refused in
// Redis's NOPERM words. A user without rules may run everything.

// aclCategories are the Redis 7.0 categories of each served command, by
// command or "command|subcommand" (COMMAND INFO reports them too). The
// proxy's own commands are placed as the nearest Redis command is.
var aclCategories = map[string][]string{
	"set":      {"write", "string", "slow"},
	"get":      {"read", "string", "fast"},
	"del":      {"keyspace", "write", "slow"},
	"pttl":     {"keyspace", "read", "fast"},
	"ttl":      {"keyspace", "read", "fast"},
	"hget":     {"read", "hash", "fast"},
	"hexists":  {"read", "hash", "fast"},
	"fence":    {"write", "string", "slow"},
	"delifeq":  {"write", "string", "fast"},
	"delex":    {"keyspace", "write", "fast"},
	"zrem":     {"write", "sortedset", "fast"},
	"exists":   {"keyspace", "read", "fast"},
	"type":     {"keyspace", "read", "fast"},
	"scan":     {"keyspace", "read", "slow"},
	"keys":     {"keyspace", "read", "slow", "dangerous"},
	"dbsize":   {"keyspace", "read", "fast"},
	"lockinfo": {"keyspace", "read", "slow"},
	"eval":     {"slow", "scripting"},
	"evalsha":  {"slow", "scripting"},
	"script":   {"slow", "scripting"},
	"ping":     {"fast", "connection"},
	"echo":     {"fast", "connection"},
	"quit":     {"fast", "connection"},
	"select":   {"fast", "connection"},
	"auth":     {"fast", "connection"},
	"hello":    {"fast", "connection"},
	"reset":    {"fast", "connection"},
	"client":   {"slow", "connection"},
	"help":     {"fast", "connection"},
	"info":     {"slow", "dangerous"},
	"config":   {"admin", "slow", "dangerous"},
	"command":  {"slow", "connection"},
	"wait":     {"slow", "connection"},
	"vouch":    {"admin", "slow", "dangerous"},
	"acl":      {"slow"},

	"subscribe":    {"pubsub", "slow"},
	"psubscribe":   {"pubsub", "slow"},
	"unsubscribe":  {"pubsub", "slow"},
	"punsubscribe": {"pubsub", "slow"},
	"ssubscribe":   {"pubsub", "slow"},
	"sunsubscribe": {"pubsub", "slow"},
	"publish":      {"pubsub", "fast"},
	"blpop":        {"write", "list", "slow", "blocking"},
}

// aclSubcommands are the subcommands of the container commands, each with
// its container's categories.
var aclSubcommands = map[string][]string{
	"client":  {"setname", "getname", "id", "setinfo", "info", "tracking", "caching", "trackinginfo", "getredir"},
	"script":  {"load", "exists", "explain", "flush", "kill", "help"},
	"config":  {"get", "set", "rewrite", "resetstat", "help"},
	"command": {"count", "info", "list", "docs", "help"},
	"acl":     {"whoami", "cat", "help"},
}

// keyAccess is what a command does with its keys, as Redis's key specs
// say: reads the value (R), changes the key (W), both, or neither (EXISTS
// and TYPE only look: any permission on the key will do).
type keyAccess uint8

const (
	keyRead keyAccess = 1 << iota
	keyWrite
)

// accessOf is what cmd does with its keys.
func accessOf(cmd *commandDef, args [][]byte) keyAccess {
	switch cmd.name {
	case "get", "pttl", "ttl", "lockinfo":
		return keyRead
	case "exists", "type":
		return 0
	case "del":
		return keyWrite
	case "set":
		// An acquire only writes; SET ... IFEQ compares the value first.
		for _, a := range args[3:] {
			if is(a, "ifeq") {
				return keyRead | keyWrite
			}
		}
		return keyWrite
	case "delex":
		if len(args) == 2 {
			return keyWrite
		}
	}
	return keyRead | keyWrite // scripts (as Redis's EVAL), FENCE, DELIFEQ, DELEX IFEQ
}

// userACL is a user's rules compiled against the command table.
type userACL struct {
	allowed map[string]bool // command, or "command|subcommand", allowed
	keys    []keyPerm
}

type keyPerm struct {
	pattern string
	access  keyAccess
}

// compileACL applies rules in order, as Redis does, from no command and no
// key.
func compileACL(r *acl.Rules) *userACL {
	u := &userACL{allowed: map[string]bool{}}
	set := func(id string, on bool) {
		if on {
			u.allowed[id] = true
		} else {
			delete(u.allowed, id)
		}
	}
	ids := func(name string) []string { // a command and its subcommands
		out := []string{name}
		for _, s := range aclSubcommands[name] {
			out = append(out, name+"|"+s)
		}
		return out
	}
	for _, rule := range r.Rules {
		switch rule.Kind {
		case acl.AllowCommand, acl.DenyCommand:
			on := rule.Kind == acl.AllowCommand
			if strings.Contains(rule.Name, "|") {
				set(rule.Name, on)
				continue
			}
			for _, id := range ids(rule.Name) {
				set(id, on)
			}
		case acl.AllowCategory, acl.DenyCategory:
			on := rule.Kind == acl.AllowCategory
			for name, cats := range aclCategories {
				if rule.Name == "all" || slices.Contains(cats, rule.Name) {
					for _, id := range ids(name) {
						set(id, on)
					}
				}
			}
		case acl.KeyPattern:
			var a keyAccess
			if rule.Read {
				a |= keyRead
			}
			if rule.Write {
				a |= keyWrite
			}
			u.keys = append(u.keys, keyPerm{rule.Pattern, a})
		case acl.ResetKeys:
			u.keys = nil
		}
	}
	return u
}

// aclRefusal is why c's user may not run cmd with args, or "".
func (c *client) aclRefusal(cmd *commandDef, args [][]byte) string {
	u := c.acl
	if u == nil || cmd.noAuth {
		return "" // AUTH, HELLO, QUIT and RESET are always allowed, as in Redis
	}
	id := cmd.name
	if subs := aclSubcommands[cmd.name]; subs != nil && len(args) > 1 {
		if sub := strings.ToLower(string(args[1])); slices.Contains(subs, sub) {
			id += "|" + sub
		}
	}
	if !u.allowed[id] {
		return msgNoPermCommand(id)
	}
	need := accessOf(cmd, args)
	for _, k := range commandKeys(cmd, args) {
		if !u.mayAccess(string(k), need) {
			return msgNoPermKey
		}
	}
	return ""
}

// mayAccess reports whether some pattern grants need on key.
func (u *userACL) mayAccess(key string, need keyAccess) bool {
	for _, p := range u.keys {
		if p.access&need == need && acl.Match(p.pattern, key) {
			return true
		}
	}
	return false
}

// aclCommands are ACL's subcommands a client can use: who it is, and the
// categories. Users and their rules are set in the configuration.
var aclCommands = []*commandDef{
	{name: "acl", arity: -2, flags: []string{}, fn: handleACL},
}

func handleACL(c *client, args [][]byte) {
	switch sub := args[1]; {
	case is(sub, "whoami") && len(args) == 2:
		c.reply(resp.BulkValue([]byte(c.user)))
	case is(sub, "cat") && len(args) == 2:
		v := resp.Value{Kind: resp.KindArray}
		for _, cat := range acl.Categories {
			v.Elems = append(v.Elems, resp.BulkValue([]byte(cat)))
		}
		c.reply(v)
	case is(sub, "cat") && len(args) == 3:
		cat := strings.ToLower(string(args[2]))
		if !slices.Contains(acl.Categories, cat) {
			c.replyErr(msgUnknownCategory(args[2]))
			return
		}
		v := resp.Value{Kind: resp.KindArray, Elems: []resp.Value{}}
		for _, name := range sortedNames() {
			if slices.Contains(aclCategories[name], cat) {
				v.Elems = append(v.Elems, resp.BulkValue([]byte(name)))
			}
		}
		c.reply(v)
	case is(sub, "help"):
		c.reply(helpReply("ACL", "CAT [<category>]", "WHOAMI"))
	case is(sub, "whoami"):
		c.replyErr(msgWrongArgs("acl|whoami"))
	case is(sub, "cat"):
		c.replyErr(msgUnknownSubcommandOrArgs(sub, "ACL"))
	case slices.Contains(aclAdminSubcommands, strings.ToLower(string(sub))):
		c.replyErr(msgACLNotServed(sub))
	default:
		c.replyErr(msgUnknownSubcommand(string(sub), "ACL"))
	}
}

// aclAdminSubcommands are Redis's ACL subcommands that manage users: users
// and their rules are set in the proxy's configuration instead.
var aclAdminSubcommands = []string{"setuser", "deluser", "getuser", "list", "users", "load", "save", "log", "genpass", "dryrun"}
