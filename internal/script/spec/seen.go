package spec

import (
	"fmt"
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
	// Nums bounds the tokens that read as numbers (a worker id): a
	// script may compare one with a threshold it computes.
	Nums []ArgNum
	// TTL and Low bound, in ms, the TTL (what is left of a deadline) and
	// the least TTL (Threshold) the probes ran.
	TTL, Low Span
}

// ArgLen is the least and greatest length (bytes) of an argument the
// probes ran.
type ArgLen struct{ Arg, Lo, Hi int }

// ArgNum is the least and greatest number an argument was probed with.
type ArgNum struct {
	Arg    int
	Lo, Hi float64
}

// AddNum widens argument arg's number bounds to f.
func (s *Seen) AddNum(arg int, f float64) {
	for i := range s.Nums {
		if s.Nums[i].Arg == arg {
			s.Nums[i].Lo, s.Nums[i].Hi = min(s.Nums[i].Lo, f), max(s.Nums[i].Hi, f)
			return
		}
	}
	s.Nums = append(s.Nums, ArgNum{Arg: arg, Lo: f, Hi: f})
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
		if f, ok := sandbox.ArgNumber(argAt(keys, argv, lock, c.KeyArgs, l.Arg)); ok && (f < l.Lo || f > l.Hi) {
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
		parts = append(parts, fmt.Sprintf("%s from %s to %s when a number", nm.Arg(l.Arg), fmtNum(l.Lo), fmtNum(l.Hi)))
	}
	return strings.Join(parts, "; ")
}
