package quorum

import (
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestDefaultTiming(t *testing.T) {
	d := DefaultTiming()
	if d.DriftFactor != 0.01 || d.DriftFloor != 2*time.Millisecond || d.MinValidity != 0 {
		t.Errorf("DefaultTiming() = %+v, want factor 0.01, floor 2ms, min validity 0", d)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("DefaultTiming().Validate() = %v, want nil", err)
	}
}

func TestTimingValidate(t *testing.T) {
	for _, tc := range []struct {
		name  string
		t     Timing
		field string // "" when valid
	}{
		{"zero", Timing{}, ""},
		{"default", DefaultTiming(), ""},
		{"largest factor", Timing{DriftFactor: 0.999}, ""},
		{"min validity", Timing{MinValidity: time.Second}, ""},
		{"negative factor", Timing{DriftFactor: -0.01}, "drift_factor"},
		{"factor one", Timing{DriftFactor: 1}, "drift_factor"},
		{"factor above one", Timing{DriftFactor: 1.5}, "drift_factor"},
		{"factor NaN", Timing{DriftFactor: math.NaN()}, "drift_factor"},
		{"factor +Inf", Timing{DriftFactor: math.Inf(1)}, "drift_factor"},
		{"factor -Inf", Timing{DriftFactor: math.Inf(-1)}, "drift_factor"},
		{"negative floor", Timing{DriftFloor: -time.Nanosecond}, "drift_floor"},
		{"negative min validity", Timing{MinValidity: -time.Millisecond}, "min_validity"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.t.Validate()
			switch {
			case tc.field == "" && err != nil:
				t.Errorf("Validate(%+v) = %v, want nil", tc.t, err)
			case tc.field != "" && err == nil:
				t.Errorf("Validate(%+v) = nil, want an error about %s", tc.t, tc.field)
			case tc.field != "" && !errors.Is(err, ErrTiming):
				t.Errorf("Validate(%+v) = %v, does not wrap ErrTiming", tc.t, err)
			case tc.field != "" && !strings.Contains(err.Error(), tc.field):
				t.Errorf("Validate(%+v) = %q, does not name %s", tc.t, err, tc.field)
			}
		})
	}
}

func TestDrift(t *testing.T) {
	def := DefaultTiming()
	for _, tc := range []struct {
		t    Timing
		ttl  time.Duration
		want time.Duration
	}{
		{def, 10 * time.Second, 102 * time.Millisecond},
		{def, 30 * time.Second, 302 * time.Millisecond},
		{def, time.Second, 12 * time.Millisecond},
		{def, 100 * time.Millisecond, 3 * time.Millisecond},
		{def, 0, 2 * time.Millisecond},
		{def, -time.Second, 2 * time.Millisecond}, // a negative TTL is no TTL
		{Timing{}, 10 * time.Second, 0},
		{Timing{DriftFloor: time.Millisecond}, 10 * time.Second, time.Millisecond},
		{Timing{DriftFactor: 0.5}, 10 * time.Second, 5 * time.Second},
	} {
		if got := tc.t.Drift(tc.ttl); got != tc.want {
			t.Errorf("%+v.Drift(%v) = %v, want %v", tc.t, tc.ttl, got, tc.want)
		}
	}
}

// Drift is ttl*factor + floor, to within the rounding of one float multiply.
func TestDriftProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for range 20000 {
		tm := randomTiming(rng)
		ttl := time.Duration(rng.Int64N(1 << 45)) // up to ~9.7 hours
		got := tm.Drift(ttl)
		exact := float64(ttl)*tm.DriftFactor + float64(tm.DriftFloor)
		if d := math.Abs(float64(got) - exact); d > 1+exact*1e-15 {
			t.Fatalf("%+v.Drift(%v) = %v, want ttl*factor+floor = %.1fns (off by %.1fns)", tm, ttl, got, exact, d)
		}
		if got < tm.DriftFloor {
			t.Fatalf("%+v.Drift(%v) = %v, below the floor", tm, ttl, got)
		}
	}
}

func randomTiming(rng *rand.Rand) Timing {
	return Timing{
		DriftFactor: rng.Float64() * 0.2,
		DriftFloor:  time.Duration(rng.Int64N(int64(50 * time.Millisecond))),
		MinValidity: time.Duration(rng.Int64N(int64(time.Second))),
	}
}

func TestValidity(t *testing.T) {
	def := DefaultTiming()
	for _, tc := range []struct {
		ttl, elapsed, want time.Duration
	}{
		{10 * time.Second, 0, 10*time.Second - 102*time.Millisecond},
		{10 * time.Second, 5 * time.Millisecond, 10*time.Second - 107*time.Millisecond},
		{10 * time.Second, -time.Second, 10*time.Second - 102*time.Millisecond}, // negative elapsed clamps to 0
		{10 * time.Second, 10*time.Second - 102*time.Millisecond, 0},
		{10 * time.Second, 10 * time.Second, -102 * time.Millisecond},
		{time.Millisecond, 0, -1*time.Millisecond - 10*time.Microsecond}, // shorter than the drift floor
		{0, 0, -2 * time.Millisecond},
	} {
		if got := def.Validity(tc.ttl, tc.elapsed); got != tc.want {
			t.Errorf("Validity(%v, %v) = %v, want %v", tc.ttl, tc.elapsed, got, tc.want)
		}
	}
}

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		min, validity time.Duration
		want          bool
	}{
		{0, -time.Second, false},
		{0, 0, false},
		{0, time.Nanosecond, true},
		{0, time.Hour, true},
		{time.Millisecond, 0, false},
		{time.Millisecond, time.Millisecond - 1, false},
		{time.Millisecond, time.Millisecond, true},
		{time.Millisecond, time.Second, true},
	} {
		tm := Timing{MinValidity: tc.min}
		if got := tm.Valid(tc.validity); got != tc.want {
			t.Errorf("Timing{MinValidity: %v}.Valid(%v) = %v, want %v", tc.min, tc.validity, got, tc.want)
		}
	}
}

// For realistic magnitudes (TTL and elapsed up to 2^61ns, about 73 years):
// validity never exceeds the TTL; it strictly decreases as elapsed grows past
// 0 and stays equal for negative elapsed (clamped to 0); and a round that
// took at least ttl - drift is never valid.
func TestValidityProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	for range 50000 {
		tm := randomTiming(rng)
		ttl := randomDuration(rng)
		e1, e2 := randomDuration(rng)-randomDuration(rng)/2, randomDuration(rng)-randomDuration(rng)/2
		if e1 > e2 {
			e1, e2 = e2, e1
		}
		v1, v2 := tm.Validity(ttl, e1), tm.Validity(ttl, e2)
		if v1 > ttl || v2 > ttl {
			t.Fatalf("%+v: Validity(%v, %v) = %v, Validity(%v, %v) = %v: exceeds the TTL", tm, ttl, e1, v1, ttl, e2, v2)
		}
		switch {
		case e2 <= 0 && v1 != v2:
			t.Fatalf("%+v: Validity(%v, %v) = %v != Validity(%v, %v) = %v; negative elapsed must clamp to 0", tm, ttl, e1, v1, ttl, e2, v2)
		case e2 > 0 && e1 < e2 && v2 >= v1:
			t.Fatalf("%+v: Validity(%v, %v) = %v but Validity(%v, %v) = %v; must shrink as elapsed grows", tm, ttl, e1, v1, ttl, e2, v2)
		}
		if want := ttl - max(e2, 0) - tm.Drift(ttl); v2 != want {
			t.Fatalf("%+v: Validity(%v, %v) = %v, want ttl - elapsed - drift = %v", tm, ttl, e2, v2, want)
		}
		if e2 >= ttl-tm.Drift(ttl) && tm.Valid(v2) {
			t.Fatalf("%+v: elapsed %v >= ttl %v - drift %v, yet Valid(%v) = true", tm, e2, ttl, tm.Drift(ttl), v2)
		}
		if tm.Valid(v2) && (v2 <= 0 || v2 < tm.MinValidity) {
			t.Fatalf("%+v: Valid(%v) = true below the minimum", tm, v2)
		}
	}
}

// randomDuration spreads over many magnitudes, from nanoseconds to 2^61ns.
func randomDuration(rng *rand.Rand) time.Duration {
	return time.Duration(rng.Int64N(1 << rng.IntN(62)))
}
