package proxy

import (
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// ruleAcquire is SET key token NX PX ms (handleSet): each backend grants with
// OK or refuses with nil; the acquire succeeds when a majority granted
// with validity left, and answers OK or nil as one Redis would. A failed
// acquire is undone wherever it may have set the key (undo.go).
var ruleAcquire rules = acquireRules{}

type acquireRules struct{ plain }

func (acquireRules) effects(*op) effect { return effTakes | effVeto | effValidity | effWrites }

func (acquireRules) vote(_ *op, v resp.Value) quorum.Vote {
	switch {
	case v.IsOK():
		return quorum.Granted
	case v.Kind == resp.KindNil:
		return quorum.Refused
	}
	return quorum.Unknown
}

func (acquireRules) decide(o *op) bool { return o.decideByMajority() }

func (acquireRules) reply(_ *op, success bool) resp.Value {
	if success {
		return resp.OK
	}
	return resp.Nil
}
