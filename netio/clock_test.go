package netio

import (
	"testing"
	"time"
)

// clockSim drives a clockWatch with readings of a simulated master: the
// proxy's instants advance by the round trip and the pause given, the
// master's clock by the same real time plus its rate and any step.
type clockSim struct {
	t      *testing.T
	w      clockWatch
	proxy  time.Time // the proxy's monotonic now
	master float64   // the master's clock, ms
	rate   float64   // how much faster the master's clock runs (0.005: 0.5%)
	back   backCount // the marker's count of steps back the checks answer
}

func newClockSim(t *testing.T, rate float64) *clockSim {
	return &clockSim{t: t, proxy: time.Unix(1000, 0), master: 1.8e12, rate: rate}
}

// pass lets d of real time go by.
func (s *clockSim) pass(d time.Duration) {
	s.proxy = s.proxy.Add(d)
	s.master += float64(d.Milliseconds()) * (1 + s.rate)
}

// read takes one reading with the given round trip (the master reads its
// clock half way) and returns what the watch says.
func (s *clockSim) read(rtt time.Duration) (time.Duration, bool) {
	sent := s.proxy
	s.pass(rtt / 2)
	ms := int64(s.master)
	s.pass(rtt - rtt/2)
	return s.w.observe("run", ms, s.back, sent, s.proxy)
}

func (s *clockSim) quiet(n int, every, rtt time.Duration) {
	s.t.Helper()
	for i := 0; i < n; i++ {
		if ahead, jumped := s.read(rtt); jumped {
			s.t.Fatalf("reading %d: a clock with no step taken for one %v ahead (rate %v)", i, ahead, s.rate)
		}
		s.pass(every)
	}
}

func TestClockWatchTakesNoSteadyClockForAJump(t *testing.T) {
	for _, rate := range []float64{0, 0.005, -0.05} {
		s := newClockSim(t, rate)
		s.quiet(2000, 500*time.Millisecond, 3*time.Millisecond)
		s.quiet(2000, 0, 0) // readings back to back, answered at once
		s.quiet(50, 10*time.Second, 900*time.Millisecond)
	}
}

func TestClockWatchSeesAStepAheadAtTheNextReading(t *testing.T) {
	s := newClockSim(t, 0)
	s.quiet(100, 100*time.Millisecond, time.Millisecond)
	s.master += 1500
	ahead, jumped := s.read(time.Millisecond)
	if !jumped || ahead < 1400*time.Millisecond || ahead > 1500*time.Millisecond {
		t.Fatalf("a 1.5 s step ahead: ahead %v, jumped %v", ahead, jumped)
	}
	s.quiet(100, 100*time.Millisecond, time.Millisecond) // the step is the new reference
}

func TestClockWatchSeesAClockSetBackThenForward(t *testing.T) {
	s := newClockSim(t, 0)
	s.quiet(10, 100*time.Millisecond, time.Millisecond)
	s.master -= 20000 // back: keys live longer, which is safe
	s.quiet(10, 100*time.Millisecond, time.Millisecond)
	s.master += 20000 // forward again: keys set meanwhile expire early
	if ahead, jumped := s.read(time.Millisecond); !jumped || ahead < 19*time.Second {
		t.Fatalf("a clock set back 20 s, then forward 20 s: ahead %v, jumped %v", ahead, jumped)
	}
}

func TestClockWatchStartsAgainWithANewRun(t *testing.T) {
	s := newClockSim(t, 0)
	s.quiet(10, 100*time.Millisecond, time.Millisecond)
	s.master += 60000
	sent := s.proxy
	s.pass(time.Millisecond)
	if _, jumped := s.w.observe("another run", int64(s.master), s.back, sent, s.proxy); jumped {
		t.Fatal("a new run's first reading was compared with the old run's")
	}
	s.quiet(10, 100*time.Millisecond, time.Millisecond)
}

func TestClockWatchIgnoresAMissingReading(t *testing.T) {
	var w clockWatch
	if _, jumped := w.observe("run", 0, backCount{}, time.Now(), time.Now()); jumped || w.known {
		t.Fatal("a reading of 0 ms was taken")
	}
}

func TestClockWatchIgnoresAReadingOlderThanTheLast(t *testing.T) {
	s := newClockSim(t, -0.05) // a slow clock: its offset falls with time
	s.quiet(5, 100*time.Millisecond, time.Millisecond)
	old := s.proxy.Add(-10 * time.Second) // queued 10 s before the last reading
	if _, jumped := s.w.observe("run", int64(s.master)+500, s.back, old, old.Add(time.Millisecond)); jumped {
		t.Fatal("a reading older than the last was compared as a later one")
	}
	s.quiet(5, 100*time.Millisecond, time.Millisecond)
}

// Another proxy's check read the clock set back 20 s (the marker counted
// the step), and the clock was set right again before this link read it:
// its own readings agree, the count moved, and none of its readings since
// it last read the count was below the floor. That is a jump.
func TestClockWatchSeesAStepBackItMissedThroughTheCount(t *testing.T) {
	s := newClockSim(t, 0)
	s.back = backCount{n: 3, ms: 40, ok: true}
	s.quiet(10, 100*time.Millisecond, time.Millisecond)
	s.back = backCount{n: 4, ms: 20000, ok: true}
	if ahead, jumped := s.read(time.Millisecond); !jumped || ahead != 20*time.Second {
		t.Fatalf("a step back of 20 s counted by another proxy, undone before this link read the clock: ahead %v, jumped %v", ahead, jumped)
	}
	s.quiet(10, 100*time.Millisecond, time.Millisecond) // the count is the new reference
}

// A link that read the clock set back itself (in the reading that answers
// the new count, or in one since it last read the count) takes the count
// for no jump: the clock going forward again shows in its own readings.
func TestClockWatchTakesAStepBackItSawForNoJump(t *testing.T) {
	for _, seenBefore := range []bool{false, true} {
		s := newClockSim(t, 0)
		s.back = backCount{n: 0, ok: true}
		s.quiet(10, 100*time.Millisecond, time.Millisecond)
		s.master -= 20000
		if seenBefore {
			// A reading that does not answer the count yet.
			s.back.ok = false
			s.quiet(1, 100*time.Millisecond, time.Millisecond)
		}
		s.back = backCount{n: 1, ms: 20000, ok: true}
		s.quiet(10, 100*time.Millisecond, time.Millisecond)
		s.master += 20000
		if ahead, jumped := s.read(time.Millisecond); !jumped || ahead < 19*time.Second {
			t.Fatalf("seen before the count: %v; the clock forward again: ahead %v, jumped %v", seenBefore, ahead, jumped)
		}
	}
}

// The first reading of a run records the count, whatever it is; a count
// that falls (the marker written anew after a loss) is no step.
func TestClockWatchRecordsTheCountOfANewRunAndAFallingOne(t *testing.T) {
	s := newClockSim(t, 0)
	s.back = backCount{n: 7, ms: 5000, ok: true}
	s.quiet(10, 100*time.Millisecond, time.Millisecond)
	s.back = backCount{n: 0, ok: true}
	s.quiet(10, 100*time.Millisecond, time.Millisecond)
}

// A link reading a master for the first time takes a clock the master
// found behind within the hold (plus the depth it was behind) for a jump:
// it cannot tell one set right again since from time gone by. Not one
// found behind longer ago, and not at a later reading.
func TestClockWatchTakesARecentStepBackForAJumpAtItsFirstReading(t *testing.T) {
	now := time.Now()
	const master = int64(1_000_000_000)
	for _, c := range []struct {
		name      string
		behindAgo time.Duration
		want      bool
	}{
		{"found behind 30 s before", 30 * time.Second, true},
		{"found behind before the hold and the depth", 7 * time.Minute, false},
		{"never found behind", 0, false},
	} {
		w := clockWatch{recent: 5 * time.Minute}
		b := backCount{n: 1, ms: 20000, ok: true}
		if c.behindAgo > 0 {
			b.behind = master - c.behindAgo.Milliseconds()
		}
		if _, jumped := w.observe("run", master, b, now, now.Add(time.Millisecond)); jumped != c.want {
			t.Errorf("%s: jumped %v at the first reading, want %v", c.name, jumped, c.want)
		}
		if _, jumped := w.observe("run", master+100, b, now.Add(100*time.Millisecond), now.Add(101*time.Millisecond)); jumped {
			t.Errorf("%s: the rule for a first reading applied to a later one", c.name)
		}
	}
}

// A link that last read a master in an earlier run (or before its marker
// was written anew, its count starting again from 0) has nothing to
// compare its next reading with either: a clock the master found behind
// within the hold, set right again before that reading, expired the keys
// written meanwhile early, as for a link's first reading.
func TestClockWatchTakesARecentStepBackForAJumpAfterALossItDidNotSee(t *testing.T) {
	now := time.Now()
	const master = int64(1_000_000_000)
	later := now.Add(time.Minute)
	b := backCount{n: 1, ms: 5000, behind: master + 60_000 - 30_000, ok: true}
	for _, c := range []struct {
		name string
		run  string
		old  backCount
	}{
		{"a new run", "run B", backCount{n: 0, ok: true}},
		{"the marker written anew, its count back where it was", "run A", backCount{n: 1, ms: 40, ok: true}},
	} {
		w := clockWatch{recent: 5 * time.Minute}
		if _, jumped := w.observe("run A", master, c.old, now, now.Add(time.Millisecond)); jumped {
			t.Fatalf("%s: the first reading, with no step back, taken as a jump", c.name)
		}
		if _, jumped := w.observe(c.run, master+60_000, b, later, later.Add(time.Millisecond)); !jumped {
			t.Errorf("%s: a clock found behind 30 s before, then set right, not taken as a jump", c.name)
		}
	}
}
