package script

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Classification runs a script in the sandbox against probe states of its
// keys and sees what it does; see doc.go for why the probes suffice.

// Refusal says why a script is not run as a lock operation.
type Refusal struct {
	Sha    string
	Reason string
	// NoTTL is set when the script writes a key without an expiry (the
	// vote policy refuses those too).
	NoTTL bool
}

func (r *Refusal) Error() string {
	return "script " + r.Sha + ": refused: " + r.Reason
}

// Limits of one classification.
const (
	// classifyBudget bounds the Lua instructions of all runs together.
	classifyBudget = 3_000_000
	// MaxKeys is the most keys a classified script may take.
	MaxKeys = 64
)

// TTLs of probe states, odd enough not to equal an argument by chance.
const (
	ttlLong1 = 41_734
	ttlLong2 = 52_345
	ttlShort = 3
)

type classifier struct {
	p     *Program
	keys  []string // the lock keys
	argv  []string // the arguments: KEYS after the lock keys, then ARGV
	extra int      // how many arguments come from KEYS
	names namer
	left  int
	r     *runner
	// now is the sandbox's clock for every run of this classification:
	// the real time (ms since the Unix epoch) when it started, so that a
	// deadline in the call's arguments (PXAT, PEXPIREAT) and TIME mean
	// what they mean on Redis.
	now int64
}

// Classify says what a script does for a call with these keys and
// arguments, or why it is refused.
func Classify(p *Program, keys, argv []string) (*Class, *Refusal) {
	return classifyAt(p, keys, argv, time.Now().UnixMilli())
}

// classifyAt is Classify with the sandbox's clock at now.
func classifyAt(p *Program, keys, argv []string, now int64) (*Class, *Refusal) {
	c := &classifier{p: p, keys: keys, argv: argv, left: classifyBudget, now: now}
	defer func() {
		if c.r != nil {
			c.r.close()
		}
	}()
	cl, ref := c.lockKeys()
	if ref == nil {
		cl, ref = c.classify()
	}
	if ref != nil {
		return nil, &Refusal{Sha: p.Sha, Reason: ref.reason, NoTTL: ref.kind == refuseNoTTL}
	}
	cl.KeyArgs = c.extra
	cl.Source = "classified"
	return cl.Finish(), nil
}

// lockKeys finds which KEYS the script uses as keys: some libraries pass
// arguments (a TTL, a token) in KEYS after the lock key. When only the
// first m entries are ever given to a command, the rest are arguments.
func (c *classifier) lockKeys() (*Class, *refusal) {
	if len(c.keys) < 2 {
		return nil, nil
	}
	used := map[string]bool{}
	values := append(append([]string{}, c.keys...), c.argv...)
	for i := -1; i < len(values); i++ {
		st := &State{Now: c.now, Keys: map[string]Item{}}
		if i >= 0 {
			for _, k := range c.keys {
				st.Keys[k] = Item{Value: values[i], At: c.now + ttlLong1}
			}
		}
		if c.r == nil {
			c.r = newRunner()
		}
		res := c.p.runOn(c.r, c.keys, c.argv, st, min(maxSteps, c.left))
		c.left -= res.steps
		if res.ref != nil || c.r.broken {
			return nil, nil // the classification proper will say why
		}
		for k := range res.touched {
			used[k] = true
		}
	}
	m := 0
	for i, k := range c.keys {
		if used[k] {
			m = i + 1
		}
	}
	if m == 0 || m == len(c.keys) {
		return nil, nil
	}
	c.extra = len(c.keys) - m
	c.argv = append(append([]string{}, c.keys[m:]...), c.argv...)
	c.keys = c.keys[:m]
	c.names = namer{lock: m, extra: c.extra}
	return nil, nil
}

func (c *classifier) classify() (*Class, *refusal) {
	n := len(c.keys)
	switch {
	case n == 0:
		return nil, refuse(refuseOther, "takes no keys: a lock script names its lock in KEYS")
	case n > MaxKeys:
		return nil, refuse(refuseOther, "takes %d keys; the classifier reads scripts of at most %d", n, MaxKeys)
	}
	seen := map[string]bool{}
	for _, k := range c.keys {
		if seen[k] {
			return nil, refuse(refuseOther, "is given the key %s twice", strconv.Quote(short(k)))
		}
		seen[k] = true
	}
	if c.extra > 0 && len(c.keys) > 1 {
		return nil, refuse(refuseOther, "takes arguments in KEYS after several lock keys, which the proxy does not read")
	}
	cands, ref := c.candidates()
	if ref != nil {
		return nil, ref
	}
	var first *refusal
	for _, cl := range cands {
		ref := c.refine(cl)
		if ref == nil {
			ref = c.verify(cl)
		}
		if ref == nil {
			ref = c.controls(cl)
		}
		if ref == nil {
			return cl, nil
		}
		if ref.kind != refuseOther || c.left <= 0 {
			return nil, ref // the script itself is refused, not a guess
		}
		if first == nil {
			first = ref
		}
	}
	return nil, first
}

// keySpec is the probe state of one key.
type keySpec struct {
	held  bool
	value string
	ttl   int64 // ms; 0: no TTL; < 0: expired
}

func (c *classifier) state(keys []string, specs []keySpec) *State {
	st := &State{Now: c.now, Keys: map[string]Item{}}
	for k, s := range specs {
		if !s.held {
			continue
		}
		it := Item{Value: s.value}
		if s.ttl != 0 {
			it.At = c.now + s.ttl
		}
		st.Keys[keys[k]] = it
	}
	return st
}

func uniform(n int, s keySpec) []keySpec {
	out := make([]keySpec, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// run executes the script once, charging the classification's budget.
func (c *classifier) run(keys, argv []string, st *State) (result, *refusal) {
	if c.left <= 0 {
		return result{}, refuse(refuseBudget, "takes more than %d Lua instructions to classify", classifyBudget)
	}
	if c.r == nil || c.r.broken {
		if c.r != nil {
			c.r.close()
		}
		c.r = newRunner()
	}
	res := c.p.runLocked(c.r, append(keys[:len(keys):len(keys)], argv[:c.extra]...), len(keys), argv[c.extra:], st, min(maxSteps, c.left))
	c.left -= res.steps
	if res.ref != nil {
		return res, res.ref
	}
	return res, nil
}

// namer names a call's arguments: the first extra ones are KEYS after the
// lock keys (a script that takes arguments in KEYS), the rest ARGV.
type namer struct{ lock, extra int }

func (n namer) arg(i int) string {
	if i < n.extra {
		return fmt.Sprintf("KEYS[%d]", n.lock+i+1)
	}
	return fmt.Sprintf("ARGV[%d]", i-n.extra+1)
}

// describe renders a probe: the keys' states and any changed argument.
func describe(keys, argv, orig []string, specs []keySpec, base []string) string {
	return namer{}.describe(keys, argv, orig, specs, base)
}

func (nm namer) describe(keys, argv, orig []string, specs []keySpec, base []string) string {
	var parts []string
	allSame := len(specs) > 1
	for _, s := range specs[1:] {
		allSame = allSame && s == specs[0]
	}
	for k, s := range specs {
		if allSame && k > 0 {
			break
		}
		who := fmt.Sprintf("KEYS[%d]", k+1)
		if allSame {
			who = "every key"
		}
		switch {
		case !s.held && allSame:
			parts = append(parts, "every key missing")
		case !s.held:
			parts = append(parts, who+" missing")
		case s.ttl < 0:
			parts = append(parts, who+" expired")
		default:
			t := "no TTL"
			if s.ttl > 0 {
				t = fmt.Sprintf("PTTL %d ms", s.ttl)
			}
			parts = append(parts, fmt.Sprintf("%s holding %s (%s)", who, nm.valueText(s.value, argv), t))
		}
	}
	out := "with " + strings.Join(parts, ", ")
	for i := range argv {
		if i < len(orig) && argv[i] != orig[i] {
			out += fmt.Sprintf(" and %s = %s", nm.arg(i), strconv.Quote(short(argv[i])))
		}
	}
	if base != nil && !slices.Equal(keys, base) {
		out += " and other key names"
	}
	return out
}

func (nm namer) valueText(v string, argv []string) string {
	for i, a := range argv {
		if a == v {
			return nm.arg(i)
		}
	}
	return "another value " + strconv.Quote(short(v))
}

// effect describes what a run did to the keys.
func (nm namer) effect(keys, argv []string, before, after *State) string {
	var parts []string
	for k, key := range keys {
		b, bok := before.lookup(key)
		a, aok := after.lookup(key)
		name := fmt.Sprintf("KEYS[%d]", k+1)
		switch {
		case bok && !aok:
			parts = append(parts, "deleted "+name)
		case aok && (!bok || a.Value != b.Value):
			parts = append(parts, fmt.Sprintf("set %s to %s with %s", name, nm.valueText(a.Value, argv), pttlText(after, key)))
		case aok && a.At != b.At:
			parts = append(parts, fmt.Sprintf("set %s's %s", name, pttlText(after, key)))
		}
	}
	if len(parts) == 0 {
		return "changed nothing"
	}
	return strings.Join(parts, " and ")
}

func pttlText(st *State, key string) string {
	p := st.pttl(key)
	if p == -1 {
		return "no TTL"
	}
	return fmt.Sprintf("PTTL %d ms", p)
}

// sameKeys reports whether two states agree on the given keys.
func sameKeys(keys []string, a, b *State) bool {
	for _, k := range keys {
		x, xok := a.lookup(k)
		y, yok := b.lookup(k)
		if xok != yok || !x.equal(y) {
			return false
		}
	}
	return true
}

// argsEqual lists the ARGV indexes holding v.
func argsEqual(argv []string, v string) []int {
	var out []int
	for i, a := range argv {
		if a == v {
			out = append(out, i)
		}
	}
	return out
}

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
		n, ok := parseInt(a)
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
func (c *classifier) candidates() ([]*Class, *refusal) {
	n := len(c.keys)
	var out []*Class
	base := func(role Role) *Class {
		return &Class{Role: role, Layout: Layout{Keys: n, Args: len(c.argv), TTLArg: -1, MinArg: -1, TTLUnit: time.Millisecond, MinUnit: time.Millisecond}}
	}
	var seenEffects []string

	// Every key missing: an acquire creates them.
	st := c.state(c.keys, uniform(n, keySpec{}))
	res, ref := c.run(c.keys, c.argv, st)
	if ref != nil {
		return nil, withProbe(ref, c.names.describe(c.keys, c.argv, c.argv, uniform(n, keySpec{}), nil))
	}
	seenEffects = append(seenEffects, "with every key missing it "+c.names.effect(c.keys, c.argv, st, res.state))
	created := 0
	for _, k := range c.keys {
		if _, ok := res.state.lookup(k); ok {
			created++
		}
	}
	if created == n {
		tokens := make([][]int, n)
		var d int64 = -1
		ok := true
		for k, key := range c.keys {
			it, _ := res.state.lookup(key)
			tokens[k] = argsEqual(c.argv, it.Value)
			if len(tokens[k]) == 0 || it.At == 0 || (d >= 0 && it.At-c.now != d) {
				ok = false
			}
			d = it.At - c.now
		}
		if ok {
			ttls := ttlArgs(c.argv, d, c.now)
			for _, tok := range tokenChoices(tokens) {
				for _, role := range []Role{RoleAcquire, RoleExtendOrAcquire} {
					if role == RoleExtendOrAcquire && n > 1 {
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
			if it, ok := res.state.lookup(key); ok && it.Type == TypeString && len(argsEqual(c.argv, it.Value)) > 0 {
				return nil, refuse(refuseOther, "%s it %s: it takes a lock another client holds (a forced takeover). "+
					"No majority makes that safe: the holder is not told and goes on as if it held the lock until it next "+
					"checks, and the proxy's own lock scripts never take a key from its holder", c.names.describe(c.keys, c.argv, c.argv, otherSpecs, nil),
					c.names.effect(c.keys[k:k+1], c.argv, st, res.state))
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
		held = append(held, uniformInts(n, i))
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
		if ref != nil {
			return nil, withProbe(ref, c.names.describe(c.keys, c.argv, c.argv, specs, nil))
		}
		seenEffects = append(seenEffects, c.names.describe(c.keys, c.argv, c.argv, specs, nil)+" it "+c.names.effect(c.keys, c.argv, st, res.state))
		deleted, rearmed := 0, map[int64]int{}
		for _, key := range c.keys {
			b, _ := st.lookup(key)
			a, ok := res.state.lookup(key)
			switch {
			case !ok:
				deleted++
			case a.Value == b.Value && a.At != b.At && a.At != 0:
				rearmed[a.At-c.now]++
			}
		}
		if deleted == n {
			cl := base(RoleRelease)
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
					cl := base(RoleExtend)
					cl.Tokens, cl.TTLArg, cl.TTLUnit, cl.Additive, cl.Deadline = tok, t.idx, t.unit, additive, t.deadline
					out = append(out, cl)
				}
			}
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	if created > 0 {
		return nil, refuse(refuseOther, "fits no role: %s", strings.Join(seenEffects, "; "))
	}

	// Nothing written: a query, with no token or with one of the string
	// arguments as the token.
	for _, tok := range append([][]int{nil}, held...) {
		if n > 1 {
			break // queries read one key
		}
		cl := base(RoleInspect)
		cl.Tokens = tok
		out = append(out, cl)
	}
	if len(out) == 0 {
		return nil, refuse(refuseOther, "fits no role: %s", strings.Join(seenEffects, "; "))
	}
	return out, nil
}

func withProbe(r *refusal, probe string) *refusal {
	if r.kind == refuseOther || r.kind == refuseNoTTL {
		return &refusal{kind: r.kind, reason: probe + " it " + r.reason}
	}
	return r
}

func uniformInts(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
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
			out = append(out, uniformInts(len(cands), v))
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

// acted reports whether a run on one probe state changed the keys (the
// battery checks later that the change is the role's).
func (c *classifier) acted(specs []keySpec, argv []string) (bool, *refusal) {
	st := c.state(c.keys, specs)
	res, ref := c.run(c.keys, argv, st)
	if ref != nil {
		return false, withProbe(ref, c.names.describe(c.keys, argv, c.argv, specs, nil))
	}
	return !sameKeys(c.keys, st, res.state), nil
}

// refine settles what the first probes cannot tell: whether ownership is
// a prefix of the token, whether a key without TTL is acted on, and a
// least TTL for extending.
func (c *classifier) refine(cl *Class) *refusal {
	if cl.Tokens == nil || cl.Role.Query() || cl.Role == RoleAcquire {
		return nil
	}
	n := len(c.keys)
	own := func(ttl int64, vary func(k int, tok string) string) []keySpec {
		specs := make([]keySpec, n)
		for k := range specs {
			tok := cl.token(c.argv, k)
			if vary != nil {
				tok = vary(k, tok)
			}
			specs[k] = keySpec{held: true, value: tok, ttl: ttl}
		}
		return specs
	}
	// Ownership: a value that starts with the token but is longer. (A
	// script that acts on any other value is left to the battery, which
	// names the probe.)
	other, ref := c.acted(own(ttlLong1, func(int, string) string { return "other-holder-7f3a" }), c.argv)
	if ref != nil || other {
		return ref
	}
	longer, ref := c.acted(own(ttlLong1, func(_ int, t string) string { return t + "\x01meta" }), c.argv)
	if ref != nil {
		return ref
	}
	if longer {
		tok := cl.token(c.argv, 0)
		var ps []int
		for i, a := range c.argv {
			if slices.Contains(cl.Tokens, i) || i == cl.TTLArg {
				continue
			}
			if p, ok := parseInt(a); ok && p >= 1 && int(p) <= len(tok) {
				ps = append(ps, int(p))
			}
		}
		ps = append(ps, len(tok))
		cl.Prefix = 0
		for _, p := range ps {
			if p < 1 {
				continue
			}
			// Owned: the first p bytes and anything after; not owned: a
			// change within the first p bytes.
			yes, ref := c.acted(own(ttlLong1, func(_ int, t string) string { return prefix(t, p) + "\x02other" }), c.argv)
			if ref != nil {
				return ref
			}
			no, ref := c.acted(own(ttlLong1, func(_ int, t string) string { return flip(prefix(t, p), p-1) }), c.argv)
			if ref != nil {
				return ref
			}
			if yes && !no {
				cl.Prefix = p
				break
			}
		}
		if cl.Prefix == 0 {
			return refuse(refuseOther, "treats a value that starts with the token as its own, but not as a fixed-length prefix of it")
		}
	}
	if cl.Role == RoleRelease {
		return nil
	}
	// A key held without TTL.
	noTTL, ref := c.acted(own(0, nil), c.argv)
	if ref != nil {
		return ref
	}
	cl.NoTTLActs = noTTL
	if cl.Role != RoleExtend {
		return nil
	}
	// A least TTL left: acting with a long TTL but not with a short one.
	short, ref := c.acted(own(ttlShort, nil), c.argv)
	if ref != nil || short {
		return ref
	}
	for i, a := range c.argv {
		if slices.Contains(cl.Tokens, i) || i == cl.TTLArg {
			continue
		}
		m, ok := parseInt(a)
		if !ok || m <= 0 {
			continue
		}
		for _, unit := range []time.Duration{time.Millisecond, time.Second} {
			thr := m * int64(unit/time.Millisecond)
			if thr > ttlLong1*4 {
				continue
			}
			var got [3]bool
			for j, p := range []int64{thr - 1, thr, thr + 1} {
				if p < 1 {
					continue
				}
				got[j], ref = c.acted(own(p, nil), c.argv)
				if ref != nil {
					return ref
				}
			}
			switch got {
			case [3]bool{false, true, true}:
				cl.MinArg, cl.MinUnit, cl.MinOffset = i, unit, 0
				return nil
			case [3]bool{false, false, true}:
				cl.MinArg, cl.MinUnit, cl.MinOffset = i, unit, 1
				return nil
			}
		}
	}
	return nil // the battery will show where it does not act
}

// flip changes byte i of s (or appends one if s is shorter).
func flip(s string, i int) string {
	if i < 0 || i >= len(s) {
		return s + "\x03"
	}
	b := []byte(s)
	b[i] ^= 0x55
	return string(b)
}
