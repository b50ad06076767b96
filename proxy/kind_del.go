package proxy

import (
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// ruleDel is DEL of one key, an operator's force-unlock (handleDel): a
// backend that deleted it grants, one that had nothing refuses; the key
// counts as deleted (1) when a majority deleted it, else 0. It takes no
// lock and needs no validity; it is never undone.
var ruleDel rules = delRules{}

type delRules struct{ plain }

func (delRules) effects(*op) effect { return effWrites }

func (delRules) vote(_ *op, v resp.Value) quorum.Vote {
	if v.Kind != resp.KindArray || len(v.Elems) != 2 || v.Elems[0].Kind != resp.KindInt {
		return quorum.Unknown
	}
	if v.Elems[0].Int > 0 {
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

// forcedUnlockLocked logs a DEL that a majority carried out (a held lock forced
// open) at WARN, with the key, the holder's token (the value a majority
// deleted), and the client's address and user; and counts it. Called by
// final, in the client's goroutine, with o.mu held.
func (o *op) forcedUnlockLocked() {
	c := o.forcedBy
	hs := make([]quorum.Holding, o.e.n)
	var seen []string
	for i := range hs {
		v, counted := o.tally.Vote(i)
		if v != quorum.Granted {
			continue
		}
		h := quorum.Holding{Answered: true, Counts: counted}
		if e := o.replies[i].Elems[1]; e.Kind == resp.KindBulk {
			h.Exists, h.Value = true, e.Str
		}
		hs[i] = h
		seen = append(seen, string(h.Value))
	}
	c.s.stats.forcedUnlock()
	attrs := []any{"key", string(o.forcedKey)}
	if v, _, ok := quorum.MajorityValue(o.e.n, hs); ok {
		attrs = append(attrs, "token", string(v))
	} else {
		attrs = append(attrs, "tokens", seen) // no majority deleted the same value
	}
	attrs = append(attrs, "client", c.nc.RemoteAddr().String(), "user", c.user, "client_name", string(c.name))
	c.s.cfg.Logger.Warn("forced unlock: DEL of a held lock", attrs...)
}
