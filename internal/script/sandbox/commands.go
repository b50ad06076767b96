package sandbox

import (
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// The one list of the commands a lock script may use: every command that
// reads or writes the value or the expiry of the script's own keys
// (strings, hashes, sets and sorted sets), in its single-key and
// multi-key forms, and TIME and SELECT 0. The sandbox runs these against
// its model, as Redis 7.0 answers them; the vote policy's guard
// (guard.go) lets a script call these and nothing else on the backends.
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

// Strings.

func cmdGet(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], TypeString)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !ok:
		return resp.Nil, nil
	}
	return bulk(it.Value), nil
}

// strOpts are the options of SET and GETEX, parsed as Redis 7.0 parses
// them: each option is accepted only where it fits the ones before it
// (the same expiry option twice is fine, the last wins), anything else is
// a syntax error; the expiry's value is read later.
type strOpts struct {
	nx, xx, get, keep, persist bool
	expiry, value              string // "ex", "px", "exat" or "pxat", and its argument
}

func parseStrOpts(args []string, from int, getex bool) (strOpts, bool) {
	var o strOpts
	for j := from; j < len(args); j++ {
		w := strings.ToLower(args[j])
		next := j+1 < len(args)
		other := func(e string) bool { // no expiry other than e so far
			return o.expiry == "" || o.expiry == e
		}
		switch {
		case w == "nx" && !o.xx && !getex:
			o.nx = true
		case w == "xx" && !o.nx && !getex:
			o.xx = true
		case w == "get" && !getex:
			o.get = true
		case w == "keepttl" && !o.persist && o.expiry == "" && !getex:
			o.keep = true
		case w == "persist" && getex && o.expiry == "" && !o.keep:
			o.persist = true
		case (w == "ex" || w == "px" || w == "exat" || w == "pxat") && !o.keep && !o.persist && other(w) && next:
			o.expiry, o.value = w, args[j+1]
			j++
		default:
			return o, false
		}
	}
	return o, true
}

// expiryAt reads the expiry option's value as an absolute time (ms).
func (c *call) expiryAt(o strOpts) (int64, *Stop) {
	n, ok := ParseInt(o.value)
	if !ok {
		_, r := c.fail(errNotInt)
		return 0, r
	}
	seconds := o.expiry == "ex" || o.expiry == "exat"
	if n <= 0 || seconds && n > math.MaxInt64/1000 {
		_, r := c.expireErr()
		return 0, r
	}
	if seconds {
		n *= 1000
	}
	if o.expiry == "ex" || o.expiry == "px" {
		if n > math.MaxInt64-c.s.Now {
			_, r := c.expireErr()
			return 0, r
		}
		n += c.s.Now
	}
	return n, nil
}

// cmdSet is SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL].
func cmdSet(c *call) (resp.Value, *Stop) {
	args, s := c.args, c.s
	o, ok := parseStrOpts(args, 3, false)
	if !ok {
		return c.fail(errSyntax)
	}
	var at int64
	if o.expiry != "" {
		var ref *Stop
		if at, ref = c.expiryAt(o); ref != nil {
			return resp.Value{}, ref
		}
	}
	old, exists := s.Lookup(args[1])
	var reply resp.Value
	if o.get {
		if exists && old.Type != TypeString {
			return c.fail(errWrongType)
		}
		reply = resp.Nil
		if exists {
			reply = bulk(old.Value)
		}
	}
	if (o.nx && exists) || (o.xx && !exists) {
		if o.get {
			return reply, nil
		}
		return resp.Nil, nil
	}
	it := Item{Value: args[2], At: at}
	if o.keep && exists {
		it.At = old.At
	}
	c.put(args[1], it)
	if o.get {
		return reply, nil
	}
	return resp.OK, nil
}

func cmdSetNX(c *call) (resp.Value, *Stop) {
	if _, ok := c.s.Lookup(c.args[1]); ok {
		return resp.IntValue(0), nil
	}
	c.put(c.args[1], Item{Value: c.args[2]})
	return resp.IntValue(1), nil
}

// cmdSetEx is SETEX key seconds value and PSETEX key ms value.
func cmdSetEx(c *call) (resp.Value, *Stop) {
	n, ok := ParseInt(c.args[2])
	if !ok {
		return c.fail(errNotInt)
	}
	unit := int64(1)
	if c.name == "setex" {
		unit = 1000
	}
	if n <= 0 || n > math.MaxInt64/unit || n*unit > math.MaxInt64-c.s.Now {
		return c.expireErr()
	}
	c.put(c.args[1], Item{Value: c.args[3], At: c.s.Now + n*unit})
	return resp.OK, nil
}

func cmdGetSet(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	c.put(c.args[1], Item{Value: c.args[2]})
	if !ok {
		return resp.Nil, nil
	}
	return bulk(it.Value), nil
}

func cmdGetDel(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], TypeString)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !ok:
		return resp.Nil, nil
	}
	delete(c.s.Keys, c.args[1])
	return bulk(it.Value), nil
}

// cmdGetEx is GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST].
func cmdGetEx(c *call) (resp.Value, *Stop) {
	o, ok := parseStrOpts(c.args, 2, true)
	if !ok {
		return c.fail(errSyntax)
	}
	it, exists, typeOK := c.typed(c.args[1], TypeString)
	switch {
	case !exists:
		return resp.Nil, nil
	case !typeOK:
		return c.fail(errWrongType)
	}
	reply := bulk(it.Value)
	switch {
	case o.persist:
		it.At = 0
	case o.expiry != "":
		at, ref := c.expiryAt(o)
		if ref != nil {
			return resp.Value{}, ref
		}
		if at <= c.s.Now {
			delete(c.s.Keys, c.args[1])
			return reply, nil
		}
		it.At = at
	}
	c.put(c.args[1], it)
	return reply, nil
}

func cmdMGet(c *call) (resp.Value, *Stop) {
	out := make([]resp.Value, 0, len(c.args)-1)
	for _, k := range c.args[1:] {
		it, ok := c.s.Lookup(k)
		if ok && it.Type == TypeString {
			out = append(out, bulk(it.Value))
		} else {
			out = append(out, resp.Nil)
		}
	}
	return array(out...), nil
}

// cmdMSet is MSET and MSETNX.
func cmdMSet(c *call) (resp.Value, *Stop) {
	if len(c.args)%2 == 0 {
		return c.fail("ERR wrong number of arguments for '" + c.name + "' command")
	}
	if c.name == "msetnx" {
		for i := 1; i < len(c.args); i += 2 {
			if _, ok := c.s.Lookup(c.args[i]); ok {
				return resp.IntValue(0), nil
			}
		}
	}
	for i := 1; i < len(c.args); i += 2 {
		c.put(c.args[i], Item{Value: c.args[i+1]})
	}
	if c.name == "msetnx" {
		return resp.IntValue(1), nil
	}
	return resp.OK, nil
}

func cmdAppend(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	if len(it.Value)+len(c.args[2]) > maxString {
		return resp.Value{}, Refuse(RefuseBudget, "builds a string longer than %d bytes", maxString)
	}
	it.Value += c.args[2]
	c.put(c.args[1], it)
	return resp.IntValue(int64(len(it.Value))), nil
}

func cmdSetRange(c *call) (resp.Value, *Stop) {
	off, ok := ParseInt(c.args[2])
	if !ok {
		return c.fail(errNotInt)
	}
	if off < 0 {
		return c.fail("ERR offset is out of range")
	}
	it, exists, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	v := c.args[3]
	if v == "" {
		return resp.IntValue(int64(len(it.Value))), nil
	}
	if off > maxString || off+int64(len(v)) > maxString {
		return resp.Value{}, Refuse(RefuseBudget, "builds a string longer than %d bytes", maxString)
	}
	b := []byte(it.Value)
	if need := int(off) + len(v); need > len(b) {
		b = append(b, make([]byte, need-len(b))...)
	}
	copy(b[off:], v)
	if !exists {
		it = Item{}
	}
	it.Value = string(b)
	c.put(c.args[1], it)
	return resp.IntValue(int64(len(b))), nil
}

func cmdGetRange(c *call) (resp.Value, *Stop) {
	start, ok1 := ParseInt(c.args[2])
	end, ok2 := ParseInt(c.args[3])
	if !ok1 || !ok2 {
		return c.fail(errNotInt)
	}
	it, _, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	return bulk(getrange(it.Value, start, end)), nil
}

func cmdStrlen(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	return resp.IntValue(int64(len(it.Value))), nil
}

// cmdIncr is INCR, DECR, INCRBY and DECRBY.
func cmdIncr(c *call) (resp.Value, *Stop) {
	by := int64(1)
	if len(c.args) == 3 {
		n, ok := ParseInt(c.args[2])
		if !ok {
			return c.fail(errNotInt)
		}
		by = n
	}
	if strings.HasPrefix(c.name, "decr") {
		if by == math.MinInt64 {
			return c.fail("ERR decrement would overflow")
		}
		by = -by
	}
	it, exists, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	var cur int64
	if exists {
		n, ok := ParseInt(it.Value)
		if !ok {
			return c.fail(errNotInt)
		}
		cur = n
	}
	if (by < 0 && cur < 0 && by < math.MinInt64-cur) || (by > 0 && cur > 0 && by > math.MaxInt64-cur) {
		return c.fail(errOverflow)
	}
	cur += by
	it.Value = strconv.FormatInt(cur, 10)
	c.put(c.args[1], it)
	return resp.IntValue(cur), nil
}

// getrange is GETRANGE's substring rule.
func getrange(v string, start, end int64) string {
	n := int64(len(v))
	if start < 0 && end < 0 && start > end {
		return ""
	}
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	start = max(start, 0)
	end = max(end, 0)
	if end >= n {
		end = n - 1
	}
	if n == 0 || start > end {
		return ""
	}
	return v[start : end+1]
}

// Any key.

func cmdDel(c *call) (resp.Value, *Stop) {
	n := int64(0)
	for _, k := range c.args[1:] {
		if _, ok := c.s.Lookup(k); ok {
			n++
			delete(c.s.Keys, k)
		}
	}
	return resp.IntValue(n), nil
}

// cmdExists is EXISTS and TOUCH: every name counts, repeated or not.
func cmdExists(c *call) (resp.Value, *Stop) {
	n := int64(0)
	for _, k := range c.args[1:] {
		if _, ok := c.s.Lookup(k); ok {
			n++
		}
	}
	return resp.IntValue(n), nil
}

func cmdType(c *call) (resp.Value, *Stop) {
	name := "none"
	if it, ok := c.s.Lookup(c.args[1]); ok {
		name = it.Type.String()
	}
	return resp.Value{Kind: resp.KindSimple, Str: []byte(name)}, nil
}

// cmdExpire is PEXPIRE, EXPIRE, PEXPIREAT and EXPIREAT, with NX, XX, GT
// and LT.
func cmdExpire(c *call) (resp.Value, *Stop) {
	var nx, xx, gt, lt bool
	for _, o := range c.args[3:] {
		switch strings.ToLower(o) {
		case "nx":
			nx = true
		case "xx":
			xx = true
		case "gt":
			gt = true
		case "lt":
			lt = true
		default:
			return c.fail("ERR Unsupported option " + o)
		}
	}
	switch {
	case nx && (xx || gt || lt):
		return c.fail("ERR NX and XX, GT or LT options at the same time are not compatible")
	case gt && lt:
		return c.fail("ERR GT and LT options at the same time are not compatible")
	}
	n, ok := ParseInt(c.args[2])
	if !ok {
		return c.fail(errNotInt)
	}
	if c.name == "expire" || c.name == "expireat" {
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			return c.expireErr()
		}
		n *= 1000
	}
	var base int64
	if c.name == "expire" || c.name == "pexpire" {
		base = c.s.Now
	}
	if n > math.MaxInt64-base {
		return c.expireErr()
	}
	at := n + base
	it, exists := c.s.Lookup(c.args[1])
	if !exists {
		return resp.IntValue(0), nil
	}
	cur := it.At
	switch {
	case nx && cur != 0, xx && cur == 0, gt && (cur == 0 || at <= cur), lt && cur != 0 && at >= cur:
		return resp.IntValue(0), nil
	}
	if at <= c.s.Now {
		delete(c.s.Keys, c.args[1])
		return resp.IntValue(1), nil
	}
	it.At = at
	c.s.Keys[c.args[1]] = it
	return resp.IntValue(1), nil
}

// cmdTTL is PTTL, TTL, PEXPIRETIME and EXPIRETIME.
func cmdTTL(c *call) (resp.Value, *Stop) {
	it, ok := c.s.Lookup(c.args[1])
	switch {
	case !ok:
		return resp.IntValue(-2), nil
	case it.At == 0:
		return resp.IntValue(-1), nil
	}
	v := it.At
	if c.name == "pttl" || c.name == "ttl" {
		v -= c.s.Now
	}
	if c.name == "ttl" || c.name == "expiretime" {
		v = (v + 500) / 1000
	}
	return resp.IntValue(v), nil
}

func cmdTime(c *call) (resp.Value, *Stop) {
	return array(bulk(strconv.FormatInt(c.s.Now/1000, 10)), bulk(strconv.FormatInt(c.s.Now%1000*1000, 10))), nil
}

func cmdSelect(c *call) (resp.Value, *Stop) {
	db, ok := ParseInt(c.args[1])
	if !ok {
		return c.fail(errNotInt)
	}
	if db != 0 {
		return resp.Value{}, Refuse(RefuseOther, "SELECTs database %d: only database 0 is served (locks live in database 0 of every backend)", db)
	}
	return resp.OK, nil
}

// Hashes, sets and sorted sets share HLEN, SCARD and ZCARD.

func (c *call) lenType() Type {
	switch c.name {
	case "hlen":
		return TypeHash
	case "scard":
		return TypeSet
	}
	return TypeZset
}

func cmdLen(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], c.lenType())
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !ok:
		return resp.IntValue(0), nil
	}
	return resp.IntValue(int64(it.size())), nil
}

// hash returns the key's hash (a new one when it is missing).
func (c *call) hash() (Item, bool) {
	it, ok, typeOK := c.typed(c.args[1], TypeHash)
	if !ok {
		it = Item{Type: TypeHash}
	}
	if it.Hash == nil {
		it.Hash = map[string]string{}
	}
	return it, typeOK
}

// cmdHSet is HSET and HMSET.
func cmdHSet(c *call) (resp.Value, *Stop) {
	if len(c.args)%2 == 1 {
		return c.fail("ERR wrong number of arguments for '" + c.name + "' command")
	}
	it, typeOK := c.hash()
	if !typeOK {
		return c.fail(errWrongType)
	}
	n := int64(0)
	for i := 2; i < len(c.args); i += 2 {
		if _, ok := it.Hash[c.args[i]]; !ok {
			n++
		}
		it.Hash[c.args[i]] = c.args[i+1]
	}
	c.put(c.args[1], it)
	if c.name == "hmset" {
		return resp.OK, nil
	}
	return resp.IntValue(n), nil
}

func cmdHSetNX(c *call) (resp.Value, *Stop) {
	it, typeOK := c.hash()
	if !typeOK {
		return c.fail(errWrongType)
	}
	if _, ok := it.Hash[c.args[2]]; ok {
		return resp.IntValue(0), nil
	}
	it.Hash[c.args[2]] = c.args[3]
	c.put(c.args[1], it)
	return resp.IntValue(1), nil
}

// cmdHGet is HGET and HMGET.
func cmdHGet(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeHash)
	if !typeOK {
		return c.fail(errWrongType)
	}
	get := func(f string) resp.Value {
		if v, ok := it.Hash[f]; ok {
			return bulk(v)
		}
		return resp.Nil
	}
	return c.oneOrMany(c.name == "hget", get)
}

func cmdHExists(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeHash)
	if !typeOK {
		return c.fail(errWrongType)
	}
	_, ok := it.Hash[c.args[2]]
	return boolInt(ok), nil
}

func cmdHStrlen(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeHash)
	if !typeOK {
		return c.fail(errWrongType)
	}
	return resp.IntValue(int64(len(it.Hash[c.args[2]]))), nil
}

func cmdHIncrBy(c *call) (resp.Value, *Stop) {
	by, ok := ParseInt(c.args[3])
	if !ok {
		return c.fail(errNotInt)
	}
	it, typeOK := c.hash()
	if !typeOK {
		return c.fail(errWrongType)
	}
	var cur int64
	if v, ok := it.Hash[c.args[2]]; ok {
		n, ok := ParseInt(v)
		if !ok {
			return c.fail("ERR hash value is not an integer")
		}
		cur = n
	}
	if (by < 0 && cur < 0 && by < math.MinInt64-cur) || (by > 0 && cur > 0 && by > math.MaxInt64-cur) {
		return c.fail(errOverflow)
	}
	cur += by
	it.Hash[c.args[2]] = strconv.FormatInt(cur, 10)
	c.put(c.args[1], it)
	return resp.IntValue(cur), nil
}

// removeNames deletes names from m and counts those it held.
func removeNames[V any](m map[string]V, names []string) int64 {
	n := int64(0)
	for _, f := range names {
		if _, ok := m[f]; ok {
			n++
			delete(m, f)
		}
	}
	return n
}

// cmdRemove is HDEL, SREM and ZREM: fields or members removed, the key
// deleted once it is empty.
func cmdRemove(c *call) (resp.Value, *Stop) {
	t := map[string]Type{"hdel": TypeHash, "srem": TypeSet, "zrem": TypeZset}[c.name]
	it, ok, typeOK := c.typed(c.args[1], t)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !ok:
		return resp.IntValue(0), nil
	}
	var n int64
	switch t {
	case TypeHash:
		n = removeNames(it.Hash, c.args[2:])
	case TypeSet:
		n = removeNames(it.Set, c.args[2:])
	default:
		n = removeNames(it.Zset, c.args[2:])
	}
	c.put(c.args[1], it)
	return resp.IntValue(n), nil
}

// oneOrMany answers a command of one name (HGET) with get of its third
// argument, and its many-name form (HMGET) with an array of get of each.
func (c *call) oneOrMany(single bool, get func(string) resp.Value) (resp.Value, *Stop) {
	if single {
		return get(c.args[2]), nil
	}
	out := make([]resp.Value, 0, len(c.args)-2)
	for _, f := range c.args[2:] {
		out = append(out, get(f))
	}
	return array(out...), nil
}

func boolInt(b bool) resp.Value {
	if b {
		return resp.IntValue(1)
	}
	return resp.IntValue(0)
}

// Sets.

func cmdSAdd(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], TypeSet)
	if !typeOK {
		return c.fail(errWrongType)
	}
	if !ok {
		it = Item{Type: TypeSet}
	}
	if it.Set == nil {
		it.Set = map[string]struct{}{}
	}
	n := int64(0)
	for _, m := range c.args[2:] {
		if _, ok := it.Set[m]; !ok {
			n++
			it.Set[m] = struct{}{}
		}
	}
	c.put(c.args[1], it)
	return resp.IntValue(n), nil
}

// cmdSIsMember is SISMEMBER and SMISMEMBER.
func cmdSIsMember(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeSet)
	if !typeOK {
		return c.fail(errWrongType)
	}
	return c.oneOrMany(c.name == "sismember", func(m string) resp.Value { _, ok := it.Set[m]; return boolInt(ok) })
}

// Sorted sets. Scores are doubles; replies show them as Redis 7.0 does
// (%.17g, inf and -inf).

// parseScore reads a score as ZADD does.
func parseScore(s string) (float64, bool) {
	if s == "" || s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r' || s[0] == '\v' || s[0] == '\f' {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		return 0, false
	}
	if f == 0 {
		f = 0 // no negative zero
	}
	return f, true
}

// FormatScore is how Redis 7.0 shows a score.
func FormatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// scoreRange is a ZCOUNT range: min and max, each inclusive or not.
type scoreRange struct {
	min, max     float64
	minEx, maxEx bool
}

func parseBound(s string) (float64, bool, bool) {
	ex := strings.HasPrefix(s, "(")
	if ex {
		s = s[1:]
	}
	f, err := strconv.ParseFloat(strings.TrimLeft(s, " \t\n\r\v\f"), 64)
	if err != nil && !math.IsInf(f, 0) || math.IsNaN(f) || s == "" {
		return 0, false, false
	}
	return f, ex, true
}

func parseRange(lo, hi string) (scoreRange, bool) {
	var r scoreRange
	var ok1, ok2 bool
	r.min, r.minEx, ok1 = parseBound(lo)
	r.max, r.maxEx, ok2 = parseBound(hi)
	return r, ok1 && ok2
}

func (r scoreRange) holds(f float64) bool {
	return (f > r.min || !r.minEx && f == r.min) && (f < r.max || !r.maxEx && f == r.max)
}

// zmember is a member with its score.
type zmember struct {
	name  string
	score float64
}

// sorted lists a sorted set's members in Redis's order: by score, then by
// name.
func sorted(z map[string]float64) []zmember {
	out := make([]zmember, 0, len(z))
	for m, s := range z {
		out = append(out, zmember{m, s})
	}
	slices.SortFunc(out, func(a, b zmember) int {
		switch {
		case a.score < b.score:
			return -1
		case a.score > b.score:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

// cmdZAdd is ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ... and
// ZINCRBY key increment member.
func cmdZAdd(c *call) (resp.Value, *Stop) {
	var nx, xx, gt, lt, ch, incr bool
	i := 2
	if c.name == "zincrby" {
		incr = true
	} else {
	opts:
		for ; i < len(c.args); i++ {
			switch strings.ToLower(c.args[i]) {
			case "nx":
				nx = true
			case "xx":
				xx = true
			case "gt":
				gt = true
			case "lt":
				lt = true
			case "ch":
				ch = true
			case "incr":
				incr = true
			default:
				break opts
			}
		}
	}
	elems := len(c.args) - i
	switch {
	case elems%2 != 0 || elems == 0:
		return c.fail(errSyntax)
	case nx && xx:
		return c.fail("ERR XX and NX options at the same time are not compatible")
	case gt && nx || lt && nx || gt && lt:
		return c.fail("ERR GT, LT, and/or NX options at the same time are not compatible")
	case incr && elems > 2:
		return c.fail("ERR INCR option supports a single increment-element pair")
	}
	scores := make([]float64, 0, elems/2)
	for j := i; j < len(c.args); j += 2 {
		f, ok := parseScore(c.args[j])
		if !ok {
			return c.fail(errNotFloat)
		}
		scores = append(scores, f)
	}
	it, exists, typeOK := c.typed(c.args[1], TypeZset)
	if !typeOK {
		return c.fail(errWrongType)
	}
	var added, updated, processed int64
	var score float64
	if exists || !xx {
		if !exists {
			it = Item{Type: TypeZset}
		}
		if it.Zset == nil {
			it.Zset = map[string]float64{}
		}
		for j, f := range scores {
			m := c.args[i+1+2*j]
			cur, has := it.Zset[m]
			switch {
			case has:
				if nx {
					continue
				}
				if incr {
					f += cur
					if math.IsNaN(f) {
						return c.fail("ERR resulting score is not a number (NaN)")
					}
				}
				if lt && f >= cur || gt && f <= cur {
					continue
				}
				if f != cur {
					it.Zset[m] = f
					updated++
				}
			case xx:
				continue
			default:
				it.Zset[m] = f
				added++
			}
			processed++
			score = f
		}
		c.put(c.args[1], it)
	}
	if incr {
		if processed == 0 {
			return resp.Nil, nil
		}
		return bulk(FormatScore(score)), nil
	}
	if ch {
		return resp.IntValue(added + updated), nil
	}
	return resp.IntValue(added), nil
}

// cmdZScore is ZSCORE and ZMSCORE.
func cmdZScore(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeZset)
	if !typeOK {
		return c.fail(errWrongType)
	}
	get := func(m string) resp.Value {
		if f, ok := it.Zset[m]; ok {
			return bulk(FormatScore(f))
		}
		return resp.Nil
	}
	return c.oneOrMany(c.name == "zscore", get)
}

// cmdZCount is ZCOUNT and ZREMRANGEBYSCORE.
func cmdZCount(c *call) (resp.Value, *Stop) {
	r, ok := parseRange(c.args[2], c.args[3])
	if !ok {
		return c.fail(errRange)
	}
	it, exists, typeOK := c.typed(c.args[1], TypeZset)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !exists:
		return resp.IntValue(0), nil
	}
	n := int64(0)
	for m, f := range it.Zset {
		if r.holds(f) {
			n++
			if c.name == "zremrangebyscore" {
				delete(it.Zset, m)
			}
		}
	}
	c.put(c.args[1], it)
	return resp.IntValue(n), nil
}

// rankRange sanitizes a rank range as Redis does; ok is false when it is
// empty.
func rankRange(start, end int64, n int) (int, int, bool) {
	l := int64(n)
	if start < 0 {
		start += l
	}
	if end < 0 {
		end += l
	}
	start = max(start, 0)
	if start > end || start >= l {
		return 0, 0, false
	}
	end = min(end, l-1)
	return int(start), int(end), true
}

func cmdZRemRangeByRank(c *call) (resp.Value, *Stop) {
	start, ok1 := ParseInt(c.args[2])
	end, ok2 := ParseInt(c.args[3])
	if !ok1 || !ok2 {
		return c.fail(errNotInt)
	}
	it, exists, typeOK := c.typed(c.args[1], TypeZset)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !exists:
		return resp.IntValue(0), nil
	}
	ms := sorted(it.Zset)
	a, b, ok := rankRange(start, end, len(ms))
	if !ok {
		return resp.IntValue(0), nil
	}
	for _, m := range ms[a : b+1] {
		delete(it.Zset, m.name)
	}
	c.put(c.args[1], it)
	return resp.IntValue(int64(b - a + 1)), nil
}

func cmdZRank(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeZset)
	if !typeOK {
		return c.fail(errWrongType)
	}
	ms := sorted(it.Zset)
	for i, m := range ms {
		if m.name == c.args[2] {
			if c.name == "zrevrank" {
				i = len(ms) - 1 - i
			}
			return resp.IntValue(int64(i)), nil
		}
	}
	return resp.Nil, nil
}

// cmdZRange is ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count]
// [WITHSCORES], and ZREVRANGE, ZRANGEBYSCORE and ZREVRANGEBYSCORE.
func cmdZRange(c *call) (resp.Value, *Stop) {
	byScore := c.name == "zrangebyscore" || c.name == "zrevrangebyscore"
	rev := c.name == "zrevrange" || c.name == "zrevrangebyscore"
	fixed := c.name != "zrange" // the legacy forms take no BYSCORE or REV
	var withScores, limited bool
	var offset, count int64 = 0, -1
	for j := 4; j < len(c.args); j++ {
		o := strings.ToLower(c.args[j])
		switch {
		case o == "withscores":
			withScores = true
		case o == "limit" && j+2 < len(c.args):
			var ok1, ok2 bool
			offset, ok1 = ParseInt(c.args[j+1])
			count, ok2 = ParseInt(c.args[j+2])
			if !ok1 || !ok2 {
				return c.fail(errNotInt)
			}
			limited = true
			j += 2
		case !fixed && !rev && o == "rev":
			rev = true
		case !fixed && !byScore && o == "byscore":
			byScore = true
		default:
			return c.fail(errSyntax)
		}
	}
	if limited && !byScore {
		return c.fail("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
	}
	lo, hi := c.args[2], c.args[3]
	if rev && byScore {
		lo, hi = hi, lo
	}
	var r scoreRange
	var start, end int64
	if byScore {
		var ok bool
		if r, ok = parseRange(lo, hi); !ok {
			return c.fail(errRange)
		}
	} else {
		var ok1, ok2 bool
		start, ok1 = ParseInt(lo)
		end, ok2 = ParseInt(hi)
		if !ok1 || !ok2 {
			return c.fail(errNotInt)
		}
	}
	it, exists, typeOK := c.typed(c.args[1], TypeZset)
	switch {
	case !exists:
		return array(), nil
	case !typeOK:
		return c.fail(errWrongType)
	}
	ms := sorted(it.Zset)
	if rev {
		slices.Reverse(ms)
	}
	var sel []zmember
	if byScore {
		if offset < 0 {
			return array(), nil
		}
		for _, m := range ms {
			if !r.holds(m.score) {
				continue
			}
			if offset > 0 {
				offset--
				continue
			}
			if count == 0 {
				break
			}
			sel = append(sel, m)
			count--
		}
	} else if a, b, ok := rankRange(start, end, len(ms)); ok {
		sel = ms[a : b+1]
	}
	out := make([]resp.Value, 0, len(sel)*2)
	for _, m := range sel {
		out = append(out, bulk(m.name))
		if withScores {
			out = append(out, bulk(FormatScore(m.score)))
		}
	}
	return array(out...), nil
}
