package quorum

import (
	"testing"
	"time"
)

// The vote path of one lock command over five backends.
func BenchmarkTallyFiveVotes(b *testing.B) {
	b.ReportAllocs()
	timing := DefaultTiming()
	for i := 0; i < b.N; i++ {
		t := NewTally(5)
		for n := 0; n < 5; n++ {
			t.Record(n, Granted, true)
			if t.Outcome() != Undecided {
				break
			}
		}
		_ = timing.Valid(timing.Validity(30*time.Second, 300*time.Microsecond))
	}
}
