package script

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Item is one key in the sandbox's model of Redis: its value and its
// absolute expiry in milliseconds on the sandbox's clock (0: none). A key
// with Fields is a hash (Value unused).
type Item struct {
	Value  string
	At     int64
	Fields map[string]string
}

// same reports whether two items hold the same value and expiry.
func (it Item) same(o Item) bool {
	if it.Value != o.Value || it.At != o.At || len(it.Fields) != len(o.Fields) || (it.Fields == nil) != (o.Fields == nil) {
		return false
	}
	for k, v := range it.Fields {
		if w, ok := o.Fields[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// wrongType is Redis's error for a command on a key of another type.
const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"

// State is the model's keyspace: the keys a script was given, on a clock
// that does not move while the script runs. A key whose expiry is before
// Now does not exist (Redis: a key is expired when now > when).
type State struct {
	Now  int64
	Keys map[string]Item
	// proxyOwn allows the hash commands the proxy's own scripts use on
	// their companion keys (Eval's model Redis); client scripts are
	// classified without them.
	proxyOwn bool
}

func (s *State) clone() *State {
	c := &State{Now: s.Now, Keys: make(map[string]Item, len(s.Keys)), proxyOwn: s.proxyOwn}
	for k, it := range s.Keys {
		if it.Fields != nil {
			f := make(map[string]string, len(it.Fields))
			for n, v := range it.Fields {
				f[n] = v
			}
			it.Fields = f
		}
		c.Keys[k] = it
	}
	return c
}

// lookup returns a live key.
func (s *State) lookup(k string) (Item, bool) {
	it, ok := s.Keys[k]
	if !ok {
		return Item{}, false
	}
	if it.At != 0 && it.At < s.Now {
		delete(s.Keys, k)
		return Item{}, false
	}
	return it, true
}

// pttl is Redis's PTTL: -2 missing, -1 no expiry, else milliseconds left.
func (s *State) pttl(k string) int64 {
	it, ok := s.lookup(k)
	switch {
	case !ok:
		return -2
	case it.At == 0:
		return -1
	}
	return it.At - s.Now
}

// refusal stops a run: the script did something the classifier does not
// accept. It is never seen by the script (pcall cannot catch it).
type refusal struct {
	kind   refusalKind
	reason string
}

type refusalKind uint8

const (
	refuseOther   refusalKind = iota + 1
	refuseNoTTL               // a write that leaves a key without expiry
	refuseCommand             // a command outside the allow-list
	refuseBudget              // too many instructions or too much memory
)

func refuse(kind refusalKind, format string, args ...any) *refusal {
	return &refusal{kind: kind, reason: fmt.Sprintf(format, args...)}
}

// allowed are the commands the model runs, with the positions of their key
// arguments (1-based, -1: every argument).
var allowed = map[string]int{
	"get": 1, "set": 1, "del": -1, "unlink": -1, "exists": -1, "pexpire": 1, "expire": 1,
	"pttl": 1, "ttl": 1, "getrange": 1, "strlen": 1, "select": 0,
}

// companionCommands are what the proxy's own scripts also run, on the hash
// beside each lock (see State.proxyOwn).
var companionCommands = map[string]int{"hset": 1, "hget": 1, "hmget": 1, "hdel": 1}

// exec runs one command of a script against the model, as Redis 7.0 would.
// Commands outside the allow-list, keys not passed in KEYS, another
// database, and any command that Redis would answer with an error refuse
// the run: a lock script has no business doing them.
func (s *State) exec(args []string, keys map[string]bool, touched map[string]bool) (resp.Value, *refusal) {
	if len(args) == 0 {
		return resp.Value{}, refuse(refuseOther, "calls redis.call with no command")
	}
	name := strings.ToLower(args[0])
	pos, ok := allowed[name]
	if !ok && s.proxyOwn {
		pos, ok = companionCommands[name]
	}
	if !ok {
		switch name {
		case "time":
			return resp.Value{}, refuse(refuseCommand, "calls TIME: a lock script must not depend on time")
		case "randomkey", "srandmember", "spop", "hrandfield", "zrandmember":
			return resp.Value{}, refuse(refuseCommand, "calls %s: a lock script must not depend on randomness", strings.ToUpper(name))
		}
		return resp.Value{}, refuse(refuseCommand, "calls %s, which is not one of the commands a lock script may use (GET, SET, DEL, UNLINK, EXISTS, PEXPIRE, EXPIRE, PTTL, TTL, GETRANGE, STRLEN, SELECT 0)", quoteCmd(args[0]))
	}
	switch {
	case pos == 1 && len(args) >= 2:
		if !keys[args[1]] {
			return resp.Value{}, refuse(refuseOther, "%s accesses key %s, which is not in KEYS", strings.ToUpper(name), strconv.Quote(short(args[1])))
		}
		touched[args[1]] = true
	case pos == -1:
		for _, k := range args[1:] {
			if !keys[k] {
				return resp.Value{}, refuse(refuseOther, "%s accesses key %s, which is not in KEYS", strings.ToUpper(name), strconv.Quote(short(k)))
			}
			touched[k] = true
		}
	}
	fail := func(msg string) (resp.Value, *refusal) {
		return resp.Value{}, refuse(refuseOther, "redis.call(%s) fails on Redis with %q", strings.ToUpper(name), msg)
	}
	arity := func(n int, exact bool) bool {
		if exact {
			return len(args) == n
		}
		return len(args) >= n
	}
	wrongArgs := "ERR wrong number of arguments for '" + name + "' command"
	if it, ok := s.lookup(args[1%len(args)]); ok && len(args) > 1 {
		if hash := strings.HasPrefix(name, "h"); hash != (it.Fields != nil) && name != "del" && name != "unlink" &&
			name != "exists" && name != "pttl" && name != "ttl" && name != "pexpire" && name != "expire" && name != "set" {
			return fail(wrongType)
		}
	}
	switch name {
	case "get":
		if !arity(2, true) {
			return fail(wrongArgs)
		}
		it, ok := s.lookup(args[1])
		if !ok {
			return resp.Nil, nil
		}
		return resp.BulkValue([]byte(it.Value)), nil
	case "strlen":
		if !arity(2, true) {
			return fail(wrongArgs)
		}
		it, _ := s.lookup(args[1])
		return resp.IntValue(int64(len(it.Value))), nil
	case "getrange":
		if !arity(4, true) {
			return fail(wrongArgs)
		}
		start, ok1 := parseInt(args[2])
		end, ok2 := parseInt(args[3])
		if !ok1 || !ok2 {
			return fail("ERR value is not an integer or out of range")
		}
		it, _ := s.lookup(args[1])
		return resp.BulkValue([]byte(getrange(it.Value, start, end))), nil
	case "hset", "hget", "hmget", "hdel":
		return s.hash(name, args, fail)
	case "exists", "del", "unlink":
		if !arity(2, false) {
			return fail(wrongArgs)
		}
		n := int64(0)
		for _, k := range args[1:] {
			if _, ok := s.lookup(k); ok {
				n++
				if name != "exists" {
					delete(s.Keys, k)
				}
			}
		}
		return resp.IntValue(n), nil
	case "pttl", "ttl":
		if !arity(2, true) {
			return fail(wrongArgs)
		}
		p := s.pttl(args[1])
		if name == "ttl" && p >= 0 {
			p = (p + 500) / 1000
		}
		return resp.IntValue(p), nil
	case "pexpire", "expire":
		return s.expire(name, args, fail)
	case "set":
		return s.set(args, fail)
	case "select":
		if !arity(2, true) {
			return fail(wrongArgs)
		}
		db, ok := parseInt(args[1])
		if !ok {
			return fail("ERR value is not an integer or out of range")
		}
		if db != 0 {
			return resp.Value{}, refuse(refuseOther, "SELECTs database %d: only database 0 is served (locks live in database 0 of every backend)", db)
		}
		return resp.OK, nil
	}
	return fail("ERR unknown command")
}

func (s *State) expire(name string, args []string, fail func(string) (resp.Value, *refusal)) (resp.Value, *refusal) {
	if len(args) < 3 || len(args) > 4 {
		return fail("ERR wrong number of arguments for '" + name + "' command")
	}
	n, ok := parseInt(args[2])
	if !ok {
		return fail("ERR value is not an integer or out of range")
	}
	unit := int64(1)
	if name == "expire" {
		unit = 1000
	}
	if n > math.MaxInt64/unit || n < math.MinInt64/unit {
		return fail("ERR invalid expire time in '" + name + "' command")
	}
	ms := n * unit
	if (ms > 0 && s.Now > math.MaxInt64-ms) || (ms < 0 && s.Now < math.MinInt64-ms) {
		return fail("ERR invalid expire time in '" + name + "' command")
	}
	at := s.Now + ms
	it, exists := s.lookup(args[1])
	if len(args) == 4 {
		cur := it.At
		switch strings.ToLower(args[3]) {
		case "nx":
			if cur != 0 {
				return resp.IntValue(0), nil
			}
		case "xx":
			if cur == 0 {
				return resp.IntValue(0), nil
			}
		case "gt":
			if cur == 0 || at <= cur {
				return resp.IntValue(0), nil
			}
		case "lt":
			if cur != 0 && at >= cur {
				return resp.IntValue(0), nil
			}
		default:
			return fail("ERR Unsupported option " + args[3])
		}
	}
	if !exists {
		return resp.IntValue(0), nil
	}
	if at <= s.Now {
		delete(s.Keys, args[1])
		return resp.IntValue(1), nil
	}
	it.At = at
	s.Keys[args[1]] = it
	return resp.IntValue(1), nil
}

// set is SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL].
func (s *State) set(args []string, fail func(string) (resp.Value, *refusal)) (resp.Value, *refusal) {
	if len(args) < 3 {
		return fail("ERR wrong number of arguments for 'set' command")
	}
	var nx, xx, get, keep bool
	var at int64
	expiry := ""
	for i := 3; i < len(args); i++ {
		switch o := strings.ToLower(args[i]); o {
		case "nx":
			nx = true
		case "xx":
			xx = true
		case "get":
			get = true
		case "keepttl":
			keep = true
		case "ex", "px", "exat", "pxat":
			if expiry != "" || i+1 >= len(args) {
				return fail("ERR syntax error")
			}
			expiry = o
			i++
			n, ok := parseInt(args[i])
			if !ok {
				return fail("ERR value is not an integer or out of range")
			}
			if n <= 0 {
				return fail("ERR invalid expire time in 'set' command")
			}
			unit := int64(1)
			if o == "ex" || o == "exat" {
				unit = 1000
			}
			if n > math.MaxInt64/unit {
				return fail("ERR invalid expire time in 'set' command")
			}
			at = n * unit
			if o == "ex" || o == "px" {
				if at > math.MaxInt64-s.Now {
					return fail("ERR invalid expire time in 'set' command")
				}
				at += s.Now
			}
		default:
			return fail("ERR syntax error")
		}
	}
	if (nx && xx) || (keep && expiry != "") {
		return fail("ERR syntax error")
	}
	old, exists := s.lookup(args[1])
	var reply resp.Value
	if get {
		reply = resp.Nil
		if exists {
			reply = resp.BulkValue([]byte(old.Value))
		}
	}
	if (nx && exists) || (xx && !exists) {
		if get {
			return reply, nil
		}
		return resp.Nil, nil
	}
	it := Item{Value: args[2], At: at}
	if keep && exists {
		it.At = old.At
	}
	if it.At == 0 {
		return resp.Value{}, refuse(refuseNoTTL, "SET %s without an expiry: the proxy never writes a lock that cannot expire", strconv.Quote(short(args[1])))
	}
	if it.At <= s.Now {
		delete(s.Keys, args[1])
	} else {
		s.Keys[args[1]] = it
	}
	if get {
		return reply, nil
	}
	return resp.OK, nil
}

// hash runs HSET, HGET, HMGET and HDEL on a hash key. A hash created by
// HSET has no expiry until the script sets one.
func (s *State) hash(name string, args []string, fail func(string) (resp.Value, *refusal)) (resp.Value, *refusal) {
	wrongArgs := "ERR wrong number of arguments for '" + name + "' command"
	it, exists := s.lookup(args[1])
	switch name {
	case "hget":
		if len(args) != 3 {
			return fail(wrongArgs)
		}
		if v, ok := it.Fields[args[2]]; ok {
			return resp.BulkValue([]byte(v)), nil
		}
		return resp.Nil, nil
	case "hmget":
		if len(args) < 3 {
			return fail(wrongArgs)
		}
		out := resp.Value{Kind: resp.KindArray}
		for _, f := range args[2:] {
			if v, ok := it.Fields[f]; ok {
				out.Elems = append(out.Elems, resp.BulkValue([]byte(v)))
			} else {
				out.Elems = append(out.Elems, resp.Nil)
			}
		}
		return out, nil
	case "hdel":
		if len(args) < 3 {
			return fail(wrongArgs)
		}
		n := int64(0)
		for _, f := range args[2:] {
			if _, ok := it.Fields[f]; ok {
				delete(it.Fields, f)
				n++
			}
		}
		if exists && len(it.Fields) == 0 {
			delete(s.Keys, args[1])
		}
		return resp.IntValue(n), nil
	}
	if len(args) < 4 || len(args)%2 != 0 {
		return fail(wrongArgs)
	}
	if !exists {
		it = Item{Fields: map[string]string{}}
	}
	n := int64(0)
	for i := 2; i < len(args); i += 2 {
		if _, ok := it.Fields[args[i]]; !ok {
			n++
		}
		it.Fields[args[i]] = args[i+1]
	}
	s.Keys[args[1]] = it
	return resp.IntValue(n), nil
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

// parseInt reads an integer as Redis does (no spaces, no plus sign).
func parseInt(s string) (int64, bool) {
	n, ok := resp.ParseInt([]byte(s))
	return n, ok
}

// short abbreviates a value for messages.
func short(s string) string {
	if len(s) > 40 {
		return s[:37] + "..."
	}
	return s
}

func quoteCmd(s string) string {
	if len(s) > 32 {
		s = s[:32] + "..."
	}
	return strconv.Quote(strings.ToUpper(s))
}
