package spec

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

// Seen is what a classification was verified with beyond the relations of
// its call (relations.go): the values the probes ran. A script may treat
// a value otherwise for a reason the relations do not see, because it
// computes it (a TTL capped at math.min(ttl, 60 * 1000), read in seconds
// below 2^10, a token cut to 400 bytes, an owner whose token is empty
// that may not re-enter): the probes around one call cannot vouch for
// values far from theirs. So a classification holds only for calls whose
// TTL, least TTL and token and ignored arguments' lengths lie within the
// ranges its probes ran; a call outside them is classified on its own,
// with its own values among the probes.
type Seen struct {
	// Lens bounds the byte length of the token arguments and of the
	// arguments the script ignores (every value was tried there).
	Lens []ArgLen
	// Nums bounds the orders of magnitude of the tokens that read as
	// numbers (a worker id): a script may compare one with a threshold it
	// computes. Orders, not values: a library whose tokens are random
	// numbers, or a count that grows, would otherwise leave the bounds on
	// almost every call, and be classified again each time.
	Nums []ArgNum
	// TTL and Low bound, in ms, the TTL (what is left of a deadline) and
	// the least TTL (Threshold) the probes ran.
	TTL, Low Span
}

// ArgLen is the least and greatest length (bytes) of an argument the
// probes ran.
type ArgLen struct{ Arg, Lo, Hi int }

// ArgNum is the least and greatest order of magnitude (NumOrder) of the
// numbers an argument was probed with.
type ArgNum struct{ Arg, Lo, Hi int }

// AddNum widens argument arg's bounds to the order of f.
func (s *Seen) AddNum(arg int, f float64) {
	o := NumOrder(f)
	for i := range s.Nums {
		if s.Nums[i].Arg == arg {
			s.Nums[i].Lo, s.Nums[i].Hi = min(s.Nums[i].Lo, o), max(s.Nums[i].Hi, o)
			return
		}
	}
	s.Nums = append(s.Nums, ArgNum{Arg: arg, Lo: o, Hi: o})
}

// NumOrder is a finite number's signed order of magnitude: 0 for 0, and
// for any other, its sign times 400 plus its power of ten (1 for 1 to 9,
// 2 for 10 to 99, 0 for 0.1 to 0.99...). It grows with f, so a range of
// orders is a range of numbers, cut at powers of ten.
func NumOrder(f float64) int {
	if f == 0 || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	e := 400 + int(math.Floor(math.Log10(math.Abs(f)))) + 1
	if f < 0 {
		return -e
	}
	return e
}

// Span is the least and greatest of a quantity the probes ran, if Set.
type Span struct {
	Lo, Hi int64
	Set    bool
}

// Add widens the span to v.
func (s *Span) Add(v int64) {
	if !s.Set {
		*s = Span{Lo: v, Hi: v, Set: true}
		return
	}
	s.Lo, s.Hi = min(s.Lo, v), max(s.Hi, v)
}

// AddLen widens argument arg's length bounds to n.
func (s *Seen) AddLen(arg, n int) {
	for i := range s.Lens {
		if s.Lens[i].Arg == arg {
			s.Lens[i].Lo, s.Lens[i].Hi = min(s.Lens[i].Lo, n), max(s.Lens[i].Hi, n)
			return
		}
	}
	s.Lens = append(s.Lens, ArgLen{Arg: arg, Lo: n, Hi: n})
}

// Covers reports whether a call's values lie within what the
// classification was verified with (always, for one that records
// nothing: a library fact, a declaration). It does not allocate.
func (c *Class) Covers(keys, argv [][]byte) bool {
	s := c.Seen
	if s == nil {
		return true
	}
	lock := len(keys) - c.KeyArgs
	for _, l := range s.Lens {
		n := len(argAt(keys, argv, lock, c.KeyArgs, l.Arg))
		if n < l.Lo || n > l.Hi {
			return false
		}
	}
	for _, l := range s.Nums {
		// A token that is no number, or not a finite one, stands in
		// other relations than one that is.
		f, ok := sandbox.ArgNumber(argAt(keys, argv, lock, c.KeyArgs, l.Arg))
		if !ok || math.IsNaN(f) || math.IsInf(f, 0) {
			continue
		}
		if o := NumOrder(f); o < l.Lo || o > l.Hi {
			return false
		}
	}
	if s.TTL.Set && c.TTLArg >= 0 {
		if n, ok := resp.ParseInt(argAt(keys, argv, lock, c.KeyArgs, c.TTLArg)); ok && n > 0 && n <= int64(1<<62)/int64(c.TTLUnit) {
			ms := n * int64(c.TTLUnit/time.Millisecond)
			if c.Deadline {
				// What is left of it; one already passed is read as a
				// read of the keys (Lapsed) or as nothing left.
				ms -= time.Now().UnixMilli()
			}
			if (ms > 0 || !c.Deadline) && (ms < s.TTL.Lo || ms > s.TTL.Hi) {
				return false
			}
		}
	}
	if s.Low.Set && c.MinArg >= 0 {
		if n, ok := resp.ParseInt(argAt(keys, argv, lock, c.KeyArgs, c.MinArg)); ok && n >= 0 && n <= int64(1<<62)/int64(c.MinUnit/time.Millisecond) {
			if ms := n*int64(c.MinUnit/time.Millisecond) + c.MinOffset; ms < s.Low.Lo || ms > s.Low.Hi {
				return false
			}
		}
	}
	return true
}

// argAt is argument i of a call (KEYS after the lock keys, then ARGV).
func argAt(keys, argv [][]byte, lock, keyArgs, i int) []byte {
	if i < keyArgs {
		if lock+i < len(keys) {
			return keys[lock+i]
		}
		return nil
	}
	if i -= keyArgs; i < len(argv) {
		return argv[i]
	}
	return nil
}

// seenText renders the ranges for SCRIPT EXPLAIN.
func (c *Class) seenText() string {
	s := c.Seen
	if s == nil {
		return ""
	}
	nm := c.Names()
	var parts []string
	if s.TTL.Set && c.TTLArg >= 0 {
		what := "TTL"
		if c.Deadline {
			what = "time left to the deadline"
		}
		parts = append(parts, fmt.Sprintf("%s %s from %d to %d ms", nm.Arg(c.TTLArg), what, s.TTL.Lo, s.TTL.Hi))
	}
	if s.Low.Set && c.MinArg >= 0 {
		parts = append(parts, fmt.Sprintf("%s least TTL from %d to %d ms", nm.Arg(c.MinArg), s.Low.Lo, s.Low.Hi))
	}
	for _, l := range s.Lens {
		parts = append(parts, fmt.Sprintf("%s of %d to %d bytes", nm.Arg(l.Arg), l.Lo, l.Hi))
	}
	for _, l := range s.Nums {
		parts = append(parts, fmt.Sprintf("%s from %s to %s when a number", nm.Arg(l.Arg), orderBound(l.Lo, false), orderBound(l.Hi, true)))
	}
	return strings.Join(parts, "; ")
}

// orderBound is the least (or, high, the greatest) magnitude of a number
// of order o (NumOrder), for SCRIPT EXPLAIN.
func orderBound(o int, high bool) string {
	if o == 0 {
		return "0"
	}
	e, sign := o-401, "" // the power of ten of the least positive one
	if o < 0 {
		e, sign, high = -o-401, "-", !high // the same, mirrored
	}
	if high {
		e++
	}
	return sign + "1e" + strconv.Itoa(e)
}
