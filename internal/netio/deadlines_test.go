package netio

import (
	"errors"
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
