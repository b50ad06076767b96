package spec

import (
	"strconv"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

// The meaning of each role on one Redis, in Go: what the classifier checks
// a script against, and what the reference scripts (reference.go) do on
// the backends. The two are checked against each other on a real Redis
// by the tests.

// token returns key k's token for a call, or "" when the class has none.
func (c *Class) Token(argv []string, k int) string {
	if len(c.Tokens) == 0 {
		return ""
	}
	t := c.Tokens[min(k, len(c.Tokens)-1)]
	if t >= len(argv) {
		return ""
	}
	return argv[t]
}

// owns reports whether a key holding v belongs to the caller with token tok.
func (c *Class) owns(v, tok string) bool {
	if c.Tokens == nil {
		return false
	}
	if c.Prefix == 0 {
		return v == tok
	}
	return Prefix(v, c.Prefix) == Prefix(tok, c.Prefix)
}

// ownsItem reports whether a key holding it belongs to the caller: a
// string the caller owns, or, for ShapeHash, a hash whose one field is the
// caller's token. To an extend, a read-write lock's write lock that is the
// caller's (fields ModeField = "write" and the caller's) is the caller's
// too, as the hash extend's reference reads it: Redisson's write lock
// renews with a hash lock's script. Every other role reads it as
// another holder's, and never acts on it.
func (c *Class) ownsItem(it sandbox.Item, tok string) bool {
	if c.Shape == ShapeHash {
		if it.Type != sandbox.TypeHash || c.Tokens == nil || tok == ModeField {
			return false
		}
		if _, ok := it.Hash[tok]; !ok {
			return false
		}
		return len(it.Hash) == 1 || c.Role == RoleExtend && len(it.Hash) == 2 && it.Hash[ModeField] == "write"
	}
	return it.Type == sandbox.TypeString && c.owns(it.Value, tok)
}

// ModeField is the field of a read-write lock's hash (Redisson's
// RReadWriteLock) that says whether it is read or write locked.
const ModeField = "mode"

// lockItem is what the role writes to lock key k for a call, expiring at.
func (c *Class) lockItem(argv []string, k int, at int64) sandbox.Item {
	tok := c.Token(argv, k)
	if c.Shape == ShapeHash {
		return sandbox.Item{Type: sandbox.TypeHash, Hash: map[string]string{tok: string(c.FieldValueOf(StrArgs(argv)))}, At: at}
	}
	return sandbox.Item{Value: tok, At: at}
}

// prefix is Lua's string.sub(s, 1, n).
func Prefix(s string, n int) string {
	if n < len(s) {
		return s[:n]
	}
	return s
}

// keyCase classifies one key; thr is the least PTTL that is not low
// (when the class has a minimum).
func (c *Class) KeyCase(st *sandbox.State, key, tok string, thr int64) Case {
	if c.Shape == ShapeOwners {
		return c.ownersCase(st, key, tok)
	}
	it, ok := st.Lookup(key)
	if !ok {
		return CaseMissing
	}
	own := c.ownsItem(it, tok)
	p := st.PTTL(key)
	switch {
	case p == -1 && own:
		return CaseOwnNoTTL
	case p == -1:
		return CaseOtherNoTTL
	case c.MinArg >= 0 && p < thr && own:
		return CaseOwnLowTTL
	case c.MinArg >= 0 && p < thr:
		return CaseOtherLowTTL
	case own && c.Counted && holds(it, tok) > 1:
		return CaseOwnAgain
	case own:
		return CaseOwn
	}
	return CaseOther
}

// holds is how many times a counted lock's owner tok holds it (its field,
// read as HINCRBY reads it; 0 when not a whole number).
func holds(it sandbox.Item, tok string) int64 {
	n, _ := sandbox.ParseInt(it.Hash[tok])
	return n
}

func StrArgs(a []string) [][]byte {
	out := make([][]byte, len(a))
	for i, s := range a {
		out[i] = []byte(s)
	}
	return out
}

func (c *Class) ThresholdOf(argv []string) int64 {
	thr, _ := c.Threshold(StrArgs(argv))
	return thr
}

// situate returns the situation of a call on one state: its case, focus
// key and what the templates read. after is the state once the call ran.
func (c *Class) Situate(before, after *sandbox.State, keys, argv []string) *Situation {
	thr := c.ThresholdOf(argv)
	cases := make([]Case, len(keys))
	count := 0
	for k, key := range keys {
		cases[k] = c.KeyCase(before, key, c.Token(argv, k), thr)
		if cases[k] == CaseOwn || cases[k] == CaseOwnNoTTL || cases[k] == CaseOwnLowTTL || cases[k] == CaseOwnAgain {
			count++
		}
	}
	cs, focus := c.Combine(cases)
	s := &Situation{Case: cs, Focus: focus, Count: count, NKeys: len(keys), Keys: StrArgs(keys), Argv: StrArgs(argv)}
	if len(keys) > 0 {
		key := keys[focus]
		s.PTTL = before.PTTL(key)
		if it, ok := before.Lookup(key); ok && it.Type == sandbox.TypeString && c.Shape == ShapeString {
			s.Value, s.HasValue = []byte(it.Value), true
		}
		s.PTTLAfter = after.PTTL(key)
	}
	return s
}

// Combine reduces the keys' cases to the call's case and its focus key:
// the key that decided the outcome (the first key that stops an acquire
// or an extend, the first key a release could not delete).
func (c *Class) Combine(cases []Case) (Case, int) {
	if len(cases) <= 1 {
		if len(cases) == 0 {
			return CaseMissing, 0
		}
		return cases[0], 0
	}
	role := c.Role
	if c.as != 0 {
		role = c.as
	}
	switch role {
	case RoleAcquire:
		for k, cs := range cases {
			if cs != CaseMissing {
				return cs, k
			}
		}
		return CaseMissing, 0
	case RoleExtend:
		for k, cs := range cases {
			if !c.Acts(cs) {
				return cs, k
			}
		}
		return cases[0], 0
	case RoleRelease:
		own := 0
		first := -1
		for k, cs := range cases {
			if c.Acts(cs) {
				own++
			} else if first < 0 {
				first = k
			}
		}
		switch {
		case own == len(cases):
			return cases[0], 0
		case own == 0:
			return cases[0], 0
		}
		return CasePartial, first
	}
	return cases[0], 0
}

// simulate runs the role on a copy of st: the state one Redis would be in
// after the call, and whether the role acted.
func (c *Class) Simulate(st *sandbox.State, keys, argv []string) (*sandbox.State, bool) {
	out := st.Clone()
	ttl, ok := c.TTLAt(StrArgs(argv), st.Now)
	if c.writes() && !ok {
		return out, false
	}
	// A deadline already passed (ms <= 0) sets a key that is gone at
	// once, as SET ... PXAT and PEXPIREAT of a past time do on Redis.
	ms := ttl.Milliseconds()
	thr := c.ThresholdOf(argv)
	cases := make([]Case, len(keys))
	for k, key := range keys {
		cases[k] = c.KeyCase(out, key, c.Token(argv, k), thr)
	}
	cs, _ := c.Combine(cases)
	if c.Role == RoleDelete {
		deleted := false
		for _, key := range keys {
			if _, ok := out.Lookup(key); ok {
				delete(out.Keys, key)
				deleted = true
			}
		}
		return out, deleted
	}
	if c.Shape == ShapeOwners {
		if !c.Acts(cs) {
			return out, false
		}
		for k, key := range keys {
			c.simulateOwners(out, key, c.Token(argv, k), cases[k], ms)
		}
		return out, true
	}
	switch c.Role {
	case RoleAcquire:
		if cs != CaseMissing {
			return out, false
		}
		for k, key := range keys {
			if ms > 0 {
				out.Keys[key] = c.lockItem(argv, k, out.Now+ms)
			}
		}
		return out, true
	case RoleExtend:
		if !c.Acts(cs) {
			return out, false
		}
		for _, key := range keys {
			it, _ := out.Lookup(key)
			if c.Additive {
				if it.At == 0 {
					return st.Clone(), false
				}
				it.At += ms
			} else {
				it.At = out.Now + ms
			}
			if it.At <= out.Now {
				delete(out.Keys, key)
				continue
			}
			out.Keys[key] = it
		}
		return out, true
	case RoleExtendOrAcquire:
		if !c.Acts(cs) {
			return out, false
		}
		for k, key := range keys {
			if c.Counted && ms > 0 {
				// One more hold: HINCRBY, then the TTL.
				it, _ := out.Lookup(key)
				tok := c.Token(argv, k)
				out.Keys[key] = sandbox.Item{Type: sandbox.TypeHash, Hash: map[string]string{tok: strconv.FormatInt(holds(it, tok)+1, 10)}, At: out.Now + ms}
				continue
			}
			if ms > 0 {
				out.Keys[key] = c.lockItem(argv, k, out.Now+ms)
			} else {
				delete(out.Keys, key)
			}
		}
		return out, true
	case RoleRelease:
		all := true
		for k, key := range keys {
			if c.Counted && cases[k] == CaseOwnAgain {
				// One hold less; the lock stays, re-armed when the script
				// gives a TTL.
				it, _ := out.Lookup(key)
				tok := c.Token(argv, k)
				it = sandbox.Item{Type: sandbox.TypeHash, Hash: map[string]string{tok: strconv.FormatInt(holds(it, tok)-1, 10)}, At: it.At}
				if c.Rearms() {
					if !ok || ms <= 0 {
						return st.Clone(), false
					}
					it.At = out.Now + ms
				}
				out.Keys[key] = it
				continue
			}
			if c.Acts(cases[k]) {
				delete(out.Keys, key)
			} else {
				all = false
			}
		}
		return out, all && len(keys) > 0
	}
	return out, false
}

// simulateRef is simulate as the reference scripts do it on the backends,
// with an extend's second step (see reference.go): the same, but an extend
// without a second step (a lock of several owners) never shortens a lock
// (a key it re-arms keeps the longer of the TTL asked and what it had left).
func (c *Class) SimulateRef(st *sandbox.State, keys, argv []string) (*sandbox.State, bool) {
	out, acted := c.Simulate(st, keys, argv)
	counted := c.Counted && (c.Role == RoleExtendOrAcquire || c.Role == RoleRelease)
	if !acted || c.Additive || c.SetsTTL() || (c.Role != RoleExtend && c.Role != RoleExtendOrAcquire && !counted) {
		return out, acted
	}
	for _, key := range keys {
		b, bok := st.Lookup(key)
		a, aok := out.Lookup(key)
		if bok && aok && b.At > a.At {
			a.At = b.At
			out.Keys[key] = a
		}
	}
	return out, acted
}

// TokensOf returns each key's token for a call.
func (c *Class) TokensOf(argv [][]byte, numkeys int) [][]byte {
	out := make([][]byte, numkeys)
	for k := range out {
		out[k] = argv[c.Tokens[min(k, len(c.Tokens)-1)]]
	}
	return out
}

// NeedsArgs reports whether a reply template shows the call's keys or
// arguments.
func (c *Class) NeedsArgs() bool {
	if !c.Finished {
		c = c.finishedCopy()
	}
	return c.needsArgs
}

// Timed reports whether the reply in case cs shows a TTL.
func (c *Class) Timed(cs Case) bool {
	if !c.Finished {
		c = c.finishedCopy()
	}
	return c.timed[cs]
}

// Finish computes what the proxy asks of a classification on every call
// (whether its replies show TTLs, values or arguments), once. A Class must
// not change after Finish; one not finished is read the slow way.
func (c *Class) Finish() *Class {
	if c.Role == RoleAcquire && c.Deadline && c.LapsedClass == nil {
		c.LapsedClass = c.lapsedCopy()
	}
	c.detail, c.needsArgs = false, false
	for cs, t := range c.Replies {
		c.detail = c.detail || t.uses(SrcPTTL, SrcTTL, SrcPTTLAfter, SrcTTLAfter, SrcValue)
		c.needsArgs = c.needsArgs || t.NeedsArgs()
		c.timed[cs] = t != nil && t.Timed()
	}
	if c.Each {
		c.eachKeys = make([]*Class, c.Keys)
		for i := range c.eachKeys {
			c.eachKeys[i] = c.KeyClass(i).Finish()
		}
	}
	c.Finished = true
	return c
}

func (c *Class) finishedCopy() *Class {
	d := *c
	return d.Finish()
}

// keyClass is the class of key k of a class whose keys are each on their
// own, not finished.
func (c *Class) KeyClass(k int) *Class {
	d := *c
	d.Each, d.Keys, d.Tokens, d.Rel, d.eachKeys = false, 1, []int{c.Tokens[k]}, nil, nil
	d.LapsedClass, d.Finished = nil, false
	return &d
}

// EachKey is, for a class whose keys are each on their own (Each), the
// class of its k-th key: the proxy runs each as a lock operation of its
// own.
func (c *Class) EachKey(k int) *Class {
	if !c.Each || k >= len(c.eachKeys) {
		return c
	}
	return c.eachKeys[k]
}
