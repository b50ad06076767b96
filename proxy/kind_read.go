package proxy

import (
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The reads: GET, EXISTS, PTTL and TTL of a lock (handleGet, handleExists,
// handlePTTL, handleTTL). Every
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
	// ruleExists and ruleType answer EXISTS (1 or 0) and TYPE ("string" or
	// "none") of a key as GET sees it.
	ruleExists = &getRules{as: asExists}
	ruleType   = &getRules{as: asType}
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
	case asExists:
		if held {
			return resp.IntValue(1)
		}
		return resp.IntValue(0)
	case asType:
		if held {
			return resp.Value{Kind: resp.KindSimple, Str: []byte("string")}
		}
		return resp.Value{Kind: resp.KindSimple, Str: []byte("none")}
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

func (*ttlRules) vote(_ *op, v resp.Value) quorum.Vote {
	if (v.Kind == resp.KindArray && len(v.Elems) == 2 && v.Elems[1].Kind == resp.KindInt) || tooLong(v) {
		return quorum.Granted
	}
	return quorum.Unknown
}

func (t *ttlRules) decide(o *op) bool {
	hs, refused := o.holdings(func(r resp.Value) quorum.Holding {
		h := quorum.Holding{Exists: r.Elems[0].Kind == resp.KindBulk, Value: r.Elems[0].Str}
		h.PTTL = time.Duration(r.Elems[1].Int) * time.Millisecond
		if r.Elems[1].Int == -1 {
			h.PTTL = quorum.NoExpiry
		}
		return h
	})
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
