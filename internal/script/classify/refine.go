package classify

import (
	"slices"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// Refinement: what the first probes cannot tell of a candidate that every
// probe agreed with (whether ownership is a prefix of the token, whether a
// key without TTL is acted on, a least TTL for extending, and whether a
// lock of several owners is promoted or demoted).

// acted reports whether a run on one probe state changed the keys (the
// battery checks later that the change is the role's).
func (c *classifier) acted(specs []keySpec, argv []string) (bool, *sandbox.Stop) {
	st := c.state(c.keys, specs)
	res, ref := c.run(c.keys, argv, st)
	if ref != nil {
		return false, sandbox.WithProbe(ref, describeIn(c.names, c.keys, argv, c.argv, specs, nil))
	}
	return !sameKeys(c.keys, st, res.State), nil
}

// refine settles what the first probes cannot tell: whether ownership is
// a prefix of the token, whether a key without TTL is acted on, and a
// least TTL for extending.
func (c *classifier) refine(cl *spec.Class) *sandbox.Stop {
	if cl.Shape == spec.ShapeOwners {
		return c.refineOwners(cl)
	}
	if cl.Tokens == nil || cl.Role.Query() || cl.Role == spec.RoleAcquire {
		return nil
	}
	n := len(c.keys)
	own := func(ttl int64, vary func(k int, tok string) string) []keySpec {
		specs := make([]keySpec, n)
		for k := range specs {
			tok := cl.Token(c.argv, k)
			if vary != nil {
				tok = vary(k, tok)
			}
			specs[k] = keySpec{held: true, value: tok, ttl: ttl}
		}
		return specs
	}
	// Ownership: a value that starts with the token but is longer. (A
	// script that acts on any other value is left to the battery, which
	// names the probe.)
	other, ref := c.acted(own(ttlLong1, func(int, string) string { return "other-holder-7f3a" }), c.argv)
	if ref != nil || other {
		return ref
	}
	longer, ref := c.acted(own(ttlLong1, func(_ int, t string) string { return t + "\x01meta" }), c.argv)
	if ref != nil {
		return ref
	}
	if longer {
		tok := cl.Token(c.argv, 0)
		var ps []int
		for i, a := range c.argv {
			if slices.Contains(cl.Tokens, i) || i == cl.TTLArg {
				continue
			}
			if p, ok := sandbox.ParseInt(a); ok && p >= 1 && int(p) <= len(tok) {
				ps = append(ps, int(p))
			}
		}
		ps = append(ps, len(tok))
		cl.Prefix = 0
		for _, p := range ps {
			if p < 1 {
				continue
			}
			// Owned: the first p bytes and anything after; not owned: a
			// change within the first p bytes.
			yes, ref := c.acted(own(ttlLong1, func(_ int, t string) string { return spec.Prefix(t, p) + "\x02other" }), c.argv)
			if ref != nil {
				return ref
			}
			no, ref := c.acted(own(ttlLong1, func(_ int, t string) string { return flip(spec.Prefix(t, p), p-1) }), c.argv)
			if ref != nil {
				return ref
			}
			if yes && !no {
				cl.Prefix = p
				break
			}
		}
		if cl.Prefix == 0 {
			return sandbox.Refuse(sandbox.RefuseOther, "treats a value that starts with the token as its own, but not as a fixed-length prefix of it")
		}
	}
	if cl.Role == spec.RoleRelease {
		return nil
	}
	// A key held without TTL.
	noTTL, ref := c.acted(own(0, nil), c.argv)
	if ref != nil {
		return ref
	}
	cl.NoTTLActs = noTTL
	if cl.Role != spec.RoleExtend {
		return nil
	}
	// A least TTL left: acting with a long TTL but not with a short one.
	short, ref := c.acted(own(ttlShort, nil), c.argv)
	if ref != nil || short {
		return ref
	}
	for i, a := range c.argv {
		if slices.Contains(cl.Tokens, i) || i == cl.TTLArg {
			continue
		}
		m, ok := sandbox.ParseInt(a)
		if !ok || m <= 0 {
			continue
		}
		for _, unit := range []time.Duration{time.Millisecond, time.Second} {
			thr := m * int64(unit/time.Millisecond)
			if thr > ttlLong1*4 {
				continue
			}
			var got [3]bool
			for j, p := range []int64{thr - 1, thr, thr + 1} {
				if p < 1 {
					continue
				}
				got[j], ref = c.acted(own(p, nil), c.argv)
				if ref != nil {
					return ref
				}
			}
			switch got {
			case [3]bool{false, true, true}:
				cl.MinArg, cl.MinUnit, cl.MinOffset = i, unit, 0
				return nil
			case [3]bool{false, false, true}:
				cl.MinArg, cl.MinUnit, cl.MinOffset = i, unit, 1
				return nil
			}
		}
	}
	return nil // the battery will show where it does not act
}

// flip changes byte i of s (or appends one if s is shorter).
func flip(s string, i int) string {
	if i < 0 || i >= len(s) {
		return s + "\x03"
	}
	b := []byte(s)
	b[i] ^= 0x55
	return string(b)
}

// refineOwners settles, for a lock of several owners with a marker,
// whether an exclusive acquire takes a lock the caller holds shared alone
// (promotes) and whether a shared acquire takes one it holds exclusively
// (demotes).
func (c *classifier) refineOwners(cl *spec.Class) *sandbox.Stop {
	if cl.Marker == "" {
		if cl.Role == spec.RoleShare {
			return sandbox.Refuse(sandbox.RefuseOther, "is a shared acquire of a sorted set without a marker for exclusive locks")
		}
		return nil
	}
	tok := cl.Token(c.argv, 0)
	var ref *sandbox.Stop
	switch cl.Role {
	case spec.RoleAcquire, spec.RoleExtendOrAcquire:
		cl.Promotes, ref = c.acted([]keySpec{{held: true, zset: true, mine: true, value: tok, ttl: ttlLong1}}, c.argv)
	case spec.RoleShare:
		cl.Demotes, ref = c.acted([]keySpec{{held: true, zset: true, mine: true, value: tok, ttl: ttlLong1, marker: cl.Marker}}, c.argv)
	}
	return ref
}
