package classify

import (
	"maps"
	"slices"
	"strconv"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

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
func (c *classifier) latched(cl *spec.Class, all []spec.Sample) *sandbox.Stop {
	if c.latchArg() < 0 {
		return nil
	}
	name := c.names.Arg(c.latchArg())
	if cl.Shape == spec.ShapeOwners || cl.Role.Query() {
		return sandbox.Refuse(sandbox.RefuseOther, "records a result under %s, which the proxy keeps for locks in strings and hashes that change, only", name)
	}
	var ttls []ttlArg
	acted := false
	for _, s := range all {
		if !cl.Acts(s.Sit.Case) {
			if s.Latch {
				return sandbox.Refuse(sandbox.RefuseOther, "%s it recorded a result under %s without acting: a retry would be answered for a call that did nothing", s.Probe, name)
			}
			continue
		}
		if !s.Latch {
			return sandbox.Refuse(sandbox.RefuseOther, "%s it acted without recording its result under %s, though other calls do", s.Probe, name)
		}
		if s.Reply.Kind != resp.KindInt || strconv.FormatInt(s.Reply.Int, 10) != s.LatchValue {
			return sandbox.Refuse(sandbox.RefuseOther, "%s it recorded %s under %s but replied %s: a retry would be answered otherwise than the call", s.Probe, strconv.Quote(sandbox.Short(s.LatchValue)), name, s.Reply)
		}
		var here []ttlArg
		for _, t := range ttlArgs(s.Argv, s.LatchPTTL, c.now) {
			if !t.deadline && t.idx != c.latchArg() && (!acted || containsTTL(ttls, t)) {
				here = append(here, t)
			}
		}
		ttls, acted = here, true
		if len(ttls) == 0 {
			return sandbox.Refuse(sandbox.RefuseOther, "%s it recorded its result under %s for %d ms, which follows no argument", s.Probe, name, s.LatchPTTL)
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
			st.Keys[c.argv[c.latchArg()]] = sandbox.Item{Value: strconv.FormatInt(n, 10), At: c.now + ttlLong1}
			res, ref := c.run(c.keys, c.argv, st)
			desc := describeIn(c.names, c.keys, c.argv, c.argv, specs, nil) + " and " + name + " holding " + strconv.FormatInt(n, 10)
			if ref != nil {
				return sandbox.WithProbe(ref, desc)
			}
			if !sameKeys(slices.Collect(maps.Keys(st.Keys)), st, res.State) || len(res.State.Keys) != len(st.Keys) || len(res.State.Published) > 0 {
				return sandbox.Refuse(sandbox.RefuseOther, "%s it %s: a call whose result is recorded must change nothing", desc, effectIn(c.names, c.keys, c.argv, st, res.State))
			}
			if !res.Reply.Equal(resp.IntValue(n)) {
				return sandbox.Refuse(sandbox.RefuseOther, "%s it replied %s: a retry answers the result recorded", desc, res.Reply)
			}
		}
	}
	cl.Latch = &spec.Latch{Arg: c.latchArg(), TTLArg: ttls[0].idx, TTLUnit: ttls[0].unit}
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
func (c *classifier) counted(cl *spec.Class, all []spec.Sample) *sandbox.Stop {
	if c.counterArg() < 0 {
		return nil
	}
	name := c.names.Arg(c.counterArg())
	for _, s := range all {
		switch want := cl.Acts(s.Sit.Case); {
		case s.Moved < 0:
			return sandbox.Refuse(sandbox.RefuseOther, "%s it changed %s otherwise than adding one to it: a counter of grants only counts", s.Probe, name)
		case want && s.Moved == 0:
			return sandbox.Refuse(sandbox.RefuseOther, "%s it acted without counting the grant in %s, though other calls do", s.Probe, name)
		case !want && s.Moved == 1:
			return sandbox.Refuse(sandbox.RefuseOther, "%s it counted a grant in %s without acting", s.Probe, name)
		}
	}
	cl.Counter = &spec.Counter{Arg: c.counterArg()}
	return nil
}
