package quorum

import (
	"math/bits"
	"testing"
	"time"
)

// For every n up to 7, every lost backend x, every majority that may have
// counted a grant on x, and every set of other backends whose whole
// records are read after the settle time: either the readings are too few
// to tell, or the end they give covers the grant.
func TestRecordsEndCoversEveryGrantTheLostBackendMayHaveHeld(t *testing.T) {
	lost := time.Unix(1000, 0)
	const settle = 50 * time.Millisecond
	const deadline = 40 * time.Second // the grant's, after the readings
	for n := 1; n <= 7; n++ {
		maj := Majority(n)
		for x := 0; x < n; x++ {
			for grant := uint(0); grant < 1<<n; grant++ {
				if grant&(1<<x) == 0 || bits.OnesCount(grant) < maj {
					continue // not a grant counted on x
				}
				for readers := uint(0); readers < 1<<n; readers++ {
					if readers&(1<<x) != 0 {
						continue
					}
					var rs []Reading
					for i := 0; i < n; i++ {
						if readers&(1<<i) == 0 {
							continue
						}
						r := Reading{Sent: lost.Add(settle), Got: lost.Add(settle + time.Millisecond), Whole: true}
						if grant&(1<<i) != 0 {
							r.Left = deadline
						}
						rs = append(rs, r)
					}
					end, ok := RecordsEnd(n, lost, settle, rs)
					if len(rs) < ReadersNeeded(n) {
						if ok {
							t.Fatalf("n=%d: %d readers gave an end, %d needed", n, len(rs), ReadersNeeded(n))
						}
						continue
					}
					if !ok {
						t.Fatalf("n=%d: %d whole readers gave no end", n, len(rs))
					}
					if end.Before(lost.Add(settle + deadline)) {
						t.Fatalf("n=%d x=%d grant=%b readers=%b: end %v before the grant's deadline", n, x, grant, readers, end.Sub(lost))
					}
				}
			}
		}
	}
}

func TestRecordsEndIgnoresReadingsThatCannotBeReliedOn(t *testing.T) {
	lost := time.Unix(1000, 0)
	const settle = 50 * time.Millisecond
	after := Reading{Sent: lost.Add(settle), Got: lost.Add(settle + time.Millisecond), Whole: true}
	early := after
	early.Sent = lost.Add(settle - time.Millisecond)
	partial := after
	partial.Whole = false
	cases := []struct {
		name   string
		others []Reading
		ok     bool
	}{
		{"three whole readings after the settle time", []Reading{after, after, after}, true},
		{"one sent before the settle time", []Reading{after, after, early}, false},
		{"one not whole", []Reading{after, partial, after}, false},
		{"too few", []Reading{after, after}, false},
	}
	for _, c := range cases {
		if _, ok := RecordsEnd(5, lost, settle, c.others); ok != c.ok {
			t.Errorf("%s: ok %v, want %v", c.name, ok, c.ok)
		}
	}
	if _, ok := RecordsEnd(1, lost, settle, nil); ok {
		t.Error("a lone backend's loss has no record elsewhere: it must wait the ceiling")
	}
}

func TestRecordsEndConvertsTheTimeLeftWithTheDriftRate(t *testing.T) {
	lost := time.Unix(1000, 0)
	got := lost.Add(time.Second)
	r := Reading{Sent: got.Add(-time.Millisecond), Got: got, Left: 100 * time.Second, Whole: true}
	end, ok := RecordsEnd(3, lost, 0, []Reading{r, {Sent: got, Got: got, Whole: true}})
	if !ok {
		t.Fatal("no end")
	}
	if want := got.Add(101*time.Second + RecordSlack); !end.Equal(want) {
		t.Fatalf("end %v after the reading, want %v", end.Sub(got), want.Sub(got))
	}
	end, _ = RecordsEnd(3, lost, 0, []Reading{{Sent: got, Got: got, Left: -time.Second, Whole: true}, {Sent: got, Got: got, Whole: true}})
	if !end.Equal(lost) {
		t.Fatalf("with nothing valid recorded the end is the loss itself, got %v", end.Sub(lost))
	}
}
