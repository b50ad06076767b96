package script

import (
	"maps"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
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
func (it Item) equal(o Item) bool {
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
	return strconv.Quote(short(it.Value))
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
}

// Message is one PUBLISH or SPUBLISH of a script.
type Message struct {
	Shard            bool // SPUBLISH
	Channel, Payload string
}

func (s *State) clone() *State {
	c := &State{Now: s.Now, Keys: make(map[string]Item, len(s.Keys))}
	for k, it := range s.Keys {
		c.Keys[k] = it.clone()
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

// exec runs one command of a script against the model, as Redis 7.0 would.
// Commands outside the allow-list (commands.go), keys not passed in KEYS,
// another database, and any command that Redis would answer with an error
// refuse the run: a lock script has no business doing them. wrote records,
// for each key a command may have changed, the command's name.
func (s *State) exec(args []string, keys map[string]bool, touched map[string]bool, wrote map[string]string) (resp.Value, *refusal) {
	if len(args) == 0 {
		return resp.Value{}, refuse(refuseOther, "calls redis.call with no command")
	}
	name := strings.ToLower(args[0])
	if name == "publish" || name == "spublish" {
		if len(args) != 3 {
			return (&call{s: s, name: name, args: args}).fail("ERR wrong number of arguments for '" + name + "' command")
		}
		s.Published = append(s.Published, Message{Shard: name == "spublish", Channel: args[1], Payload: args[2]})
		return resp.IntValue(0), nil
	}
	cmd, ok := lockCommands[name]
	if !ok {
		return resp.Value{}, refuse(refuseCommand, "calls %s, %s", quoteCmd(args[0]), OutsideReason(name))
	}
	c := &call{s: s, name: name, args: args}
	if (cmd.arity > 0 && len(args) != cmd.arity) || len(args) < -cmd.arity {
		return c.fail("ERR wrong number of arguments for '" + name + "' command")
	}
	for _, i := range cmd.keyPositions(len(args)) {
		k := args[i]
		if !keys[k] {
			return resp.Value{}, refuse(refuseOther, "%s accesses key %s, which is not in KEYS", strings.ToUpper(name), strconv.Quote(short(k)))
		}
		touched[k] = true
		if cmd.write && wrote != nil {
			wrote[k] = strings.ToUpper(name)
		}
	}
	return cmd.fn(c)
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
