package classify

import (
	"math"
	"slices"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// Candidate classes: from what a run on free keys did (what it wrote, with
// which TTL, which arguments it compared), the classes a script may be,
// each then confirmed against every probe state (classify.go) and refined
// (refine.go).

// ttlArg is an argument that gives a TTL: its index, its unit, and
// whether it is a deadline (a Unix time, as PXAT and PEXPIREAT take)
// rather than a duration.
type ttlArg struct {
	idx      int
	unit     time.Duration
	deadline bool
}

// ttlArgs lists the arguments whose integer value is d milliseconds from
// now: as a duration in ms or s, or as a deadline at now + d in ms or s.
func ttlArgs(argv []string, d, now int64) []ttlArg {
	var out []ttlArg
	for i, a := range argv {
		n, ok := sandbox.ParseInt(a)
		if !ok || n <= 0 {
			continue
		}
		if n == d {
			out = append(out, ttlArg{i, time.Millisecond, false})
		}
		if n <= math.MaxInt64/1000 && n*1000 == d {
			out = append(out, ttlArg{i, time.Second, false})
		}
		if n == now+d {
			out = append(out, ttlArg{i, time.Millisecond, true})
		}
		if n <= math.MaxInt64/1000 && n*1000 == now+d {
			out = append(out, ttlArg{i, time.Second, true})
		}
	}
	return out
}

// candidates watches the script on a few states and proposes the
// classes that could explain it, most likely first.
func (c *classifier) candidates() ([]*spec.Class, *sandbox.Stop) {
	n := len(c.keys)
	var out []*spec.Class
	base := func(role spec.Role) *spec.Class {
		return &spec.Class{Role: role, Layout: spec.Layout{Keys: n, Args: len(c.argv), TTLArg: -1, MinArg: -1, TTLUnit: time.Millisecond, MinUnit: time.Millisecond}}
	}
	var seenEffects []string

	// Every key missing: an acquire creates them.
	st := c.state(c.keys, uniform(n, keySpec{}))
	res, ref := c.run(c.keys, c.argv, st)
	if ref != nil {
		return nil, sandbox.WithProbe(ref, describeIn(c.names, c.keys, c.argv, c.argv, uniform(n, keySpec{}), nil))
	}
	st0 := res.State // what it made of missing keys
	seenEffects = append(seenEffects, "with every key missing it "+effectIn(c.names, c.keys, c.argv, st, res.State))
	created := 0
	for _, k := range c.keys {
		if _, ok := res.State.Lookup(k); ok {
			created++
		}
	}
	if created == n {
		tokens := make([][]int, n)
		var d int64 = -1
		ok := true
		for k, key := range c.keys {
			it, _ := res.State.Lookup(key)
			tokens[k] = spec.ArgsEqual(c.argv, it.Value)
			if len(tokens[k]) == 0 || it.At == 0 || (d >= 0 && it.At-c.now != d) {
				ok = false
			}
			d = it.At - c.now
		}
		if ok {
			ttls := ttlArgs(c.argv, d, c.now)
			for _, tok := range tokenChoices(tokens) {
				for _, role := range []spec.Role{spec.RoleAcquire, spec.RoleExtendOrAcquire} {
					if role == spec.RoleExtendOrAcquire && n > 1 {
						continue
					}
					for _, t := range ttls {
						cl := base(role)
						cl.Tokens, cl.TTLArg, cl.TTLUnit, cl.Deadline = tok, t.idx, t.unit, t.deadline
						out = append(out, cl)
					}
					cl := base(role)
					cl.Tokens, cl.TTLConst = tok, time.Duration(d)*time.Millisecond
					out = append(out, cl)
				}
			}
		}
	}

	// Every key held by another owner: no lock operation takes it. A
	// script that does is a forced takeover, refused with why.
	otherSpecs := uniform(n, keySpec{held: true, value: "other-holder-7f3a", ttl: ttlLong1})
	st = c.state(c.keys, otherSpecs)
	if res, ref := c.run(c.keys, c.argv, st); ref == nil {
		for k, key := range c.keys {
			if it, ok := res.State.Lookup(key); ok && it.Type == sandbox.TypeString && len(spec.ArgsEqual(c.argv, it.Value)) > 0 {
				return nil, sandbox.Refuse(sandbox.RefuseOther, "%s it %s: it takes a lock another client holds (a forced takeover). "+
					"No majority makes that safe: the holder is not told and goes on as if it held the lock until it next "+
					"checks, and the proxy's own lock scripts never take a key from its holder", describeIn(c.names, c.keys, c.argv, c.argv, otherSpecs, nil),
					effectIn(c.names, c.keys[k:k+1], c.argv, st, res.State))
			}
		}
	}

	// Every key holding one of the arguments: a release deletes them, an
	// extend re-arms them.
	holds := map[string]bool{}
	var held [][]int
	for i, a := range c.argv {
		if holds[a] {
			continue
		}
		holds[a] = true
		held = append(held, spec.UniformInts(n, i))
	}
	if n > 1 && len(c.argv) >= n {
		diag := make([]int, n)
		for k := range diag {
			diag[k] = k
		}
		held = append(held, diag)
	}
	for _, tok := range held {
		specs := make([]keySpec, n)
		for k := range specs {
			specs[k] = keySpec{held: true, value: c.argv[tok[k]], ttl: ttlLong1}
		}
		st := c.state(c.keys, specs)
		res, ref := c.run(c.keys, c.argv, st)
		if ref != nil && sandbox.WrongType(ref) && (c.hashSeen || c.zsetSeen) {
			continue // a script of hashes or sorted sets, given a string
		}
		if ref != nil {
			return nil, sandbox.WithProbe(ref, describeIn(c.names, c.keys, c.argv, c.argv, specs, nil))
		}
		seenEffects = append(seenEffects, describeIn(c.names, c.keys, c.argv, c.argv, specs, nil)+" it "+effectIn(c.names, c.keys, c.argv, st, res.State))
		deleted, rearmed := 0, map[int64]int{}
		for _, key := range c.keys {
			b, _ := st.Lookup(key)
			a, ok := res.State.Lookup(key)
			switch {
			case !ok:
				deleted++
			case a.Value == b.Value && a.At != b.At && a.At != 0:
				rearmed[a.At-c.now]++
			}
		}
		if deleted == n {
			cl := base(spec.RoleRelease)
			cl.Tokens = tok
			out = append(out, cl)
		}
		for d, cnt := range rearmed {
			if cnt != n {
				continue
			}
			for _, additive := range []bool{false, true} {
				want := d
				if additive {
					want = d - ttlLong1
				}
				for _, t := range ttlArgs(c.argv, want, c.now) {
					if additive && t.deadline {
						continue
					}
					cl := base(spec.RoleExtend)
					cl.Tokens, cl.TTLArg, cl.TTLUnit, cl.Additive, cl.Deadline = tok, t.idx, t.unit, additive, t.deadline
					out = append(out, cl)
				}
			}
		}
	}
	if len(out) > 0 {
		// A script that deletes the keys whoever holds them and publishes
		// then (a forced unlock that tells waiters) is a delete with a
		// notice, not a release. (One that does not publish is refused as
		// a release that deletes another owner's lock.)
		if out[0].Role == spec.RoleRelease && publishes(c, otherSpecs) {
			if del := c.deleteCandidate(base, st0); del != nil {
				out = append(out, del)
			}
		}
		return out, nil
	}
	if n == 1 && c.zsetSeen {
		// A lock kept as a sorted set of owners.
		if oc, ref := c.ownerCandidates(base, res.State); ref != nil || len(oc) > 0 {
			return oc, ref
		}
	}
	if c.hashSeen {
		// A lock kept as a hash whose one field is its owner.
		if hc := c.hashCandidates(base, res.State); len(hc) > 0 {
			return hc, nil
		}
	}
	if del := c.deleteCandidate(base, res.State); del != nil {
		return []*spec.Class{del}, nil
	}
	if created > 0 {
		return nil, sandbox.Refuse(sandbox.RefuseOther, "fits no role: %s", strings.Join(seenEffects, "; "))
	}

	// Nothing written: a query, with no token or with one of the string
	// arguments as the token.
	for _, tok := range append([][]int{nil}, held...) {
		if n > 1 {
			break // queries read one key
		}
		cl := base(spec.RoleInspect)
		cl.Tokens = tok
		out = append(out, cl)
	}
	if len(out) == 0 {
		return nil, sandbox.Refuse(sandbox.RefuseOther, "fits no role: %s", strings.Join(seenEffects, "; "))
	}
	return out, nil
}

// tokenChoices picks the lowest candidate index per key, and the uniform
// choice when every key can take the same one.
func tokenChoices(cands [][]int) [][]int {
	var out [][]int
	for _, v := range cands[0] {
		all := true
		for _, cs := range cands[1:] {
			all = all && slices.Contains(cs, v)
		}
		if all {
			out = append(out, spec.UniformInts(len(cands), v))
		}
	}
	per := make([]int, len(cands))
	for k, cs := range cands {
		per[k] = cs[0]
	}
	if !slices.ContainsFunc(out, func(t []int) bool { return slices.Equal(t, per) }) {
		out = append(out, per)
	}
	return out
}

// publishes reports whether a run on a probe state published.
func publishes(c *classifier, specs []keySpec) bool {
	res, ref := c.run(c.keys, c.argv, c.state(c.keys, specs))
	return ref == nil && len(res.State.Published) > 0
}
