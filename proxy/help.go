package proxy

import (
	"fmt"
	"slices"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// What a person at a prompt learns about this server. Libraries get Redis's
// own "unknown command" error for anything not served; people get HELP (a
// proxy command), and redis-cli's "help <command>", "help @lock" and its
// argument hints, which it builds from COMMAND DOCS.

// docArg is one argument of a command, as COMMAND DOCS describes it.
type docArg struct {
	name     string
	typ      string // key, string, integer, unix-time, pure-token, oneof, block
	token    string
	optional bool
	multiple bool
	args     []docArg // of a oneof or a block
}

// cmdDoc documents one served command.
type cmdDoc struct {
	group   string // lock, keyspace, connection, server, pubsub
	summary string
	args    []docArg
}

func key(name string) docArg  { return docArg{name: name, typ: "key"} }
func str(name string) docArg  { return docArg{name: name, typ: "string"} }
func integer(n string) docArg { return docArg{name: n, typ: "integer"} }
func pure(token string) docArg {
	return docArg{name: strings.ToLower(token), typ: "pure-token", token: token}
}
func opt(a docArg) docArg             { a.optional = true; return a }
func many(a docArg) docArg            { a.multiple = true; return a }
func named(t string, a docArg) docArg { a.token = t; return a }
func oneof(name string, args ...docArg) docArg {
	return docArg{name: name, typ: "oneof", args: args}
}
func block(name string, args ...docArg) docArg {
	return docArg{name: name, typ: "block", args: args}
}

// noQuorumNote is what a nil reply may also mean.
const noQuorumNote = "a nil (or 0, -2) reply may also mean that too few backends answered: INFO proxy and /readyz say how many count, the log says when the quorum was lost"

// docs documents every command of the command table.
var docs = map[string]cmdDoc{
	"set": {"lock", "Acquire a lock: OK when a majority of the backends set it with validity left, else nil (held by another, or " +
		"no quorum: see INFO proxy). With IFEQ token instead of NX, extend the caller's lock.", []docArg{
		key("key"), str("token"),
		oneof("condition", pure("NX"), named("IFEQ", str("token"))),
		oneof("expiration", named("PX", integer("milliseconds")), named("EX", integer("seconds")),
			named("PXAT", docArg{name: "unix-time-milliseconds", typ: "unix-time"}), named("EXAT", docArg{name: "unix-time-seconds", typ: "unix-time"})),
	}},
	"get":  {"lock", "The value a majority of the backends hold at key (a lock's token), else nil.", []docArg{key("key")}},
	"pttl": {"lock", "The lock's remaining validity in milliseconds (elapsed time and drift deducted); -2 when no majority holds it.", []docArg{key("key")}},
	"ttl":  {"lock", "The lock's remaining validity in seconds (elapsed time and drift deducted); -2 when no majority holds it.", []docArg{key("key")}},
	"hget": {"lock", "The value a majority of the backends hold in a hash lock's field (a reentrant lock's count of holds: when the " +
		"backends' counts differ, the count a majority hold at least), else nil.", []docArg{key("key"), str("field")}},
	"hexists": {"lock", "1 when a majority of the backends hold the field in the hash lock at key, else 0.", []docArg{key("key"), str("field")}},
	"blpop": {"lock", "Wait for a release's signal (python-redis-lock's signal list): every waiter on the key is woken with " +
		"[key, element] once per release a majority of the backends decided, through any proxy; a signal no one waited for is " +
		"kept for the release's TTL of the list. nil at the timeout (at most max_ttl).", []docArg{many(key("key")), docArg{name: "timeout", typ: "double"}}},
	"del":     {"lock", "Force unlock: delete the keys on every backend; counts the keys a majority deleted.", []docArg{many(key("key"))}},
	"delifeq": {"lock", "Release: delete key on every backend where it holds token; 1 when a majority deleted it.", []docArg{key("key"), str("token")}},
	"delex":   {"lock", "With IFEQ token, release as DELIFEQ; without, force unlock as DEL.", []docArg{key("key"), opt(named("IFEQ", str("token")))}},
	"zrem": {"lock", "Release a counting semaphore's permits (redis-semaphore's Semaphore): each member counts as removed where a " +
		"majority of the backends removed its permit.", []docArg{key("key"), many(str("member"))}},
	"fence": {"lock", "The fencing number of the lock's current grant, agreed by the masters: the same for the same grant through any proxy " +
		"and after any extend, larger for every later grant; nil when token does not hold the lock. Make the protected write " +
		"conditional on it.", []docArg{key("key"), str("token")}},
	"eval": {"lock", "Run a lock script: classified by what it does (acquire, release, extend, extend-or-acquire, or a query), " +
		"it runs as that operation on every backend and replies as it would on one Redis; other scripts are refused with the reason.", []docArg{
		str("script"), integer("numkeys"), opt(many(key("key"))), opt(many(str("arg"))),
	}},
	"evalsha": {"lock", "EVAL by SHA1 of a script the proxy has seen, or of a known library's lock script.", []docArg{
		str("sha1"), integer("numkeys"), opt(many(key("key"))), opt(many(str("arg"))),
	}},
	"script": {"lock", "SCRIPT LOAD and SCRIPT EXISTS of lock scripts; SCRIPT EXPLAIN shows how a script was classified, " +
		"or why it was refused; FLUSH and KILL are accepted.", []docArg{
		oneof("subcommand", pure("LOAD"), pure("EXISTS"), pure("EXPLAIN"), pure("FLUSH"), pure("KILL"), pure("HELP")), opt(many(str("arg"))),
	}},
	"scan": {"keyspace", "Iterate over the keys a majority of the backends hold with the same value (the proxy's own keys never show); " +
		"MATCH, COUNT and TYPE as in Redis (every lock is a string). redis-cli --scan uses it.", []docArg{
		integer("cursor"), opt(named("MATCH", str("pattern"))), opt(named("COUNT", integer("count"))), opt(named("TYPE", str("type"))),
	}},
	"keys":   {"keyspace", "Every key a majority of the backends hold with the same value that matches pattern: a walk of the whole key space, as in Redis.", []docArg{str("pattern")}},
	"dbsize": {"keyspace", "How many keys a majority of the backends hold with the same value: a walk of the whole key space (Redis keeps a count; the proxy has none).", nil},
	"exists": {"keyspace", "How many of the keys a majority of the backends hold, a string with the same value or a key of another type " +
		"(a hash lock) whoever its holder (a key named twice counts twice).", []docArg{many(key("key"))}},
	"type": {"keyspace", "string when a majority of the backends hold the key with the same value, the type (hash...) when a majority hold " +
		"it as a key of another type, else none.", []docArg{key("key")}},
	"lockinfo": {"keyspace", "Who holds a lock: the holder's token, its remaining validity, its fencing number (when FENCE numbered the grant), " +
		"and what each backend holds (value, PTTL, fencing number, or why it did not answer). A read: it changes nothing.", []docArg{key("key")}},
	"acl": {"connection", "ACL WHOAMI: the user this connection authenticated as; ACL CAT: the command categories, or the commands of one. " +
		"Users and their ACL rules (which commands, which keys) are set in the proxy's configuration.", []docArg{str("subcommand"), opt(str("category"))}},
	"help":   {"connection", "What this server serves: its commands, and what a nil reply may mean.", []docArg{opt(str("command"))}},
	"ping":   {"connection", "PONG, from the proxy itself.", []docArg{opt(str("message"))}},
	"echo":   {"connection", "The message, from the proxy itself.", []docArg{str("message")}},
	"quit":   {"connection", "Close the connection.", nil},
	"select": {"connection", "Only database 0 is served: locks live in database 0 of every backend.", []docArg{integer("index")}},
	"auth":   {"connection", "Authenticate to the proxy (requirepass, users); the proxy uses its own credentials for the backends.", []docArg{opt(str("username")), str("password")}},
	"hello": {"connection", "Choose RESP2 or RESP3, authenticate and name the connection.", []docArg{
		opt(block("arguments", integer("protover"), opt(block("auth", pure("AUTH"), str("username"), str("password"))), opt(named("SETNAME", str("clientname"))))),
	}},
	"client": {"connection", "CLIENT SETNAME, GETNAME, ID, INFO, SETINFO, TRACKING, CACHING, TRACKINGINFO, GETREDIR (client-side caching: an invalidation for every tracked key that changes).", []docArg{str("subcommand"), opt(many(str("arg")))}},
	"reset":  {"connection", "Return the connection to its initial state.", nil},
	"info": {"server", "Server, clients and stats, and the proxy section: each backend's state, quarantine, latency and last error, " +
		"and how many count toward the majority.", []docArg{opt(many(str("section")))}},
	"config":  {"server", "CONFIG GET of the settings clients read while connecting; the proxy is configured by its flags or YAML file.", []docArg{str("subcommand"), opt(many(str("parameter")))}},
	"command": {"server", "COMMAND, COUNT, INFO, LIST and DOCS of the commands this server serves.", []docArg{opt(str("subcommand")), opt(many(str("arg")))}},
	"vouch": {"server", "Vouch for brand-new masters, so that they count at once instead of after max_ttl + drift: refused, writing nothing, " +
		"unless every master of every backend holds no key and no sign of use; it answers OK once they all count. The risk is the operator's: masters that lost locks " +
		"which others still hold would count at once.", nil},
	"wait": {"server", "Answers 0 at once: the backends have no replicas, and every lock command already waited for a majority of masters.", []docArg{integer("numreplicas"), integer("timeout")}},
	"subscribe": {"pubsub", "Wait for lock releases on channels: a lock script's release message arrives once per release a majority of masters decided, " +
		"through whichever proxy it went.", []docArg{many(str("channel"))}},
	"psubscribe":   {"pubsub", "As SUBSCRIBE, for the channels a pattern matches.", []docArg{many(str("pattern"))}},
	"ssubscribe":   {"pubsub", "As SUBSCRIBE, for release messages a lock script sends with SPUBLISH.", []docArg{many(str("shardchannel"))}},
	"unsubscribe":  {"pubsub", "Leave channels subscribed to with SUBSCRIBE.", []docArg{opt(many(str("channel")))}},
	"punsubscribe": {"pubsub", "Leave patterns subscribed to with PSUBSCRIBE.", []docArg{opt(many(str("pattern")))}},
	"sunsubscribe": {"pubsub", "Leave shard channels subscribed to with SSUBSCRIBE.", []docArg{opt(many(str("shardchannel")))}},
	"publish": {"pubsub", "Refused: only a lock script's release publishes here, once a majority of masters released the lock.",
		[]docArg{str("channel"), str("message")}},
}

// synopsis is a command's name and arguments.
func synopsis(name string, d cmdDoc) string {
	if len(d.args) == 0 {
		return strings.ToUpper(name)
	}
	return strings.ToUpper(name) + " " + usage(d.args)
}

// usage writes a command's arguments as redis-cli shows them.
func usage(args []docArg) string {
	var parts []string
	for _, a := range args {
		parts = append(parts, argUsage(a))
	}
	return strings.Join(parts, " ")
}

func argUsage(a docArg) string {
	var s string
	switch a.typ {
	case "pure-token":
		s = a.token
	case "oneof":
		var alts []string
		for _, x := range a.args {
			alts = append(alts, argUsage(x))
		}
		s = strings.Join(alts, "|")
	case "block":
		s = usage(a.args)
		if a.token != "" {
			s = a.token + " " + s
		}
	default:
		s = a.name
		if a.token != "" {
			s = a.token + " " + s
		}
	}
	if a.multiple {
		s += " [" + s + " ...]"
	}
	if a.optional {
		s = "[" + s + "]"
	}
	return s
}

// helpGroups orders HELP's sections.
var helpGroups = []struct{ group, title string }{
	{"lock", "Lock commands (each a majority vote over every backend):"},
	{"keyspace", "The key space as a majority of the backends hold it (for operators):"},
	{"connection", "Connection commands (answered by the proxy):"},
	{"server", "Server commands (answered by the proxy):"},
	{"pubsub", "Pub/sub (accepted so that clients connect; nothing is published):"},
}

// handleHelp lists what is served, or documents one command.
func handleHelp(c *client, args [][]byte) {
	var lines []string
	line := func(format string, a ...any) { lines = append(lines, fmt.Sprintf(format, a...)) }
	switch len(args) {
	case 1:
		n := c.s.be.N()
		line("redlock-proxy %s: a lock service that speaks the Redis protocol. Every lock command is a Redlock majority vote over %d Redis masters (%d needed).",
			c.s.cfg.Version, n, quorum.Majority(n))
		for _, g := range helpGroups {
			line("%s", g.title)
			for _, name := range sortedNames() {
				if d := docs[name]; d.group == g.group {
					line("  %s", synopsis(name, d))
					line("      %s", d.summary)
				}
			}
		}
		line("Every other command (FLUSHALL, RENAME, ...) is not served: it gets Redis's \"unknown command\" error; the commands of lock designs no majority makes safe (SETNX, EXPIRE, GETSET, INCR, MULTI, ...) are answered with why.")
		line("Note: %s.", noQuorumNote)
		line("HELP <command> documents one command; redis-cli's \"help @lock\" lists the lock commands.")
	case 2:
		name := strings.ToLower(string(args[1]))
		d, ok := docs[name]
		if !ok {
			c.replyErr(msgNotServed(args[1]))
			return
		}
		line("%s", synopsis(name, d))
		line("  %s", d.summary)
		if d.group == "lock" {
			line("  Note: %s.", noQuorumNote)
		}
	default:
		c.replyErr(msgWrongArgs("help"))
		return
	}
	v := resp.Value{Kind: resp.KindArray}
	for _, l := range lines {
		v.Elems = append(v.Elems, resp.Value{Kind: resp.KindSimple, Str: []byte(l)})
	}
	c.reply(v)
}

// sortedNames lists the command table's names in order.
func sortedNames() []string {
	var names []string
	for n := range commands {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// appendDocs encodes COMMAND DOCS for names (all served commands when
// empty; names not served are left out, as Redis does).
func appendDocs(b []byte, names []string, resp3 bool) []byte {
	var served []string
	for _, n := range names {
		if _, ok := docs[n]; ok && lookup([]byte(n)) != nil {
			served = append(served, n)
		}
	}
	b = resp.AppendMapHeader(b, len(served), resp3)
	for _, n := range served {
		d := docs[n]
		b = resp.AppendBulkString(b, n)
		fields := 2
		if len(d.args) > 0 {
			fields++
		}
		b = resp.AppendMapHeader(b, fields, resp3)
		b = resp.AppendBulkString(b, "summary")
		b = resp.AppendBulkString(b, d.summary)
		b = resp.AppendBulkString(b, "group")
		b = resp.AppendBulkString(b, d.group)
		if len(d.args) > 0 {
			b = resp.AppendBulkString(b, "arguments")
			b = appendDocArgs(b, d.args, resp3)
		}
	}
	return b
}

func appendDocArgs(b []byte, args []docArg, resp3 bool) []byte {
	b = resp.AppendArrayHeader(b, len(args))
	for _, a := range args {
		var flags []string
		if a.optional {
			flags = append(flags, "optional")
		}
		if a.multiple {
			flags = append(flags, "multiple")
		}
		fields := 2
		if a.token != "" {
			fields++
		}
		if len(flags) > 0 {
			fields++
		}
		if len(a.args) > 0 {
			fields++
		}
		b = resp.AppendMapHeader(b, fields, resp3)
		b = resp.AppendBulkString(b, "name")
		b = resp.AppendBulkString(b, a.name)
		b = resp.AppendBulkString(b, "type")
		b = resp.AppendBulkString(b, a.typ)
		if a.token != "" {
			b = resp.AppendBulkString(b, "token")
			b = resp.AppendBulkString(b, a.token)
		}
		if len(flags) > 0 {
			b = resp.AppendBulkString(b, "flags")
			b = resp.AppendArrayHeader(b, len(flags))
			for _, f := range flags {
				b = append(append(append(b, '+'), f...), '\r', '\n')
			}
		}
		if len(a.args) > 0 {
			b = resp.AppendBulkString(b, "arguments")
			b = appendDocArgs(b, a.args, resp3)
		}
	}
	return b
}
