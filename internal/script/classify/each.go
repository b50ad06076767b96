package classify

import (
	"slices"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Scripts that act on each of their keys on its own (Layout.Each):
// Redisson's renewal of every lock a client holds, in one call, re-arms
// each lock whose field is its owner's and answers an array of one result
// per key. Such a call is classified key by key: the script is run with
// one key in the probe states and the others missing, and read as a
// script of that one key whose reply is its element of the array (a
// focus); the first and the last key are classified so, the keys between
// have their token found, and runs with every key in a state of its own
// check that each key's effect and element follow its own class. The
// proxy runs each key as its own lock operation and answers the array.

// eachFocus is a classification of one key of a call of several: keys
// are the call's keys, k the one probed.
type eachFocus struct {
	keys []string
	k    int
}

// focusRun runs the script with the probed key (keys[0], a name the
// battery may vary) at its place among the call's keys, the others missing,
// and returns the run with its reply narrowed to the key's element. A run
// that touches another key, or that does not reply one element per key,
// is refused.
func (c *classifier) focusRun(keys, argv []string, st *sandbox.State) (sandbox.Result, *sandbox.Stop) {
	f := c.each
	full := slices.Clone(f.keys)
	full[f.k] = keys[0]
	res := c.p.RunKeyed(c.runner(), full, len(full), argv, st, min(sandbox.MaxSteps, c.left), sandbox.SideKeys{})
	c.left -= res.Steps
	c.zsetSeen = c.zsetSeen || res.Zset
	c.hashSeen = c.hashSeen || res.Hash
	if res.Ref != nil {
		return res, res.Ref
	}
	for i, key := range full {
		if _, ok := res.State.Lookup(key); ok && i != f.k {
			return res, sandbox.Refuse(sandbox.RefuseOther, "acts on KEYS[%d] where only KEYS[%d] is held: its keys are not each on its own", i+1, f.k+1)
		}
	}
	if res.Reply.Kind != resp.KindArray || len(res.Reply.Elems) != len(full) {
		return res, sandbox.Refuse(sandbox.RefuseOther, "replies %s: a script of several keys each on its own replies one element per key", res.Reply)
	}
	res.Reply = res.Reply.Elems[f.k]
	return res, nil
}

// classifyEach classifies a call of several keys, none of them passed as
// arguments, as keys each on its own, or says why not.
func (c *classifier) classifyEach() (*spec.Class, *sandbox.Stop) {
	n := len(c.keys)
	focus := func(k int) (*spec.Class, *sandbox.Stop) {
		f := &classifier{p: c.p, keys: []string{c.keys[k]}, argv: c.argv, left: c.left, now: c.now, r: c.r, each: &eachFocus{keys: c.keys, k: k}}
		cl, ref := f.classify()
		c.left, c.r = f.left, f.r
		if ref != nil {
			return nil, ref
		}
		if cl.Tokens == nil || cl.Shape == spec.ShapeOwners || cl.Notice != nil || cl.Latch != nil || cl.Counter != nil {
			return nil, sandbox.Refuse(sandbox.RefuseOther, "taken key by key, KEYS[%d] reads as %s, which the proxy does not run key by key", k+1, cl.Role)
		}
		return cl, nil
	}
	first, ref := focus(0)
	if ref != nil {
		return nil, ref
	}
	tokens := make([]int, n)
	tokens[0] = first.Tokens[0]
	for k := 1; k < n; k++ {
		t, ref := c.eachToken(first, k, tokens[:k])
		if ref != nil {
			return nil, ref
		}
		tokens[k] = t
	}
	cl := *first
	cl.Each, cl.Keys, cl.Tokens, cl.Rel = true, n, tokens, nil
	cl.LapsedClass, cl.Finished = nil, false
	if ref := c.eachTogether(&cl); ref != nil {
		return nil, ref
	}
	return &cl, nil
}

// eachToken finds key k's token: the argument with which key k, probed on
// its own, does what the first key's class does with its token. Several
// arguments of the same value (two locks of one owner) serve alike for
// calls in these relations, which keep them equal: the first not yet
// another key's is taken.
func (c *classifier) eachToken(first *spec.Class, k int, taken []int) (int, *sandbox.Stop) {
	var found []int
	for j := range c.argv {
		if slices.Contains(first.Controls, spec.Control{Arg: j, Value: c.argv[j]}) || j == first.TTLArg || j == first.MinArg {
			continue
		}
		cl := *first
		cl.Tokens = []int{j}
		f := &classifier{p: c.p, keys: []string{c.keys[k]}, argv: c.argv, left: c.left, now: c.now, r: c.r, each: &eachFocus{keys: c.keys, k: k}, cur: &cl}
		ok := true
		for _, specs := range f.states(&cl, argVariant{keys: f.keys, argv: c.argv}) {
			s, ref := f.check(&cl, f.keys, c.argv, specs, "")
			if ref != nil || !cl.Replies[s.Sit.Case].Fill(s.Sit).Equal(s.Reply) {
				ok = false
				break
			}
		}
		c.left, c.r = f.left, f.r
		if c.left <= 0 {
			return 0, sandbox.Refuse(sandbox.RefuseBudget, "takes more than %d Lua instructions to classify", classifyBudget)
		}
		if ok {
			found = append(found, j)
		}
	}
	if len(found) == 0 {
		return 0, sandbox.Refuse(sandbox.RefuseOther, "taken key by key, KEYS[%d] does with no argument what KEYS[1] does with its token", k+1)
	}
	for _, j := range found {
		if !slices.Contains(taken, j) {
			return j, nil
		}
	}
	return found[0], nil
}

// eachTogether runs the script with every key in a state of its own (all
// held by their owners, all free, all another's, and alternating) and
// checks that each key's effect and element are those of its own class.
func (c *classifier) eachTogether(cl *spec.Class) *sandbox.Stop {
	n := len(c.keys)
	one := cl.KeyClass
	own := func(k int) keySpec { return keySpec{held: true, value: c.argv[cl.Tokens[k]], ttl: ttlLong1} }
	free := func(int) keySpec { return keySpec{} }
	other := func(int) keySpec { return keySpec{held: true, value: "other-holder-7f3a", ttl: ttlLong1} }
	kinds := []func(int) keySpec{own, free, other}
	var combos [][]keySpec
	for _, a := range kinds {
		for _, b := range kinds {
			s := make([]keySpec, n)
			for k := range s {
				if k%2 == 0 {
					s[k] = a(k)
				} else {
					s[k] = b(k)
				}
			}
			combos = append(combos, s)
		}
	}
	c.cur = one(0) // the probe states keep each key in the class's shape
	for _, specs := range combos {
		st := c.state(c.keys, specs)
		res := c.p.RunKeyed(c.runner(), c.keys, n, c.argv, st, min(sandbox.MaxSteps, c.left), sandbox.SideKeys{})
		c.left -= res.Steps
		desc := describeIn(c.names, c.keys, c.argv, c.argv, specs, nil)
		if res.Ref != nil {
			return sandbox.WithProbe(res.Ref, desc)
		}
		if res.Reply.Kind != resp.KindArray || len(res.Reply.Elems) != n {
			return sandbox.Refuse(sandbox.RefuseOther, "%s it replied %s: one element per key is wanted", desc, res.Reply)
		}
		for k, key := range c.keys {
			d := one(k)
			mine := &sandbox.State{Now: st.Now, Keys: map[string]sandbox.Item{}}
			if it, ok := st.Lookup(key); ok {
				mine.Keys[key] = it
			}
			want, _ := d.Simulate(mine, []string{key}, c.argv)
			if !sameKeys([]string{key}, res.State, want) {
				return sandbox.Refuse(sandbox.RefuseOther, "%s it left KEYS[%d] otherwise than on its own: its keys are not each on its own", desc, k+1)
			}
			sit := d.Situate(mine, want, []string{key}, c.argv)
			if t := cl.Replies[sit.Case]; t == nil || !t.Fill(sit).Equal(res.Reply.Elems[k]) {
				return sandbox.Refuse(sandbox.RefuseOther, "%s its element for KEYS[%d] is %s, not what it answers for that key on its own", desc, k+1, res.Reply.Elems[k])
			}
		}
	}
	return nil
}
