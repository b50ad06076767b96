package classify

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// The battery: every case a role can meet, with several TTLs, values and
// argument variants, each run checked against the role's meaning and its
// reply recorded to learn the reply templates.

// tokenAlts replace the token in argument variants: other lengths, odd
// bytes, a long one.
var tokenAlts = []string{"t", "tok\x00\xff\r\n \"odd\"", strings.Repeat("long-token-", 30)}

// argVariant is a call's arguments with one thing changed.
type argVariant struct {
	keys []string
	argv []string
	full bool // probe every state, not the reduced set
}

func (c *classifier) variants(cl *spec.Class) []argVariant {
	out := []argVariant{{keys: c.keys, argv: c.argv, full: true}}
	with := func(idx int, v string) []string {
		a := slices.Clone(c.argv)
		a[idx] = v
		return a
	}
	// A variant in other relations than the call (relations.go) is left
	// out: the classification will not hold for it, and a call like it is
	// classified on its own. Numbers near the call's stand in for those.
	var lits *sandbox.Literals
	if c.p != nil {
		lits = c.p.Lits
	}
	base := spec.SigOf(lits, c.keys, c.argv)
	same := func(keys, argv []string) bool { return spec.SigOf(lits, keys, argv) == base }
	if cl.Tokens != nil {
		orig := c.argv[cl.Tokens[0]]
		alts := append(slices.Clone(tokenAlts), orig+"-2")
		if _, ok := sandbox.ArgNumber([]byte(orig)); ok {
			alts = append(alts, orig+"1", "1"+orig, orig+"7")
		}
		full := 0
		for _, alt := range alts {
			a := slices.Clone(c.argv)
			for k, t := range cl.Tokens {
				a[t] = alt
				if !cl.UniformToken() {
					a[t] = alt + "-" + strconv.Itoa(k)
				}
			}
			if !same(c.keys, a) {
				continue
			}
			out = append(out, argVariant{keys: c.keys, argv: a, full: full < 2})
			full++
		}
	}
	if cl.TTLArg >= 0 {
		// A small TTL too: a script that read small values in another unit
		// would make the lock outlive, or not, what its caller counts on.
		alts := []int64{7, 1234, 59999}
		if cl.TTLUnit == time.Second {
			alts = []int64{1, 2, 59}
		}
		if cl.Deadline {
			// Deadlines that far ahead, and one already passed (a second
			// ago): the script must do what Redis does with a time in the
			// past.
			base := c.now
			if cl.TTLUnit == time.Second {
				base = c.now / 1000
			}
			for i := range alts {
				alts[i] += base
			}
			if cl.TTLUnit == time.Second {
				alts = append(alts, base-1)
			} else {
				alts = append(alts, base-1000)
			}
		}
		want := len(alts)
		if n, ok := sandbox.ParseInt(c.argv[cl.TTLArg]); ok && n > 0 {
			if cl.Deadline {
				alts = append(alts, n+1000, n+1)
			} else {
				alts = append(alts, n+1, 2*n)
			}
		}
		if cl.Deadline && len(alts) > want {
			// A deadline a second beyond the call's too: a later call's
			// deadline, read a moment later or from a client whose clock
			// runs ahead, leaves a little more time than this one's, and
			// a classification holds only for the times left it ran
			// (spec.Seen).
			want++
		}
		kept := 0
		for _, v := range alts {
			a := with(cl.TTLArg, strconv.FormatInt(v, 10))
			if kept < want && same(c.keys, a) {
				out = append(out, argVariant{keys: c.keys, argv: a})
				kept++
			}
		}
	}
	if cl.MinArg >= 0 {
		alts := []string{"500", "7000"}
		if cl.MinUnit == time.Second {
			alts = []string{"1", "7"}
		}
		if n, ok := sandbox.ParseInt(c.argv[cl.MinArg]); ok {
			alts = append(alts, strconv.FormatInt(n+1, 10))
		}
		for _, v := range alts {
			if a := with(cl.MinArg, v); same(c.keys, a) {
				out = append(out, argVariant{keys: c.keys, argv: a})
			}
		}
	}
	other := make([]string, len(c.keys))
	for k := range other {
		other[k] = fmt.Sprintf("{probe}:lock:%d", k+1)
	}
	if same(other, c.argv) {
		out = append(out, argVariant{keys: other, argv: c.argv})
	}
	return out
}

// ownerStates lists the probe states of a variant for a lock of several
// owners (one key): free, expired, the caller's (exclusive, shared alone,
// shared with another owner) with several deadlines, another owner's
// (exclusive) and others' (shared), and a string held by another value.
func (c *classifier) ownerStates(cl *spec.Class, v argVariant) [][]keySpec {
	tok := cl.Token(v.argv, 0)
	m := cl.Marker
	ttls := []int64{ttlLong1, ttlLong2 + 7_000, ttlShort}
	if !v.full {
		ttls = ttls[:1]
	}
	one := func(s keySpec) []keySpec { return []keySpec{s} }
	out := [][]keySpec{one(keySpec{}), one(keySpec{held: true, zset: true, mine: true, value: tok, ttl: -1000, marker: m})}
	for _, t := range ttls {
		own := keySpec{held: true, zset: true, mine: true, value: tok, ttl: t}
		excl := own
		excl.marker = m
		with := own
		with.others = 1
		out = append(out, one(excl), one(with))
		if m != "" {
			out = append(out, one(own))
		}
	}
	out = append(out,
		one(keySpec{held: true, zset: true, others: 1, marker: m, ttl: ttlLong1}),
		one(keySpec{held: true, zset: true, others: 2, ttl: ttlLong1}),
		one(keySpec{held: true, value: "other-holder-7f3a", ttl: ttlLong1}))
	if v.full {
		out = append(out, one(keySpec{held: true, value: tok, ttl: ttlLong1}), one(keySpec{held: true, zset: true, others: 1, ttl: ttlLong1}))
	}
	return out
}

// states lists the probe states of a variant.
func (c *classifier) states(cl *spec.Class, v argVariant) [][]keySpec {
	if cl.Shape == spec.ShapeOwners {
		return c.ownerStates(cl, v)
	}
	if cl.Shape == spec.ShapeHash {
		// A hash lock's states are a string lock's, each held key a hash
		// whose one field is the value.
		return c.stringStates(cl, v)
	}
	return c.stringStates(cl, v)
}

// stringStates lists the probe states of a string lock.
func (c *classifier) stringStates(cl *spec.Class, v argVariant) [][]keySpec {
	n := len(v.keys)
	thr := cl.ThresholdOf(v.argv)
	ok := []int64{ttlLong1, ttlLong2, ttlShort}
	var low []int64
	if cl.MinArg >= 0 {
		ok = []int64{thr, thr + ttlLong1, thr + 9_345}
		for _, t := range []int64{thr - 1, thr / 2, 1} {
			if t >= 1 && t < thr && !slices.Contains(low, t) {
				low = append(low, t)
			}
		}
	}
	if !v.full {
		ok = ok[:1]
		if len(low) > 1 {
			low = low[:1]
		}
	}
	ttls := append(append(slices.Clone(ok), 0), low...)

	// Values per key: the token (and a value owned by prefix), others.
	ownVals := func(k int) []string {
		if cl.Tokens == nil {
			return nil
		}
		tok := cl.Token(v.argv, k)
		vals := []string{tok}
		if cl.Prefix > 0 && v.full {
			vals = append(vals, spec.Prefix(tok, cl.Prefix)+"\x7fmeta")
		}
		return vals
	}
	// The script's own string constants as other holders' values too (but
	// command, option and type names, at most 8): a script may single out
	// a lock holding one ("*", "force").
	var consts []string
	if v.full && c.p != nil {
	next:
		for _, s := range c.markers() {
			if s == "" {
				continue
			}
			for k := 0; k < n; k++ {
				if cl.Tokens != nil && s == cl.Token(v.argv, k) {
					continue next
				}
			}
			if s != "other-holder-7f3a" && s != "\x00" {
				consts = append(consts, s)
			}
		}
	}
	otherVals := func(k int) []string {
		vals := []string{"other-holder-7f3a"}
		if !v.full {
			return vals
		}
		vals = append(vals, "\x00")
		vals = append(vals, consts...)
		if cl.Tokens != nil {
			tok := cl.Token(v.argv, k)
			if cl.Prefix > 0 {
				vals = append(vals, flip(spec.Prefix(tok, cl.Prefix), cl.Prefix-1))
			} else {
				vals = append(vals, tok+"x")
				if tok != "" {
					vals = append(vals, flip(tok, len(tok)-1))
				}
			}
		} else {
			for _, a := range v.argv {
				if !slices.Contains(vals, a) {
					vals = append(vals, a)
				}
			}
		}
		return vals
	}
	perKey := func(f func(k int) keySpec) []keySpec {
		s := make([]keySpec, n)
		for k := range s {
			s[k] = f(k)
		}
		return s
	}
	var out [][]keySpec
	out = append(out, uniform(n, keySpec{}))
	if v.full {
		out = append(out, perKey(func(k int) keySpec { return keySpec{held: true, value: cl.Token(v.argv, k) + "old", ttl: -1000} }))
	}
	if cl.Tokens != nil {
		for j := range ownVals(0) {
			for _, t := range ttls {
				out = append(out, perKey(func(k int) keySpec { return keySpec{held: true, value: ownVals(k)[j], ttl: t} }))
			}
		}
		if cl.Counted || cl.Shape == spec.ShapeHash && cl.FieldArg < 0 && cl.FieldValue == "1" {
			// Held more than once, and once more than that. A hash lock
			// whose field holds 1, as a count of one hold does, is
			// probed so too: a reentrant lock's scripts may share its
			// key, and a script that acts on a count (a release that
			// only takes one hold off) must not pass for one that
			// ignores it. A field holding another value is no count.
			for _, cnt := range []int{2, 5} {
				for _, t := range ok {
					out = append(out, perKey(func(k int) keySpec { return keySpec{held: true, value: ownVals(k)[0], ttl: t, count: cnt} }))
				}
			}
		}
		if cl.Shape == spec.ShapeHash && cl.Role == spec.RoleExtend {
			// A read-write lock's write lock (Redisson's RReadWriteLock,
			// which the proxy runs too): its hash holds "mode" = "write"
			// beside its writer's field, and the hash extend's reference
			// reads it as the writer's lock (its watchdog renews it with
			// a hash lock's script). An extend that spares it must not
			// pass for one that re-arms it. Every other role reads it as
			// another holder's and never acts on it, whatever a script
			// would do there (docs/scripts.md).
			for _, cnt := range []int{0, 2} {
				out = append(out, perKey(func(k int) keySpec {
					return keySpec{held: true, value: ownVals(k)[0], ttl: ok[0], count: cnt, mode: true}
				}))
			}
		}
	}
	if cl.Shape == spec.ShapeHash && v.full {
		// Another's write lock: another holder's.
		out = append(out, perKey(func(k int) keySpec { return keySpec{held: true, value: "other-holder-7f3a", ttl: ttlLong1, mode: true} }))
	}
	for j := range otherVals(0) {
		for i, t := range ttls {
			// The first other value with every TTL; the second also
			// without TTL (so that every case sees two values); the
			// rest with one TTL.
			if j > 0 && i > 0 && !(j == 1 && t == 0) {
				continue
			}
			out = append(out, perKey(func(k int) keySpec { return keySpec{held: true, value: otherVals(k)[j], ttl: t} }))
		}
	}
	if n > 1 {
		kind := func(own bool, ttl int64) func(k int) keySpec {
			return func(k int) keySpec {
				if own {
					return keySpec{held: true, value: cl.Token(v.argv, k), ttl: ttl}
				}
				return keySpec{held: true, value: "other-holder-7f3a", ttl: ttl}
			}
		}
		kinds := []func(k int) keySpec{func(int) keySpec { return keySpec{} }, kind(false, ok[0])}
		if cl.Tokens != nil {
			kinds = append(kinds, kind(true, ok[0]))
		}
		if v.full {
			kinds = append(kinds, kind(false, 0))
			if cl.Tokens != nil {
				kinds = append(kinds, kind(true, 0))
			}
		}
		positions := []int{0, n - 1}
		if n > 2 {
			positions = append(positions, n/2)
		}
		for bi, b := range kinds {
			for oi, o := range kinds {
				if bi == oi {
					continue
				}
				for _, pos := range positions {
					out = append(out, perKey(func(k int) keySpec {
						if k == pos {
							return o(k)
						}
						return b(k)
					}))
				}
			}
		}
	}
	return out
}

// verify runs the battery: every run must leave the keys as the role
// would, and the replies of each case must follow one template.
func (c *classifier) verify(cl *spec.Class) *sandbox.Stop {
	samples := map[spec.Case][]spec.Sample{}
	var all []spec.Sample
	for _, v := range c.variants(cl) {
		for _, specs := range c.states(cl, v) {
			desc := describeIn(c.names, v.keys, v.argv, c.argv, specs, c.keys)
			s, ref := c.check(cl, v.keys, v.argv, specs, desc)
			if ref != nil {
				return ref
			}
			samples[s.Sit.Case] = append(samples[s.Sit.Case], s)
			all = append(all, s)
		}
	}
	if ref := c.notice(cl, all); ref != nil {
		return ref
	}
	if ref := c.latched(cl, all); ref != nil {
		return ref
	}
	if ref := c.counted(cl, all); ref != nil {
		return ref
	}
	for _, cs := range cl.Cases() {
		ss := samples[cs]
		if len(ss) == 0 {
			return sandbox.Refuse(sandbox.RefuseOther, "could not be probed %s", spec.CaseText[cs])
		}
		t, a, b := spec.Learn(ss)
		if t != nil && t.Fenced() && !(cl.Acts(cs) && cl.Role.Writes()) {
			return sandbox.Refuse(sandbox.RefuseOther, "%s its reply shows its counter's count, which the proxy answers with the grant's fencing number only where the lock is taken or kept", ss[0].Probe)
		}
		if t == nil {
			if a == b {
				return sandbox.Refuse(sandbox.RefuseOther, "%s its reply %s has no template", a.Probe, a.Reply)
			}
			return sandbox.Refuse(sandbox.RefuseOther, "replies %s %s but %s %s, which no reply template explains", a.Reply, a.Probe, b.Reply, b.Probe)
		}
		cl.Replies[cs] = t
	}
	if cl.Role.Query() {
		cl.Role = queryRole(cl)
	}
	return nil
}

// check runs one probe and compares its effect with the role's.
func (c *classifier) check(cl *spec.Class, keys, argv []string, specs []keySpec, desc string) (spec.Sample, *sandbox.Stop) {
	st := c.state(keys, specs)
	res, ref := c.run(keys, argv, st)
	if ref != nil {
		return spec.Sample{}, sandbox.WithProbe(ref, desc)
	}
	want, _ := cl.Simulate(st, keys, argv)
	pub := res.State.Published
	if cl.Role == spec.RoleDelete {
		res.State = settled(res.State)
	}
	if !sameKeys(keys, res.State, want) {
		got := effectIn(c.names, keys, argv, st, res.State)
		sit := cl.Situate(st, want, keys, argv)
		if sameKeys(keys, st, want) {
			return spec.Sample{}, sandbox.Refuse(sandbox.RefuseOther, "%s it %s; %s must leave a key %s alone", desc, got, roleArticle(cl), spec.CaseText[sit.Case])
		}
		return spec.Sample{}, sandbox.Refuse(sandbox.RefuseOther, "%s it %s; %s would have %s", desc, got, roleArticle(cl), effectIn(c.names, keys, argv, st, want))
	}
	s := spec.Sample{Sit: cl.Situate(st, res.State, keys, argv), Reply: res.Reply, Probe: desc, Pub: pub, Keys: keys, Argv: argv}
	if c.latchArg() >= 0 {
		name := argv[c.latchArg()]
		it, ok := res.State.Lookup(name)
		s.Latch, s.LatchValue, s.LatchPTTL = ok, it.Value, res.State.PTTL(name)
	}
	if c.signalArg() >= 0 {
		if _, ok := res.State.Lookup(argv[c.signalArg()]); ok {
			return spec.Sample{}, sandbox.Refuse(sandbox.RefuseOther, "%s it wrote its signal list %s as a key of its own: a signal list is pushed onto, nothing else", desc, c.names.Arg(c.signalArg()))
		}
	}
	if c.counterArg() >= 0 {
		b, _ := st.Lookup(argv[c.counterArg()])
		a, _ := res.State.Lookup(argv[c.counterArg()])
		x, xok := sandbox.ParseInt(b.Value)
		y, yok := sandbox.ParseInt(a.Value)
		s.Moved = -1
		if xok && yok && (y == x || y == x+1) && a.At == b.At {
			s.Moved = y - x
		}
		if s.Moved == 1 {
			s.Sit.Fence = y
		}
	}
	if len(keys) == 1 {
		_, before := st.Lookup(keys[0])
		_, after := res.State.Lookup(keys[0])
		s.Freed = before && !after
	}
	return s, nil
}

func roleArticle(cl *spec.Class) string {
	r := cl.Role.String()
	if cl.Role.Query() {
		r = "query"
	}
	a := "a "
	if strings.IndexByte("aeiou", r[0]) >= 0 {
		a = "an "
	}
	return a + r
}

// queryRole names a read-only script by what its replies show.
func queryRole(cl *spec.Class) spec.Role {
	uses := func(t *spec.Template, srcs ...spec.Source) bool {
		found := false
		var walk func(*spec.Template)
		walk = func(t *spec.Template) {
			if t == nil {
				return
			}
			if slices.Contains(srcs, t.Src) && t.Kind != 0 {
				found = true
			}
			for _, e := range t.Elems {
				walk(e)
			}
		}
		walk(t)
		return found
	}
	ttl := false
	value := false
	for _, t := range cl.Replies {
		ttl = ttl || uses(t, spec.SrcPTTL, spec.SrcTTL)
		value = value || uses(t, spec.SrcValue)
	}
	switch {
	case cl.Tokens != nil && uses(cl.Replies[spec.CaseOwn], spec.SrcPTTL, spec.SrcTTL):
		return spec.RoleTTL
	case cl.Tokens != nil:
		return spec.RoleOwner
	case ttl:
		return spec.RoleInspect
	}
	return spec.RoleValue
}

// controlAlts are the values controls tries in place of an argument:
// small numbers, nothing, another string, a long one, and deadlines ahead
// (in ms and s): an argument that is a time changes what the script does.
func (c *classifier) controlAlts(orig string) []string {
	return []string{"0", "1", "7", "", orig + "x", strings.Repeat("long-value-", 30), strconv.FormatInt(c.now+ttlLong2, 10), strconv.FormatInt(c.now/1000+ttlLong2/1000, 10)}
}

// seen records what the battery ran for a class (spec.Seen): the TTLs and
// least TTLs of its argument variants, the lengths of its tokens, and of
// every argument controls found ignored.
func (c *classifier) seen(cl *spec.Class) *spec.Seen {
	s := &spec.Seen{}
	for _, v := range c.variants(cl) {
		a := spec.BytesOf(v.argv)
		if cl.TTLArg >= 0 {
			if d, ok := cl.TTLAt(a, c.now); ok && d > 0 {
				s.TTL.Add(d.Milliseconds())
			}
		}
		if cl.MinArg >= 0 {
			if n, ok := cl.Threshold(a); ok {
				s.Low.Add(n)
			}
		}
		for _, t := range cl.Tokens {
			s.AddLen(t, len(v.argv[t]))
			if f, ok := sandbox.ArgNumber([]byte(v.argv[t])); ok && !math.IsNaN(f) && !math.IsInf(f, 0) {
				s.AddNum(t, f)
			}
		}
	}
	for _, j := range c.ignored(cl) {
		s.AddLen(j, len(c.argv[j]))
		for _, alt := range c.controlAlts(c.argv[j]) {
			s.AddLen(j, len(alt))
		}
	}
	return s
}

// used are the arguments the layout reads.
func (c *classifier) used(cl *spec.Class) map[int]bool {
	used := map[int]bool{cl.TTLArg: true, cl.MinArg: true, c.latchArg(): true, c.counterArg(): true}
	if cl.Latch != nil {
		used[cl.Latch.TTLArg] = true
	}
	if cl.Notice != nil && cl.Notice.List {
		used[c.signalArg()], used[cl.Notice.TTLArg] = true, true
	}
	for _, t := range cl.Tokens {
		used[t] = true
	}
	return used
}

// ignored are the arguments controls varied and found to change nothing.
func (c *classifier) ignored(cl *spec.Class) []int {
	used := c.used(cl)
	var out []int
	for j := range c.argv {
		if !used[j] && !slices.ContainsFunc(cl.Controls, func(ct spec.Control) bool { return ct.Arg == j }) {
			out = append(out, j)
		}
	}
	return out
}

// controls varies every argument the layout does not use: one whose
// change changes the behaviour is a control, whose value the
// classification then holds for; one that changes nothing is ignored.
func (c *classifier) controls(cl *spec.Class) *sandbox.Stop {
	used := c.used(cl)
	base := argVariant{keys: c.keys, argv: c.argv}
	states := c.states(cl, base)
	for j, orig := range c.argv {
		if used[j] {
			continue
		}
		control := false
		for _, alt := range c.controlAlts(orig) {
			if alt == orig || control {
				continue
			}
			argv := slices.Clone(c.argv)
			argv[j] = alt
			for _, specs := range states {
				s, ref := c.check(cl, c.keys, argv, specs, "")
				if ref != nil {
					if ref.Kind == sandbox.RefuseBudget {
						return ref
					}
					control = true
					break
				}
				t := cl.Replies[s.Sit.Case]
				if t == nil || !t.Fill(s.Sit).Equal(s.Reply) {
					control = true
					break
				}
			}
		}
		if control {
			cl.Controls = append(cl.Controls, spec.Control{Arg: j, Value: orig})
		}
	}
	return nil
}
