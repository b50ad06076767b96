package quorum

import (
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// Holdings for read tests.
func held(v string, pttl time.Duration) Holding {
	return Holding{Answered: true, Counts: true, Exists: true, Value: []byte(v), PTTL: pttl}
}

func absent() Holding { return Holding{Answered: true, Counts: true} }

func unanswered(h Holding) Holding { h.Answered = false; return h }

func quarantined(h Holding) Holding { h.Counts = false; return h }

const ms = time.Millisecond

func TestMajorityValue(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       int
		hs      []Holding
		want    string
		holders int
		ok      bool
	}{
		{"one node holds", 1, []Holding{held("a", ms)}, "a", 1, true},
		{"one node absent", 1, []Holding{absent()}, "", 0, false},
		{"empty value is a value", 1, []Holding{held("", ms)}, "", 1, true},
		{"two of three", 3, []Holding{held("a", ms), absent(), held("a", ms)}, "a", 2, true},
		{"three of three", 3, []Holding{held("a", ms), held("a", ms), held("a", ms)}, "a", 3, true},
		{"split values", 3, []Holding{held("a", ms), held("b", ms), absent()}, "", 0, false},
		{"minority first", 3, []Holding{held("b", ms), held("a", ms), held("a", ms)}, "a", 2, true},
		{"majority absent", 3, []Holding{held("a", ms), absent(), absent()}, "", 0, false},
		{"quarantined holder ignored", 3, []Holding{held("a", ms), quarantined(held("a", ms)), absent()}, "", 0, false},
		{"quarantined holder not counted", 3, []Holding{held("a", ms), quarantined(held("a", ms)), held("a", ms)}, "a", 2, true},
		{"unanswered holder ignored", 3, []Holding{held("a", ms), unanswered(held("a", ms)), absent()}, "", 0, false},
		{"majority of n, not of answers", 5, []Holding{held("a", ms), held("a", ms), unanswered(absent()), unanswered(absent()), unanswered(absent())}, "", 0, false},
		{"fewer holdings than nodes", 5, []Holding{held("a", ms), held("a", ms), held("a", ms)}, "a", 3, true},
		{"no holdings", 3, nil, "", 0, false},
		{"five nodes, three agree", 5, []Holding{held("x", ms), held("a", ms), held("a", ms), held("y", ms), held("a", ms)}, "a", 3, true},
		{"seven nodes, three-three-one", 7, []Holding{held("a", ms), held("b", ms), held("a", ms), held("b", ms), held("a", ms), held("b", ms), held("c", ms)}, "", 0, false},
		{"seven nodes, four agree", 7, []Holding{held("a", ms), held("b", ms), held("a", ms), held("b", ms), held("a", ms), held("b", ms), held("a", ms)}, "a", 4, true},
		{"value differs in case", 3, []Holding{held("a", ms), held("A", ms), absent()}, "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, holders, ok := MajorityValue(tc.n, tc.hs)
			if ok != tc.ok || holders != tc.holders || (ok && string(v) != tc.want) {
				t.Errorf("MajorityValue(%d) = %q, %d, %v; want %q, %d, %v", tc.n, v, holders, ok, tc.want, tc.holders, tc.ok)
			}
			if !ok && v != nil {
				t.Errorf("MajorityValue(%d) = %q with ok=false, want nil", tc.n, v)
			}
		})
	}
}

func TestMajorityRemaining(t *testing.T) {
	for _, tc := range []struct {
		name  string
		n     int
		hs    []Holding
		value string
		want  time.Duration
		ok    bool
	}{
		{"one node", 1, []Holding{held("a", 100*ms)}, "a", 100 * ms, true},
		{"one node, no expiry", 1, []Holding{held("a", NoExpiry)}, "a", NoExpiry, true},
		{"second largest of three", 3, []Holding{held("a", 100*ms), held("a", 300*ms), held("a", 200*ms)}, "a", 200 * ms, true},
		{"two holders: the shorter", 3, []Holding{held("a", 100*ms), absent(), held("a", 300*ms)}, "a", 100 * ms, true},
		{"third largest of five", 5, []Holding{held("a", 1*ms), held("a", 5*ms), held("a", 3*ms), held("a", 2*ms), held("a", 4*ms)}, "a", 3 * ms, true},
		{"fourth largest of seven", 7, []Holding{held("a", 7*ms), held("a", 6*ms), held("a", 5*ms), held("a", 4*ms), held("a", 3*ms), held("a", 2*ms), held("a", 1*ms)}, "a", 4 * ms, true},
		{"equal TTLs", 3, []Holding{held("a", 50*ms), held("a", 50*ms), held("a", 50*ms)}, "a", 50 * ms, true},
		{"minority value's TTL ignored", 3, []Holding{held("a", 100*ms), held("b", time.Hour), held("a", 200*ms)}, "a", 100 * ms, true},
		{"quarantined TTL ignored", 3, []Holding{held("a", 100*ms), quarantined(held("a", time.Hour)), held("a", 200*ms)}, "a", 100 * ms, true},
		{"unanswered TTL ignored", 3, []Holding{held("a", 100*ms), unanswered(held("a", time.Hour)), held("a", 200*ms)}, "a", 100 * ms, true},
		{"no expiry on a majority", 3, []Holding{held("a", NoExpiry), held("a", 100*ms), held("a", NoExpiry)}, "a", NoExpiry, true},
		{"no expiry on a minority", 3, []Holding{held("a", NoExpiry), held("a", 100*ms), held("a", 200*ms)}, "a", 200 * ms, true},
		{"no expiry on a minority of two holders", 3, []Holding{held("a", NoExpiry), held("a", 100*ms), absent()}, "a", 100 * ms, true},
		{"no expiry on three of five", 5, []Holding{held("a", NoExpiry), held("a", 1*ms), held("a", NoExpiry), held("a", 2*ms), held("a", NoExpiry)}, "a", NoExpiry, true},
		{"no majority", 3, []Holding{held("a", 100*ms), held("b", 100*ms), absent()}, "", 0, false},
		{"nobody holds", 3, []Holding{absent(), absent(), absent()}, "", 0, false},
		{"only quarantined hold", 3, []Holding{quarantined(held("a", ms)), quarantined(held("a", ms)), quarantined(held("a", ms))}, "", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, rem, ok := MajorityRemaining(tc.n, tc.hs)
			if ok != tc.ok || rem != tc.want || string(v) != tc.value {
				t.Errorf("MajorityRemaining(%d) = %q, %v, %v; want %q, %v, %v", tc.n, v, rem, ok, tc.value, tc.want, tc.ok)
			}
		})
	}
}

// remainingOracle is the longest r such that at least a majority of counted,
// answered nodes hold the majority value for r or longer (infinite for a key
// without TTL), found by trying every candidate.
func remainingOracle(n int, hs []Holding, value []byte) time.Duration {
	const inf = time.Duration(1<<63 - 1)
	ttl := func(h Holding) time.Duration {
		if h.PTTL < 0 {
			return inf
		}
		return h.PTTL
	}
	best := time.Duration(-1 << 63)
	for _, cand := range hs {
		r := ttl(cand)
		c := 0
		for _, h := range hs {
			if h.Answered && h.Counts && h.Exists && string(h.Value) == string(value) && ttl(h) >= r {
				c++
			}
		}
		if c >= Majority(n) && r > best {
			best = r
		}
	}
	if best == inf {
		return NoExpiry
	}
	return best
}

func randomHoldings(rng *rand.Rand, n int) []Holding {
	values := []string{"tok-a", "tok-b", ""}
	hs := make([]Holding, n)
	for i := range hs {
		h := Holding{
			Answered: rng.IntN(6) != 0,
			Counts:   rng.IntN(6) != 0,
			Exists:   rng.IntN(5) != 0,
		}
		if h.Exists {
			// Bias toward one value so majorities are common.
			h.Value = []byte(values[min(rng.IntN(5), 2)])
			h.PTTL = time.Duration(rng.IntN(5)) * 100 * ms
			if rng.IntN(5) == 0 {
				h.PTTL = NoExpiry
			}
		}
		hs[i] = h
	}
	return hs
}

func TestMajorityReadProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	for n := 1; n <= 7; n++ {
		for range 5000 {
			hs := randomHoldings(rng, n)
			counts := map[string]int{}
			for _, h := range hs {
				if h.Answered && h.Counts && h.Exists {
					counts[string(h.Value)]++
				}
			}
			var wantValue string
			wantOK := false
			for v, c := range counts {
				if c >= Majority(n) {
					wantValue, wantOK = v, true
				}
			}
			v, holders, ok := MajorityValue(n, hs)
			if ok != wantOK || (ok && (string(v) != wantValue || holders != counts[wantValue])) {
				t.Fatalf("n=%d %+v: MajorityValue = %q, %d, %v; want %q, %d, %v", n, hs, v, holders, ok, wantValue, counts[wantValue], wantOK)
			}
			rv, rem, rok := MajorityRemaining(n, hs)
			if rok != ok || string(rv) != string(v) {
				t.Fatalf("n=%d %+v: MajorityRemaining value %q, %v disagrees with MajorityValue %q, %v", n, hs, rv, rok, v, ok)
			}
			if ok {
				if want := remainingOracle(n, hs, v); rem != want {
					t.Fatalf("n=%d %+v: MajorityRemaining = %v, want %v", n, hs, rem, want)
				}
			}
		}
	}
}

// MajorityRemaining must not reorder or modify the caller's holdings.
func TestMajorityRemainingLeavesInputAlone(t *testing.T) {
	hs := []Holding{held("a", 300*ms), held("a", 100*ms), held("a", 200*ms)}
	before := slices.Clone(hs)
	MajorityRemaining(3, hs)
	for i := range hs {
		if hs[i].PTTL != before[i].PTTL || string(hs[i].Value) != string(before[i].Value) {
			t.Fatalf("holding %d changed from %+v to %+v", i, before[i], hs[i])
		}
	}
}

func TestRemainingValidity(t *testing.T) {
	def := DefaultTiming()
	for _, tc := range []struct {
		remaining, elapsed, want time.Duration
	}{
		{NoExpiry, 0, NoExpiry},
		{NoExpiry, time.Hour, NoExpiry},
		{10 * time.Second, 0, 10*time.Second - 102*ms},
		{10 * time.Second, 8 * ms, 10*time.Second - 110*ms},
		{10 * time.Second, -time.Second, 10*time.Second - 102*ms},
		{time.Millisecond, 0, 0}, // less than the drift: clamped to 0
		{100 * ms, 200 * ms, 0},
		{0, 0, 0},
	} {
		if got := def.RemainingValidity(tc.remaining, tc.elapsed); got != tc.want {
			t.Errorf("RemainingValidity(%v, %v) = %v, want %v", tc.remaining, tc.elapsed, got, tc.want)
		}
	}
}

func TestRemainingValidityProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(23, 24))
	for range 20000 {
		tm := randomTiming(rng)
		rem, el := randomDuration(rng), randomDuration(rng)
		got := tm.RemainingValidity(rem, el)
		if got < 0 || got > rem {
			t.Fatalf("%+v.RemainingValidity(%v, %v) = %v, want within [0, remaining]", tm, rem, el, got)
		}
		if want := max(rem-el-tm.Drift(rem), 0); got != want {
			t.Fatalf("%+v.RemainingValidity(%v, %v) = %v, want %v", tm, rem, el, got, want)
		}
	}
}
