package quorum

import (
	"errors"
	"fmt"
	"math"
	"time"
)

// Timing holds the clock assumptions of the algorithm.
type Timing struct {
	// DriftFactor is the fraction of the TTL allowed for clock drift
	// between the proxy and the backends (default 0.01).
	DriftFactor float64
	// DriftFloor is added to the drift so short TTLs keep a margin
	// (default 2ms).
	DriftFloor time.Duration
	// MinValidity is the least validity a successful acquisition or
	// extension may leave the client (default 0: any positive validity).
	MinValidity time.Duration
}

// DefaultNodeTimeout is how long one node may take to answer one command
// before its vote is unknown: far below the TTLs in use, so that a dead or
// hung node costs little of a lock's validity.
const DefaultNodeTimeout = 50 * time.Millisecond

// DefaultTiming returns the values of the Redlock page and most clients.
func DefaultTiming() Timing {
	return Timing{DriftFactor: 0.01, DriftFloor: 2 * time.Millisecond}
}

// ErrTiming is wrapped by Validate's errors.
var ErrTiming = errors.New("quorum: invalid timing")

// TimingError says which setting of a Timing breaks which rule; it wraps
// ErrTiming.
type TimingError struct {
	Setting string // drift_factor, drift_floor or min_validity
	Rule    string // the rule and the value, e.g. "must not be negative, got -1s"
}

func (e *TimingError) Error() string { return fmt.Sprintf("%v: %s %s", ErrTiming, e.Setting, e.Rule) }

func (e *TimingError) Unwrap() error { return ErrTiming }

// Validate checks the timing assumptions: the rules live here alone.
func (t Timing) Validate() error {
	switch {
	case t.DriftFactor < 0 || t.DriftFactor >= 1 || t.DriftFactor != t.DriftFactor:
		return &TimingError{"drift_factor", fmt.Sprintf("must be at least 0 and below 1, got %v", t.DriftFactor)}
	case t.DriftFloor < 0:
		return &TimingError{"drift_floor", fmt.Sprintf("must not be negative, got %v", t.DriftFloor)}
	case t.MinValidity < 0:
		return &TimingError{"min_validity", fmt.Sprintf("must not be negative, got %v", t.MinValidity)}
	}
	return nil
}

// Drift is the clock drift allowance for a TTL: ttl*DriftFactor + DriftFloor.
func (t Timing) Drift(ttl time.Duration) time.Duration {
	if ttl < 0 {
		ttl = 0
	}
	return time.Duration(float64(ttl)*t.DriftFactor) + t.DriftFloor
}

// Validity is how long a lock acquired with ttl is safe to use after elapsed
// time was spent acquiring it: ttl - elapsed - drift. It never exceeds ttl
// and is negative once the lock can no longer be trusted. elapsed must come
// from a monotonic clock.
func (t Timing) Validity(ttl, elapsed time.Duration) time.Duration {
	if elapsed < 0 {
		elapsed = 0
	}
	// Subtract without wrapping: a huge elapsed time clamps to the most
	// negative validity instead of overflowing to a positive one.
	v := ttl - t.Drift(ttl)
	if v < math.MinInt64+elapsed {
		return math.MinInt64
	}
	return v - elapsed
}

// Valid reports whether a round won with the given validity may be reported
// as a success: validity is positive and at least MinValidity.
func (t Timing) Valid(validity time.Duration) bool {
	return validity > 0 && validity >= t.MinValidity
}
