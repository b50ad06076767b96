package proxy

import (
	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// ruleDel is DEL of one key, an operator's force-unlock (cmdDel): a
// backend that deleted it grants, one that had nothing refuses; the key
// counts as deleted (1) when a majority deleted it, else 0. It takes no
// lock and needs no validity; it is never undone.
var ruleDel rules = delRules{}

type delRules struct{ plain }

func (delRules) effects(*op) effect { return effWrites }

func (delRules) vote(_ *op, v resp.Value) quorum.Vote {
	if v.Kind != resp.KindInt {
		return quorum.Unknown
	}
	if v.Int > 0 {
		return quorum.Granted
	}
	return quorum.Refused
}

func (delRules) decide(o *op) bool { return o.decideByMajority() }

func (delRules) reply(_ *op, success bool) resp.Value {
	if success {
		return resp.IntValue(1)
	}
	return resp.IntValue(0)
}
