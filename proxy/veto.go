package proxy

import (
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The upgrade veto. While clients move from their single Redis to the
// proxy, that Redis (upgrade_from) is node n of the backends: every command
// goes to it too, as to a master, but it never votes. A grant (acquire,
// extend-or-acquire, extend) succeeds only when it also granted
// (quorum.WithVeto), so a client locking there directly and one going
// through the proxy exclude each other; a failed grant is undone there as
// on every master; releases and forced deletes reach it too; a read sees a
// lock that only it holds (an old client's), and a lock's validity is never
// said to outlast its copy there. When it cannot answer, grants fail: the
// old clients may hold the lock there, which is the availability they had
// before the upgrade.

// awaitsVeto reports whether a read must still wait for the veto's answer.
func (o *op) awaitsVeto() bool { return o.e.veto && o.vetoVote == quorum.Pending }

// vetoHolds returns the value the veto holds, from its answer to a GET.
func (o *op) vetoHolds() ([]byte, bool) {
	if !o.e.veto || o.vetoVote != quorum.Granted || o.vetoReply.Kind != resp.KindBulk {
		return nil, false
	}
	return o.vetoReply.Str, true
}

// vetoHoldsFor returns the value and PTTL the veto holds, from its answer
// to a PTTL read.
func (o *op) vetoHoldsFor() ([]byte, time.Duration, bool) {
	v := o.vetoReply
	if !o.e.veto || o.vetoVote != quorum.Granted || v.Kind != resp.KindArray || len(v.Elems) != 2 || v.Elems[0].Kind != resp.KindBulk {
		return nil, 0, false
	}
	p := time.Duration(v.Elems[1].Int) * time.Millisecond
	if v.Elems[1].Int == -1 {
		p = quorum.NoExpiry
	}
	return v.Elems[0].Str, p, true
}

// vetoObs is what the veto said of key k, for a query script whose
// majority does not hold it.
func (o *op) vetoObs(k int) (keyObs, bool) {
	if !o.e.veto || o.vetoVote != quorum.Granted {
		return keyObs{}, false
	}
	v := o.vetoReply
	if !o.sc.detailed {
		if v.Kind != resp.KindInt {
			return keyObs{}, false
		}
		return keyObs{cs: spec.Case(v.Int >> 1)}, true
	}
	if v.Kind != resp.KindArray || len(v.Elems) != 1+4*o.sc.nkeys {
		return keyObs{}, false
	}
	e := v.Elems[1+4*k:]
	return keyObs{cs: spec.Case(e[0].Int), pttl: e[1].Int, value: e[2].Str, hasValue: e[2].Kind == resp.KindBulk, after: e[3].Int}, true
}
