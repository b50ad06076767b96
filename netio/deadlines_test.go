package netio

import (
	"errors"
	"math/rand/v2"
	"testing"
	"time"
)

// A command's deadline fires on time whatever is queued before it: a short
// deadline queued behind a longer one times out first.
func TestDeadlineFiresOnTimeBehindALongerOne(t *testing.T) {
	s := startRedis(t)
	l := startLink(t, Options{Addr: s.Addr})
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	defer s.Resume()
	c := newCollector()
	start := time.Now()
	l.Send(cmd("PING"), nil, c, 1, start.Add(150*time.Millisecond))
	l.Send(cmd("PING"), nil, c, 2, start.Add(60*time.Millisecond))
	first := c.next(t)
	if first.tag != 2 || !errors.Is(first.r.Err, ErrTimeout) {
		t.Fatalf("first result: tag %d %+v; want the 60 ms command's timeout before the 150 ms one's", first.tag, first.r)
	}
	if second := c.next(t); second.tag != 1 || !errors.Is(second.r.Err, ErrTimeout) {
		t.Fatalf("second result: tag %d %+v", second.tag, second.r)
	}
}

func TestDeadlineHeapOrder(t *testing.T) {
	var h deadlineHeap
	base := time.Now()
	for _, ms := range []int{50, 10, 40, 10, 30, 20, 60, 0} {
		h.push(deadline{at: base.Add(time.Duration(ms) * time.Millisecond), seq: uint64(ms)})
	}
	var got []uint64
	for len(h) > 0 {
		got = append(got, h[0].seq)
		h.pop()
	}
	for i := 1; i < len(got); i++ {
		if got[i] < got[i-1] {
			t.Fatalf("popped out of order: %v", got)
		}
	}
}

// The FIFO and the heap together give every unanswered deadline in order,
// whatever order they were pushed in and whichever were answered.
func TestDeadlinesInOrderAcrossFIFOAndHeap(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := time.Now()
	for round := 0; round < 200; round++ {
		var d deadlines
		type item struct {
			at  time.Time
			seq uint64
		}
		var pending []item
		var seq, popped uint64
		for step := 0; step < 100; step++ {
			switch rng.IntN(3) {
			case 0, 1: // queue a command; mostly in order, sometimes earlier
				at := base.Add(time.Duration(seq) * time.Millisecond)
				if rng.IntN(4) == 0 {
					at = at.Add(-time.Duration(rng.IntN(50)) * time.Millisecond)
				}
				d.push(deadline{at: at, seq: seq})
				pending = append(pending, item{at, seq})
				seq++
			case 2: // the oldest command is answered
				if popped < seq {
					popped++
					d.answered(popped)
					for i, it := range pending {
						if it.seq == popped-1 {
							pending = append(pending[:i], pending[i+1:]...)
							break
						}
					}
				}
			}
			if rng.IntN(10) == 0 { // a sweep takes the earliest one
				x, ok := d.earliest(popped)
				if ok != (len(pending) > 0) {
					t.Fatalf("earliest: ok %v with %d pending", ok, len(pending))
				}
				if !ok {
					continue
				}
				min := 0
				for i, it := range pending {
					if it.at.Before(pending[min].at) {
						min = i
					}
				}
				if !x.at.Equal(pending[min].at) {
					t.Fatalf("earliest %v, want %v", x.at.Sub(base), pending[min].at.Sub(base))
				}
				d.popEarliest()
				for i, it := range pending {
					if it.seq == x.seq {
						pending = append(pending[:i], pending[i+1:]...)
						break
					}
				}
			}
		}
	}
}
