package proxy

import (
	"slices"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The reads: GET, EXISTS, TYPE, PTTL and TTL of a lock (handleGet, handleExists,
// handleType, handlePTTL, handleTTL), and HGET and HEXISTS of a hash lock. Every
// backend's answer is an answer (Granted); the value and the TTL are the
// majority's (quorum.MajorityValue, quorum.MajorityRemaining), and a TTL
// is reported as of the moment the reply leaves, never more than remains.
// Under an upgrade a read also sees a lock only the old Redis holds (an
// old client's), and a lock's validity is never said to outlast its copy
// there (veto.go). Reads change nothing, take nothing and need no
// validity.
var (
	ruleGet = &getRules{}
	// rulePastAcquire answers SET NX with a deadline already passed
	// (startPastAcquire) from the key's state, read as GET reads it: OK
	// where a majority holds nothing, nil where it is held.
	rulePastAcquire = &getRules{as: asPastAcquire}
	// ruleExists and ruleType answer EXISTS (1 or 0) and TYPE of a key as
	// PTTL reads it: a string a majority hold with one value, or a key of
	// another type (a hash lock, a lock of several owners) a majority
	// hold, whoever its holder.
	ruleExists = &keyRules{as: asExists}
	ruleType   = &keyRules{as: asType}
	rulePTTL   = &ttlRules{unit: time.Millisecond}
	ruleTTL    = &ttlRules{unit: time.Second}
)

// getAs is what a read of a key's value answers.
type getAs uint8

const (
	asGet getAs = iota
	asPastAcquire
	asExists
	asType
)

type getRules struct {
	plain
	as getAs
}

func (*getRules) effects(*op) effect { return 0 }

func (*getRules) vote(_ *op, v resp.Value) quorum.Vote {
	if v.Kind == resp.KindBulk || v.Kind == resp.KindNil || tooLong(v) {
		return quorum.Granted // an answer; the value decides
	}
	return quorum.Unknown
}

func (g *getRules) decide(o *op) bool {
	hs, refused := o.holdings(func(r resp.Value) quorum.Holding {
		return quorum.Holding{Exists: r.Kind == resp.KindBulk, Value: r.Str}
	})
	if refused {
		return o.answered(true)
	}
	if v, _, ok := quorum.MajorityValue(o.e.n, hs); ok {
		o.result = g.answer(o, v, true)
		return o.answered(true)
	}
	if !o.tally.Done() || o.awaitsVeto() {
		return false
	}
	v, held := o.vetoHolds() // a lock taken on the old Redis directly
	o.result = g.answer(o, v, held)
	return o.answered(true)
}

// answer is the reply for a key held with value v, or not held.
func (g *getRules) answer(o *op, v []byte, held bool) resp.Value {
	switch g.as {
	case asPastAcquire:
		if !held && o.tally.Granted() >= quorum.Majority(o.e.n) {
			return resp.OK // free on a majority: what one Redis answers, holding nothing
		}
		return resp.Nil
	}
	if held {
		return resp.BulkValue(v)
	}
	return resp.Nil
}

type ttlRules struct {
	plain
	unit time.Duration // of the reply: ms for PTTL, s for TTL
}

func (*ttlRules) effects(*op) effect { return 0 }

func (*ttlRules) vote(_ *op, v resp.Value) quorum.Vote { return typedVote(v) }

// typedVote reads readScript's answer: {value or false, PTTL} for a string
// or a missing key, {false, PTTL, type} for a key of another type.
func typedVote(v resp.Value) quorum.Vote {
	if (v.Kind == resp.KindArray && (len(v.Elems) == 2 || len(v.Elems) == 3 && v.Elems[2].Kind == resp.KindBulk) && v.Elems[1].Kind == resp.KindInt) || tooLong(v) {
		return quorum.Granted
	}
	return quorum.Unknown
}

// typedPrefix starts the holding a key of a type other than string reads
// as: its type, whoever holds it. A lock kept in a hash or a sorted set
// has no one value to agree on; a majority holding one is held.
const typedPrefix = "\x00type:"

// typedHolding reads readScript's answer as a holding: a string's value,
// or typedPrefix and the key's type.
func typedHolding(r resp.Value) quorum.Holding {
	h := quorum.Holding{Exists: r.Elems[0].Kind == resp.KindBulk, Value: r.Elems[0].Str}
	if len(r.Elems) == 3 {
		h.Exists, h.Value = true, append([]byte(typedPrefix), r.Elems[2].Str...)
	}
	h.PTTL = time.Duration(r.Elems[1].Int) * time.Millisecond
	if r.Elems[1].Int == -1 {
		h.PTTL = quorum.NoExpiry
	}
	return h
}

// keyRules answer EXISTS and TYPE from readScript (typedHolding).
type keyRules struct {
	plain
	as getAs
}

func (*keyRules) effects(*op) effect                   { return 0 }
func (*keyRules) vote(_ *op, v resp.Value) quorum.Vote { return typedVote(v) }

func (k *keyRules) decide(o *op) bool {
	hs, refused := o.holdings(typedHolding)
	if refused {
		return o.answered(true)
	}
	if v, _, ok := quorum.MajorityValue(o.e.n, hs); ok {
		o.result = keyAnswer(k.as, v, true)
		return o.answered(true)
	}
	if !o.tally.Done() || o.awaitsVeto() {
		return false
	}
	v, _, held := o.vetoHoldsFor() // a lock taken on the old Redis directly
	o.result = keyAnswer(k.as, v, held)
	return o.answered(true)
}

// keyAnswer is EXISTS's or TYPE's reply for a key held as v (a string's
// value, or typedPrefix and a type), or not held.
func keyAnswer(as getAs, v []byte, held bool) resp.Value {
	if as == asExists {
		if held {
			return resp.IntValue(1)
		}
		return resp.IntValue(0)
	}
	t := "none"
	switch {
	case held && len(v) > len(typedPrefix) && string(v[:len(typedPrefix)]) == typedPrefix:
		t = string(v[len(typedPrefix):])
	case held:
		t = "string"
	}
	return resp.Value{Kind: resp.KindSimple, Str: []byte(t)}
}

func (t *ttlRules) decide(o *op) bool {
	hs, refused := o.holdings(typedHolding)
	if refused {
		return o.answered(true)
	}
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
		return o.answered(true)
	}
	o.remaining, o.timed, o.unitTTL = rem, true, t.unit
	return o.answered(true)
}

// refill is the majority's remaining validity as of now, in the reply's
// unit, rounded down: never more than remains.
func (*ttlRules) refill(o *op, now time.Time) resp.Value {
	if o.remaining == quorum.NoExpiry {
		return resp.IntValue(-1)
	}
	return resp.IntValue(int64(o.e.timing.RemainingValidity(o.remaining, now.Sub(o.t1)) / o.unitTTL))
}

// holdings reads what each backend that answered holds, by read. A value
// longer than max_token (the bounded read scripts' TOOLONG) is no lock the
// proxy wrote: the read is refused with its error as the result.
func (o *op) holdings(read func(r resp.Value) quorum.Holding) (hs []quorum.Holding, refused bool) {
	hs = make([]quorum.Holding, o.e.n)
	for i := range hs {
		v, counted := o.tally.Vote(i)
		if v != quorum.Granted {
			continue
		}
		r := o.replies[i]
		if tooLong(r) {
			o.result = resp.ErrorValue(msgValueTooLong(o.e.maxToken))
			return nil, true
		}
		hs[i] = read(r)
		hs[i].Answered, hs[i].Counts = true, counted
	}
	return hs, false
}

// tooLong reports the bounded read scripts' refusal of a value longer than
// max_token.
func tooLong(v resp.Value) bool {
	return v.Kind == resp.KindError && len(v.Str) >= 7 && string(v.Str[:7]) == "TOOLONG"
}

// HGET and HEXISTS of a hash lock's field (Redisson's getHoldCount and
// isHeldByCurrentThread ask them of a reentrant lock, whose field counts
// its owner's holds). Each master answers hashFieldScript; the reply is
// the value a majority hold in the field. When masters disagree on a
// count of holds (a partial failure the next take or release repairs),
// the count is the one the reentrant lock's rule gives: the majority-th
// largest, every master that answered nothing counting 0, so a count a
// majority holds at least. A key of another type on a majority answers
// WRONGTYPE, as Redis does.
var (
	ruleHGet    = &hashFieldRules{}
	ruleHExists = &hashFieldRules{exists: true}
)

// Codes of hashFieldScript's answers.
const (
	fieldMissingKey = 0
	fieldMissing    = 1
	fieldHeld       = 2
	fieldWrongType  = -1
)

type hashFieldRules struct {
	plain
	exists bool
}

func (*hashFieldRules) effects(*op) effect { return 0 }

func (*hashFieldRules) vote(_ *op, v resp.Value) quorum.Vote {
	if v.Kind == resp.KindArray && len(v.Elems) >= 1 && v.Elems[0].Kind == resp.KindInt || tooLong(v) {
		return quorum.Granted
	}
	return quorum.Unknown
}

func (h *hashFieldRules) decide(o *op) bool {
	var counts [3]int // wrong type, field missing (or key), field held
	var values [][]byte
	for i := range o.replies {
		v, counted := o.tally.Vote(i)
		if v != quorum.Granted || !counted {
			continue
		}
		r := o.replies[i]
		if tooLong(r) {
			o.result = resp.ErrorValue(msgValueTooLong(o.e.maxToken))
			return o.answered(true)
		}
		switch r.Elems[0].Int {
		case fieldWrongType:
			counts[0]++
		case fieldHeld:
			counts[2]++
			values = append(values, r.Elems[1].Str)
		default:
			counts[1]++
		}
	}
	m := quorum.Majority(o.e.n)
	if !o.tally.Done() && counts[0] < m && counts[1] < m && (h.exists && counts[2] < m || !h.exists && !held(values, m)) {
		return false
	}
	switch {
	case counts[0] >= m:
		o.result = resp.ErrorValue(msgWrongType)
	case h.exists && counts[2] >= m:
		o.result = resp.IntValue(1)
	case h.exists:
		o.result = resp.IntValue(0)
	default:
		o.result = fieldAnswer(o.e.n, values)
	}
	return o.answered(true)
}

func held(values [][]byte, m int) bool { _, ok := majorityOf(values, m); return ok }

// majorityOf returns the value m of the values are, if any.
func majorityOf(values [][]byte, m int) ([]byte, bool) {
	for _, v := range values {
		n := 0
		for _, w := range values {
			if string(v) == string(w) {
				n++
			}
		}
		if n >= m {
			return v, true
		}
	}
	return nil, false
}

// fieldAnswer is HGET's reply from the values the masters hold in the
// field (those without it hold none): the value a majority hold; for
// counts that differ, the majority-th largest of the n masters' counts;
// else nil.
func fieldAnswer(n int, values [][]byte) resp.Value {
	m := quorum.Majority(n)
	if v, ok := majorityOf(values, m); ok {
		return resp.BulkValue(v)
	}
	counts := make([]int64, n)
	for i, v := range values {
		c, ok := resp.ParseInt(v)
		if !ok || c <= 0 {
			return resp.Nil // not counts: no value a majority hold
		}
		counts[i] = c
	}
	slices.Sort(counts)
	if c := counts[n-m]; c > 0 {
		return resp.BulkValue([]byte(strconv.FormatInt(c, 10)))
	}
	return resp.Nil
}
