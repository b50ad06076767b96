package sandbox

import (
	"sort"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// The one list of the commands a lock script may use: every command that
// reads or writes the value or the expiry of the script's own keys
// (strings, hashes, sets and sorted sets), in its single-key and
// multi-key forms, and TIME and SELECT 0. The sandbox runs these against
// its model, as Redis 7.0 answers them; the vote policy's guard
// (package guard) lets a script call these and nothing else on the backends.
// What stays out is in outside, with the reason.

// command is how a lock script may call one command.
type command struct {
	arity int      // as Redis: n > 0 exactly n arguments (name included), n < 0 at least -n
	Keys  keyPlace // which arguments are keys
	Write bool     // it may create or change a key
	fn    func(c *call) (resp.Value, *Stop)
}

// keyPlace says where a command's keys are.
type keyPlace uint8

const (
	keysNone  keyPlace = iota // TIME, SELECT
	keysFirst                 // the first argument
	keysAll                   // every argument (DEL, EXISTS, MGET)
	keysPairs                 // every other argument from the first (MSET)
)

// keyPositions lists the positions of the keys in a call of n arguments
// (the name included).
func (c *command) keyPositions(n int) []int {
	var out []int
	switch c.Keys {
	case keysFirst:
		if n > 1 {
			out = []int{1}
		}
	case keysAll:
		for i := 1; i < n; i++ {
			out = append(out, i)
		}
	case keysPairs:
		for i := 1; i < n; i += 2 {
			out = append(out, i)
		}
	}
	return out
}

// lockCommands is the allow-list, by lower-case name.
var LockCommands = map[string]*command{
	// Strings.
	"get":      {2, keysFirst, false, cmdGet},
	"set":      {-3, keysFirst, true, cmdSet},
	"setnx":    {3, keysFirst, true, cmdSetNX},
	"setex":    {4, keysFirst, true, cmdSetEx},
	"psetex":   {4, keysFirst, true, cmdSetEx},
	"getset":   {3, keysFirst, true, cmdGetSet},
	"getdel":   {2, keysFirst, true, cmdGetDel},
	"getex":    {-2, keysFirst, true, cmdGetEx},
	"mget":     {-2, keysAll, false, cmdMGet},
	"mset":     {-3, keysPairs, true, cmdMSet},
	"msetnx":   {-3, keysPairs, true, cmdMSet},
	"append":   {3, keysFirst, true, cmdAppend},
	"setrange": {4, keysFirst, true, cmdSetRange},
	"getrange": {4, keysFirst, false, cmdGetRange},
	"substr":   {4, keysFirst, false, cmdGetRange},
	"strlen":   {2, keysFirst, false, cmdStrlen},
	"incr":     {2, keysFirst, true, cmdIncr},
	"decr":     {2, keysFirst, true, cmdIncr},
	"incrby":   {3, keysFirst, true, cmdIncr},
	"decrby":   {3, keysFirst, true, cmdIncr},
	// Any key.
	"del":         {-2, keysAll, true, cmdDel},
	"unlink":      {-2, keysAll, true, cmdDel},
	"exists":      {-2, keysAll, false, cmdExists},
	"touch":       {-2, keysAll, false, cmdExists},
	"type":        {2, keysFirst, false, cmdType},
	"pexpire":     {-3, keysFirst, true, cmdExpire},
	"expire":      {-3, keysFirst, true, cmdExpire},
	"pexpireat":   {-3, keysFirst, true, cmdExpire},
	"expireat":    {-3, keysFirst, true, cmdExpire},
	"pttl":        {2, keysFirst, false, cmdTTL},
	"ttl":         {2, keysFirst, false, cmdTTL},
	"pexpiretime": {2, keysFirst, false, cmdTTL},
	"expiretime":  {2, keysFirst, false, cmdTTL},
	// Hashes.
	"hset":    {-4, keysFirst, true, cmdHSet},
	"hmset":   {-4, keysFirst, true, cmdHSet},
	"hsetnx":  {4, keysFirst, true, cmdHSetNX},
	"hget":    {3, keysFirst, false, cmdHGet},
	"hmget":   {-3, keysFirst, false, cmdHGet},
	"hdel":    {-3, keysFirst, true, cmdRemove},
	"hexists": {3, keysFirst, false, cmdHExists},
	"hlen":    {2, keysFirst, false, cmdLen},
	"hstrlen": {3, keysFirst, false, cmdHStrlen},
	"hincrby": {4, keysFirst, true, cmdHIncrBy},
	// Sets.
	"sadd":       {-3, keysFirst, true, cmdSAdd},
	"srem":       {-3, keysFirst, true, cmdRemove},
	"sismember":  {3, keysFirst, false, cmdSIsMember},
	"smismember": {-3, keysFirst, false, cmdSIsMember},
	"scard":      {2, keysFirst, false, cmdLen},
	// Sorted sets.
	"zadd":             {-4, keysFirst, true, cmdZAdd},
	"zincrby":          {4, keysFirst, true, cmdZAdd},
	"zscore":           {3, keysFirst, false, cmdZScore},
	"zmscore":          {-3, keysFirst, false, cmdZScore},
	"zrem":             {-3, keysFirst, true, cmdRemove},
	"zcard":            {2, keysFirst, false, cmdLen},
	"zcount":           {4, keysFirst, false, cmdZCount},
	"zrange":           {-4, keysFirst, false, cmdZRange},
	"zrevrange":        {-4, keysFirst, false, cmdZRange},
	"zrangebyscore":    {-4, keysFirst, false, cmdZRange},
	"zrevrangebyscore": {-4, keysFirst, false, cmdZRange},
	"zremrangebyscore": {4, keysFirst, true, cmdZCount},
	"zremrangebyrank":  {4, keysFirst, true, cmdZRemRangeByRank},
	"zrank":            {3, keysFirst, false, cmdZRank},
	"zrevrank":         {3, keysFirst, false, cmdZRank},
	// The clock and the database.
	"time":   {1, keysNone, false, cmdTime},
	"select": {2, keysNone, false, cmdSelect},
}

// outside names the commands that stay off the list and why; any other
// command is outside because it does not read or write a key's value or
// expiry, or reaches keys a script does not name.
var outside = map[string]string{
	"persist":        "removes a key's expiry: a lock must always expire",
	"incrbyfloat":    "its result is formatted from a long double, which the model does not reproduce exactly",
	"hincrbyfloat":   "its result is formatted from a long double, which the model does not reproduce exactly",
	"hgetall":        "its reply is in the server's hash-table order, which the model cannot know",
	"hkeys":          "its reply is in the server's hash-table order, which the model cannot know",
	"hvals":          "its reply is in the server's hash-table order, which the model cannot know",
	"smembers":       "its reply is in the server's hash-table order, which the model cannot know",
	"hscan":          "its reply is in the server's hash-table order, which the model cannot know",
	"sscan":          "its reply is in the server's hash-table order, which the model cannot know",
	"zscan":          "its reply is in the server's hash-table order, which the model cannot know",
	"randomkey":      "a lock script must not depend on randomness",
	"srandmember":    "a lock script must not depend on randomness",
	"spop":           "a lock script must not depend on randomness",
	"hrandfield":     "a lock script must not depend on randomness",
	"zrandmember":    "a lock script must not depend on randomness",
	"rename":         "it moves a value to another key: no lock operation moves a lock",
	"renamenx":       "it moves a value to another key: no lock operation moves a lock",
	"copy":           "it copies a value to another key: no lock operation copies a lock",
	"move":           "it moves a key to another database: only database 0 is served",
	"keys":           "it reaches keys the script does not name in KEYS",
	"scan":           "it reaches keys the script does not name in KEYS",
	"publish":        "a message has no majority meaning (it reaches the subscribers of every backend, or of none)",
	"spublish":       "a message has no majority meaning (it reaches the subscribers of every backend, or of none)",
	"flushall":       "it empties the backend: every lock of every client",
	"flushdb":        "it empties the backend: every lock of every client",
	"script":         "the backends' script cache is the proxy's",
	"config":         "the backends' configuration is the operator's",
	"eval":           "scripts cannot call scripts",
	"evalsha":        "scripts cannot call scripts",
	"fcall":          "functions are not lock scripts the proxy reads",
	"function":       "functions are not lock scripts the proxy reads",
	"dump":           "a serialized value has no meaning across backends",
	"restore":        "a serialized value has no meaning across backends",
	"object":         "it reports the backend's internal encoding",
	"debug":          "it reports or changes the backend's internals",
	"wait":           "replication to the backends' replicas is not a lock operation",
	"lpush":          "lists are not a shape a lock is kept in here (no lock operation reads a list); a release may push one element onto a signal list beside its lock, for BLPOP waiters (python-redis-lock's), which the proxy delivers itself",
	"rpush":          "lists are not a shape a lock is kept in here (no lock operation reads a list); a release may push one element onto a signal list beside its lock, for BLPOP waiters, which the proxy delivers itself",
	"lpop":           "lists are not a shape a lock is kept in here (no lock operation reads a list)",
	"rpop":           "lists are not a shape a lock is kept in here (no lock operation reads a list)",
	"lrange":         "lists are not a shape a lock is kept in here (no lock operation reads a list)",
	"llen":           "lists are not a shape a lock is kept in here (no lock operation reads a list)",
	"xadd":           "streams are not a shape a lock is kept in here",
	"zrangebylex":    "lexicographic ranges are not modelled (no lock shape orders owners by name)",
	"zrevrangebylex": "lexicographic ranges are not modelled (no lock shape orders owners by name)",
	"zlexcount":      "lexicographic ranges are not modelled (no lock shape orders owners by name)",
	"zremrangebylex": "lexicographic ranges are not modelled (no lock shape orders owners by name)",
	"zpopmin":        "it takes whichever owner comes first, not the caller's",
	"zpopmax":        "it takes whichever owner comes first, not the caller's",
	"zunionstore":    "it writes a key computed from others: no lock operation does",
	"zinterstore":    "it writes a key computed from others: no lock operation does",
	"zdiffstore":     "it writes a key computed from others: no lock operation does",
	"sunionstore":    "it writes a key computed from others: no lock operation does",
	"sinterstore":    "it writes a key computed from others: no lock operation does",
	"sdiffstore":     "it writes a key computed from others: no lock operation does",
	"zrangestore":    "it writes a key computed from others: no lock operation does",
	"lcs":            "it compares two keys' values, which no lock operation does",
}

// OutsideReason says why a command is not one a lock script may use.
func OutsideReason(name string) string {
	name = strings.ToLower(name)
	if r, ok := outside[name]; ok {
		return "which a lock script may not use: " + r
	}
	return "which is not one of the commands a lock script may use (those that read or write the value or expiry of the script's keys, TIME and SELECT 0)"
}

// Allowed reports whether a lock script may call the command.
func Allowed(name string) bool {
	_, ok := LockCommands[strings.ToLower(name)]
	return ok
}

// CommandNames lists the allow-list, sorted.
func CommandNames() []string {
	out := make([]string, 0, len(LockCommands))
	for n := range LockCommands {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// OutsideNames lists the commands kept off the list with a reason, sorted.
func OutsideNames() []string {
	out := make([]string, 0, len(outside))
	for n := range outside {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// call is one command of a script being run against the model.
type call struct {
	s    *State
	name string
	args []string
}

const (
	errWrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
	errNotInt    = "ERR value is not an integer or out of range"
	errNotFloat  = "ERR value is not a valid float"
	errSyntax    = "ERR syntax error"
	errOverflow  = "ERR increment or decrement would overflow"
	errRange     = "ERR min or max is not a float"
)

// fail is a command Redis answers with an error: the run is refused.
func (c *call) fail(msg string) (resp.Value, *Stop) {
	r := Refuse(RefuseOther, "redis.call(%s) fails on Redis with %q", strings.ToUpper(c.name), msg)
	r.redisErr = msg
	return resp.Value{}, r
}

func (c *call) expireErr() (resp.Value, *Stop) {
	return c.fail("ERR invalid expire time in '" + c.name + "' command")
}

// typed looks a key up and checks its type.
func (c *call) typed(key string, t Type) (Item, bool, bool) {
	it, ok := c.s.Lookup(key)
	if ok && it.Type != t {
		return it, true, false
	}
	return it, ok, true
}

// put stores an item, or deletes the key when it is empty or expired. (A
// key set to expire at the current millisecond still exists, as on Redis:
// SET ... PXAT keeps it until the clock moves on. EXPIRE and GETEX delete
// a key whose new time is not in the future themselves.)
func (c *call) put(key string, it Item) {
	if (it.Type != TypeString && it.size() == 0) || (it.At != 0 && it.At < c.s.Now) {
		delete(c.s.Keys, key)
		return
	}
	c.s.Keys[key] = it
}

func bulk(s string) resp.Value { return resp.BulkValue([]byte(s)) }

func array(vs ...resp.Value) resp.Value {
	if vs == nil {
		vs = []resp.Value{}
	}
	return resp.Value{Kind: resp.KindArray, Elems: vs}
}

// parseInt reads an integer as Redis does (no spaces, no plus sign).
func ParseInt(s string) (int64, bool) {
	n, ok := resp.ParseInt([]byte(s))
	return n, ok
}
