// Regression tests for bugs found while writing this suite, now fixed.

package quorum

import (
	"math"
	"testing"
	"time"
)

// validity.go: Validity computes ttl - elapsed - drift in int64 without
// saturating. When elapsed + drift - ttl exceeds 2^63 the subtraction wraps
// to a large positive validity, which Valid accepts: "never OK once
// elapsed >= ttl - drift" breaks. Unreachable with a monotonic elapsed and a
// TTL bounded by max_ttl, but the function's promise ("negative once the lock
// can no longer be trusted") holds for no input range short of that.
func TestKnownBugValidityOverflow(t *testing.T) {
	def := DefaultTiming()
	for _, tc := range []struct {
		ttl, elapsed time.Duration
	}{
		{0, math.MaxInt64},
		{time.Millisecond, math.MaxInt64},
		{time.Millisecond, math.MaxInt64 - time.Millisecond},
		{-time.Second, math.MaxInt64 - time.Second},
	} {
		v := def.Validity(tc.ttl, tc.elapsed)
		if v > tc.ttl || v > 0 || def.Valid(v) {
			t.Errorf("Validity(%v, %v) = %v (Valid %v); want at most min(ttl, 0) and not valid", tc.ttl, tc.elapsed, v, def.Valid(v))
		}
	}
}
