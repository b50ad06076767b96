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
	// zsetSeen, hashSeen: a run called a sorted-set, a hash command.
	zsetSeen, hashSeen bool
	// cur is the candidate being checked: its shape decides how a probe
	// state's held keys are kept.
	cur *Class
}

// Classify says what a script does for a call with these keys and
// arguments, or why it is refused.
func Classify(p *Program, keys, argv []string) (*Class, *Refusal) {
	return classifyAt(p, keys, argv, time.Now().UnixMilli())
}

// classifyAt is Classify with the sandbox's clock at now.
func classifyAt(p *Program, keys, argv []string, now int64) (*Class, *Refusal) {
	c := &classifier{p: p, keys: keys, argv: aheadOf(argv, now), left: classifyBudget, now: now}
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

// pastSpan is how far back an argument may be a deadline that has passed;
// aheadMs is how far ahead aheadOf puts it (unlike any probe's TTL).
const (
	pastSpan = 10 * 365 * 24 * 3600 * 1000
	aheadMs  = 37_911
)

// aheadOf returns the arguments with every one that reads as a deadline
// already passed (an integer Unix time in ms or s, at most ten years ago)
// moved ahead of now. A script is classified by what it does with a
// deadline ahead: with one passed, an extend (PEXPIREAT) deletes the lock
// and would read as a release, which a late call must never be. The call
// itself is then judged with its own deadline (Class.TTL: nothing left).
func aheadOf(argv []string, now int64) []string {
	var out []string
	for i, a := range argv {
		n, ok := parseInt(a)
		if !ok {
			continue
		}
		var ahead int64
		switch {
		case n >= now-pastSpan && n <= now:
			ahead = now + aheadMs
		case n >= (now-pastSpan)/1000 && n <= now/1000:
			ahead = now/1000 + aheadMs/1000
		default:
			continue
		}
		if out == nil {
			out = slices.Clone(argv)
		}
		out[i] = strconv.FormatInt(ahead, 10)
	}
	if out == nil {
		return argv
	}
	return out
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
	var constant *Class
	for _, cl := range cands {
		c.cur = cl
		ref := c.refine(cl)
		if ref == nil {
			ref = c.verify(cl)
		}
		if ref == nil {
			ref = c.controls(cl)
		}
		if ref == nil && cl.Role.Query() && cl.Tokens != nil && sameReplies(cl) {
			// A query whose reply is the same in every case says nothing
			// of its token: another argument may be the token.
			if constant == nil {
				constant = cl
			}
			continue
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
	if constant != nil {
		return constant, nil
	}
	return nil, first
}

// sameReplies reports whether a class replies the same in every case.
func sameReplies(cl *Class) bool {
	var first string
	for i, cs := range cl.Cases() {
		t := cl.Replies[cs]
		if t == nil {
			return false
		}
		if i == 0 {
			first = t.String()
		} else if t.String() != first {
			return false
		}
	}
	return true
}

// keySpec is the probe state of one key.
type keySpec struct {
	held  bool
	value string
	ttl   int64 // ms; 0: no TTL; < 0: expired
	// zset: the key is a sorted set of owners (ShapeOwners), each member
	// scored with its deadline: the caller (value) if mine, with ttl left;
	// others more owners, with more time left; marker, when not "", marks
	// the lock exclusive, scored like its owner.
	zset   bool
	mine   bool
	others int
	marker string
	// str: a string held by another value, whatever the candidate's shape.
	str bool
}

// otherOwners name the other owners of a probe's sorted set.
var otherOwners = [...]string{"other-holder-7f3a", "reader-b-51c2"}

func (c *classifier) state(keys []string, specs []keySpec) *State {
	st := &State{Now: c.now, Keys: map[string]Item{}}
	for k, s := range specs {
		if !s.held {
			continue
		}
		if s.zset {
			st.Keys[keys[k]] = c.ownersItem(s)
			continue
		}
		it := Item{Value: s.value}
		if c.cur != nil && c.cur.Shape == ShapeHash && !s.str {
			it = Item{Type: TypeHash, Hash: map[string]string{s.value: string(c.cur.fieldValue(strArgs(c.argv)))}}
		}
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

// ownersItem is the sorted set of a probe state.
func (c *classifier) ownersItem(s keySpec) Item {
	z := map[string]float64{}
	excl := float64(c.now + s.ttl)
	if s.mine {
		z[s.value] = float64(c.now + s.ttl)
	}
	for i := 0; i < s.others && i < len(otherOwners); i++ {
		d := ttlLong2 + int64(i)*1_000
		if s.ttl < 0 {
			d = s.ttl
		}
		z[otherOwners[i]] = float64(c.now + d)
		if i == 0 && !s.mine {
			excl = z[otherOwners[i]]
		}
	}
	if s.marker != "" {
		z[s.marker] = excl
	}
	top := math.Inf(-1)
	for _, v := range z {
		top = math.Max(top, v)
	}
	return Item{Type: TypeZset, Zset: z, At: int64(top)}
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
	c.zsetSeen = c.zsetSeen || res.zset
	c.hashSeen = c.hashSeen || res.hash
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
		case s.zset:
			parts = append(parts, who+" "+nm.ownersText(s, argv))
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

// ownersText describes a probe's sorted set of owners.
func (nm namer) ownersText(s keySpec, argv []string) string {
	var who []string
	if s.mine {
		who = append(who, fmt.Sprintf("%s (deadline in %d ms)", nm.valueText(s.value, argv), s.ttl))
	}
	if s.others == 1 {
		who = append(who, "another owner")
	} else if s.others > 1 {
		who = append(who, fmt.Sprintf("%d other owners", s.others))
	}
	mode := "shared"
	if s.marker != "" {
		mode = "exclusive, marked " + strconv.Quote(short(s.marker))
	}
	return "a sorted set of owners holding " + strings.Join(who, " and ") + ", " + mode
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
		case aok && a.Type != TypeString && (!bok || !a.equal(b)):
			parts = append(parts, fmt.Sprintf("made %s %s with %s", name, a, pttlText(after, key)))
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
		if ref != nil && wrongType(ref) && (c.hashSeen || c.zsetSeen) {
			continue // a script of hashes or sorted sets, given a string
		}
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
	if n == 1 && c.zsetSeen {
		// A lock kept as a sorted set of owners.
		if oc, ref := c.ownerCandidates(base, res.state); ref != nil || len(oc) > 0 {
			return oc, ref
		}
	}
	if c.hashSeen {
		// A lock kept as a hash whose one field is its owner.
		if hc := c.hashCandidates(base, res.state); len(hc) > 0 {
			return hc, nil
		}
	}
	if del := c.deleteCandidate(base, res.state); del != nil {
		return []*Class{del}, nil
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
	if cl.Shape == ShapeOwners {
		return c.refineOwners(cl)
	}
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
	for _, s := range c.p.strs {
		l := strings.ToLower(s)
		if s == "" || markerWords[l] || lockCommands[l] != nil || slices.Contains(c.argv, s) {
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
func (c *classifier) ownerCandidates(base func(Role) *Class, after *State) ([]*Class, *refusal) {
	key := c.keys[0]
	var out []*Class
	add := func(role Role, tok int, ttl *ttlArg, marker string) {
		cl := base(role)
		cl.Shape, cl.Marker, cl.Tokens = ShapeOwners, marker, []int{tok}
		if ttl != nil {
			cl.TTLArg, cl.TTLUnit, cl.Deadline = ttl.idx, ttl.unit, ttl.deadline
		}
		out = append(out, cl)
	}
	if it, ok := after.lookup(key); ok {
		if it.Type != TypeZset {
			return nil, nil
		}
		// Made from nothing: the caller's member, and maybe a marker with
		// the same score.
		var toks []int
		var score float64
		marker, others := "", 0
		for m, sc := range it.Zset {
			if i := argsEqual(c.argv, m); len(i) > 0 {
				toks, score = append(toks, i[0]), sc
			}
		}
		if len(toks) != 1 {
			return nil, nil
		}
		for m, sc := range it.Zset {
			if len(argsEqual(c.argv, m)) > 0 {
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
		roles, markers := []Role{RoleExtendOrAcquire, RoleAcquire}, []string{marker}
		if marker == "" {
			roles, markers = []Role{RoleShare, RoleExtendOrAcquire, RoleAcquire}, c.markers()
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
		st := &State{Now: c.now, Keys: map[string]Item{key: {Type: TypeZset, Zset: map[string]float64{a: float64(c.now + ttlLong1)}, At: c.now + ttlLong1}}}
		res, ref := c.run(c.keys, c.argv, st)
		if ref != nil {
			continue
		}
		it, ok := res.state.lookup(key)
		sc, mine := it.Zset[a]
		switch {
		case !ok || it.Type == TypeZset && !mine:
			for _, m := range c.markers() {
				add(RoleRelease, i, nil, m)
			}
		case it.Type == TypeZset && sc != float64(c.now+ttlLong1) && sc == float64(int64(sc)):
			ttls := ttlArgs(c.argv, int64(sc)-c.now, c.now)
			for _, m := range c.markers() {
				for j := range ttls {
					add(RoleExtend, i, &ttls[j], m)
				}
			}
		}
	}
	if len(out) > 0 {
		return out, nil
	}
	for _, i := range toks {
		for _, m := range c.markers() {
			add(RoleInspect, i, nil, m)
		}
	}
	return out, nil
}

// deleteCandidate proposes RoleDelete for a script that leaves every key
// gone, or set to expire within a millisecond, when another owner holds
// it: a forced delete (DEL in a script).
func (c *classifier) deleteCandidate(base func(Role) *Class, fromMissing *State) *Class {
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
		if !gone(res.state, k, c.now) {
			return nil
		}
	}
	return base(RoleDelete)
}

// gone reports whether a key is missing, or expires within ephemeralMs.
func gone(st *State, k string, now int64) bool {
	it, ok := st.lookup(k)
	return !ok || it.At != 0 && it.At <= now+ephemeralMs
}

// settled is a state as it stands once the keys that expire within
// ephemeralMs are gone (how RoleDelete is judged).
func settled(st *State) *State {
	out := st.clone()
	out.Now += ephemeralMs + 1
	for k := range out.Keys {
		out.lookup(k)
	}
	out.Now = st.Now
	return out
}

// ephemeralMs is how long a key may be left to live and still count as
// deleted: the shortest TTL Redis sets (PX 1). No lock is held in it.
const ephemeralMs = 1

// refineOwners settles, for a lock of several owners with a marker,
// whether an exclusive acquire takes a lock the caller holds shared alone
// (promotes) and whether a shared acquire takes one it holds exclusively
// (demotes).
func (c *classifier) refineOwners(cl *Class) *refusal {
	if cl.Marker == "" {
		if cl.Role == RoleShare {
			return refuse(refuseOther, "is a shared acquire of a sorted set without a marker for exclusive locks")
		}
		return nil
	}
	tok := cl.token(c.argv, 0)
	var ref *refusal
	switch cl.Role {
	case RoleAcquire, RoleExtendOrAcquire:
		cl.Promotes, ref = c.acted([]keySpec{{held: true, zset: true, mine: true, value: tok, ttl: ttlLong1}}, c.argv)
	case RoleShare:
		cl.Demotes, ref = c.acted([]keySpec{{held: true, zset: true, mine: true, value: tok, ttl: ttlLong1, marker: cl.Marker}}, c.argv)
	}
	return ref
}

// hashCandidates proposes classes of ShapeHash for a script that used hash
// commands: an acquire from what it made of missing keys (after), else a
// release or an extend from what it does to hashes whose one field is an
// argument, else a query.
func (c *classifier) hashCandidates(base func(Role) *Class, after *State) []*Class {
	n := len(c.keys)
	var out []*Class
	mk := func(role Role, tok []int) *Class {
		cl := base(role)
		cl.Shape, cl.Tokens, cl.FieldArg, cl.FieldValue = ShapeHash, tok, -1, "1"
		return cl
	}
	// Made from nothing: one field per key, an argument, with the same TTL.
	tok := make([]int, n)
	var d int64 = -1
	field, fieldArg := "", -1
	made := true
	for k, key := range c.keys {
		it, ok := after.lookup(key)
		if !ok || it.Type != TypeHash || len(it.Hash) != 1 || it.At == 0 || d >= 0 && it.At-c.now != d {
			made = false
			break
		}
		d = it.At - c.now
		for f, v := range it.Hash {
			i := argsEqual(c.argv, f)
			if len(i) == 0 {
				made = false
				break
			}
			tok[k], field = i[0], v
		}
	}
	if made {
		if i := argsEqual(c.argv, field); len(i) > 0 && !slices.Contains(tok, i[0]) {
			fieldArg = i[0]
		}
		for _, role := range []Role{RoleAcquire, RoleExtendOrAcquire} {
			if role == RoleExtendOrAcquire && n > 1 {
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
		toks = append(toks, uniformInts(n, i))
		st := &State{Now: c.now, Keys: map[string]Item{}}
		for _, key := range c.keys {
			st.Keys[key] = Item{Type: TypeHash, Hash: map[string]string{a: "1"}, At: c.now + ttlLong1}
		}
		res, ref := c.run(c.keys, c.argv, st)
		if ref != nil {
			continue
		}
		deleted, rearmed := 0, map[int64]int{}
		for _, key := range c.keys {
			it, ok := res.state.lookup(key)
			switch {
			case !ok:
				deleted++
			case it.Type == TypeHash && it.At != c.now+ttlLong1 && it.At != 0:
				rearmed[it.At-c.now]++
			}
		}
		if deleted == n {
			out = append(out, mk(RoleRelease, uniformInts(n, i)))
		}
		for d, cnt := range rearmed {
			if cnt != n {
				continue
			}
			for _, t := range ttlArgs(c.argv, d, c.now) {
				cl := mk(RoleExtend, uniformInts(n, i))
				cl.TTLArg, cl.TTLUnit, cl.Deadline = t.idx, t.unit, t.deadline
				out = append(out, cl)
			}
		}
	}
	if len(out) > 0 || n > 1 {
		return out
	}
	for _, t := range toks {
		out = append(out, mk(RoleInspect, t))
	}
	return out
}

// wrongType reports whether a run stopped on Redis's WRONGTYPE error.
func wrongType(r *refusal) bool { return strings.HasPrefix(r.redisErr, "WRONGTYPE") }
