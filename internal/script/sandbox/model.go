package sandbox

import (
	"maps"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Type is the kind of value a key holds in the model, as Redis's TYPE
// names it. A lock is kept in a string (the owner's token), or in a hash,
// a set or a sorted set whose fields or members are owners.
type Type uint8

// The types the model holds.
const (
	TypeString Type = iota
	TypeHash
	TypeSet
	TypeZset
)

var typeNames = [...]string{"string", "hash", "set", "zset"}

func (t Type) String() string {
	if int(t) < len(typeNames) {
		return typeNames[t]
	}
	return "none"
}

// Item is one key in the sandbox's model of Redis: its value and its
// absolute expiry in milliseconds since the Unix epoch (0: none).
type Item struct {
	Type  Type
	Value string              // TypeString
	Hash  map[string]string   // TypeHash: field -> value
	Set   map[string]struct{} // TypeSet
	Zset  map[string]float64  // TypeZset: member -> score
	At    int64
}

// clone copies an item and its fields or members.
func (it Item) clone() Item {
	it.Hash = maps.Clone(it.Hash)
	it.Set = maps.Clone(it.Set)
	it.Zset = maps.Clone(it.Zset)
	return it
}

// equal reports whether two items hold the same value with the same
// expiry.
func (it Item) Equal(o Item) bool {
	if it.Type != o.Type || it.At != o.At {
		return false
	}
	switch it.Type {
	case TypeHash:
		return maps.Equal(it.Hash, o.Hash)
	case TypeSet:
		return maps.Equal(it.Set, o.Set)
	case TypeZset:
		return maps.Equal(it.Zset, o.Zset)
	}
	return it.Value == o.Value
}

// size is how many fields or members the item holds (1 for a string).
func (it Item) size() int {
	switch it.Type {
	case TypeHash:
		return len(it.Hash)
	case TypeSet:
		return len(it.Set)
	case TypeZset:
		return len(it.Zset)
	}
	return 1
}

// String renders an item for messages.
func (it Item) String() string {
	switch it.Type {
	case TypeHash:
		return "a hash of " + strconv.Itoa(len(it.Hash)) + " fields"
	case TypeSet:
		return "a set of " + strconv.Itoa(len(it.Set)) + " members"
	case TypeZset:
		return "a sorted set of " + strconv.Itoa(len(it.Zset)) + " members"
	}
	return strconv.Quote(Short(it.Value))
}

// State is the model's keyspace: the keys a script was given, on a clock
// that does not move while the script runs (Now, ms since the Unix epoch;
// the classifier sets it to the real time). A key whose expiry is before
// Now does not exist (Redis: a key is expired when now > when).
type State struct {
	Now  int64
	Keys map[string]Item
	// Published are the messages a run published (PUBLISH, SPUBLISH):
	// read by the classifier as a release's notice, never sent to a
	// backend as such (a publish of the proxy's own follows a release a
	// majority decided).
	Published []Message
	// signals: where the run may push a signal (execSignal).
	signals signals
	// derived: the keys a run may build from its keys, and HKEYS' order
	// (SideKeys.Derived, SideKeys.HKeys).
	derived derived
}

// derived is what a run with SideKeys.Derived may do besides others.
type derived struct {
	prefixes []string
	hkeys    int
}

// allows reports whether k is a key built from one of the prefixes.
func (d derived) allows(k string) bool {
	for _, p := range d.prefixes {
		if len(k) > len(p) && k[len(p)] == ':' && strings.HasPrefix(k, p) {
			return true
		}
	}
	return false
}

// Message is one PUBLISH or SPUBLISH of a script, or one element it
// pushed onto a signal list (LPUSH or RPUSH: List; Channel is the list's
// key), which waiters take with BLPOP (python-redis-lock's release).
type Message struct {
	Shard            bool // SPUBLISH
	List             bool // a push onto a signal list
	Channel, Payload string
	// TTL, for a signal list, is the expiry the run then gave it, in ms
	// (-1: none).
	TTL int64
}

// signals says onto which keys a run may push a signal: the script's
// signal key, or (when the classifier looks for one) any key it is given.
type signals struct {
	key string
	any bool
}

// signal returns the index in Published of the signal pushed onto key in
// this run, or -1.
func (s *State) signal(key string) int {
	for i := len(s.Published) - 1; i >= 0; i-- {
		if m := s.Published[i]; m.List && m.Channel == key {
			return i
		}
	}
	return -1
}

// execSignal runs a command on a signal list (a key the run pushed onto,
// or a push): a push of one element records it, an expiry sets its TTL, a
// deletion removes it; any other command on it is refused. The model
// keeps no list: a signal is a release's notice (notice.go), which the
// proxy delivers to BLPOP waiters itself. ok is false for a command that
// is not about a signal.
func (s *State) execSignal(name string, args []string, keys, touched map[string]bool) (resp.Value, *Stop, bool) {
	switch {
	case (name == "lpush" || name == "rpush") && len(args) >= 2 && (s.signals.any || s.signals.key != "" && args[1] == s.signals.key):
		if len(args) != 3 {
			return resp.Value{}, Refuse(RefuseOther, "pushes %d elements onto %s: a signal list gets one per release", len(args)-2, strconv.Quote(Short(args[1]))), true
		}
		if !keys[args[1]] {
			return resp.Value{}, Refuse(RefuseOther, "%s accesses key %s, which is not in KEYS", strings.ToUpper(name), strconv.Quote(Short(args[1]))), true
		}
		if _, held := s.Lookup(args[1]); held {
			return resp.Value{}, Refuse(RefuseOther, "pushes onto %s, which holds a value: a signal list is kept by the proxy, not in a key of the script's", strconv.Quote(Short(args[1]))), true
		}
		touched[args[1]] = true
		s.Published = append(s.Published, Message{List: true, Channel: args[1], Payload: args[2], TTL: -1})
		return resp.IntValue(1), nil, true
	}
	if len(args) < 2 {
		return resp.Value{}, nil, false
	}
	i := s.signal(args[1])
	if i < 0 {
		return resp.Value{}, nil, false
	}
	switch name {
	case "pexpire", "expire":
		if len(args) != 3 {
			break
		}
		n, ok := ParseInt(args[2])
		if !ok {
			break
		}
		if name == "expire" {
			n *= 1000
		}
		s.Published[i].TTL = n
		return resp.IntValue(1), nil, true
	case "del", "unlink":
		if len(args) == 2 {
			s.Published = append(s.Published[:i], s.Published[i+1:]...)
			return resp.IntValue(1), nil, true
		}
	}
	return resp.Value{}, Refuse(RefuseOther, "calls %s on the signal list %s: a signal list is pushed onto, expired or deleted, nothing else", quoteCmd(name), strconv.Quote(Short(args[1]))), true
}

func (s *State) Clone() *State {
	c := &State{Now: s.Now, Keys: make(map[string]Item, len(s.Keys))}
	for k, it := range s.Keys {
		c.Keys[k] = it.clone()
	}
	return c
}

// lookup returns a live key.
func (s *State) Lookup(k string) (Item, bool) {
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
func (s *State) PTTL(k string) int64 {
	it, ok := s.Lookup(k)
	switch {
	case !ok:
		return -2
	case it.At == 0:
		return -1
	}
	return it.At - s.Now
}

// exec runs one command of a script against the model, as Redis 7.0 would.
// Commands outside the allow-list (commands.go), keys not passed in KEYS,
// another database, and any command that Redis would answer with an error
// refuse the run: a lock script has no business doing them. wrote records,
// for each key a command may have changed, the command's name.
func (s *State) exec(args []string, keys map[string]bool, touched map[string]bool, wrote map[string]string) (resp.Value, *Stop) {
	if len(args) == 0 {
		return resp.Value{}, Refuse(RefuseOther, "calls redis.call with no command")
	}
	name := strings.ToLower(args[0])
	if name == "publish" || name == "spublish" {
		if len(args) != 3 {
			return (&call{s: s, name: name, args: args}).fail("ERR wrong number of arguments for '" + name + "' command")
		}
		s.Published = append(s.Published, Message{Shard: name == "spublish", Channel: args[1], Payload: args[2]})
		return resp.IntValue(0), nil
	}
	if v, ref, ok := s.execSignal(name, args, keys, touched); ok {
		return v, ref
	}
	cmd, ok := LockCommands[name]
	if name == "hkeys" && s.derived.hkeys != 0 {
		cmd, ok = hkeysCommand, true
	}
	if !ok {
		return resp.Value{}, Refuse(RefuseCommand, "calls %s, %s", quoteCmd(args[0]), OutsideReason(name))
	}
	c := &call{s: s, name: name, args: args}
	if (cmd.arity > 0 && len(args) != cmd.arity) || len(args) < -cmd.arity {
		return c.fail("ERR wrong number of arguments for '" + name + "' command")
	}
	for _, i := range cmd.keyPositions(len(args)) {
		k := args[i]
		if !keys[k] && !s.derived.allows(k) {
			for kk := range keys {
				if kk != "" && len(k) > len(kk) && strings.HasPrefix(k, kk) {
					return resp.Value{}, Refuse(RefuseOther, "%s accesses key %s, which is not in KEYS: it builds it at run time from its key %s. "+
						"The proxy runs a lock only in the keys a call names (it routes, checks and classifies a call by them), so a lock that "+
						"keeps a key of its own per hold, built so, is supported only as a read-write lock in Redisson's layout (recognized by what it does)",
						strings.ToUpper(name), strconv.Quote(Short(k)), strconv.Quote(Short(kk)))
				}
			}
			return resp.Value{}, Refuse(RefuseOther, "%s accesses key %s, which is not in KEYS", strings.ToUpper(name), strconv.Quote(Short(k)))
		}
		touched[k] = true
		if cmd.Write && wrote != nil {
			wrote[k] = strings.ToUpper(name)
		}
	}
	return cmd.fn(c)
}

// short abbreviates a value for messages.
func Short(s string) string {
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
