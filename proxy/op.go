package proxy

import (
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// rules are one command kind's part of an op: how a backend's reply reads
// as a vote, when the op is decided and what it answers, what the op may do
// to its keys. Each kind has one file (kind_*.go). Everything else is the
// same for every kind and lives here: the fan-out, the tally, the undo
// lifecycle (undo.go), the settle timer, the extend's second step
// (secondstep.go) and the re-judgement of validity as the reply leaves
// (final).
type rules interface {
	// effects says what the op may do to its keys.
	effects(o *op) effect
	// vote reads one backend's reply (an error result is Unknown before
	// it gets here).
	vote(o *op, v resp.Value) quorum.Vote
	// decide sets o.result and o.outcome once the outcome is known, and
	// reports whether it is: by decideByMajority for grants, releases and
	// deletes, by the kind's own reading for reads (then answered).
	// Called with o.mu held.
	decide(o *op) bool
	// reply is the answer of one Redis in the majority's state, for a
	// success or a failure; final asks it again for a grant whose validity
	// ran out before the reply left.
	reply(o *op, success bool) resp.Value
	// refill is a timed reply (o.timed) again as it leaves at now: a TTL
	// never reports more than remains.
	refill(o *op, now time.Time) resp.Value
	// undoFate says whether a failed op may have taken effect on a
	// backend, from its vote and result, and must be undone there.
	undoFate(o *op, v quorum.Vote, r netio.Result) quorum.Fate
}

// effect is what an op may do to its keys.
type effect uint8

const (
	// effTakes: it can take a free key. Its votes count only once each
	// backend showed, after running it, that its data went on unbroken
	// (netio.Checked). Releases and reads cannot hand a lock to a second
	// holder; extends are checked too (effValidity), for the deadline they
	// record, and so are releases that re-arm what they leave (longest).
	effTakes effect = 1 << iota
	// effVeto: it can hand out or lengthen a lock, so under an upgrade its
	// success needs the old Redis's grant too (veto.go).
	effVeto
	// effValidity: its success needs validity left, at the decision and
	// again as the reply leaves (it sets a TTL).
	effValidity
	// effWrites: it may change its keys; its success invalidates them for
	// clients tracking them (tracking.go).
	effWrites
)

// outcomer is a kind whose grants are decided by more than their number
// (a semaphore's: by slot, see kind_sem.go).
type outcomer interface {
	outcome(o *op) quorum.Outcome
}

// plain gives a kind the defaults most share: the reply set at the
// decision, and an undo wherever the command may have run.
type plain struct{}

func (plain) reply(o *op, _ bool) resp.Value       { return o.result }
func (plain) refill(o *op, _ time.Time) resp.Value { return o.result }
func (plain) undoFate(_ *op, v quorum.Vote, r netio.Result) quorum.Fate {
	return fate(v, r)
}

// op is one client command fanned out to every backend. It receives one
// result per backend, decides as early as the outcome is known, answers
// the client through done, and arranges the undo of a failed acquisition.
// Results that arrive after the decision are recorded and, for a failed
// acquisition, already covered by the undo.
type op struct {
	e     *engine
	name  string        // the client's command, for metrics
	rules rules         // its kind's rules, one of the ruleX values (kind_*.go)
	sc    scriptCall    // a lock script's classification and call (kind_script.go)
	sem   *semCall      // a semaphore's operation (kind_sem.go)
	rw    *rwCall       // a read-write lock's operation (kind_rw.go)
	ttl   time.Duration // requested TTL (acquire, extend)
	// longest is the longest TTL it may leave on a key (an additive extend
	// adds to what is left, up to max_ttl; a voted script, up to max_ttl; a
	// release that leaves holds re-arms the lock); zero: ttl. Each master
	// records its deadline (netio.Records).
	longest time.Duration
	undoCmd []byte       // compare-and-delete of this attempt's keys and token
	undoSc  *resp.Script // the script undoCmd runs, when not undoScript
	laterSc *resp.Script // and undoLaterScript
	// secondStep is an extend's second step (spec.Class.AppendSecondStep),
	// sent once its success leaves to the backends that granted it.
	secondStep []byte
	flags      netio.SendFlags // Tracked, when a tracking client's keys are read; Checked is added for grants
	// invKeys are invalidated, for clients tracking them, when the op
	// succeeds (invBy, the client that sent it, is spared under NOLOOP).
	invKeys [][]byte
	invBy   *client
	// forcedBy is the client of a DEL (an operator's forced unlock) and
	// forcedKey its key: a DEL a majority carried out is logged (final).
	forcedBy  *client
	forcedKey []byte
	t1        time.Time
	done      chan<- struct{}

	// mu protects everything below it up to the fields set at the
	// decision: the backends' results arrive from their link goroutines
	// (Receive, Late), the settle timer fires in its own, and final runs in
	// the client's. A result never changes once recorded, the decision is
	// taken once (decided), and done is signalled once (signalled).
	mu          sync.Mutex
	tally       quorum.Tally // set up in place by Init: the op is never copied
	replies     []resp.Value
	via         []any // where each backend made of several servers ran it (netio.Result.Via), for its undo; nil when none is
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
	vetoCounts  bool // the veto's answer counts: its data went on unbroken for the hold

	// Set at the decision, read by final in the client's goroutine after
	// the done signal.
	decidedAt time.Time
	outcome   string        // the result counted for metrics
	granted   bool          // a validity-bound op succeeded: final checks it again
	remaining time.Duration // a TTL read: the majority's remaining TTL, or quorum.NoExpiry
	timed     bool          // the reply is a TTL computed from remaining when it leaves
	unitTTL   time.Duration // the unit of a timed reply

	// awaitAll: a reentrant lock's take or release, whose reply (held or
	// released: as the majority counts) and repair need every master's
	// count, answers once every master answered or timed out.
	awaitAll bool
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
func (e *engine) newOp(name string, r rules, done chan<- struct{}) *op {
	o := &op{e: e, name: name, rules: r, done: done}
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
	if eff := o.rules.effects(o); eff&(effTakes|effValidity) != 0 || o.longest > 0 {
		// A grant, an extend, or a release that re-arms what it leaves:
		// its votes count once each master showed its data went on
		// unbroken, and the deadline it sets is recorded there, so that
		// another master's loss costs only the locks it may have held.
		flags |= netio.Checked | netio.Records(max(o.ttl, o.longest))
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

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// Receive records one backend's result.
func (o *op) Receive(node int, r netio.Result) {
	o.mu.Lock()
	vote := o.voteOf(r)
	if r.Via != nil {
		o.setVia(node, r.Via)
	}
	if node == o.e.n {
		o.vetoVote, o.vetoReply, o.vetoCounts = vote, r.V, r.Counts
	} else {
		o.replies[node] = r.V
		o.tally.Record(node, vote, r.Counts)
	}
	o.undo.Settle(node, o.rules.undoFate(o, vote, r))
	inv := o.changedLocked(vote)
	if !o.decided {
		o.decided = o.rules.decide(o)
	}
	signal := o.readyLocked()
	undo := o.takeUndoLocked()
	o.mu.Unlock()
	if inv {
		o.invalidateWritten()
	}
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
	if o.awaitAll && !o.tally.Done() {
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

// voteOf reads one backend's result as a vote: an error (the backend did
// not answer) is Unknown, a reply is its kind's to read.
func (o *op) voteOf(r netio.Result) quorum.Vote {
	if r.Err != nil {
		return quorum.Unknown
	}
	return o.rules.vote(o, r.V)
}

// decideByMajority is the decision of grants, releases and deletes: it
// succeeds when a majority of counted backends granted (and, under an
// upgrade, the old Redis did too), with validity left when it sets a TTL;
// a failure is undone. It reports whether the outcome is known yet.
func (o *op) decideByMajority() bool {
	eff := o.rules.effects(o)
	outcome := o.tally.Outcome()
	if s, ok := o.rules.(outcomer); ok {
		outcome = s.outcome(o)
	}
	if o.e.veto && eff&effVeto != 0 {
		veto := o.vetoVote
		if veto == quorum.Granted && !o.vetoCounts {
			// The old Redis granted, but may have lost its data within the
			// hold (a restart, a flush, another server at its address):
			// an old client may hold the lock that it forgot.
			veto = quorum.Unknown
		}
		outcome = quorum.WithVeto(outcome, veto)
	}
	var success bool
	switch outcome {
	case quorum.Undecided:
		return false
	case quorum.Won:
		success = true
		if eff&effValidity != 0 {
			success = o.e.timing.Valid(o.e.timing.Validity(o.ttl, time.Since(o.t1)))
		}
	case quorum.Lost:
	}
	if !success {
		o.undoLocked()
	}
	o.result = o.rules.reply(o, success)
	o.granted = success && eff&effValidity != 0
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
func (o *op) Late(node int, r netio.Result) {
	o.mu.Lock()
	if r.Via != nil {
		o.setVia(node, r.Via)
	}
	vote := o.voteOf(r)
	o.undo.Settle(node, o.rules.undoFate(o, vote, r))
	inv := o.changedLocked(vote)
	signal := o.readyLocked()
	undo := o.takeUndoLocked()
	o.mu.Unlock()
	if inv {
		o.invalidateWritten()
	}
	o.sendUndo(undo)
	if signal {
		o.done <- struct{}{}
	}
}

// fate says, from one result, whether the command may have taken effect.
func fate(v quorum.Vote, r netio.Result) quorum.Fate {
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
			o.result = o.rules.reply(o, false)
			o.undoLocked()
			if o.e.stats != nil {
				o.e.stats.late.Add(1)
			}
		}
	}
	if o.timed || o.awaitAll {
		o.result = o.rules.refill(o, now)
	}
	undo := o.takeUndoLocked()
	v := o.result
	var second []int
	if o.granted && o.secondStep != nil {
		second = o.grantedNodesLocked()
	}
	repair, repairs := o.countRepairLocked()
	limitFix, limitNodes := o.semLimitRepairLocked()
	notice := o.noticeLocked()
	written := o.invKeys != nil && o.outcome == ResultGranted
	if o.forcedBy != nil && o.outcome == ResultGranted {
		o.forcedUnlockLocked()
	}
	o.mu.Unlock()
	o.sendUndo(undo)
	o.sendSecondStep(second, now)
	o.sendAfterReply(repair, repairs, notice, now)
	o.sendLimitRepair(limitFix, limitNodes, now)
	if written {
		o.invalidateWritten()
	}
	if o.e.stats != nil {
		o.e.stats.decided(o.name, o.outcome, o.decidedAt.Sub(o.t1))
	}
	return v
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
