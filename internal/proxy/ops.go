package proxy

import (
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/netio"
	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// opKind selects how an op reads votes and decides.
type opKind uint8

const (
	opAcquire opKind = iota + 1 // SET NX PX: OK granted, nil refused
	opScript                    // a classified lock script, run as its role (scriptop.go)
	opGet                       // GET: the majority value
	opPTTL                      // PTTL/TTL: the majority's remaining validity
	opDel                       // DEL of one key: 1 granted, 0 refused
	opVote                      // an unknown script under the vote policy: the reply a majority agree on
)

// op is one client command fanned out to every backend. It receives one
// result per backend, decides as early as the outcome is known, answers
// the client through done, and arranges the undo of a failed acquisition.
// Results that arrive after the decision are recorded and, for a failed
// acquisition, already covered by the undo.
type op struct {
	e       *engine
	name    string // the client's command, for metrics
	kind    opKind
	sc      scriptCall // opScript: the classification and the call (scriptop.go)
	seconds bool       // TTL rather than PTTL
	// pastAcquire: a GET that answers a SET NX of a passed deadline, OK
	// where the majority holds nothing (see startPastAcquire).
	pastAcquire bool
	ttl         time.Duration // requested TTL (acquire, extend)
	undoCmd     []byte        // compare-and-delete of this attempt's keys and token
	undoSc      *resp.Script  // the script undoCmd runs, when not undoScript
	laterSc     *resp.Script  // and undoLaterScript
	// secondStep is an extend's second step (script.AppendSecondStep),
	// sent once its success leaves to the backends that granted it.
	secondStep []byte
	flags      netio.SendFlags // Tracked, when a tracking client's keys are read; Checked is added for grants
	// invKeys are invalidated, for clients tracking them, when the op
	// succeeds (invBy, the client that sent it, is spared under NOLOOP).
	invKeys [][]byte
	invBy   *client
	t1      time.Time
	done    chan<- struct{}

	// mu protects everything below it up to the fields set at the
	// decision: the backends' results arrive from their link goroutines
	// (Receive, Late), the settle timer fires in its own, and final runs in
	// the client's. A result never changes once recorded, the decision is
	// taken once (decided), and done is signalled once (signalled).
	mu          sync.Mutex
	tally       quorum.Tally // set up in place by Init: the op is never copied
	replies     []resp.Value
	via         []any // where each backend made of several servers ran it (resp.Result.Via), for its undo; nil when none is
	replyBuf    [8]resp.Value
	undoBuf     [192]byte // holds undoCmd for short keys and tokens
	decided     bool
	signalled   bool        // done was signalled
	settleTimer *time.Timer // bounds the wait for timed-out masters' fates
	settledAt   time.Time   // when the reply could first leave (see readyLocked)
	dispatched  bool
	undo        quorum.Undo // set up in place by Init, like tally: the backends and the veto
	result      resp.Value
	vetoVote    quorum.Vote // the veto's answer (veto.go), Pending until it comes
	vetoReply   resp.Value

	// Set at the decision, read by final in the client's goroutine after
	// the done signal.
	decidedAt time.Time
	outcome   string        // the result counted for metrics
	granted   bool          // a validity-bound op succeeded: final checks it again
	remaining time.Duration // a TTL read: the majority's remaining TTL, or quorum.NoExpiry
	timed     bool          // the reply is a TTL computed from remaining when it leaves
	unitTTL   time.Duration // the unit of a timed reply
}

// engine runs ops against the backends.
type engine struct {
	be       Backends
	n        int
	timing   quorum.Timing
	timeout  time.Duration
	stats    *stats
	maxToken int      // the bounded reads' limit, for their error message
	track    *tracker // client-side caching: invalidations of successful writes
	// veto is whether the backends have a veto, node n (the Redis the
	// clients used before the proxy, see veto.go).
	veto bool
}

// nodes is how many links a command goes to: the backends and the veto.
func (e *engine) nodes() int {
	if e.veto {
		return e.n + 1
	}
	return e.n
}

// newOp prepares an op in one allocation: its tally, replies and undo
// command live inside it for the usual handful of backends.
func (e *engine) newOp(name string, kind opKind, done chan<- struct{}) *op {
	o := &op{e: e, name: name, kind: kind, done: done}
	o.tally.Init(e.n)
	o.undo.Init(e.nodes())
	if e.n <= len(o.replyBuf) {
		o.replies = o.replyBuf[:e.n]
	} else {
		o.replies = make([]resp.Value, e.n)
	}
	return o
}

// start sends cmd to every backend. Decisions reached while sending (a
// backend that is down answers at once) take effect, but an undo waits
// until every backend has been sent the command, so that on each backend
// the undo runs after the command it undoes.
func (e *engine) start(o *op, cmd []byte, sc *resp.Script) {
	o.t1 = time.Now()
	deadline := o.t1.Add(e.timeout)
	if o.ttl > 0 {
		// Waiting longer than the TTL cannot produce a valid lock.
		deadline = minTime(deadline, o.t1.Add(o.ttl))
	}
	flags := o.flags
	if o.grants() {
		flags |= netio.Checked
	}
	for i := 0; i < e.nodes(); i++ {
		e.be.Send(i, cmd, sc, o, i, deadline, flags)
	}
	o.mu.Lock()
	o.dispatched = true
	undo := o.takeUndoLocked()
	o.mu.Unlock()
	o.sendUndo(undo)
}

// grants reports whether the op can take a free key (an acquisition, or
// an unknown script run under the vote policy): its votes count only once
// each backend showed, after running it, that its data went on unbroken.
// Releases, extends and reads cannot hand a lock to a second holder.
func (o *op) grants() bool {
	switch o.kind {
	case opAcquire, opVote:
		return true
	case opScript:
		r := o.sc.class.Role
		return !o.sc.readOnly && r.Takes()
	}
	return false
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Receive records one backend's result.
func (o *op) Receive(node int, r resp.Result) {
	o.mu.Lock()
	vote := o.classify(r)
	if r.Via != nil {
		o.setVia(node, r.Via)
	}
	if node == o.e.n {
		o.vetoVote, o.vetoReply = vote, r.V
	} else {
		o.replies[node] = r.V
		o.tally.Record(node, vote, r.Counts)
	}
	o.undo.Settle(node, o.undoFate(vote, r))
	if !o.decided {
		o.decided = o.decideLocked()
	}
	signal := o.readyLocked()
	undo := o.takeUndoLocked()
	o.mu.Unlock()
	o.sendUndo(undo)
	if signal {
		o.done <- struct{}{}
	}
}

// readyLocked reports, once, that the op's reply may be written: when it is
// decided; for an extend with a second step, once every node answered; for
// a failed acquisition, once every node's fate is known
// (a late reply, or the loss of the connection, settles a timed-out node).
// Until then the client cannot retry, so a later undo can tell this
// attempt's copies (set before settledAt) from a retry's with the same
// token (set after it).
func (o *op) readyLocked() bool {
	if !o.decided || o.signalled {
		return false
	}
	if o.secondStep != nil && o.granted && !o.tally.Done() {
		// An extend with a second step answers once every master answered
		// its first (or timed out): the second goes to each that granted
		// before the reply left, so that every master ends as one Redis
		// would, and never to one whose first step is still on its way.
		return false
	}
	if o.undoCmd != nil && o.undo.Failed() && !o.undo.Settled() {
		if o.settleTimer == nil {
			// A hung master may not settle for the link's dead-backend
			// delay: the client is not kept waiting past settleWait.
			o.settleTimer = time.AfterFunc(time.Until(o.t1.Add(o.e.timeout+settleWait(o.e.timeout))), o.settleNow)
		}
		return false
	}
	o.signalled = true
	o.settledAt = time.Now()
	if o.settleTimer != nil {
		o.settleTimer.Stop()
	}
	return true
}

// settleWait is how long past its deadline a failed acquisition waits for
// the fates of its timed-out masters before it answers anyway: long enough
// for a slow link, short enough for the client.
func settleWait(timeout time.Duration) time.Duration {
	return min(max(timeout, 100*time.Millisecond), time.Second)
}

// settleNow answers a failed acquisition whose masters have not all settled
// by settleWait after its deadline.
func (o *op) settleNow() {
	o.mu.Lock()
	signal := false
	if o.decided && !o.signalled {
		o.signalled = true
		o.settledAt = time.Now()
		signal = true
	}
	o.mu.Unlock()
	if signal {
		o.done <- struct{}{}
	}
}

func (o *op) classify(r resp.Result) quorum.Vote {
	if r.Err != nil {
		return quorum.Unknown
	}
	v := r.V
	switch o.kind {
	case opAcquire:
		switch {
		case v.IsOK():
			return quorum.Granted
		case v.Kind == resp.KindNil:
			return quorum.Refused
		}
	case opScript:
		return o.scriptVote(v)
	case opDel:
		if v.Kind == resp.KindInt {
			if v.Int > 0 {
				return quorum.Granted
			}
			return quorum.Refused
		}
	case opGet:
		if v.Kind == resp.KindBulk || v.Kind == resp.KindNil || tooLong(v) {
			return quorum.Granted // an answer; the value decides
		}
	case opPTTL:
		if (v.Kind == resp.KindArray && len(v.Elems) == 2 && v.Elems[1].Kind == resp.KindInt) || tooLong(v) {
			return quorum.Granted
		}
	case opVote:
		return quorum.Granted // an answer; agreement decides
	}
	return quorum.Unknown
}

// decideLocked sets the result once the outcome is known.
func (o *op) decideLocked() bool {
	switch {
	case o.kind == opGet || o.kind == opPTTL:
		return o.answered(o.decideReadLocked())
	case o.kind == opVote:
		return o.answered(o.decideVoteLocked())
	case o.kind == opScript && o.sc.class.Role.Query():
		return o.answered(o.decideQueryLocked())
	}
	var success bool
	outcome := o.tally.Outcome()
	if o.e.veto && o.vetoBinds() {
		outcome = quorum.WithVeto(outcome, o.vetoVote)
	}
	switch outcome {
	case quorum.Undecided:
		return false
	case quorum.Won:
		success = true
		if o.validityBound() {
			success = o.e.timing.Valid(o.e.timing.Validity(o.ttl, time.Since(o.t1)))
		}
	case quorum.Lost:
	}
	if !success {
		o.undoLocked()
	}
	o.result = o.reply(success)
	o.granted = success && o.validityBound()
	o.outcome = ResultGranted
	if !success {
		o.outcome = ResultNoQuorum
		if o.tally.Refused() >= quorum.Majority(o.e.n) {
			o.outcome = ResultRefused
		}
	}
	o.decidedAt = time.Now()
	return true
}

// undoLocked marks a failed acquisition for undo: every node where it may
// have taken effect gets a compare-and-delete, as soon as that is known
// (see quorum.Undo). Ops without an undo command (extends of every kind)
// are never undone: the nodes that extended hold the caller's own
// still-valid lock.
func (o *op) undoLocked() {
	if o.undoCmd != nil {
		o.undo.Fail()
	}
}

// Late records what became of a command after its timeout: a late grant,
// or a lost connection, of a failed acquisition is undone too.
func (o *op) Late(node int, r resp.Result) {
	o.mu.Lock()
	if r.Via != nil {
		o.setVia(node, r.Via)
	}
	o.undo.Settle(node, o.undoFate(o.classify(r), r))
	signal := o.readyLocked()
	undo := o.takeUndoLocked()
	o.mu.Unlock()
	o.sendUndo(undo)
	if signal {
		o.done <- struct{}{}
	}
}

// fate says, from one result, whether the command may have taken effect.
func fate(v quorum.Vote, r resp.Result) quorum.Fate {
	switch {
	case v == quorum.Granted:
		return quorum.FateHolds
	case v == quorum.Refused || r.Unsent:
		return quorum.FateClear
	case r.Later:
		return quorum.FateOpen // the late reply, or the connection's loss, will tell
	}
	return quorum.FateHolds // an error reply or a lost connection: it may have run
}

// final is the op's reply as it leaves for the client at now, after its
// done signal. Validity is judged here as well as at the decision: a grant
// whose reply waited behind slower commands of the same pipeline until its
// validity ran out is answered as a failure and undone, and a remaining
// TTL is reported as of now. It is called once per op, from the client's
// goroutine.
func (o *op) final(now time.Time) resp.Value {
	o.mu.Lock()
	if o.granted {
		validity := o.e.timing.Validity(o.ttl, now.Sub(o.t1))
		if o.e.stats != nil {
			o.e.stats.margin(o.ttl, validity)
		}
		// The client started counting before the proxy read its command,
		// and the reply still has to reach it: leave the drift floor for
		// the way there and back.
		if !o.e.timing.Valid(validity - o.e.timing.DriftFloor) {
			o.granted = false
			o.settledAt = now // the client learns of the failure now
			o.outcome = ResultNoQuorum
			o.result = o.reply(false)
			o.undoLocked()
			if o.e.stats != nil {
				o.e.stats.late.Add(1)
			}
		}
	}
	if o.timed {
		o.result = o.ttlReply(now)
	}
	undo := o.takeUndoLocked()
	v := o.result
	var second []int
	if o.granted && o.secondStep != nil {
		second = o.grantedNodesLocked()
	}
	written := o.invKeys != nil && o.outcome == ResultGranted
	o.mu.Unlock()
	o.sendUndo(undo)
	o.sendSecondStep(second, now)
	if written {
		o.invalidateWritten()
	}
	if o.e.stats != nil {
		o.e.stats.decided(o.name, o.outcome, o.decidedAt.Sub(o.t1))
	}
	return v
}

// ttlReply is a TTL read's remaining validity as of now, in the reply's
// unit, rounded down: never more than remains.
func (o *op) ttlReply(now time.Time) resp.Value {
	if o.kind == opScript {
		return o.scriptReplyAt(o.sc.success, now)
	}
	if o.remaining == quorum.NoExpiry {
		return resp.IntValue(-1)
	}
	return resp.IntValue(int64(o.e.timing.RemainingValidity(o.remaining, now.Sub(o.t1)) / o.unitTTL))
}

// answered sets the result counted for a decided read (or voted script),
// by the rule every command follows (see ResultNoQuorum): an answer that
// fewer than a majority of counted backends gave is no_quorum.
func (o *op) answered(decided bool) bool {
	if decided {
		switch {
		case o.result.Kind == resp.KindError:
			o.outcome = ResultError
		case o.tally.Granted()+o.tally.Refused() < quorum.Majority(o.e.n):
			o.outcome = ResultNoQuorum
		default:
			o.outcome = ResultOK
		}
		o.decidedAt = time.Now()
	}
	return decided
}

// validityBound reports whether success also needs validity left: for
// everything that sets a TTL.
func (o *op) validityBound() bool {
	if o.kind == opAcquire {
		return true
	}
	if o.kind == opScript {
		return o.scriptValidityBound()
	}
	return false
}

// reply is what one Redis holding the majority state would have said.
func (o *op) reply(success bool) resp.Value {
	switch o.kind {
	case opAcquire:
		if success {
			return resp.OK
		}
		return resp.Nil
	case opDel:
		if success {
			return resp.IntValue(1)
		}
		return resp.IntValue(0)
	}
	// A script: what one Redis in the majority's state would have replied.
	return o.scriptReplyLocked(success)
}

// tooLong reports the bounded read scripts' refusal of a value longer than
// max_token.
func tooLong(v resp.Value) bool {
	return v.Kind == resp.KindError && len(v.Str) >= 7 && string(v.Str[:7]) == "TOOLONG"
}

func (o *op) decideReadLocked() bool {
	hs := make([]quorum.Holding, o.e.n)
	for i := range hs {
		v, counted := o.tally.Vote(i)
		if v != quorum.Granted {
			continue
		}
		r := o.replies[i]
		if tooLong(r) {
			// Not a lock: no proxy wrote a value that long.
			o.result = resp.ErrorValue(msgValueTooLong(o.e.maxToken))
			return true
		}
		h := quorum.Holding{Answered: true, Counts: counted}
		switch o.kind {
		case opGet:
			h.Exists, h.Value = r.Kind == resp.KindBulk, r.Str
		case opPTTL:
			h.Exists, h.Value = r.Elems[0].Kind == resp.KindBulk, r.Elems[0].Str
			h.PTTL = time.Duration(r.Elems[1].Int) * time.Millisecond
			if r.Elems[1].Int == -1 {
				h.PTTL = quorum.NoExpiry
			}
		}
		hs[i] = h
	}
	switch o.kind {
	case opGet:
		if v, _, ok := quorum.MajorityValue(o.e.n, hs); ok {
			o.result = resp.BulkValue(v)
			if o.pastAcquire {
				o.result = resp.Nil // held
			}
			return true
		}
		if o.tally.Done() && !o.awaitsVeto() {
			o.result = resp.Nil
			if v, ok := o.vetoHolds(); ok {
				o.result = resp.BulkValue(v) // a lock taken on the old Redis directly
			}
			if o.pastAcquire && o.result.Kind == resp.KindNil && o.tally.Granted() >= quorum.Majority(o.e.n) {
				o.result = resp.OK // free on a majority: what one Redis answers, holding nothing
			} else if o.pastAcquire {
				o.result = resp.Nil
			}
			return true
		}
	case opPTTL:
		if !o.tally.Done() || o.awaitsVeto() {
			return false
		}
		v, rem, ok := quorum.MajorityRemaining(o.e.n, hs)
		if vv, vp, vok := o.vetoHoldsFor(); vok {
			switch {
			case !ok:
				v, rem, ok = vv, vp, true // a lock taken on the old Redis directly
			case string(vv) == string(v) && vp != quorum.NoExpiry && (rem == quorum.NoExpiry || vp < rem):
				rem = vp // the old Redis lets it go sooner
			}
		}
		if !ok {
			o.result = resp.IntValue(-2)
			return true
		}
		o.remaining, o.timed, o.unitTTL = rem, true, time.Millisecond
		if o.seconds {
			o.unitTTL = time.Second
		}
		return true
	}
	return false
}

// agreedLocked returns a reply that at least a majority of counted
// backends gave, with its vote, if there is one.
func (o *op) agreedLocked() (resp.Value, quorum.Vote, bool) {
	m := quorum.Majority(o.e.n)
	for i := range o.replies {
		v, counted := o.tally.Vote(i)
		if v == quorum.Pending || v == quorum.Unknown || !counted {
			continue
		}
		agree := 0
		for j := range o.replies {
			if w, c := o.tally.Vote(j); c && w != quorum.Pending && w != quorum.Unknown && o.replies[j].Equal(o.replies[i]) {
				agree++
			}
		}
		if agree >= m {
			return o.replies[i], v, true
		}
	}
	return resp.Value{}, quorum.Pending, false
}

// decideVoteLocked answers an unknown script with the reply a majority
// agree on, once there is one or every backend has answered.
func (o *op) decideVoteLocked() bool {
	if v, _, ok := o.agreedLocked(); ok {
		o.result = v
		return true
	}
	if !o.tally.Done() {
		return false
	}
	o.result = resp.ErrorValue(msgNoAgreedReply)
	return true
}
