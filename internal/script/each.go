package script

import (
	"slices"

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
func (c *classifier) focusRun(keys, argv []string, st *State) (result, *refusal) {
	f := c.each
	full := slices.Clone(f.keys)
	full[f.k] = keys[0]
	res := c.p.runKeyed(c.runner(), full, len(full), argv, st, min(maxSteps, c.left), sideKeys{})
	c.left -= res.steps
	c.zsetSeen = c.zsetSeen || res.zset
	c.hashSeen = c.hashSeen || res.hash
	if res.ref != nil {
		return res, res.ref
	}
	for i, key := range full {
		if _, ok := res.state.lookup(key); ok && i != f.k {
			return res, refuse(refuseOther, "acts on KEYS[%d] where only KEYS[%d] is held: its keys are not each on its own", i+1, f.k+1)
		}
	}
	if res.reply.Kind != resp.KindArray || len(res.reply.Elems) != len(full) {
		return res, refuse(refuseOther, "replies %s: a script of several keys each on its own replies one element per key", res.reply)
	}
	res.reply = res.reply.Elems[f.k]
	return res, nil
}

// classifyEach classifies a call of several keys, none of them passed as
// arguments, as keys each on its own, or says why not.
func (c *classifier) classifyEach() (*Class, *refusal) {
	n := len(c.keys)
	focus := func(k int) (*Class, *refusal) {
		f := &classifier{p: c.p, keys: []string{c.keys[k]}, argv: c.argv, left: c.left, now: c.now, r: c.r, each: &eachFocus{keys: c.keys, k: k}}
		cl, ref := f.classify()
		c.left, c.r = f.left, f.r
		if ref != nil {
			return nil, ref
		}
		if cl.Tokens == nil || cl.Shape == ShapeOwners || cl.Notice != nil || cl.Latch != nil || cl.Counter != nil {
			return nil, refuse(refuseOther, "taken key by key, KEYS[%d] reads as %s, which the proxy does not run key by key", k+1, cl.Role)
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
	cl.Each, cl.Keys, cl.Tokens, cl.rel = true, n, tokens, nil
	cl.lapsed, cl.finished = nil, false
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
func (c *classifier) eachToken(first *Class, k int, taken []int) (int, *refusal) {
	var found []int
	for j := range c.argv {
		if slices.Contains(first.Controls, Control{Arg: j, Value: c.argv[j]}) || j == first.TTLArg || j == first.MinArg {
			continue
		}
		cl := *first
		cl.Tokens = []int{j}
		f := &classifier{p: c.p, keys: []string{c.keys[k]}, argv: c.argv, left: c.left, now: c.now, r: c.r, each: &eachFocus{keys: c.keys, k: k}, cur: &cl}
		ok := true
		for _, specs := range f.states(&cl, argVariant{keys: f.keys, argv: c.argv}) {
			s, ref := f.check(&cl, f.keys, c.argv, specs, "")
			if ref != nil || !cl.Replies[s.sit.Case].Fill(s.sit).Equal(s.reply) {
				ok = false
				break
			}
		}
		c.left, c.r = f.left, f.r
		if c.left <= 0 {
			return 0, refuse(refuseBudget, "takes more than %d Lua instructions to classify", classifyBudget)
		}
		if ok {
			found = append(found, j)
		}
	}
	if len(found) == 0 {
		return 0, refuse(refuseOther, "taken key by key, KEYS[%d] does with no argument what KEYS[1] does with its token", k+1)
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
func (c *classifier) eachTogether(cl *Class) *refusal {
	n := len(c.keys)
	one := cl.keyClass
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
		res := c.p.runKeyed(c.runner(), c.keys, n, c.argv, st, min(maxSteps, c.left), sideKeys{})
		c.left -= res.steps
		desc := describeIn(c.names, c.keys, c.argv, c.argv, specs, nil)
		if res.ref != nil {
			return withProbe(res.ref, desc)
		}
		if res.reply.Kind != resp.KindArray || len(res.reply.Elems) != n {
			return refuse(refuseOther, "%s it replied %s: one element per key is wanted", desc, res.reply)
		}
		for k, key := range c.keys {
			d := one(k)
			mine := &State{Now: st.Now, Keys: map[string]Item{}}
			if it, ok := st.lookup(key); ok {
				mine.Keys[key] = it
			}
			want, _ := d.simulate(mine, []string{key}, c.argv)
			if !sameKeys([]string{key}, res.state, want) {
				return refuse(refuseOther, "%s it left KEYS[%d] otherwise than on its own: its keys are not each on its own", desc, k+1)
			}
			sit := d.situate(mine, want, []string{key}, c.argv)
			if t := cl.Replies[sit.Case]; t == nil || !t.Fill(sit).Equal(res.reply.Elems[k]) {
				return refuse(refuseOther, "%s its element for KEYS[%d] is %s, not what it answers for that key on its own", desc, k+1, res.reply.Elems[k])
			}
		}
	}
	return nil
}
