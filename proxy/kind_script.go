package proxy

import (
	"time"

	"github.com/redlock-proxy/redlock-proxy/netio"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// ruleScript is a call of a classified lock script (startClassOp). The
// script is classified once per shape of call (classify.Registry); the
// backends then run the proxy's own reference script for its role, never
// the client's text, and answer which case each key was in and whether
// they acted. A backend that acted grants; the op is decided as an acquire
// is (decideByMajority), or, for a query, from the majority's state once
// every backend answered; and the client gets the reply its script would
// have given on one Redis holding the majority's state (scriptstate.go).
// What it may do follows its role: see effects.
var ruleScript rules = scriptRules{}

type scriptRules struct{}

func (scriptRules) effects(o *op) effect {
	r := o.sc.class.Role
	var eff effect
	if !o.sc.readOnly && r.Takes() {
		eff |= effTakes
	}
	if r.Writes() && !o.sc.readOnly {
		eff |= effVeto
	}
	if o.sc.class.Writes() && o.ttl > 0 {
		eff |= effValidity
	}
	if !r.Query() && !o.sc.readOnly {
		eff |= effWrites
	}
	return eff
}

func (scriptRules) vote(o *op, v resp.Value) quorum.Vote { return o.scriptVote(v) }

func (scriptRules) decide(o *op) bool {
	if o.sc.class.Role.Query() {
		return o.answered(o.decideQueryLocked())
	}
	return o.decideByMajority()
}

func (scriptRules) reply(o *op, success bool) resp.Value { return o.scriptReplyLocked(success) }

func (scriptRules) refill(o *op, now time.Time) resp.Value {
	return o.scriptReplyAt(o.sc.success, now)
}

// scriptCall is what a lock script's op needs besides the op.
type scriptCall struct {
	class    *spec.Class
	nkeys    int
	detailed bool     // backends answer in detail (see spec.Class.Detailed)
	lowMs    int64    // least PTTL that is not "too little", or 0
	keys     [][]byte // copies, kept only when a reply template shows them
	argv     [][]byte
	// readOnly: an extend whose TTL cannot leave any validity. The
	// backends only report the keys' states and the answer is the role's
	// failure: the caller's lock is left exactly as it was (an extend sent
	// as asked would re-arm it to that TTL and still be answered as
	// failed, shortening a lock its holder was told it still has).
	readOnly bool
	success  bool      // the decision, for a reply filled again as it leaves
	caseAt   spec.Case // the case the reply was filled in
	// nonce, for a reentrant lock's take or release, marks what the op
	// wrote, so that a repair of the count applies only where no later
	// write came (countRepairLocked).
	nonce string
	// signalTTL, for a release that pushes a signal (spec.Notice's
	// List), is how long the signal is kept for waiters to come, at most
	// max_ttl.
	signalTTL time.Duration
}

// undoFate says whether a failed op may have taken effect on a backend and
// must be undone there. An extend-or-acquire is undone only where its
// answer says it took a free key: where it extended the caller's own lock,
// or where nothing is known, a compare-and-delete could delete a lock that
// is still valid.
func (scriptRules) undoFate(o *op, v quorum.Vote, r netio.Result) quorum.Fate {
	if o.sc.class.Role != spec.RoleExtendOrAcquire && o.sc.class.Shape == spec.ShapeString {
		return fate(v, r)
	}
	switch {
	case r.Err != nil && r.Later:
		return quorum.FateOpen // its late reply will tell what it did
	case v != quorum.Granted || r.Err != nil:
		return quorum.FateClear
	}
	cs := spec.Case(r.V.Int >> 1)
	if o.sc.detailed {
		cs = spec.Case(r.V.Elems[1].Int)
	}
	if cs == spec.CaseMissing || cs == spec.CaseOtherShared {
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
		return v.Int&1 == 1, v.Kind == resp.KindInt && v.Int >= 0 && v.Int>>1 < 64 && spec.Case(v.Int>>1).Valid()
	}
	if v.Kind != resp.KindArray || len(v.Elems) != 1+4*o.sc.nkeys {
		return false, false
	}
	for k := 0; k < o.sc.nkeys; k++ {
		e := v.Elems[1+4*k:]
		if e[0].Kind != resp.KindInt || e[1].Kind != resp.KindInt || e[3].Kind != resp.KindInt ||
			(e[2].Kind != resp.KindBulk && e[2].Kind != resp.KindNil) || e[0].Int < 0 || e[0].Int >= 64 || !spec.Case(e[0].Int).Valid() {
			return false, false
		}
	}
	return v.Elems[0].Kind == resp.KindInt && v.Elems[0].Int == 1, v.Elems[0].Kind == resp.KindInt
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
// that shows a TTL is filled again when it leaves (refill), so that it
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
