package proxy

import (
	"bytes"
	"fmt"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

// Wire replies: errors worded as Redis words them where Redis has a reply
// for the case, and prefixed with "ERR redlock-proxy:" where the refusal is
// the proxy's own; and the fixed simple-string replies. The protocol text
// lives here and nowhere else (help.go holds the command documentation).
const (
	msgSyntax            = "ERR syntax error"
	msgNotInteger        = "ERR value is not an integer or out of range"
	msgWrongType         = "WRONGTYPE Operation against a key holding the wrong kind of value"
	msgTimeoutNotFloat   = "ERR timeout is not a float or out of range"
	msgInvalidExpireSet  = "ERR invalid expire time in 'set' command"
	msgNumkeysTooBig     = "ERR Number of keys can't be greater than number of args"
	msgNumkeysNegative   = "ERR Number of keys can't be negative"
	msgNoScript          = "NOSCRIPT No matching script. Please use EVAL."
	msgNoProto           = "NOPROTO unsupported protocol version"
	msgDBRange           = "ERR DB index is out of range"
	msgNoAuth            = "NOAUTH Authentication required."
	msgWrongPass         = "WRONGPASS invalid username-password pair or user is disabled."
	msgAuthNotConfigured = "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?"
	msgMaxClients        = "ERR max number of clients reached"
	msgInvalidCursor     = "ERR invalid cursor"

	msgSetNeedsNX     = "ERR redlock-proxy: SET is a lock acquire here and needs NX: SET key token NX PX milliseconds (or EX seconds, PXAT, EXAT); or IFEQ token to extend"
	msgSetNeedsExpiry = "ERR redlock-proxy: SET needs an expiry (PX, EX, PXAT or EXAT): the proxy never writes a lock that cannot expire"
	msgSetNoGet       = "ERR redlock-proxy: SET with GET is not supported for locks"
	msgSetIfEqHandoff = "ERR redlock-proxy: SET ... IFEQ is supported to extend a lock: the new value must equal the compared one"
	msgOnlyDB0        = "ERR redlock-proxy: only database 0 is served; locks live in database 0 of every backend"
	msgInvalidReply   = "ERR redlock-proxy: internal error: invalid reply"
	// msgShutdownWalk: KEYS or DBSIZE stopped by a shutdown.
	msgShutdownWalk = "ERR redlock-proxy: shutting down: the walk of the key space stopped"
	// msgScanCursorTooLarge: a backend's cursor, times the places SCAN
	// walks, would not fit the 64 bits of a cursor.
	msgScanCursorTooLarge = "ERR redlock-proxy: a backend's SCAN cursor is too large to combine with the others'; use KEYS"

	msgSemUpgrade    = "ERR redlock-proxy: semaphores are refused while upgrade_from is set: the old Redis keeps its holders in a sorted set that the proxy's permits (slots) do not see, so clients on either side could exceed the limit together"
	msgSemNoMajority = "ERR redlock-proxy: fewer than a majority of backends answered: the semaphore's free permits cannot be counted"
	msgSemNoExpiry   = "ERR redlock-proxy: a semaphore's permits need a TTL above 0: the proxy never grants a permit that cannot expire (its holder's death would keep it forever)"
)

func msgSemLimit(got string) string {
	return fmt.Sprintf("ERR redlock-proxy: a semaphore's limit must be an integer from 1 to %d here, not %q", classify.MaxSemLimit, got)
}

// msgProtocol is the reply to a malformed request (a ProtocolError, whose
// text is Redis's), before the connection closes.
func msgProtocol(err error) string { return "ERR " + err.Error() }

func msgCommandTimeout(d time.Duration) string {
	return fmt.Sprintf("ERR redlock-proxy: command not received whole within command_timeout (%v); closing the connection", d)
}

// msgShutdownPartial is the last reply to a client whose command had not
// arrived whole when the proxy began to shut down.
const msgShutdownPartial = "ERR redlock-proxy: shutting down: the command had not arrived whole and was not run; closing the connection"

func msgWrongArgs(name string) string {
	return fmt.Sprintf("ERR wrong number of arguments for '%s' command", name)
}

// msgNoPermCommand is Redis's refusal of a command the user may not run
// (id is "name" or "name|subcommand").
func msgNoPermCommand(id string) string {
	return "NOPERM this user has no permissions to run the '" + id + "' command"
}

// msgNoPermKey is Redis's refusal of a key the user may not access as the
// command would.
const msgNoPermKey = "NOPERM this user has no permissions to access one of the keys used as arguments"

func msgUnknownCategory(cat []byte) string {
	return "ERR Unknown category '" + string(cString(cat, 128)) + "'"
}

func msgUnknownSubcommandOrArgs(sub []byte, cmd string) string {
	return "ERR unknown subcommand or wrong number of arguments for '" + string(cString(sub, 128)) + "'. Try " + cmd + " HELP."
}

func msgACLNotServed(sub []byte) string {
	return "ERR redlock-proxy: ACL " + strings.ToUpper(string(cString(sub, 128))) +
		" is not served: users and their rules are set in the proxy's configuration (users:, with rules:); ACL WHOAMI and ACL CAT are served"
}

func msgUnknownSubcommand(sub, cmd string) string {
	b := append([]byte("ERR unknown subcommand '"), cString([]byte(sub), 128)...)
	b = append(b, "'. Try "...)
	b = append(b, cmd...)
	b = append(b, " HELP."...)
	return string(noNewlines(b))
}

func msgTokenTooLong(n, limit int) string {
	return fmt.Sprintf("ERR redlock-proxy: lock token of %d bytes exceeds max_token (%d bytes); lock tokens are small, raise max_token if yours are not", n, limit)
}

func msgValueTooLong(limit int) string {
	return fmt.Sprintf("ERR redlock-proxy: the value at this key is longer than max_token (%d bytes): it is not a lock", limit)
}

const msgFenceContention = "ERR redlock-proxy: FENCE could not agree on a number with the masters (other FENCE calls for the same lock, or masters timing out); retry"

// msgCrossSlot refuses, when a backend is a Redis Cluster, a command
// whose keys do not share a slot, in Redis Cluster's words.
const msgCrossSlot = "CROSSSLOT Keys in request don't hash to the same slot"

// msgReservedKey refuses a command on the proxy's own keys.
const msgReservedKey = "ERR redlock-proxy: keys starting with 'redlock-proxy:' are the proxy's own"

// msgVouchUnsupported answers VOUCH where the backends cannot be vouched
// for.
const msgVouchUnsupported = "ERR redlock-proxy: VOUCH needs the proxy's own backends"

// msgVouchRefused says why VOUCH wrote nothing.
func msgVouchRefused(why string) string {
	return "ERR redlock-proxy: VOUCH refused, nothing written: " + why
}

// msgVouchIncomplete says what VOUCH wrote before it stopped, or which
// vouched master does not count yet.
func msgVouchIncomplete(why string) string {
	return "ERR redlock-proxy: VOUCH incomplete: " + why
}

func msgTTLTooLong(ttlMs, maxMs int64) string {
	return fmt.Sprintf("ERR redlock-proxy: TTL of %d ms exceeds max_ttl (%d ms); a longer TTL would outlast the restart quarantine", ttlMs, maxMs)
}

// msgLatchTooLong refuses a call whose latch (spec.Latch) would outlive
// max_ttl: the proxy writes no key that lives longer, and a latch kept
// shorter than asked would let a late retry act twice.
func msgLatchTooLong(ms, maxMs int64) string {
	return fmt.Sprintf("ERR redlock-proxy: the script records its result for a retry for %d ms, above max_ttl (%d ms): the proxy keeps no key longer, and a shorter record would let a late retry act again", ms, maxMs)
}

// msgUnknownCommand is Redis's reply to a command it does not have (clients
// match on it), then what this server serves instead.
func msgUnknownCommand(args [][]byte) string {
	return redisUnknownCommand(args) + unknownCommandHint
}

// unknownCommandHint follows Redis's unknown-command reply.
const unknownCommandHint = "(redlock-proxy serves lock commands only; COMMAND LIST lists them, redis-cli's help @lock describes them)"

// redisUnknownCommand is Redis's own reply to a command it does not have.
func redisUnknownCommand(args [][]byte) string {
	b := append([]byte("ERR unknown command '"), cString(args[0], 128)...)
	b = append(b, "', with args beginning with: "...)
	rest := 0 // Redis caps the quoted arguments, not the whole message
	for _, a := range args[1:] {
		if rest >= 128 {
			break
		}
		a = cString(a, 128-rest)
		b = append(b, '\'')
		b = append(b, a...)
		b = append(b, '\'', ' ')
		rest += len(a) + 3
	}
	return string(noNewlines(b))
}

// cString is what C's "%.<n>s" prints of an argument, as Redis formats
// it: the bytes before the first NUL, at most n of them. (Go's %.*s
// would count runes, not bytes.)
func cString(a []byte, n int) []byte {
	if i := bytes.IndexByte(a, 0); i >= 0 {
		a = a[:i]
	}
	if len(a) > n {
		a = a[:n]
	}
	return a
}

// noNewlines turns CR and LF into spaces, as Redis does to error replies
// that quote client input.
func noNewlines(b []byte) []byte {
	for i, c := range b {
		if c == '\r' || c == '\n' {
			b[i] = ' '
		}
	}
	return b
}

// Fixed simple-string replies, already encoded.
var (
	rawOK    = []byte("+OK\r\n")
	rawPong  = []byte("+PONG\r\n")
	rawReset = []byte("+RESET\r\n")
)

const (
	msgClientName            = "ERR Client names cannot contain spaces, newlines or special characters."
	msgTrackingRedirect      = "ERR The client ID you want redirect to does not exist"
	msgTrackingOptinOptout   = "ERR You can't use both OPTIN and OPTOUT"
	msgTrackingBcastOpt      = "ERR OPTIN and OPTOUT are not compatible with BCAST"
	msgTrackingPrefixNoBcast = "ERR PREFIX option requires BCAST mode to be enabled"
	msgTrackingSwitchBcast   = "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode."
	msgTrackingSwitchOpt     = "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode."
	msgCachingNeedsMode      = "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled"
	msgCachingYesNeedsOptin  = "ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode."
	msgCachingNoNeedsOptout  = "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode."
	msgProtoVersion          = "ERR Protocol version is not an integer or out of range"
	msgHelloNoAuth           = "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time"
	msgTimeoutNotInteger     = "ERR timeout is not an integer or out of range"
	msgTimeoutNegative       = "ERR timeout is negative"
	msgNoAgreedReply         = "ERR redlock-proxy: no majority of backends gave the same reply to this script"
	msgDelexIfEqOnly         = "ERR redlock-proxy: DELEX supports IFEQ (compare-and-delete) only"
	msgScriptTooLong         = "ERR redlock-proxy: script too long"
	msgNotBusy               = "NOTBUSY No scripts in execution right now."
	msgExplainNumkeys        = "ERR redlock-proxy: SCRIPT EXPLAIN <sha1|script> [numkeys key ... arg ...]: bad numkeys"
)

func msgSubscribedContext(name string) string {
	return "ERR Can't execute '" + name + "': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
}

func msgUnrecognizedOption(opt []byte) string { return "ERR Unrecognized option '" + string(opt) + "'" }

func msgHelloOption(opt []byte) string {
	return "ERR Syntax error in HELLO option '" + string(opt) + "'"
}

func msgConfigUnsupported(sub []byte) string {
	return "ERR redlock-proxy: CONFIG " + strings.ToUpper(string(sub)) + " is not supported: the proxy is configured by its flags or YAML file"
}

func msgNotServed(name []byte) string {
	return "ERR redlock-proxy: '" + string(cString(name, 128)) + "' is not served here; COMMAND LIST lists what is"
}

func msgNoReplyForCase(c string) string {
	return "ERR redlock-proxy: no reply known for this script in case " + c
}

// unsafeDesigns are commands of lock designs no majority can make safe, by
// lower-case name: the proxy answers them with why, not "unknown command".
var unsafeDesigns = map[string]string{
	"setnx": "SETNX sets a key with no expiry: a lock taken in two steps (SETNX, then EXPIRE) never expires if its client stops " +
		"between them, and no majority can tell the steps apart. Take it in one step: SET key token NX PX milliseconds",
	"expire":    msgRearmUnchecked,
	"pexpire":   msgRearmUnchecked,
	"expireat":  msgRearmUnchecked,
	"pexpireat": msgRearmUnchecked,
	"setex":     "SETEX overwrites whatever holds the key: it takes a lock from its holder. Take a free lock with SET key token NX EX seconds",
	"psetex":    "PSETEX overwrites whatever holds the key: it takes a lock from its holder. Take a free lock with SET key token NX PX milliseconds",
	"getset": "GETSET takes the key whatever holds it and leaves it without an expiry (the SETNX/GETSET recipe lets two clients " +
		"take the same expired lock). Take a free lock with SET key token NX PX milliseconds",
	"getdel": "GETDEL deletes the key whatever holds it. Release with a compare-and-delete: DELIFEQ key token, or a script " +
		"that deletes the key only if it holds the token",
	"persist": "PERSIST removes a lock's expiry: a lock must always expire, or a client that stops holds it for ever",
	"incr":    msgCounter,
	"incrby":  msgCounter,
	"decr":    msgCounter,
	"decrby":  msgCounter,
	"multi":   msgTransaction,
	"exec":    msgTransaction,
	"watch":   msgTransaction,
	"unwatch": msgTransaction,
	"discard": msgTransaction,
}

const (
	msgRearmUnchecked = "EXPIRE and PEXPIRE re-arm a key whatever holds it: they could lengthen another client's lock, and " +
		"as the second step of SETNX they leave a lock that never expires if the client stops first. Extend with a script " +
		"that re-arms the key only if it holds the caller's token, or SET key token IFEQ token PX milliseconds"
	msgCounter = "a counter has no majority meaning: each master counts on its own, and a majority of them can go back " +
		"when one is lost. FENCE key token gives a lock's fencing number, which only grows"
	msgTransaction = "a transaction runs on each master on its own: WATCH, MULTI and EXEC check and change one master, not a " +
		"majority, so they cannot decide who holds a lock. Lock with SET key token NX PX milliseconds and release or extend " +
		"with a script that checks the token"
)

// msgUnsafeDesign is the refusal of a command of an unsafe lock design, if
// name is one.
func msgUnsafeDesign(name []byte) (string, bool) {
	var buf [16]byte
	if len(name) > len(buf) {
		return "", false
	}
	why, ok := unsafeDesigns[string(resp.AppendLower(buf[:0], name))]
	if !ok {
		return "", false
	}
	return "ERR redlock-proxy: " + why, true
}

// msgScriptNeedsExpiry refuses a lock script called with a TTL of 0 or
// less in the argument named arg (ARGV[2]), as SET without an expiry is
// refused.
func msgScriptNeedsExpiry(arg string) string {
	return "ERR redlock-proxy: the lock script's TTL (" + arg + ") must be above 0: a TTL of 0 asks for a lock that never expires, " +
		"and the proxy never writes a lock that cannot expire"
}

// msgRefused is the error a refused script gets: why, and where to look.
func msgRefused(ref *sandbox.Refusal) string {
	return "ERR redlock-proxy: unknown " + ref.Error() + ". The proxy runs a script only as a lock operation it recognizes " +
		"(SCRIPT EXPLAIN " + ref.Sha + " numkeys key... arg... shows how it read this one); a lock script it cannot read can be " +
		"declared by hand under 'scripts:' in the configuration"
}

// msgVoteRefused is the error of a script that the vote policy's guard
// will not run.
func msgVoteRefused(ref *sandbox.Refusal) string {
	return "ERR redlock-proxy: " + ref.Error() + ": a voted script may use the lock commands on its own keys only " +
		"(SCRIPT EXPLAIN " + ref.Sha + " numkeys key... arg... shows why the classifier refused it; 'scripts:' in the configuration declares a lock script by hand)"
}

// msgPublish refuses PUBLISH, saying what SUBSCRIBE is for.
const msgPublish = "ERR redlock-proxy: PUBLISH is not served: only a lock script's release publishes here, " +
	"once a majority of masters released the lock (SUBSCRIBE to its channel to wait for it)"
