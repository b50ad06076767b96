package proxy

import (
	"fmt"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// scriptCommands run and manage lock scripts: a script runs only as a lock
// operation the classifier recognized (kind_script.go), or, under the vote
// policy, guarded (kind_vote.go).
var scriptCommands = []*commandDef{
	{name: "eval", arity: -3, flags: []string{"noscript", "movablekeys"}, fn: handleEval},
	{name: "evalsha", arity: -3, flags: []string{"noscript", "movablekeys"}, fn: handleEvalSha},
	{name: "script", arity: -2, flags: []string{"noscript"}, fn: handleScript},
}

func handleEval(c *client, args [][]byte) {
	if len(args[1]) > c.s.cfg.Limits.MaxBulk {
		c.replyErr(msgScriptTooLong)
		return
	}
	runScript(c, c.s.cfg.Scripts.Load(args[1], true), args)
}

func handleEvalSha(c *client, args [][]byte) {
	e := c.s.cfg.Scripts.BySha(args[1])
	if e == nil {
		c.replyErr(msgNoScript)
		return
	}
	runScript(c, e, args)
}

// runScript runs a script's call: args is EVAL or EVALSHA with its
// numkeys, keys and arguments.
func runScript(c *client, e *classify.Entry, args [][]byte) {
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
	lay := classify.RWLayout(len(keys), len(argv))
	var rwWhy string
	var rwDerived bool
	if lay != nil {
		if rwWhy, rwDerived = e.RWCheck(lay); rwWhy == "" {
			startRWScript(c, lay, keys, argv)
			return
		}
	}
	cl := e.Lookup(keys, argv)
	if cl == nil {
		if s := c.s.sems.Lookup(e.Sha, keys, argv); s != nil {
			startSemScript(c, s, keys, argv)
			return
		}
		if e.Body == nil {
			// Known by a library fact for other arguments: the client
			// sends the text on NOSCRIPT, and it is classified then.
			c.replyErr(msgNoScript)
			return
		}
		// A TTL argument that is no TTL (0 or less: refused as SET without
		// an expiry is; not a number: Redis's error) gets its error, whether
		// a classification of the same shape reads it (the call stands in
		// other relations) or the call's own classification fails.
		if tc := e.TTLReader(keys, argv); tc != nil {
			if _, args := tc.Split(keys, argv); !validTTL(tc, args) {
				c.replyErr(ttlArgError(tc, args))
				return
			}
		}
		reg := c.s.cfg.Scripts
		var ref *sandbox.Refusal
		cl, ref = reg.Classify(e, keys, argv)
		if ref != nil && rwDerived {
			ref = rwRefusal(ref, lay, rwWhy)
		}
		if ref != nil {
			if arg, ok := reg.NoExpiry(e, keys, argv); ok {
				c.replyErr(msgScriptNeedsExpiry(arg))
				return
			}
			if s, why := c.s.sems.Classify(e, keys, argv); s != nil {
				if s.Role != classify.SemUnknown {
					startSemScript(c, s, keys, argv)
					return
				}
				// A semaphore the proxy refuses is never voted on: a
				// plain majority lets more than its limit in.
				ref = &sandbox.Refusal{Sha: e.Sha, Reason: why}
				if e.FirstRefusal() {
					c.s.cfg.Logger.Info("script refused", "sha", e.Sha, "reason", ref.Reason)
				}
				c.replyErr(msgRefused(ref))
				return
			}
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
// checks every command it runs (guard.Script), and the reply a majority
// gave.
func startVote(c *client, e *classify.Entry, args [][]byte) {
	sc, ref := e.Guarded(reservedPrefix, c.s.cfg.MaxTTL.Milliseconds())
	if ref != nil {
		c.replyErr(msgVoteRefused(ref))
		return
	}
	c.reserve(1)
	o := c.s.eng.newOp("vote", ruleVote, c.done)
	// What TTL it leaves is unknown: the guard lets it set up to max_ttl,
	// so that is the deadline its masters record.
	o.longest = c.s.cfg.MaxTTL
	c.cmd = appendEvalSha(c.cmd[:0], sc.Sha, args[2:])
	c.startOp(o, c.cmd, sc)
}

// validTTL reports whether a call's TTL argument is one (a positive
// integer; a deadline's, whether passed or not, is judged later).
func validTTL(cl *spec.Class, args [][]byte) bool {
	if cl.Deadline {
		if cl.TTLArg >= len(args) {
			return false
		}
		_, ok := resp.ParseInt(args[cl.TTLArg])
		return ok
	}
	_, ok := cl.TTL(args)
	return ok
}

// ttlArgError is the refusal of a call whose TTL argument is no positive
// TTL: a TTL of 0 or less asks for a lock that never expires (what such a
// script does on one Redis), which gets SET's refusal of a lock without an
// expiry; anything else is not a number.
func ttlArgError(cl *spec.Class, argv [][]byte) string {
	if arg, ok := cl.NoExpiry(argv); ok {
		return msgScriptNeedsExpiry(arg)
	}
	return msgNotInteger
}

// classCall is what a call of a classified script runs with, once its
// arguments are checked (prepareClassCall).
type classCall struct {
	cl      *spec.Class // the class (a lapsed deadline's: a read)
	a       spec.CallArgs
	ttl     time.Duration
	tokens  [][]byte // the tokens an acquiring role writes, one per key
	low     int64
	counted bool // a reentrant lock's take or release
}

// prepareClassCall checks a call's arguments as one Redis would read them
// and the proxy's bounds, and returns what it runs with, or the error to
// answer.
func prepareClassCall(c *client, cl *spec.Class, keys, argv [][]byte) (call classCall, msg string) {
	call.cl = cl
	var ttl time.Duration
	if cl.Writes() {
		var ok bool
		// A deadline's TTL is what is left of it now (max_ttl bounds that).
		ttl, ok = cl.TTL(argv)
		if !ok {
			return call, ttlArgError(cl, argv)
		}
		if ttl > c.s.cfg.MaxTTL {
			return call, msgTTLTooLong(ttl.Milliseconds(), c.s.cfg.MaxTTL.Milliseconds())
		}
		if ttl <= 0 && cl.Role == spec.RoleAcquire {
			// A deadline already passed: on one Redis the keys would be set
			// and gone at once, so nothing is written anywhere and the
			// client gets what its script answers in the keys' case (the
			// acquire's success where they are free). An extend of that kind
			// is sent as a read below and answered as the role's failure: it
			// never shortens a lock.
			call.cl, ttl = cl.Lapsed(), 0
			cl = call.cl
		}
		call.a.TTLms = ttl.Milliseconds()
	}
	if cl.Role.Takes() {
		call.tokens = cl.TokensOf(argv, len(keys))
		for _, tok := range call.tokens {
			if len(tok) > c.s.cfg.Limits.MaxToken {
				return call, msgTokenTooLong(len(tok), c.s.cfg.Limits.MaxToken)
			}
		}
	}
	low, ok := cl.Threshold(argv)
	call.low = low
	if !ok {
		return call, msgNotInteger
	}
	call.a.LowMs = low
	call.a.CapMs = c.s.cfg.MaxTTL.Milliseconds()
	call.a.Detailed = cl.Detailed(len(keys))
	call.a.MaxValue = c.s.cfg.Limits.MaxToken
	call.a.Companion = fenceStatePrefix // FENCE's state lives as long as its lock
	call.counted = cl.Counted && (cl.Role == spec.RoleExtendOrAcquire || cl.Role == spec.RoleRelease)
	if call.counted && cl.Rearms() {
		// A release of one hold re-arms the lock while holds are left.
		rttl, ok := cl.TTL(argv)
		switch {
		case !ok:
			return call, msgNotInteger
		case rttl > c.s.cfg.MaxTTL:
			return call, msgTTLTooLong(rttl.Milliseconds(), c.s.cfg.MaxTTL.Milliseconds())
		}
		call.a.TTLms = rttl.Milliseconds()
	}
	if cl.Latch != nil {
		lt, ok := cl.LatchTTL(argv)
		switch {
		case !ok:
			return call, msgNotInteger
		case lt > c.s.cfg.MaxTTL:
			return call, msgLatchTooLong(lt.Milliseconds(), c.s.cfg.MaxTTL.Milliseconds())
		}
		call.a.Latch, call.a.LatchMs = argv[cl.Latch.Arg], lt.Milliseconds()
	}
	call.ttl = ttl
	return call, ""
}

// startClassOp runs a call of a classified script as its role: the
// reference script on every backend (a script whose keys are each on
// their own: one op per key, answered as an array).
func startClassOp(c *client, name string, cl *spec.Class, keys, argv [][]byte) {
	if cl.Each {
		startEachOp(c, name, cl, keys, argv)
		return
	}
	call, msg := prepareClassCall(c, cl, keys, argv)
	if msg != "" {
		c.replyErr(msg)
		return
	}
	startPreparedOp(c, name, call, keys, argv)
}

// startEachOp runs a call of a script whose keys are each on their own:
// each key as its own op, answered together as an array; an argument
// error of any key answers the call.
func startEachOp(c *client, name string, cl *spec.Class, keys, argv [][]byte) {
	calls := make([]classCall, len(keys))
	for k := range keys {
		var msg string
		if calls[k], msg = prepareClassCall(c, cl.EachKey(k), keys[k:k+1], argv); msg != "" {
			c.replyErr(msg)
			return
		}
	}
	c.reserve(len(keys)) // room for every op: none flushes before the others start
	mark := len(c.slots)
	for k := range keys {
		startPreparedOp(c, name, calls[k], keys[k:k+1], argv)
	}
	ops := make([]*op, 0, len(keys))
	for _, sl := range c.slots[mark:] {
		ops = append(ops, sl.op)
	}
	c.slots = append(c.slots[:mark], slot{ops: ops, each: true, resp3: c.resp3.Load()})
}

// startPreparedOp starts a checked call (prepareClassCall).
func startPreparedOp(c *client, name string, call classCall, keys, argv [][]byte) {
	cl, a, ttl, low, counted, tokens := call.cl, call.a, call.ttl, call.low, call.counted, call.tokens
	var second []byte
	if cl.Role.Extends() {
		t := c.s.eng.timing
		a.ReadOnly = !t.Valid(t.Validity(ttl, 0))
		if !a.ReadOnly && cl.SetsTTL() {
			// Two steps: the first never shortens a lock; once the extend
			// succeeded, the second sets the TTL asked where the first kept
			// it longer and nothing touched it since (see
			// spec.Class.AppendSecondStep).
			a.Nonce = newNonce()
			second = cl.AppendSecondStep(nil, keys, argv, a)
		}
	}

	c.reserve(1)
	o := c.s.eng.newOp(name, ruleScript, c.done)
	o.sc = scriptCall{class: cl, nkeys: len(keys), detailed: a.Detailed, lowMs: low, readOnly: a.ReadOnly}
	o.ttl = ttl
	if cl.Additive {
		o.longest = c.s.cfg.MaxTTL
	}
	o.secondStep = second
	if counted && !a.ReadOnly {
		a.Nonce = newNonce()
		o.sc.nonce = a.Nonce
		o.awaitAll = true
		if cl.Role == spec.RoleRelease {
			// A release that leaves holds re-arms the lock to its TTL.
			o.longest = time.Duration(a.TTLms) * time.Millisecond
		}
	}
	if cl.Notice != nil && cl.Notice.List {
		o.sc.signalTTL = min(cl.Notice.SignalTTL(argv), c.s.cfg.MaxTTL)
	}
	fenced := c.noteFenced(cl, keys, argv)
	if cl.NeedsArgs() || counted || cl.Notice != nil || fenced {
		o.sc.keys, o.sc.argv = cloneArgs(keys), cloneArgs(argv)
	}
	if cl.Role.Takes() && !a.ReadOnly {
		// A failed acquire is undone wherever it was not refused; a failed
		// extend-or-acquire, or any acquire of a lock of several owners,
		// only where the caller did not hold it before (see undoFate). A
		// failed extend never is: it would delete the caller's lock where
		// it is still valid.
		switch {
		case cl.Shape == spec.ShapeHash:
			o.undoCmd = appendUndoCmd(o.undoBuf[:0], undoHashScript, keys, tokens, ttl)
			o.undoSc, o.laterSc = undoHashScript, undoHashLaterScript
		case cl.Shape == spec.ShapeOwners:
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
	c.startOp(o, c.cmd, cl.ReferenceFor(len(keys), a))
	if fenced && !a.ReadOnly {
		// Its reply shows the grant's number: FENCE follows (fenced.go).
		c.slots[len(c.slots)-1].chain = chainGrant
		c.chains++
	}
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

func handleScript(c *client, args [][]byte) {
	sub := args[1]
	reg := c.s.cfg.Scripts
	switch {
	case is(sub, "load") && len(args) == 3:
		e := reg.Load(args[2], false)
		// A read-write lock script is one by what it does (classify.RWCheck).
		if !c.s.cfg.VoteUnknownScripts && len(e.RWRoles()) == 0 {
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
		lay := classify.RWLayout(len(keys), len(argv))
		var rwWhy string
		var rwDerived bool
		if lay != nil {
			if rwWhy, rwDerived = e.RWCheck(lay); rwWhy == "" {
				add(lay.String())
				if why := lay.Fits(keys, argv); why != "" {
					add("refused: " + why)
				}
				return explainLines(lines)
			}
		}
		cl := e.Lookup(keys, argv)
		var ref *sandbox.Refusal
		if cl == nil {
			cl, ref = reg.Classify(e, keys, argv)
			if ref != nil && rwDerived {
				ref = rwRefusal(ref, lay, rwWhy)
			}
		}
		if s := c.s.sems.Lookup(e.Sha, keys, argv); s != nil && cl == nil {
			add(s.String())
		} else if ref != nil {
			switch s, why := c.s.sems.Classify(e, keys, argv); {
			case s != nil && s.Role != classify.SemUnknown:
				add(s.String())
			case s != nil:
				add("refused: " + why)
			default:
				add("refused: " + ref.Reason)
			}
		} else {
			add(cl.Explain()...)
		}
	} else if lays := e.RWRoles(); len(lays) > 0 {
		for i, lay := range lays {
			if i > 0 {
				add("--")
			}
			add(lay.String())
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
		sems := c.s.sems.Known(e.Sha)
		for _, s := range sems {
			if len(lines) > 1 {
				add("--")
			}
			add(s.String())
		}
		for _, r := range refusals {
			add("refused: " + r.Reason)
		}
		if len(classes) == 0 && len(refusals) == 0 && len(sems) == 0 {
			add("not classified yet: the classification depends on the number of keys and the arguments;",
				"give them: SCRIPT EXPLAIN <sha1|script> numkeys key [key ...] [arg ...]")
		}
	}
	return explainLines(lines)
}

// explainLines is SCRIPT EXPLAIN's answer: one bulk string per line.
func explainLines(lines []string) resp.Value {
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

// rwRefusal adds to a refusal of a script that names keys after its lock,
// as a read-write lock's do, why it is not the read-write lock operation
// of its call's layout.
func rwRefusal(ref *sandbox.Refusal, lay *classify.RWLock, why string) *sandbox.Refusal {
	r := *ref
	r.Reason = fmt.Sprintf("%s; as a read-write lock's %s (Redisson's layout): %s", r.Reason, lay.Role, why)
	return &r
}
