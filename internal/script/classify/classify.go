package classify

import (
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Classification runs a script in the sandbox against probe states of its
// keys and sees what it does; see doc.go for why the probes suffice.

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
	p     *sandbox.Program
	keys  []string // the lock keys
	argv  []string // the arguments: KEYS after the lock keys, then ARGV
	extra int      // how many arguments come from KEYS
	names spec.Namer
	left  int
	r     *sandbox.Runner
	// now is the sandbox's clock for every run of this classification:
	// the real time (ms since the Unix epoch) when it started, so that a
	// deadline in the call's arguments (PXAT, PEXPIREAT) and TIME mean
	// what they mean on Redis.
	now int64
	// zsetSeen, hashSeen: a run called a sorted-set, a hash command.
	zsetSeen, hashSeen bool
	// cur is the candidate being checked: its shape decides how a probe
	// state's held keys are kept.
	cur *spec.Class
	// latchAt and counterAt are 1 + the argument (an index into argv: KEYS
	// after the lock keys) naming a side key, a latch (Layout.Latch) or a
	// counter (Layout.Counter), 0 for none; seq varies the counter's
	// count from one probe state to the next, so that a reply showing it
	// is told from a constant.
	latchAt, counterAt int
	seq                int64
	// signalAt is 1 + the argument naming a signal list the script pushes
	// onto (Notice.List), 0 for none.
	signalAt int
	// each, when set, classifies one key of a call of several keys each
	// on its own (each.go).
	each *eachFocus
}

// latchArg, counterArg and signalArg are the arguments naming the side
// keys, -1 for none.
func (c *classifier) latchArg() int   { return c.latchAt - 1 }
func (c *classifier) counterArg() int { return c.counterAt - 1 }
func (c *classifier) signalArg() int  { return c.signalAt - 1 }

// Classify says what a script does for a call with these keys and
// arguments, or why it is refused.
func Script(p *sandbox.Program, keys, argv []string) (*spec.Class, *sandbox.Refusal) {
	return classifyAt(p, keys, argv, time.Now().UnixMilli())
}

// classifyAt is Classify with the sandbox's clock at now.
func classifyAt(p *sandbox.Program, keys, argv []string, now int64) (*spec.Class, *sandbox.Refusal) {
	c := &classifier{p: p, keys: keys, argv: aheadOf(argv, now), left: classifyBudget, now: now}
	defer func() {
		if c.r != nil {
			c.r.Close()
		}
	}()
	cl, ref := c.lockKeys()
	if ref == nil {
		cl, ref = c.classify()
	}
	if ref != nil && ref.Kind == sandbox.RefuseOther && len(c.keys) > 1 && c.extra == 0 && c.left > 0 {
		// Several keys, maybe each on its own (Redisson's renewal of every
		// lock a client holds).
		if each, eref := c.classifyEach(); eref == nil {
			cl, ref = each, nil
		}
	}
	if ref != nil {
		return nil, &sandbox.Refusal{Sha: p.Sha, Reason: ref.Reason, NoTTL: ref.Kind == sandbox.RefuseNoTTL}
	}
	cl.KeyArgs = c.extra
	cl.Origin = "classified"
	// Trusted only for calls in the relations of this one (relations.go).
	cl.Rel = spec.NewRelations(p.Lits, keys, argv, len(c.keys), c.names)
	// And only for values within those its probes ran (spec.Seen).
	cl.Seen = c.seen(cl)
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
		n, ok := sandbox.ParseInt(a)
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
func (c *classifier) lockKeys() (*spec.Class, *sandbox.Stop) {
	if len(c.keys) < 2 {
		return nil, nil
	}
	used := map[string]bool{}
	pushed := -1 // a key the script pushes a signal onto
	values := append(append([]string{}, c.keys...), c.argv...)
	for i := -1; i < len(values); i++ {
		st := &sandbox.State{Now: c.now, Keys: map[string]sandbox.Item{}}
		if i >= 0 {
			for _, k := range c.keys {
				st.Keys[k] = sandbox.Item{Value: values[i], At: c.now + ttlLong1}
			}
		}
		res := c.p.RunKeyed(c.runner(), c.keys, len(c.keys), c.argv, st, min(sandbox.MaxSteps, c.left), sandbox.SideKeys{Detect: true})
		c.left -= res.Steps
		if res.Ref != nil && i >= 0 && res.Ref.Kind == sandbox.RefuseOther && !c.r.Broken {
			// A script of hashes given strings fails there: the other
			// states still tell which keys it uses.
			continue
		}
		// A key left without an expiry may be a counter (sides): the keys
		// the run used still count.
		if res.Ref != nil && res.Ref.Kind != sandbox.RefuseNoTTL || c.r.Broken {
			return nil, nil // the classification proper will say why
		}
		for k := range res.Touched {
			used[k] = true
		}
		for _, m := range res.State.Published {
			if m.List && pushed < 0 {
				pushed = slices.Index(c.keys, m.Channel)
			}
		}
	}
	// A latch or a counter beside the lock keys is no lock key: it is
	// passed as an argument, as a key the runs may use.
	latch, counter := c.sides(used)
	signal := -1
	if pushed > 0 {
		signal = pushed
	}
	for _, j := range [...]int{latch, counter, signal} {
		if j >= 0 {
			used[c.keys[j]] = false
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
	if latch >= m {
		c.latchAt = latch - m + 1
	}
	if counter >= m {
		c.counterAt = counter - m + 1
	}
	if signal >= m {
		c.signalAt = signal - m + 1
	}
	c.extra = len(c.keys) - m
	c.argv = append(append([]string{}, c.keys[m:]...), c.argv...)
	c.keys = c.keys[:m]
	c.names = spec.Namer{Lock: m, Extra: c.extra}
	return nil, nil
}

// runner returns the classification's interpreter, a new one after a
// run broke the last.
func (c *classifier) runner() *sandbox.Runner {
	if c.r == nil || c.r.Broken {
		if c.r != nil {
			c.r.Close()
		}
		c.r = sandbox.NewRunner()
	}
	return c.r
}

// sides finds, among the keys after the first that the runs used, a latch
// and a counter (Layout.Latch, Layout.Counter) by what the script does
// with each while every other key is missing: -1 where there is none.
// The battery then checks what it does with them in every probe.
func (c *classifier) sides(used map[string]bool) (latch, counter int) {
	latch, counter = -1, -1
	for j := 1; j < len(c.keys); j++ {
		switch {
		case !used[c.keys[j]]:
		case latch < 0 && c.isLatch(j):
			latch = j
		case counter < 0 && c.isCounter(j):
			counter = j
		}
	}
	return latch, counter
}

// sideRun runs the script with key j alone holding v.
func (c *classifier) sideRun(j int, v string) (sandbox.Result, *sandbox.State, bool) {
	st := &sandbox.State{Now: c.now, Keys: map[string]sandbox.Item{c.keys[j]: {Value: v, At: c.now + ttlLong1}}}
	res := c.p.RunOn(c.runner(), c.keys, c.argv, st, min(sandbox.MaxSteps, c.left))
	c.left -= res.Steps
	return res, st, res.Ref == nil && len(res.State.Published) == 0
}

// isLatch: with key j holding a number (and every other key missing) the
// script changes nothing and answers that number: a result recorded for
// a retry.
func (c *classifier) isLatch(j int) bool {
	for _, n := range []int64{7, 1} {
		res, st, ok := c.sideRun(j, strconv.FormatInt(n, 10))
		if !ok || !sameKeys(c.keys, st, res.State) || !res.Reply.Equal(resp.IntValue(n)) {
			return false
		}
	}
	return true
}

// isCounter: with key j holding a count (and every other key missing) the
// script adds one to it, and what it does otherwise and answers do not
// depend on the count, but for the new count in its reply.
func (c *classifier) isCounter(j int) bool {
	const a, b = 41, 1041
	ra, _, oka := c.sideRun(j, strconv.Itoa(a))
	rb, _, okb := c.sideRun(j, strconv.Itoa(b))
	if !oka || !okb {
		return false
	}
	for k, key := range c.keys {
		x, xok := ra.State.Lookup(key)
		y, yok := rb.State.Lookup(key)
		if k == j {
			if !xok || !yok || x.Value != strconv.Itoa(a+1) || y.Value != strconv.Itoa(b+1) {
				return false
			}
			continue
		}
		if xok != yok || !x.Equal(y) {
			return false
		}
	}
	return sameBut(ra.Reply, rb.Reply, a+1, b+1)
}

// sameBut reports whether two replies are equal, but for integers that are
// x in the first where they are y in the second.
func sameBut(p, q resp.Value, x, y int64) bool {
	if p.Kind == resp.KindInt && q.Kind == resp.KindInt && p.Int == x && q.Int == y {
		return true
	}
	if p.Kind != q.Kind || len(p.Elems) != len(q.Elems) {
		return false
	}
	if p.Kind != resp.KindArray {
		return p.Equal(q)
	}
	for i := range p.Elems {
		if !sameBut(p.Elems[i], q.Elems[i], x, y) {
			return false
		}
	}
	return true
}

func (c *classifier) classify() (*spec.Class, *sandbox.Stop) {
	n := len(c.keys)
	switch {
	case n == 0:
		return nil, sandbox.Refuse(sandbox.RefuseOther, "takes no keys: a lock script names its lock in KEYS")
	case n > MaxKeys:
		return nil, sandbox.Refuse(sandbox.RefuseOther, "takes %d keys; the classifier reads scripts of at most %d", n, MaxKeys)
	}
	seen := map[string]bool{}
	for _, k := range c.keys {
		if seen[k] {
			return nil, sandbox.Refuse(sandbox.RefuseOther, "is given the key %s twice", strconv.Quote(sandbox.Short(k)))
		}
		seen[k] = true
	}
	if c.extra > 0 && len(c.keys) > 1 {
		return nil, sandbox.Refuse(sandbox.RefuseOther, "takes arguments in KEYS after several lock keys, which the proxy does not read")
	}
	cands, ref := c.candidates()
	if ref != nil {
		return nil, ref
	}
	var first *sandbox.Stop
	var constant *spec.Class
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
		if ref.Kind != sandbox.RefuseOther || c.left <= 0 {
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
func sameReplies(cl *spec.Class) bool {
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
	// count: for a hash lock, how many times its owner holds it, as a
	// reentrant lock (Layout.Counted) counts (0 reads as 1, or, for a lock
	// that does not count, as the class's field value).
	count int
	// mode: for a hash lock, the hash also holds the field "mode" =
	// "write", as a read-write lock's write lock does (Redisson's
	// RReadWriteLock): the writer's when value is the caller's token.
	mode bool
}

// otherOwners name the other owners of a probe's sorted set.
var otherOwners = [...]string{"other-holder-7f3a", "reader-b-51c2"}

func (c *classifier) state(keys []string, specs []keySpec) *sandbox.State {
	st := &sandbox.State{Now: c.now, Keys: map[string]sandbox.Item{}}
	for k, s := range specs {
		if !s.held {
			continue
		}
		if s.zset {
			st.Keys[keys[k]] = c.ownersItem(s)
			continue
		}
		it := sandbox.Item{Value: s.value}
		if c.cur != nil && c.cur.Shape == spec.ShapeHash && !s.str {
			fv := string(c.cur.FieldValueOf(spec.StrArgs(c.argv)))
			if c.cur.Counted || s.count > 0 {
				fv = strconv.Itoa(max(1, s.count))
			}
			it = sandbox.Item{Type: sandbox.TypeHash, Hash: map[string]string{s.value: fv}}
			if s.mode {
				it.Hash[spec.ModeField] = "write"
			}
		}
		if s.ttl != 0 {
			it.At = c.now + s.ttl
		}
		st.Keys[keys[k]] = it
	}
	if c.counterArg() >= 0 {
		c.seq++
		st.Keys[c.argv[c.counterArg()]] = sandbox.Item{Value: strconv.FormatInt(1000+7*c.seq, 10)}
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
func (c *classifier) ownersItem(s keySpec) sandbox.Item {
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
	return sandbox.Item{Type: sandbox.TypeZset, Zset: z, At: int64(top)}
}

// run executes the script once, charging the classification's budget.
func (c *classifier) run(keys, argv []string, st *sandbox.State) (sandbox.Result, *sandbox.Stop) {
	if c.left <= 0 {
		return sandbox.Result{}, sandbox.Refuse(sandbox.RefuseBudget, "takes more than %d Lua instructions to classify", classifyBudget)
	}
	if c.each != nil {
		return c.focusRun(keys, argv, st)
	}
	var side sandbox.SideKeys
	if c.latchArg() >= 0 {
		side.Latch = argv[c.latchArg()]
	}
	if c.counterArg() >= 0 {
		side.Counter = argv[c.counterArg()]
	}
	if c.signalArg() >= 0 {
		side.Signal = argv[c.signalArg()]
	}
	res := c.p.RunKeyed(c.runner(), append(keys[:len(keys):len(keys)], argv[:c.extra]...), len(keys), argv[c.extra:], st, min(sandbox.MaxSteps, c.left), side)
	c.left -= res.Steps
	c.zsetSeen = c.zsetSeen || res.Zset
	c.hashSeen = c.hashSeen || res.Hash
	if res.Ref != nil {
		return res, res.Ref
	}
	return res, nil
}

// sameKeys reports whether two states agree on the given keys.
func sameKeys(keys []string, a, b *sandbox.State) bool {
	for _, k := range keys {
		x, xok := a.Lookup(k)
		y, yok := b.Lookup(k)
		if xok != yok || !x.Equal(y) {
			return false
		}
	}
	return true
}
