package quorum_test

import (
	"fmt"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// One acquisition over five backends: the round is decided as soon as three
// counted grants are in, and the client is told how long it may rely on the
// lock.
func Example() {
	timing := quorum.DefaultTiming()
	ttl := 10 * time.Second

	round := quorum.NewTally(5)
	round.Record(0, quorum.Granted, true)
	round.Record(3, quorum.Refused, true)  // another client holds the key there
	round.Record(1, quorum.Granted, false) // restarted recently: recorded, not counted
	fmt.Println(round.Outcome(), round.Granted(), "of", quorum.Majority(5))
	round.Record(4, quorum.Granted, true)
	fmt.Println(round.Outcome(), round.Granted(), "of", quorum.Majority(5))
	round.Record(2, quorum.Granted, true)
	fmt.Println(round.Outcome(), round.Granted(), "of", quorum.Majority(5))

	elapsed := 8 * time.Millisecond // t2 - t1 on the monotonic clock
	validity := timing.Validity(ttl, elapsed)
	fmt.Println("validity", validity, "ok", timing.Valid(validity))
	// Output:
	// undecided 1 of 3
	// undecided 2 of 3
	// won 3 of 3
	// validity 9.89s ok true
}

// A failed acquisition is undone exactly where it may have taken effect:
// a grant at once, a timed-out node once its late reply or a lost
// connection says so, and never a node that refused.
func ExampleUndo() {
	var u quorum.Undo
	u.Init(5)
	u.Settle(0, quorum.FateClear) // refused
	u.Settle(1, quorum.FateHolds) // granted
	u.Settle(3, quorum.FateClear) // never sent: the link was down
	u.Fail()
	fmt.Println("undo now:", u.Take(nil))
	u.Settle(2, quorum.FateHolds) // timed out, then its connection was lost
	u.Settle(4, quorum.FateClear) // timed out, then replied nil
	fmt.Println("undo later:", u.Take(nil), "and then:", u.Take(nil))
	// Output:
	// undo now: [1]
	// undo later: [2] and then: []
}

// PTTL through the proxy: the time until fewer than a majority hold the key,
// minus what the read took and the drift.
func ExampleMajorityRemaining() {
	ms := time.Millisecond
	hs := []quorum.Holding{
		{Answered: true, Counts: true, Exists: true, Value: []byte("tok"), PTTL: 9000 * ms},
		{Answered: true, Counts: true, Exists: true, Value: []byte("tok"), PTTL: 7000 * ms},
		{Answered: true, Counts: true, Exists: true, Value: []byte("other"), PTTL: 60000 * ms},
		{Answered: true, Counts: true, Exists: true, Value: []byte("tok"), PTTL: 8000 * ms},
		{Answered: false}, // timed out
	}
	value, remaining, ok := quorum.MajorityRemaining(5, hs)
	fmt.Printf("%s %v %v\n", value, remaining, ok)
	fmt.Println(quorum.DefaultTiming().RemainingValidity(remaining, 3*ms))
	// Output:
	// tok 7s true
	// 6.925s
}

// A backend that comes back with a new run_id forgot its locks: its votes do
// not count until Hold after it restarted. Its uptime_in_seconds may be a
// second too high, so the restart is taken to be a second later than it
// says (here 4s ago rather than 5s).
func ExampleWatch() {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	w := quorum.Watch{Rule: quorum.RestartRule{Hold: 30 * time.Second}}

	// A master up for a day, whose marker says it last lost writes a day ago.
	w.Observe(quorum.Identity{RunID: "a1", Uptime: 24 * time.Hour,
		Marker: &quorum.Marker{LostAgo: 24 * time.Hour, StartedAgo: 24 * time.Hour}}, t0)
	fmt.Println("counts:", w.Counts(t0))

	// A minute later it has restarted empty: 5 s of uptime, and no marker
	// until this check wrote a new one.
	now := t0.Add(time.Minute)
	restarted := w.Observe(quorum.Identity{RunID: "b2", Uptime: 5 * time.Second,
		Marker: &quorum.Marker{Change: "new", StartedAgo: 4 * time.Second}}, now)
	fmt.Println("restarted:", restarted, "counts:", w.Counts(now), "why:", w.Reason())
	fmt.Println("back in quorum after", w.QuarantinedUntil().Sub(now))
	// Output:
	// counts: true
	// restarted: true counts: false why: new
	// back in quorum after 30s
}
