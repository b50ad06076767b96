package classify

import (
	"slices"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// Candidates for the other shapes of lock: a sorted set of owners
// (ShapeOwners, with or without a marker member), a hash whose one field
// is the owner's token (ShapeHash), and a script that deletes its keys
// whatever holds them.

// markerWords are string constants that are no lock's marker: option and
// type names.
var markerWords = map[string]bool{
	"nx": true, "xx": true, "gt": true, "lt": true, "ch": true, "incr": true, "px": true, "ex": true, "pxat": true, "exat": true,
	"keepttl": true, "get": true, "withscores": true, "limit": true, "byscore": true, "rev": true, "-inf": true, "+inf": true,
	"inf": true, "ok": true, "err": true, "string": true, "hash": true, "set": true, "zset": true, "none": true,
}

// markers lists the names a lock's marker member may have: the script's
// string constants that are not commands, options or arguments, then none.
func (c *classifier) markers() []string {
	var out []string
	for _, s := range c.p.Strs {
		l := strings.ToLower(s)
		if s == "" || markerWords[l] || sandbox.LockCommands[l] != nil || slices.Contains(c.argv, s) {
			continue
		}
		out = append(out, s)
		if len(out) == 8 {
			break
		}
	}
	return append(out, "")
}

// ownerCandidates proposes classes of ShapeOwners for a one-key script
// that used sorted-set commands: an acquire from what it made of a missing
// key (after), else a release or an extend from what it does to a set
// where one argument is an owner, else a query.
func (c *classifier) ownerCandidates(base func(spec.Role) *spec.Class, after *sandbox.State) ([]*spec.Class, *sandbox.Stop) {
	key := c.keys[0]
	var out []*spec.Class
	add := func(role spec.Role, tok int, ttl *ttlArg, marker string) {
		cl := base(role)
		cl.Shape, cl.Marker, cl.Tokens = spec.ShapeOwners, marker, []int{tok}
		if ttl != nil {
			cl.TTLArg, cl.TTLUnit, cl.Deadline = ttl.idx, ttl.unit, ttl.deadline
		}
		out = append(out, cl)
	}
	if it, ok := after.Lookup(key); ok {
		if it.Type != sandbox.TypeZset {
			return nil, nil
		}
		// Made from nothing: the caller's member, and maybe a marker with
		// the same score.
		var toks []int
		var score float64
		marker, others := "", 0
		for m, sc := range it.Zset {
			if i := spec.ArgsEqual(c.argv, m); len(i) > 0 {
				toks, score = append(toks, i[0]), sc
			}
		}
		if len(toks) != 1 {
			return nil, nil
		}
		for m, sc := range it.Zset {
			if len(spec.ArgsEqual(c.argv, m)) > 0 {
				continue
			}
			if sc == score {
				marker = m
			}
			others++
		}
		if others > 1 || others == 1 && marker == "" || score != float64(int64(score)) {
			return nil, nil
		}
		ttls := ttlArgs(c.argv, int64(score)-c.now, c.now)
		roles, markers := []spec.Role{spec.RoleExtendOrAcquire, spec.RoleAcquire}, []string{marker}
		if marker == "" {
			roles, markers = []spec.Role{spec.RoleShare, spec.RoleExtendOrAcquire, spec.RoleAcquire}, c.markers()
		}
		for _, m := range markers {
			for _, role := range roles {
				for i := range ttls {
					add(role, toks[0], &ttls[i], m)
				}
			}
		}
		return out, nil
	}
	// Held: each argument in turn the one owner of a shared lock.
	seen := map[string]bool{}
	var toks []int
	for i, a := range c.argv {
		if seen[a] {
			continue
		}
		seen[a] = true
		toks = append(toks, i)
		st := &sandbox.State{Now: c.now, Keys: map[string]sandbox.Item{key: {Type: sandbox.TypeZset, Zset: map[string]float64{a: float64(c.now + ttlLong1)}, At: c.now + ttlLong1}}}
		res, ref := c.run(c.keys, c.argv, st)
		if ref != nil {
			continue
		}
		it, ok := res.State.Lookup(key)
		sc, mine := it.Zset[a]
		switch {
		case !ok || it.Type == sandbox.TypeZset && !mine:
			for _, m := range c.markers() {
				add(spec.RoleRelease, i, nil, m)
			}
		case it.Type == sandbox.TypeZset && sc != float64(c.now+ttlLong1) && sc == float64(int64(sc)):
			ttls := ttlArgs(c.argv, int64(sc)-c.now, c.now)
			for _, m := range c.markers() {
				for j := range ttls {
					add(spec.RoleExtend, i, &ttls[j], m)
				}
			}
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, i := range toks {
		for _, m := range c.markers() {
			add(spec.RoleInspect, i, nil, m)
		}
	}
	return out, nil
}

// deleteCandidate proposes RoleDelete for a script that leaves every key
// gone, or set to expire within a millisecond, when another owner holds
// it: a forced delete (DEL in a script).
func (c *classifier) deleteCandidate(base func(spec.Role) *spec.Class, fromMissing *sandbox.State) *spec.Class {
	for _, k := range c.keys {
		if !gone(fromMissing, k, c.now) {
			return nil
		}
	}
	specs := uniform(len(c.keys), keySpec{held: true, value: "other-holder-7f3a", ttl: ttlLong1})
	st := c.state(c.keys, specs)
	res, ref := c.run(c.keys, c.argv, st)
	if ref != nil {
		return nil
	}
	for _, k := range c.keys {
		if !gone(res.State, k, c.now) {
			return nil
		}
	}
	return base(spec.RoleDelete)
}

// gone reports whether a key is missing, or expires within ephemeralMs.
func gone(st *sandbox.State, k string, now int64) bool {
	it, ok := st.Lookup(k)
	return !ok || it.At != 0 && it.At <= now+ephemeralMs
}

// settled is a state as it stands once the keys that expire within
// ephemeralMs are gone (how RoleDelete is judged).
func settled(st *sandbox.State) *sandbox.State {
	out := st.Clone()
	out.Now += ephemeralMs + 1
	for k := range out.Keys {
		out.Lookup(k)
	}
	out.Now = st.Now
	return out
}

// ephemeralMs is how long a key may be left to live and still count as
// deleted: the shortest TTL Redis sets (PX 1). No lock is held in it.
const ephemeralMs = 1

// hashCandidates proposes classes of ShapeHash for a script that used hash
// commands: an acquire from what it made of missing keys (after), else a
// release or an extend from what it does to hashes whose one field is an
// argument, else a query.
func (c *classifier) hashCandidates(base func(spec.Role) *spec.Class, after *sandbox.State) []*spec.Class {
	n := len(c.keys)
	var out []*spec.Class
	mk := func(role spec.Role, tok []int) *spec.Class {
		cl := base(role)
		cl.Shape, cl.Tokens, cl.FieldArg, cl.FieldValue = spec.ShapeHash, tok, -1, "1"
		return cl
	}
	// Made from nothing: one field per key, an argument, with the same TTL.
	tok := make([]int, n)
	var d int64 = -1
	field, fieldArg := "", -1
	made := true
	for k, key := range c.keys {
		it, ok := after.Lookup(key)
		if !ok || it.Type != sandbox.TypeHash || len(it.Hash) != 1 || it.At == 0 || d >= 0 && it.At-c.now != d {
			made = false
			break
		}
		d = it.At - c.now
		for f, v := range it.Hash {
			i := spec.ArgsEqual(c.argv, f)
			if len(i) == 0 {
				made = false
				break
			}
			tok[k], field = i[0], v
		}
	}
	if made {
		if i := spec.ArgsEqual(c.argv, field); len(i) > 0 && !slices.Contains(tok, i[0]) {
			fieldArg = i[0]
		}
		if field == "1" && fieldArg < 0 && n == 1 {
			// A count of holds from nothing (HINCRBY): a reentrant lock
			// that takes it again is tried first.
			for _, t := range ttlArgs(c.argv, d, c.now) {
				cl := mk(spec.RoleExtendOrAcquire, slices.Clone(tok))
				cl.Counted = true
				cl.TTLArg, cl.TTLUnit, cl.Deadline = t.idx, t.unit, t.deadline
				out = append(out, cl)
			}
			cl := mk(spec.RoleExtendOrAcquire, slices.Clone(tok))
			cl.Counted, cl.TTLConst = true, time.Duration(d)*time.Millisecond
			out = append(out, cl)
		}
		for _, role := range []spec.Role{spec.RoleAcquire, spec.RoleExtendOrAcquire} {
			if role == spec.RoleExtendOrAcquire && n > 1 {
				continue
			}
			for _, t := range ttlArgs(c.argv, d, c.now) {
				cl := mk(role, slices.Clone(tok))
				cl.FieldArg, cl.FieldValue = fieldArg, field
				cl.TTLArg, cl.TTLUnit, cl.Deadline = t.idx, t.unit, t.deadline
				out = append(out, cl)
			}
		}
		return out
	}
	// Held: every key a hash whose one field is an argument.
	seen := map[string]bool{}
	var toks [][]int
	for i, a := range c.argv {
		if seen[a] {
			continue
		}
		seen[a] = true
		toks = append(toks, spec.UniformInts(n, i))
		st := &sandbox.State{Now: c.now, Keys: map[string]sandbox.Item{}}
		for _, key := range c.keys {
			st.Keys[key] = sandbox.Item{Type: sandbox.TypeHash, Hash: map[string]string{a: "1"}, At: c.now + ttlLong1}
		}
		res, ref := c.run(c.keys, c.argv, st)
		if ref != nil {
			continue
		}
		deleted, rearmed := 0, map[int64]int{}
		for _, key := range c.keys {
			it, ok := res.State.Lookup(key)
			switch {
			case !ok:
				deleted++
			case it.Type == sandbox.TypeHash && it.At != c.now+ttlLong1 && it.At != 0:
				rearmed[it.At-c.now]++
			}
		}
		if deleted == n {
			out = append(out, c.countedReleases(mk, a, i)...)
			out = append(out, mk(spec.RoleRelease, spec.UniformInts(n, i)))
		}
		for d, cnt := range rearmed {
			if cnt != n {
				continue
			}
			for _, t := range ttlArgs(c.argv, d, c.now) {
				cl := mk(spec.RoleExtend, spec.UniformInts(n, i))
				cl.TTLArg, cl.TTLUnit, cl.Deadline = t.idx, t.unit, t.deadline
				out = append(out, cl)
			}
		}
	}
	if len(out) > 0 || n > 1 {
		return out
	}
	for _, t := range toks {
		out = append(out, mk(spec.RoleInspect, t))
	}
	return out
}

// countedReleases proposes, for a script that deletes a hash whose one
// field is argument i (held once), the release of a reentrant lock: held
// three times, it leaves the count at two, re-armed with a TTL argument or
// not.
func (c *classifier) countedReleases(mk func(spec.Role, []int) *spec.Class, a string, i int) []*spec.Class {
	if len(c.keys) != 1 {
		return nil
	}
	st := &sandbox.State{Now: c.now, Keys: map[string]sandbox.Item{c.keys[0]: {Type: sandbox.TypeHash, Hash: map[string]string{a: "3"}, At: c.now + ttlLong1}}}
	res, ref := c.run(c.keys, c.argv, st)
	if ref != nil {
		return nil
	}
	it, ok := res.State.Lookup(c.keys[0])
	if !ok || it.Type != sandbox.TypeHash || len(it.Hash) != 1 || it.Hash[a] != "2" || it.At == 0 {
		return nil
	}
	cl := mk(spec.RoleRelease, []int{i})
	cl.Counted = true
	if it.At == c.now+ttlLong1 {
		return []*spec.Class{cl}
	}
	var out []*spec.Class
	for _, t := range ttlArgs(c.argv, it.At-c.now, c.now) {
		if t.deadline {
			continue
		}
		d := *cl
		d.TTLArg, d.TTLUnit = t.idx, t.unit
		out = append(out, &d)
	}
	d := *cl // re-armed to a TTL no argument gives
	d.TTLConst = time.Duration(it.At-c.now) * time.Millisecond
	return append(out, &d)
}
