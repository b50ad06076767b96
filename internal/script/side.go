package script

import (
	"maps"
	"slices"
	"strconv"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Side keys: a latch and a counter beside a script's lock keys (Layout.Latch,
// Layout.Counter), found by lockKeys and checked here on every probe of the
// battery.

// latched checks a latch on the battery's runs: the script records its
// reply under the latch exactly when it acts, for the TTL one argument
// gives; and, with the latch holding a result, it changes nothing and
// answers that result. Then the reference's latch (which records the
// master's own answer and answers a retry with it) replies as the script
// does on one Redis.
func (c *classifier) latched(cl *Class, all []sample) *refusal {
	if c.latchArg() < 0 {
		return nil
	}
	name := c.names.arg(c.latchArg())
	if cl.Shape == ShapeOwners || cl.Role.Query() {
		return refuse(refuseOther, "records a result under %s, which the proxy keeps for locks in strings and hashes that change, only", name)
	}
	var ttls []ttlArg
	acted := false
	for _, s := range all {
		if !cl.Acts(s.sit.Case) {
			if s.latch {
				return refuse(refuseOther, "%s it recorded a result under %s without acting: a retry would be answered for a call that did nothing", s.probe, name)
			}
			continue
		}
		if !s.latch {
			return refuse(refuseOther, "%s it acted without recording its result under %s, though other calls do", s.probe, name)
		}
		if s.reply.Kind != resp.KindInt || strconv.FormatInt(s.reply.Int, 10) != s.latchValue {
			return refuse(refuseOther, "%s it recorded %s under %s but replied %s: a retry would be answered otherwise than the call", s.probe, strconv.Quote(short(s.latchValue)), name, s.reply)
		}
		var here []ttlArg
		for _, t := range ttlArgs(s.argv, s.latchPTTL, c.now) {
			if !t.deadline && t.idx != c.latchArg() && (!acted || containsTTL(ttls, t)) {
				here = append(here, t)
			}
		}
		ttls, acted = here, true
		if len(ttls) == 0 {
			return refuse(refuseOther, "%s it recorded its result under %s for %d ms, which follows no argument", s.probe, name, s.latchPTTL)
		}
	}
	if !acted {
		return nil
	}
	// A retry: the latch holds a result, whatever state the lock is in.
	base := argVariant{keys: c.keys, argv: c.argv, full: true}
	for _, specs := range c.states(cl, base) {
		for _, n := range []int64{1, 0} {
			st := c.state(c.keys, specs)
			st.Keys[c.argv[c.latchArg()]] = Item{Value: strconv.FormatInt(n, 10), At: c.now + ttlLong1}
			res, ref := c.run(c.keys, c.argv, st)
			desc := describeIn(c.names, c.keys, c.argv, c.argv, specs, nil) + " and " + name + " holding " + strconv.FormatInt(n, 10)
			if ref != nil {
				return withProbe(ref, desc)
			}
			if !sameKeys(slices.Collect(maps.Keys(st.Keys)), st, res.state) || len(res.state.Keys) != len(st.Keys) || len(res.state.Published) > 0 {
				return refuse(refuseOther, "%s it %s: a call whose result is recorded must change nothing", desc, effectIn(c.names, c.keys, c.argv, st, res.state))
			}
			if !res.reply.Equal(resp.IntValue(n)) {
				return refuse(refuseOther, "%s it replied %s: a retry answers the result recorded", desc, res.reply)
			}
		}
	}
	cl.Latch = &Latch{Arg: c.latchArg(), TTLArg: ttls[0].idx, TTLUnit: ttls[0].unit}
	return nil
}

func containsTTL(ts []ttlArg, t ttlArg) bool {
	for _, u := range ts {
		if u == t {
			return true
		}
	}
	return false
}

// counted checks a counter on the battery's runs: the script adds one to
// it on every run that acts and leaves it alone on every other. Its count
// then only numbers the grants, which FENCE does through the proxy (the
// templates show it as SrcFence).
func (c *classifier) counted(cl *Class, all []sample) *refusal {
	if c.counterArg() < 0 {
		return nil
	}
	name := c.names.arg(c.counterArg())
	for _, s := range all {
		switch want := cl.Acts(s.sit.Case); {
		case s.moved < 0:
			return refuse(refuseOther, "%s it changed %s otherwise than adding one to it: a counter of grants only counts", s.probe, name)
		case want && s.moved == 0:
			return refuse(refuseOther, "%s it acted without counting the grant in %s, though other calls do", s.probe, name)
		case !want && s.moved == 1:
			return refuse(refuseOther, "%s it counted a grant in %s without acting", s.probe, name)
		}
	}
	cl.Counter = &Counter{Arg: c.counterArg()}
	return nil
}
