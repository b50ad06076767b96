package proxy

import (
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/proxy/script"
	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Lock scripts as quorum operations. A script is classified once per
// shape of call (script.Registry); the backends then run the proxy's own
// reference script for its role, never the client's text, and the client
// gets the reply its script would have given on one Redis holding the
// majority's state.

// scriptCall is what an opScript needs besides the op.
type scriptCall struct {
	class    *script.Class
	nkeys    int
	detailed bool     // backends answer in detail (see script.Class.Detailed)
	lowMs    int64    // least PTTL that is not "too little", or 0
	keys     [][]byte // copies, kept only when a reply template shows them
	argv     [][]byte
	// readOnly: an extend whose TTL cannot leave any validity. The
	// backends only report the keys' states and the answer is the role's
	// failure: the caller's lock is left exactly as it was (an extend sent
	// as asked would re-arm it to that TTL and still be answered as
	// failed, shortening a lock its holder was told it still has).
	readOnly bool
	success  bool        // the decision, for a reply filled again as it leaves
	caseAt   script.Case // the case the reply was filled in
}

// undoOwnersScript undoes an acquire of a lock of several owners (a
// sorted set, script.ShapeOwners) where it took or joined the lock: the
// caller's member is removed, and the marker if it carries the caller's
// deadline (the acquire set both), and the key expires with its last
// member. ARGV: token, marker, then the TTL, how recent and the instant,
// as undoScript and undoLaterScript take them.
var undoOwnersScript = resp.NewScript([]byte(`local k, tok, marker = KEYS[1], ARGV[1], ARGV[2]
local s = redis.call('zscore', k, tok)
if not s then return 0 end
redis.call('zrem', k, tok)
if marker ~= '' and redis.call('zscore', k, marker) == s then redis.call('zrem', k, marker) end
local top = redis.call('zrevrange', k, 0, 0, 'withscores')[2]
if top then redis.call('pexpireat', k, top) end
return 1`))

// undoOwnersLaterScript is undoOwnersScript for a later connection, as
// undoLaterScript is undoScript's: the caller's member is this attempt's
// if its deadline says it was set (deadline - ttl, on the master's clock)
// before the attempt's reply could leave, or within the last ARGV[4] ms.
var undoOwnersLaterScript = resp.NewScript([]byte(`local k, tok, marker = KEYS[1], ARGV[1], ARGV[2]
local s = redis.call('zscore', k, tok)
if not s then return 0 end
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl, p = tonumber(ARGV[3]), tonumber(s) - now
if not (p >= 0 and p <= ttl and (p >= ttl - tonumber(ARGV[4]) or now - (ttl - p) <= tonumber(ARGV[5]))) then return 0 end
redis.call('zrem', k, tok)
if marker ~= '' and redis.call('zscore', k, marker) == s then redis.call('zrem', k, marker) end
local top = redis.call('zrevrange', k, 0, 0, 'withscores')[2]
if top then redis.call('pexpireat', k, top) end
return 1`))

// undoHashScript undoes an acquire of hash locks (script.ShapeHash):
// each key is deleted if it is a hash whose one field is its token (ARGV:
// one token per key, then the TTL, how recent and the instant, as
// undoPerKeyScript).
var undoHashScript = resp.NewScript([]byte(`local n = 0
for i, k in ipairs(KEYS) do
  if redis.call('type', k).ok == 'hash' and redis.call('hlen', k) == 1 and redis.call('hexists', k, ARGV[i]) == 1 then
    n = n + redis.call('del', k)
  end
end
return n`))

// undoHashLaterScript is undoHashScript for a later connection, as
// undoPerKeyLaterScript is undoPerKeyScript's.
var undoHashLaterScript = resp.NewScript([]byte(`local n = 0
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[#KEYS + 1])
for i, k in ipairs(KEYS) do
  if redis.call('type', k).ok == 'hash' and redis.call('hlen', k) == 1 and redis.call('hexists', k, ARGV[i]) == 1 then
    local p = redis.call('pttl', k)
    if p >= 0 and p <= ttl and (p >= ttl - tonumber(ARGV[#KEYS + 2]) or now - (ttl - p) <= tonumber(ARGV[#KEYS + 3])) then n = n + redis.call('del', k) end
  end
end
return n`))

// undoPerKeyScript undoes an acquire whose keys have different tokens:
// each key is deleted if it still holds its own.
var undoPerKeyScript = resp.NewScript([]byte(`local n = 0
for i, k in ipairs(KEYS) do
  if redis.call('get', k) == ARGV[i] then n = n + redis.call('del', k) end
end
return n`))

// undoPerKeyLaterScript is undoPerKeyScript for a later connection, as
// undoLaterScript is undoScript's: a key is deleted only if it was set
// recently enough to be this attempt's (ARGV: one token per key, then the
// TTL and how recent, in ms), so a retry with the same token that another
// proxy granted since is spared.
var undoPerKeyLaterScript = resp.NewScript([]byte(`local n = 0
local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local ttl = tonumber(ARGV[#KEYS + 1])
for i, k in ipairs(KEYS) do
  if redis.call('get', k) == ARGV[i] then
    local p = redis.call('pttl', k)
    if p >= 0 and p <= ttl and (p >= ttl - tonumber(ARGV[#KEYS + 2]) or now - (ttl - p) <= tonumber(ARGV[#KEYS + 3])) then n = n + redis.call('del', k) end
  end
end
return n`))

func cmdEval(c *client, args [][]byte) {
	if len(args[1]) > c.s.cfg.Limits.MaxBulk {
		c.replyErr(msgScriptTooLong)
		return
	}
	runScript(c, c.s.cfg.Scripts.Load(args[1], true), args)
}

func cmdEvalSha(c *client, args [][]byte) {
	e := c.s.cfg.Scripts.BySha(args[1])
	if e == nil {
		c.replyErr(msgNoScript)
		return
	}
	runScript(c, e, args)
}

// msgRefused is the error a refused script gets: why, and where to look.
func msgRefused(ref *script.Refusal) string {
	return "ERR redlock-proxy: unknown " + ref.Error() + ". The proxy runs a script only as a lock operation it recognizes " +
		"(SCRIPT EXPLAIN " + ref.Sha + " numkeys key... arg... shows how it read this one); a lock script it cannot read can be " +
		"declared by hand under 'scripts:' in the configuration"
}

// msgVoteRefused is the error of a script that the vote policy's guard
// will not run.
func msgVoteRefused(ref *script.Refusal) string {
	return "ERR redlock-proxy: " + ref.Error() + ": a voted script may use the lock commands on its own keys only " +
		"(SCRIPT EXPLAIN " + ref.Sha + " numkeys key... arg... shows why the classifier refused it; 'scripts:' in the configuration declares a lock script by hand)"
}

// runScript runs a script's call: args is EVAL or EVALSHA with its
// numkeys, keys and arguments.
func runScript(c *client, e *script.Entry, args [][]byte) {
	numkeys, ok := resp.ParseInt(args[2])
	switch {
	case !ok:
		c.replyErr(msgNotInteger)
		return
	case numkeys < 0:
		c.replyErr(msgNumkeysNegative)
		return
	case numkeys > int64(len(args)-3):
		c.replyErr(msgNumkeysTooBig)
		return
	}
	if reservedKey(args, 3, 2+int(numkeys), 1) {
		c.replyErr(msgReservedKey)
		return
	}
	keys := args[3 : 3+numkeys]
	argv := args[3+numkeys:]
	if c.s.cfg.Cluster && !keyslot.Same(keys) {
		c.replyErr(msgCrossSlot)
		return
	}
	cl := e.Lookup(keys, argv)
	if cl == nil {
		if e.Body == nil {
			// Known by a library fact for other arguments: the client
			// sends the text on NOSCRIPT, and it is classified then.
			c.replyErr(msgNoScript)
			return
		}
		var ref *script.Refusal
		cl, ref = c.s.cfg.Scripts.Classify(e, keys, argv)
		if ref != nil {
			if e.FirstRefusal() {
				c.s.cfg.Logger.Info("script refused", "sha", e.Sha, "reason", ref.Reason)
			}
			if c.s.cfg.VoteUnknownScripts && !ref.NoTTL {
				startVote(c, e, args)
				return
			}
			c.replyErr(msgRefused(ref))
			return
		}
	}
	keys, argv = cl.Split(keys, argv)
	startClassOp(c, cl.Role.String(), cl, keys, argv)
}

// startVote runs a script the classifier refused on every backend, under
// the vote policy: the client's text as the guard writes it back, which
// checks every command it runs (script.Guard), and the reply a majority
// gave.
func startVote(c *client, e *script.Entry, args [][]byte) {
	sc, ref := e.Guarded(reservedPrefix, c.s.cfg.MaxTTL.Milliseconds())
	if ref != nil {
		c.replyErr(msgVoteRefused(ref))
		return
	}
	c.reserve(1)
	o := c.s.eng.newOp("vote", opVote, c.done)
	c.cmd = appendEvalSha(c.cmd[:0], sc.Sha, args[2:])
	c.startOp(o, c.cmd, sc)
}

// startClassOp runs a call of a classified script as its role: the
// reference script on every backend.
func startClassOp(c *client, name string, cl *script.Class, keys, argv [][]byte) {
	var a script.CallArgs
	var ttl time.Duration
	if cl.Writes() {
		var ok bool
		// A deadline's TTL is what is left of it now (max_ttl bounds that).
		ttl, ok = cl.TTL(argv)
		if !ok {
			c.replyErr(msgNotInteger)
			return
		}
		if ttl > c.s.cfg.MaxTTL {
			c.replyErr(msgTTLTooLong(ttl.Milliseconds(), c.s.cfg.MaxTTL.Milliseconds()))
			return
		}
		if ttl <= 0 && cl.Role == script.RoleAcquire {
			// A deadline already passed: on one Redis the keys would be set
			// and gone at once, so nothing is written anywhere and the
			// client gets what its script answers in the keys' case (the
			// acquire's success where they are free). An extend of that kind
			// is sent as a read below and answered as the role's failure: it
			// never shortens a lock.
			cl, ttl = cl.Lapsed(), 0
		}
		a.TTLms = ttl.Milliseconds()
	}
	var tokens [][]byte // the tokens an acquiring role writes, one per key
	if cl.Role.Takes() {
		tokens = cl.TokensOf(argv, len(keys))
		for _, tok := range tokens {
			if len(tok) > c.s.cfg.Limits.MaxToken {
				c.replyErr(msgTokenTooLong(len(tok), c.s.cfg.Limits.MaxToken))
				return
			}
		}
	}
	low, ok := cl.Threshold(argv)
	if !ok {
		c.replyErr(msgNotInteger)
		return
	}
	a.LowMs = low
	a.CapMs = c.s.cfg.MaxTTL.Milliseconds()
	a.Detailed = cl.Detailed(len(keys))
	a.MaxValue = c.s.cfg.Limits.MaxToken
	a.Companion = fenceStatePrefix // FENCE's state lives as long as its lock
	var second []byte
	if cl.Role.Extends() {
		t := c.s.eng.timing
		a.ReadOnly = !t.Valid(t.Validity(ttl, 0))
		if !a.ReadOnly && cl.SetsTTL() {
			// Two steps: the first never shortens a lock; once the extend
			// succeeded, the second sets the TTL asked where the first kept
			// it longer and nothing touched it since (see
			// script.AppendSecondStep).
			a.Nonce = newNonce()
			second = cl.AppendSecondStep(nil, keys, argv, a)
		}
	}

	c.reserve(1)
	o := c.s.eng.newOp(name, opScript, c.done)
	o.sc = scriptCall{class: cl, nkeys: len(keys), detailed: a.Detailed, lowMs: low, readOnly: a.ReadOnly}
	o.ttl = ttl
	o.secondStep = second
	if cl.NeedsArgs() {
		o.sc.keys, o.sc.argv = cloneArgs(keys), cloneArgs(argv)
	}
	if cl.Role.Takes() && !a.ReadOnly {
		// A failed acquire is undone wherever it was not refused; a failed
		// extend-or-acquire, or any acquire of a lock of several owners,
		// only where the caller did not hold it before (see undoFate). A
		// failed extend never is: it would delete the caller's lock where
		// it is still valid.
		switch {
		case cl.Shape == script.ShapeHash:
			o.undoCmd = appendUndoCmd(o.undoBuf[:0], undoHashScript, keys, tokens, ttl)
			o.undoSc, o.laterSc = undoHashScript, undoHashLaterScript
		case cl.Shape == script.ShapeOwners:
			o.undoCmd = appendUndoCmd(o.undoBuf[:0], undoOwnersScript, keys, [][]byte{tokens[0], []byte(cl.Marker)}, ttl)
			o.undoSc, o.laterSc = undoOwnersScript, undoOwnersLaterScript
		case sameAll(tokens):
			o.undoCmd = appendUndoCmd(o.undoBuf[:0], undoScript, keys, tokens[:1], ttl)
		default:
			o.undoCmd = appendUndoCmd(o.undoBuf[:0], undoPerKeyScript, keys, tokens, ttl)
			o.undoSc, o.laterSc = undoPerKeyScript, undoPerKeyLaterScript
		}
	}
	c.cmd = cl.AppendReference(c.cmd[:0], keys, argv, a)
	c.startOp(o, c.cmd, cl.ReferenceFor(a))
}

func sameAll(b [][]byte) bool {
	for _, x := range b[1:] {
		if string(x) != string(b[0]) {
			return false
		}
	}
	return true
}

func cloneArgs(a [][]byte) [][]byte {
	out := make([][]byte, len(a))
	for i, x := range a {
		out[i] = append([]byte(nil), x...)
	}
	return out
}

// appendEvalSha encodes EVALSHA sha followed by numkeys, keys and args.
func appendEvalSha(b []byte, sha string, rest [][]byte) []byte {
	b = resp.AppendArrayHeader(b, 2+len(rest))
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, sha)
	for _, a := range rest {
		b = resp.AppendBulk(b, a)
	}
	return b
}

// undoFate says whether a failed op may have taken effect on a backend and
// must be undone there. An extend-or-acquire is undone only where its
// answer says it took a free key: where it extended the caller's own lock,
// or where nothing is known, a compare-and-delete could delete a lock that
// is still valid.
func (o *op) undoFate(v quorum.Vote, r resp.Result) quorum.Fate {
	if o.kind != opScript || o.sc.class.Role != script.RoleExtendOrAcquire && o.sc.class.Shape == script.ShapeString {
		return fate(v, r)
	}
	switch {
	case r.Err != nil && r.Later:
		return quorum.FateOpen // its late reply will tell what it did
	case v != quorum.Granted || r.Err != nil:
		return quorum.FateClear
	}
	cs := script.Case(r.V.Int >> 1)
	if o.sc.detailed {
		cs = script.Case(r.V.Elems[1].Int)
	}
	if cs == script.CaseMissing || cs == script.CaseOtherShared {
		return quorum.FateHolds // it took the lock, or joined it: the caller held nothing there
	}
	return quorum.FateClear
}

// scriptVote reads one backend's answer to a reference script: acted
// (granted) or not (refused); any other answer is unknown. A query's
// answer is always an answer.
func (o *op) scriptVote(v resp.Value) quorum.Vote {
	acted, ok := o.acted(v)
	switch {
	case !ok:
		return quorum.Unknown
	case o.sc.readOnly:
		return quorum.Refused
	case acted || o.sc.class.Role.Query():
		return quorum.Granted
	}
	return quorum.Refused
}

// acted reads the acted flag of a well-formed reference reply.
func (o *op) acted(v resp.Value) (bool, bool) {
	if !o.sc.detailed {
		return v.Int&1 == 1, v.Kind == resp.KindInt && v.Int >= 0 && v.Int>>1 < 64 && script.Case(v.Int>>1).Valid()
	}
	if v.Kind != resp.KindArray || len(v.Elems) != 1+4*o.sc.nkeys {
		return false, false
	}
	for k := 0; k < o.sc.nkeys; k++ {
		e := v.Elems[1+4*k:]
		if e[0].Kind != resp.KindInt || e[1].Kind != resp.KindInt || e[3].Kind != resp.KindInt ||
			(e[2].Kind != resp.KindBulk && e[2].Kind != resp.KindNil) || e[0].Int < 0 || e[0].Int >= 64 || !script.Case(e[0].Int).Valid() {
			return false, false
		}
	}
	return v.Elems[0].Kind == resp.KindInt && v.Elems[0].Int == 1, v.Elems[0].Kind == resp.KindInt
}

// scriptValidityBound: acquire and extend roles need validity left.
func (o *op) scriptValidityBound() bool {
	return o.sc.class.Writes() && o.ttl > 0
}

// decideQueryLocked answers a read-only script once every backend has
// answered, from the majority's state.
func (o *op) decideQueryLocked() bool {
	if !o.tally.Done() || o.awaitsVeto() {
		return false
	}
	o.result = o.scriptReplyLocked(true)
	return true
}

// scriptReplyLocked is the reply to the client at the decision; a reply
// that shows a TTL is filled again when it leaves (ttlReply), so that it
// never reports more than remains.
func (o *op) scriptReplyLocked(success bool) resp.Value {
	o.sc.success = success
	var now time.Time
	if o.sc.detailed {
		now = time.Now() // a compact answer shows no TTL: no clock needed
	}
	v := o.scriptReplyAt(success, now)
	if o.sc.class.Timed(o.sc.caseAt) {
		o.timed = true
	}
	return v
}

// keyObs is what one backend said of one key.
type keyObs struct {
	cs       script.Case
	pttl     int64
	value    []byte
	hasValue bool
	after    int64
}

// obs reads backend i's state of key k; ok is false when the backend's
// answer does not count.
func (o *op) obs(i, k int) (keyObs, bool) {
	vote, counted := o.tally.Vote(i)
	if !counted || vote == quorum.Pending || vote == quorum.Unknown {
		return keyObs{}, false
	}
	v := o.replies[i]
	if !o.sc.detailed {
		return keyObs{cs: script.Case(v.Int >> 1)}, true
	}
	e := v.Elems[1+4*k:]
	return keyObs{cs: script.Case(e[0].Int), pttl: e[1].Int, value: e[2].Str, hasValue: e[2].Kind == resp.KindBulk, after: e[3].Int}, true
}

// holder is a case without its TTL detail: missing, own or other.
func holder(c script.Case) script.Case {
	switch c {
	case script.CaseOwn, script.CaseOwnNoTTL, script.CaseOwnLowTTL:
		return script.CaseOwn
	case script.CaseOther, script.CaseOtherNoTTL, script.CaseOtherLowTTL:
		return script.CaseOther
	case script.CaseOwnShared, script.CaseOwnSharedOthers, script.CaseOtherShared:
		return c // a lock of several owners: each case on its own
	}
	return script.CaseMissing
}

// ttlRank orders a key's TTL cases from most time left to least.
func ttlRank(c script.Case) int {
	switch c {
	case script.CaseOwnNoTTL, script.CaseOtherNoTTL:
		return 0
	case script.CaseOwnLowTTL, script.CaseOtherLowTTL:
		return 2
	}
	return 1
}

// majorityKey is the state a majority of counted backends agree key k is
// in: who holds it (and, answered in detail, the same value), its TTL case
// from the majority-th most time left, and that PTTL before and after.
func (o *op) majorityKey(k int, elapsed time.Duration) (keyObs, bool) {
	ob, ok := o.majorityKeyOfBackends(k, elapsed)
	if holder(ob.cs) == script.CaseMissing {
		// A lock that only the upgrade's veto holds is an old client's.
		if v, vok := o.vetoObs(k); vok && holder(v.cs) != script.CaseMissing {
			return v, true
		}
	}
	return ob, ok
}

// majorityKeyOfBackends is majorityKey among the voting backends.
func (o *op) majorityKeyOfBackends(k int, elapsed time.Duration) (keyObs, bool) {
	m := quorum.Majority(o.e.n)
	if !o.sc.detailed {
		return o.majorityCompact(m)
	}
	for i := range o.replies {
		a, ok := o.obs(i, k)
		if !ok {
			continue
		}
		h := holder(a.cs)
		var ranks [3]int
		var pttls, afters []int64
		count := 0
		for j := range o.replies {
			b, ok := o.obs(j, k)
			if !ok || holder(b.cs) != h || (h == script.CaseOther && o.sc.detailed && string(b.value) != string(a.value)) {
				continue
			}
			count++
			ranks[ttlRank(b.cs)]++
			if o.sc.detailed {
				pttls = append(pttls, b.pttl)
				afters = append(afters, b.after)
			}
		}
		if count < m {
			continue
		}
		out := a
		switch {
		case h == script.CaseMissing:
			out.cs = script.CaseMissing
		case ranks[0] >= m:
			out.cs = h + 1 // no TTL
		case ranks[0]+ranks[1] >= m:
			out.cs = h
		default:
			out.cs = h + 2 // too little left
		}
		if o.sc.detailed {
			out.pttl = o.validityLeft(majorityPTTL(o.e.n, pttls), elapsed)
			out.after = o.validityLeft(majorityPTTL(o.e.n, afters), elapsed)
		}
		return out, true
	}
	return keyObs{cs: script.CaseMissing, pttl: -2, after: -2}, false
}

// majorityCompact is majorityKey for compact answers (one key, cases
// only), in one pass.
func (o *op) majorityCompact(m int) (keyObs, bool) {
	var counts [numCaseCodes]int
	for i := range o.replies {
		if a, ok := o.obs(i, 0); ok && int(a.cs) < len(counts) {
			counts[a.cs]++
		}
	}
	if counts[script.CaseMissing] >= m {
		return keyObs{cs: script.CaseMissing}, true
	}
	for _, h := range []script.Case{script.CaseOwn, script.CaseOther} {
		noTTL, ok, low := counts[h+1], counts[h], counts[h+2]
		switch {
		case noTTL >= m:
			return keyObs{cs: h + 1}, true
		case noTTL+ok >= m:
			return keyObs{cs: h}, true
		case noTTL+ok+low >= m:
			return keyObs{cs: h + 2}, true
		}
	}
	for _, cs := range []script.Case{script.CaseOwnShared, script.CaseOwnSharedOthers, script.CaseOtherShared} {
		if counts[cs] >= m {
			return keyObs{cs: cs}, true
		}
	}
	return keyObs{cs: script.CaseMissing, pttl: -2, after: -2}, false
}

// numCaseCodes bounds the case codes a reference answer may give.
const numCaseCodes = 16

// majorityPTTL is how long a majority of the n backends will still hold
// the key, from the PTTLs (ms, -1 for none) of those that hold it: the one
// rule, quorum.MajorityTTL, in milliseconds.
func majorityPTTL(n int, ps []int64) int64 {
	ds := make([]time.Duration, len(ps))
	for i, p := range ps {
		ds[i] = time.Duration(p) * time.Millisecond
	}
	r, ok := quorum.MajorityTTL(n, ds)
	switch {
	case !ok:
		return -2
	case r == quorum.NoExpiry:
		return -1
	}
	return r.Milliseconds()
}

// remaining turns a majority's PTTL into what a client may rely on.
func (o *op) validityLeft(p int64, elapsed time.Duration) int64 {
	if p < 0 {
		return p
	}
	return o.e.timing.RemainingValidity(time.Duration(p)*time.Millisecond, elapsed).Milliseconds()
}

// scriptReplyAt is the reply the client's script would have given on one
// Redis holding the majority's state at now, consistent with the decision.
func (o *op) scriptReplyAt(success bool, now time.Time) resp.Value {
	cl := o.sc.class
	elapsed := now.Sub(o.t1)
	sit := script.Situation{NKeys: o.sc.nkeys, Keys: o.sc.keys, Argv: o.sc.argv, RoundDown: true}
	var focus keyObs
	if o.sc.nkeys == 1 {
		focus, _ = o.majorityKey(0, elapsed)
		sit.Case = focus.cs
		if holder(focus.cs) == script.CaseOwn {
			sit.Count = 1
		}
	} else {
		states := make([]keyObs, o.sc.nkeys)
		cases := make([]script.Case, o.sc.nkeys)
		for k := range states {
			states[k], _ = o.majorityKey(k, elapsed)
			cases[k] = states[k].cs
			if holder(cases[k]) == script.CaseOwn {
				sit.Count++
			}
		}
		sit.Case, sit.Focus = cl.Combine(cases)
		focus = states[sit.Focus]
	}
	if !cl.Role.Query() && cl.Acts(sit.Case) != success {
		// The majority's state says otherwise than the vote (a split, a
		// lock granted too late): take the case most backends that voted
		// the decision's way were in.
		sit.Case, sit.Focus, focus = o.fallbackCase(success, elapsed)
	}
	o.sc.caseAt = sit.Case
	sit.PTTL, sit.PTTLAfter = focus.pttl, focus.after
	sit.Value, sit.HasValue = focus.value, focus.hasValue
	t := cl.Replies[sit.Case]
	if t == nil {
		return resp.ErrorValue(msgNoReplyForCase(sit.Case.String()))
	}
	return t.Fill(&sit)
}

// fallbackCase picks the case, among those whose outcome matches the
// decision, that the most counted backends were in; with none, the role's
// usual case for that outcome.
func (o *op) fallbackCase(success bool, elapsed time.Duration) (script.Case, int, keyObs) {
	cl := o.sc.class
	var counts [numCaseCodes]int
	var focus [numCaseCodes]int
	var first [numCaseCodes]keyObs
	cases := make([]script.Case, o.sc.nkeys)
	for i := range o.replies {
		ok := true
		for k := range cases {
			a, aok := o.obs(i, k)
			ok = ok && aok
			cases[k] = a.cs
		}
		if !ok {
			continue
		}
		cs, f := cl.Combine(cases)
		if cl.Acts(cs) != success || int(cs) >= len(counts) {
			continue
		}
		if counts[cs] == 0 {
			focus[cs] = f
			first[cs], _ = o.obs(i, f)
			first[cs].pttl = o.validityLeft(first[cs].pttl, elapsed)
			first[cs].after = o.validityLeft(first[cs].after, elapsed)
		}
		counts[cs]++
	}
	best := -1
	for cs := range counts {
		if counts[cs] > 0 && (best < 0 || counts[cs] > counts[best]) {
			best = cs
		}
	}
	if best >= 0 {
		return script.Case(best), focus[best], first[best]
	}
	cs := script.CaseMissing
	switch {
	case success && (cl.Role == script.RoleExtend || cl.Role == script.RoleRelease):
		cs = script.CaseOwn
	case !success && cl.Role.Takes():
		cs = script.CaseOther
	}
	return cs, 0, keyObs{cs: cs, pttl: -2, after: -2}
}

func cmdScript(c *client, args [][]byte) {
	sub := args[1]
	reg := c.s.cfg.Scripts
	switch {
	case is(sub, "load") && len(args) == 3:
		e := reg.Load(args[2], false)
		if !c.s.cfg.VoteUnknownScripts {
			if ref := reg.Check(e); ref != nil {
				c.replyErr(msgRefused(ref))
				return
			}
		}
		reg.Keep(e)
		c.reply(resp.BulkValue([]byte(e.Sha)))
	case is(sub, "exists") && len(args) >= 3:
		v := resp.Value{Kind: resp.KindArray, Elems: make([]resp.Value, 0, len(args)-2)}
		for _, sha := range args[2:] {
			n := int64(0)
			if reg.BySha(sha) != nil {
				n = 1
			}
			v.Elems = append(v.Elems, resp.IntValue(n))
		}
		c.reply(v)
	case is(sub, "explain") && len(args) >= 3:
		c.reply(explain(c, args[2], args[3:]))
	case is(sub, "flush") && len(args) <= 3:
		c.replyRaw(rawOK) // the proxy's cache holds what it classified; the backends only run its own scripts
	case is(sub, "kill") && len(args) == 2:
		c.replyErr(msgNotBusy)
	case is(sub, "help"):
		c.reply(helpReply("SCRIPT", "EXISTS <sha1> [<sha1> ...]", "EXPLAIN <sha1|script> [numkeys key ... arg ...]",
			"    Show how the proxy classified the script, or why it refused it.", "FLUSH [ASYNC|SYNC]", "KILL", "LOAD <script>"))
	case is(sub, "load") || is(sub, "exists") || is(sub, "flush") || is(sub, "kill") || is(sub, "explain"):
		c.replyErr(msgWrongArgs("script|" + string(resp.AppendLower(nil, sub))))
	default:
		c.replyErr(msgUnknownSubcommand(string(sub), "SCRIPT"))
	}
}

// explain answers SCRIPT EXPLAIN: the classification of a script (by
// sha1 or text), for the call given or for every call shape seen.
func explain(c *client, target []byte, call [][]byte) resp.Value {
	reg := c.s.cfg.Scripts
	e := reg.BySha(target)
	if e == nil && isSha1(target) {
		return resp.Value{Kind: resp.KindArray, Elems: []resp.Value{
			resp.BulkValue([]byte("script " + string(resp.AppendLower(nil, target)))),
			resp.BulkValue([]byte("not known here: send its text by EVAL or SCRIPT LOAD (or give the text to SCRIPT EXPLAIN)")),
		}}
	}
	if e == nil {
		e = reg.Load(target, false)
	}
	var lines []string
	add := func(s ...string) { lines = append(lines, s...) }
	add("script " + e.Sha)
	if len(call) > 0 {
		numkeys, ok := resp.ParseInt(call[0])
		if !ok || numkeys < 0 || numkeys > int64(len(call)-1) {
			return resp.ErrorValue(msgExplainNumkeys)
		}
		keys, argv := call[1:1+numkeys], call[1+numkeys:]
		cl := e.Lookup(keys, argv)
		var ref *script.Refusal
		if cl == nil {
			cl, ref = reg.Classify(e, keys, argv)
		}
		if ref != nil {
			add("refused: " + ref.Reason)
		} else {
			add(cl.Explain()...)
		}
	} else {
		classes, refusals := e.Known()
		if ref := reg.Check(e); ref != nil && e.Body != nil {
			refusals = append(refusals, ref)
		}
		for i, cl := range classes {
			if i > 0 || len(lines) > 1 {
				add("--")
			}
			add(cl.Explain()...)
		}
		for _, r := range refusals {
			add("refused: " + r.Reason)
		}
		if len(classes) == 0 && len(refusals) == 0 {
			add("not classified yet: the classification depends on the number of keys and the arguments;",
				"give them: SCRIPT EXPLAIN <sha1|script> numkeys key [key ...] [arg ...]")
		}
	}
	v := resp.Value{Kind: resp.KindArray}
	for _, l := range lines {
		v.Elems = append(v.Elems, resp.BulkValue([]byte(l)))
	}
	return v
}

func isSha1(b []byte) bool {
	if len(b) != 40 {
		return false
	}
	for _, c := range b {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F') {
			return false
		}
	}
	return true
}
