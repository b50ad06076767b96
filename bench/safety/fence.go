package safety

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"
)

// Fencing numbers. Every client of the harness asks for a grant's number
// right after the grant (FENCE key token), and records it with the grant;
// the fencing checker holds the numbers to the contract of FENCE:
//
//   - one grant, one number: every number given for the same grant (an
//     acquire and the extends that kept it, through any proxy) is the same;
//   - strictly increasing: when grant B was made (its acquire sent) after
//     grant A's validity ended (or A began to release it), every number
//     given for B is greater than every number given for A;
//   - a new grant gets a new number: no two grants of a key share one;
//   - numbers are positive.

// localFences is the fencing control's fake source: a counter kept by one
// proxy that numbers the grants asked through it, with no majority read.
// Each proxy's numbers rise, and it gives a grant it numbered before the
// same number again; but two proxies count apart, so grants numbered
// through different proxies interleave out of order.
type localFences struct {
	mu    sync.Mutex
	last  int64
	given map[string]localGrant // per key: the grant numbered last
}

type localGrant struct {
	token string
	n     int64
}

func newLocalFences() *localFences { return &localFences{given: map[string]localGrant{}} }

// number gives key/token's number: the one it gave the grant before, or
// the next of the counter.
func (f *localFences) number(key, token string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if g, ok := f.given[key]; ok && g.token == token {
		return g.n
	}
	f.last++
	f.given[key] = localGrant{token: token, n: f.last}
	return f.last
}

// localFence asks the local counter of the proxy running in slot p.
func (c *Cluster) localFence(p int, key, token string) (int64, error) {
	c.mu.Lock()
	s := c.slots[p]
	f := s.fences
	if s.app == nil {
		f = nil
	}
	c.mu.Unlock()
	if f == nil {
		return 0, fmt.Errorf("safety: no proxy runs in slot %d", p)
	}
	return f.number(key, token), nil
}

// fenceGrant is one grant as the fencing checker sees it: a token's
// acquire (or an extend that took a free lock) and the extends that kept
// it, with every number given for it.
type fenceGrant struct {
	key, token string
	made       time.Time // the first operation's call
	end        time.Time // the end of its validity, or its release's call if earlier
	ops        []Op      // its granted operations that got a number
	lo, hi     int64     // the smallest and largest of their numbers
}

// fenceGrants derives the grants that got numbers. A token's granted
// acquires and extends, in call order, belong to one grant while each is
// called before the validity so far has ended (an extend keeps the grant);
// one called later starts another grant of the same token (the lock may
// have expired and been taken again by an extend-or-acquire). A grant ends
// at its last validity end, or at the call of the token's release if that
// is earlier.
func fenceGrants(ops []Op) []fenceGrant {
	releaseCall := make(map[string]time.Time)
	byToken := make(map[string][]Op)
	for _, op := range ops {
		switch {
		case op.Kind == Release:
			if t, ok := releaseCall[op.Token]; !ok || op.Call.Before(t) {
				releaseCall[op.Token] = op.Call
			}
		case op.Outcome == OK:
			k := op.Key + "\x00" + op.Token
			byToken[k] = append(byToken[k], op)
		}
	}
	var out []fenceGrant
	for _, k := range sortedKeys(byToken) {
		tops := byToken[k]
		sort.SliceStable(tops, func(i, j int) bool { return tops[i].Call.Before(tops[j].Call) })
		var cur *fenceGrant
		flush := func() {
			if cur == nil {
				return
			}
			if rc, ok := releaseCall[cur.token]; ok && rc.After(cur.made) && rc.Before(cur.end) {
				cur.end = rc
			}
			if len(cur.ops) > 0 {
				out = append(out, *cur)
			}
			cur = nil
		}
		for _, op := range tops {
			if cur == nil || !op.Call.Before(cur.end) {
				flush()
				cur = &fenceGrant{key: op.Key, token: op.Token, made: op.Call, end: op.ValidUntil}
			} else if op.ValidUntil.After(cur.end) {
				cur.end = op.ValidUntil
			}
			if !op.Fence.Numbered() {
				continue
			}
			n := op.Fence.N
			if len(cur.ops) == 0 || n < cur.lo {
				cur.lo = n
			}
			if len(cur.ops) == 0 || n > cur.hi {
				cur.hi = n
			}
			cur.ops = append(cur.ops, op)
		}
		flush()
	}
	return out
}

// FenceStats counts the fencing numbers clients asked for.
type FenceStats struct {
	Numbered int // answers that were a number
	Nil      int // nil answers
	Errors   int // errors
	Grants   int // grants that got at least one number
}

// CheckFences is the fencing checker: per key, the fencing numbers given for the
// grants keep FENCE's contract (see the top of this file). It returns the
// number of grants whose numbers break it (each grant counted once, as the
// later of a pair), with examples.
func CheckFences(h *History) (violations int, st FenceStats, examples []string) {
	ops := h.Ops()
	for _, op := range ops {
		switch {
		case !op.Fence.Asked:
		case op.Fence.Outcome == OK:
			st.Numbered++
		case op.Fence.Outcome == Refused:
			st.Nil++
		default:
			st.Errors++
		}
	}
	gs := fenceGrants(ops)
	st.Grants = len(gs)
	bad := make(map[int]bool)
	flag := func(i int, format string, a ...any) {
		if !bad[i] {
			bad[i] = true
			violations++
		}
		if len(examples) < maxExamples {
			examples = append(examples, fmt.Sprintf(format, a...))
		}
	}
	desc := func(g fenceGrant) string {
		var ns []string
		for _, op := range g.ops {
			ns = append(ns, fmt.Sprintf("%d (%s, client %d, FENCE via proxy %d at %s)", op.Fence.N, op.Kind, op.Client, op.Fence.Proxy, h.rel(op.Fence.Return)))
		}
		return fmt.Sprintf("%s (made %s, valid until %s): %s", g.token, h.rel(g.made), h.rel(g.end), strings.Join(ns, ", "))
	}

	byKey := make(map[string][]int)
	for i, g := range gs {
		byKey[g.key] = append(byKey[g.key], i)
		if g.lo <= 0 {
			flag(i, "fencing: key %s: a number that is not positive: %s", g.key, desc(g))
		}
		if g.lo != g.hi {
			flag(i, "fencing: key %s: one grant, several numbers: %s", g.key, desc(g))
		}
	}
	for _, key := range sortedKeys(byKey) {
		idx := byKey[key]
		// Strictly increasing: sweep the grants in the order they were
		// made, knowing the largest numbers of grants that ended before
		// (the largest two of different tokens: a grant is not compared
		// with an earlier grant of its own token).
		byMade := append([]int(nil), idx...)
		sort.SliceStable(byMade, func(a, b int) bool { return gs[byMade[a]].made.Before(gs[byMade[b]].made) })
		byEnd := append([]int(nil), idx...)
		sort.SliceStable(byEnd, func(a, b int) bool { return gs[byEnd[a]].end.Before(gs[byEnd[b]].end) })
		best1, best2 := -1, -1
		j := 0
		for _, i := range byMade {
			g := gs[i]
			for ; j < len(byEnd) && !g.made.Before(gs[byEnd[j]].end); j++ {
				x := byEnd[j]
				switch {
				case best1 >= 0 && gs[x].token == gs[best1].token:
					if gs[x].hi > gs[best1].hi {
						best1 = x
					}
				case best1 < 0 || gs[x].hi > gs[best1].hi:
					best1, best2 = x, best1
				case best2 < 0 || gs[x].hi > gs[best2].hi:
					best2 = x
				}
			}
			before := best1
			if before >= 0 && gs[before].token == g.token {
				before = best2
			}
			if before >= 0 && g.lo <= gs[before].hi {
				flag(i, "fencing: key %s: a later grant's number is not above an earlier one's: %s was made after %s ended",
					key, desc(g), desc(gs[before]))
			}
		}
		// A new grant gets a new number, even where the history does not
		// order the two grants (ordered ones were judged above).
		owner := make(map[int64]int)
		for _, i := range idx {
			for _, op := range gs[i].ops {
				j, seen := owner[op.Fence.N]
				if !seen {
					owner[op.Fence.N] = i
					continue
				}
				a, b := gs[j], gs[i]
				if a.token != b.token && a.end.After(b.made) && b.end.After(a.made) {
					flag(max(i, j), "fencing: key %s: two grants, one number %d: %s and %s", key, op.Fence.N, desc(a), desc(b))
				}
			}
		}
	}
	return violations, st, examples
}
