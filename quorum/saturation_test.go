package quorum

import (
	"math"
	"testing"
	"time"
)

// Validity saturates: an elapsed time so large that ttl - elapsed - drift
// would wrap around int64 still gives a validity that is not valid.
func TestValiditySaturatesInsteadOfWrapping(t *testing.T) {
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
