package quorum

import (
	"math/rand/v2"
	"testing"
	"time"
)

var t0 = time.Date(2025, 3, 14, 15, 9, 26, 0, time.UTC)

const (
	hold    = 30 * time.Second
	unknown = time.Duration(-1) // uptime the backend did not report
)

func at(d time.Duration) time.Time { return t0.Add(d) }

// ident is an identity without a marker.
func ident(runID string, uptime time.Duration) Identity {
	return Identity{RunID: runID, Uptime: uptime}
}

// came is the latest a backend that reports uptime at now can have
// started: uptime_in_seconds can overstate the real uptime by a second.
func came(now time.Time, uptime time.Duration) time.Time {
	b := now.Add(-uptime + time.Second)
	if b.After(now) {
		return now
	}
	return b
}

// checkQuarantine asserts that w counts exactly from until on.
func checkQuarantine(t *testing.T, w *Watch, until time.Time) {
	t.Helper()
	if got := w.QuarantinedUntil(); !got.Equal(until) {
		t.Errorf("QuarantinedUntil() = %v, want %v", got, until)
	}
	if w.Counts(until.Add(-time.Nanosecond)) && until.After(time.Time{}) {
		t.Errorf("Counts(%v) = true one nanosecond before the quarantine ends", until.Add(-time.Nanosecond))
	}
	if !w.Counts(until) {
		t.Errorf("Counts(%v) = false at the instant the quarantine ends", until)
	}
}

func TestWatchFirstSight(t *testing.T) {
	for _, tc := range []struct {
		name   string
		strict bool
		id     Identity
		until  time.Time // zero: never quarantined
	}{
		{"lenient, fresh backend", false, ident("r1", 0), time.Time{}},
		{"lenient, young backend", false, ident("r1", time.Second), time.Time{}},
		{"lenient, uptime unknown", false, ident("r1", unknown), time.Time{}},
		{"lenient, no identity", false, ident("", unknown), time.Time{}},
		{"lenient, old backend", false, ident("r1", time.Hour), time.Time{}},
		{"strict, fresh backend", true, ident("r1", 0), at(hold)},
		{"strict, young backend", true, ident("r1", 10*time.Second), came(t0, 10*time.Second).Add(hold)},
		{"strict, just under hold", true, ident("r1", hold-time.Nanosecond), came(t0, hold-time.Nanosecond).Add(hold)},
		{"strict, uptime unknown", true, ident("r1", unknown), at(hold)},
		{"strict, no identity", true, ident("", unknown), at(hold)},
		// Reported up exactly hold: it may have been up a second less.
		{"strict, up exactly hold", true, ident("r1", hold), came(t0, hold).Add(hold)},
		{"strict, up hold plus the grain", true, ident("r1", hold+time.Second), time.Time{}},
		{"strict, old backend", true, ident("r1", time.Hour), time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Watch{Rule: RestartRule{Hold: hold, Mode: RuleRunID}}
			if tc.strict {
				// The marker says the master last lost writes long ago: only
				// its uptime can quarantine it.
				w.Rule.Mode = RuleStrict
				tc.id.Marker = &Marker{LostAgo: 24 * time.Hour, StartedAgo: t0.Sub(came(t0, tc.id.Uptime))}
				if tc.id.Uptime < 0 {
					tc.id.Marker.StartedAgo = 0
				}
			}
			if w.Observe(tc.id, t0) {
				t.Error("Observe on first sight reported a restart")
			}
			if w.RunID() != tc.id.RunID {
				t.Errorf("RunID() = %q, want %q", w.RunID(), tc.id.RunID)
			}
			checkQuarantine(t, &w, tc.until)
			if tc.until.IsZero() && !w.Counts(t0) {
				t.Errorf("Counts(now) = false on a trusted first sight")
			}
			if !tc.until.IsZero() && w.Counts(t0) {
				t.Errorf("Counts(now) = true on a quarantined first sight")
			}
		})
	}
}

func TestWatchZeroCounts(t *testing.T) {
	var w Watch
	if !w.Counts(t0) || !w.QuarantinedUntil().IsZero() || w.RunID() != "" {
		t.Errorf("zero Watch: Counts=%v QuarantinedUntil=%v RunID=%q; want true, zero, \"\"", w.Counts(t0), w.QuarantinedUntil(), w.RunID())
	}
}

// Second and later sightings: first seen at t0 with the given identity, then
// again 100s later.
func TestWatchReconnect(t *testing.T) {
	const later = 100 * time.Second
	now := at(later)
	for _, tc := range []struct {
		name      string
		first     Identity
		second    Identity
		restarted bool
		until     time.Time // when restarted
	}{
		{"same run_id", ident("r1", time.Hour), ident("r1", time.Hour+later), false, time.Time{}},
		{"same run_id, shorter uptime", ident("r1", time.Hour), ident("r1", time.Second), false, time.Time{}}, // run_id is the identity
		{"same run_id, uptime unknown", ident("r1", time.Hour), ident("r1", unknown), false, time.Time{}},
		{"run_id changed", ident("r1", time.Hour), ident("r2", 5*time.Second), true, came(now, 5*time.Second).Add(hold)},
		{"run_id changed, long uptime", ident("r1", time.Hour), ident("r2", time.Hour), true, time.Time{}}, // boot+Hold is past: counts at once
		{"run_id changed, uptime unknown", ident("r1", time.Hour), ident("r2", unknown), true, now.Add(hold)},
		{"run_id lost, uptime consistent", ident("r1", time.Hour), ident("", time.Hour+later), false, time.Time{}},
		{"run_id lost, uptime shorter", ident("r1", time.Hour), ident("", 10*time.Second), true, came(now, 10*time.Second).Add(hold)},
		{"run_id new, uptime shorter", ident("", time.Hour), ident("r1", 10*time.Second), true, came(now, 10*time.Second).Add(hold)},
		{"no run_id, uptime consistent", ident("", time.Hour), ident("", time.Hour+later), false, time.Time{}},
		{"no run_id, uptime truncated", ident("", time.Hour), ident("", time.Hour+later-time.Second), false, time.Time{}},
		{"no run_id, uptime shorter", ident("", time.Hour), ident("", 10*time.Second), true, came(now, 10*time.Second).Add(hold)},
		{"no run_id, uptime now unknown", ident("", time.Hour), ident("", unknown), true, now.Add(hold)},
		{"nothing known either time", ident("", unknown), ident("", unknown), true, now.Add(hold)},
		// The first boot estimate was t0 itself (uptime unknown): a backend up
		// since before t0 is the same run, one that came up after is not.
		{"uptime unknown, then long", ident("", unknown), ident("", later+time.Hour), false, time.Time{}},
		{"uptime unknown, then short", ident("", unknown), ident("", 10*time.Second), true, came(now, 10*time.Second).Add(hold)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Watch{Rule: RestartRule{Hold: hold, Mode: RuleRunID}}
			w.Observe(tc.first, t0)
			if got := w.Observe(tc.second, now); got != tc.restarted {
				t.Errorf("Observe(%+v) after %+v = %v, want %v", tc.second, tc.first, got, tc.restarted)
			}
			checkQuarantine(t, &w, tc.until)
			if w.RunID() != tc.second.RunID {
				t.Errorf("RunID() = %q, want the last observed %q", w.RunID(), tc.second.RunID)
			}
		})
	}
}

// Without run_ids, a boot estimate later than the known one by up to
// uptimeSlack (truncated uptime_in_seconds, INFO latency) is the same run.
func TestWatchUptimeSlackBoundary(t *testing.T) {
	now := at(time.Hour)
	for _, tc := range []struct {
		shift     time.Duration // how much later the new boot estimate is
		restarted bool
	}{
		{-time.Minute, false},
		{0, false},
		{uptimeSlack, false},
		{uptimeSlack + time.Nanosecond, true},
	} {
		w := Watch{Rule: RestartRule{Hold: hold, Mode: RuleRunID}}
		w.Observe(ident("", 2*time.Hour), t0) // booted at t0-2h
		uptime := now.Sub(t0.Add(-2 * time.Hour).Add(tc.shift))
		if got := w.Observe(ident("", uptime), now); got != tc.restarted {
			t.Errorf("boot estimate %v later: restarted = %v, want %v", tc.shift, got, tc.restarted)
		}
	}
}

func TestWatchStrictDoesNotAffectLaterSightings(t *testing.T) {
	w := Watch{Rule: RestartRule{Hold: hold}}
	w.Observe(Identity{RunID: "r1", Uptime: time.Hour, Marker: &Marker{LostAgo: 24 * time.Hour, StartedAgo: time.Hour}}, t0)
	later := &Marker{LostAgo: 24*time.Hour + time.Minute, StartedAgo: time.Hour + time.Minute}
	if got := w.Observe(Identity{RunID: "r1", Uptime: time.Hour + time.Minute, Marker: later}, at(time.Minute)); got {
		t.Error("same run seen again under the strict rule reported a restart")
	}
	checkQuarantine(t, &w, time.Time{})
}

// A quarantine is only ever extended, never shortened.
func TestWatchQuarantineOnlyExtends(t *testing.T) {
	w := Watch{Rule: RestartRule{Hold: hold, Mode: RuleRunID}}
	w.Observe(ident("r1", time.Hour), t0)
	w.Observe(ident("r2", 0), at(10*time.Second)) // came back at t0+10s
	first := at(10*time.Second + hold)
	checkQuarantine(t, &w, first)
	// Another identity whose boot estimate is far in the past must not lift it.
	if !w.Observe(ident("r3", time.Hour), at(11*time.Second)) {
		t.Fatal("run_id change not reported as a restart")
	}
	checkQuarantine(t, &w, first)
	// A later restart extends it.
	w.Observe(ident("r4", 0), at(20*time.Second))
	checkQuarantine(t, &w, at(20*time.Second+hold))
}

func TestWatchZeroHold(t *testing.T) {
	w := Watch{} // the quarantine is off
	w.Observe(ident("r1", time.Hour), t0)
	if !w.Observe(ident("r2", 0), at(time.Second)) {
		t.Error("run_id change not reported as a restart")
	}
	if !w.Counts(at(time.Second)) {
		t.Error("with Hold 0 a restarted backend must count at once")
	}
}

// A life story: the backend is trusted, restarts, sits out Hold, counts again,
// and reconnects of the same run do not reset anything.
func TestWatchStory(t *testing.T) {
	w := Watch{Rule: RestartRule{Hold: hold, Mode: RuleRunID}}
	type step struct {
		at        time.Duration
		id        Identity
		restarted bool
		countsAt  []time.Duration // instants at which Counts is true
		outAt     []time.Duration // instants at which Counts is false
	}
	for i, s := range []step{
		{0, ident("r1", time.Hour), false, []time.Duration{0, time.Hour}, nil},
		{time.Minute, ident("r1", time.Hour+time.Minute), false, []time.Duration{time.Minute}, nil},
		// Restarted at 2m, seen at 2m3s saying 3s of uptime (so maybe only
		// 2s): out until 2m31s.
		{2*time.Minute + 3*time.Second, ident("r2", 3*time.Second), true,
			[]time.Duration{2*time.Minute + 31*time.Second, time.Hour},
			[]time.Duration{2*time.Minute + 3*time.Second, 2*time.Minute + 31*time.Second - 1}},
		// A reconnect of the same run during the quarantine changes nothing.
		{2*time.Minute + 10*time.Second, ident("r2", 10*time.Second), false,
			[]time.Duration{2*time.Minute + 31*time.Second},
			[]time.Duration{2*time.Minute + 10*time.Second}},
		{5 * time.Minute, ident("r2", 3*time.Minute), false, []time.Duration{5 * time.Minute}, nil},
	} {
		if got := w.Observe(s.id, at(s.at)); got != s.restarted {
			t.Errorf("step %d: Observe(%+v) at +%v = %v, want %v", i, s.id, s.at, got, s.restarted)
		}
		for _, c := range s.countsAt {
			if !w.Counts(at(c)) {
				t.Errorf("step %d: Counts(+%v) = false, want true (quarantined until %v)", i, c, w.QuarantinedUntil().Sub(t0))
			}
		}
		for _, c := range s.outAt {
			if w.Counts(at(c)) {
				t.Errorf("step %d: Counts(+%v) = true, want false (quarantined until %v)", i, c, w.QuarantinedUntil().Sub(t0))
			}
		}
	}
}

// For random sequences of sightings, Counts(now) is exactly
// !now.Before(QuarantinedUntil()), a restart always quarantines until at
// least boot+Hold, and the quarantine never shrinks.
func TestWatchProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(31, 32))
	runIDs := []string{"", "r1", "r2"}
	for range 2000 {
		w := Watch{Rule: RestartRule{Hold: time.Duration(rng.Int64N(int64(time.Minute))), Mode: RestartMode(rng.IntN(2))}}
		now := t0
		var prevUntil time.Time
		for range 10 {
			now = now.Add(time.Duration(rng.Int64N(int64(time.Minute))))
			id := Identity{RunID: runIDs[rng.IntN(len(runIDs))], Uptime: unknown}
			if rng.IntN(4) != 0 {
				id.Uptime = time.Duration(rng.Int64N(int64(10 * time.Minute)))
			}
			restarted := w.Observe(id, now)
			until := w.QuarantinedUntil()
			if until.Before(prevUntil) {
				t.Fatalf("quarantine shrank from %v to %v after %+v", prevUntil, until, id)
			}
			boot := now
			if id.Uptime >= 0 {
				boot = came(now, id.Uptime)
			}
			if restarted && boot.Add(w.Rule.Hold).After(now) && until.Before(boot.Add(w.Rule.Hold)) {
				t.Fatalf("restart of %+v at %v quarantined only until %v, want at least boot+Hold %v", id, now, until, boot.Add(w.Rule.Hold))
			}
			if w.RunID() != id.RunID {
				t.Fatalf("RunID() = %q after observing %q", w.RunID(), id.RunID)
			}
			for _, probe := range []time.Time{until.Add(-1), until, until.Add(1), now} {
				if got, want := w.Counts(probe), !probe.Before(until); got != want {
					t.Fatalf("Counts(%v) = %v with quarantine until %v", probe, got, until)
				}
			}
			prevUntil = until
		}
	}
}

// Under the strict rule a master counts only once Hold has passed since it
// started and since its marker says it may last have lost writes, whatever
// this proxy saw before.
func TestWatchStrictFirstSight(t *testing.T) {
	day := 24 * time.Hour
	for _, tc := range []struct {
		name  string
		id    Identity
		until time.Time // zero: counts at once
	}{
		{"old master, marker kept", Identity{"r1", day, &Marker{LostAgo: day, StartedAgo: day}}, time.Time{}},
		{"old master, marker lost a while ago", Identity{"r1", day, &Marker{LostAgo: 10 * time.Second, StartedAgo: day}}, at(hold - 10*time.Second)},
		{"old master, no marker before this check", Identity{"r1", day, &Marker{Change: "new", StartedAgo: day}}, at(hold)},
		{"fresh master", Identity{"r1", 2 * time.Second, &Marker{Change: "new", StartedAgo: time.Second}}, at(hold)},
		{"restarted with its data, marker kept", Identity{"r2", 2 * time.Second, &Marker{Change: "restarted", LostAgo: time.Second, StartedAgo: time.Second}}, at(hold - time.Second)},
		{"promoted replica, up a day", Identity{"r1", day, &Marker{Change: "promoted", StartedAgo: day}}, at(hold)},
		// A restart always costs the hold from its start: what a reloaded
		// file says cannot prove it holds the last writes of the run before.
		{"restarted with appendfsync always, marker reloaded", Identity{"r2", 2 * time.Second, &Marker{Change: "restarted", LostAgo: time.Second, StartedAgo: time.Second}}, at(hold - time.Second)},
		{"failed back after a resync, up a day", Identity{"r1", day, &Marker{Change: "resynced", StartedAgo: day}}, at(hold)},
		{"keys evicted", Identity{"r1", day, &Marker{Change: "evicted", StartedAgo: day}}, at(hold)},
		{"another proxy holds longer", Identity{"r1", day, &Marker{LostAgo: 40 * time.Second, StartedAgo: day, Hold: time.Minute}}, at(20 * time.Second)},
		{"no marker check at all", Identity{"r1", day, nil}, at(hold)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := Watch{Rule: RestartRule{Hold: hold}}
			w.Observe(tc.id, t0)
			checkQuarantine(t, &w, tc.until)
		})
	}
}

// masterModel is a master as the marker check sees it: when it started and
// when it may last have lost writes (ms of its clock, as recorded).
type masterModel struct {
	boot, lost time.Time
	run        int
}

// report is what the master says at now.
func (m masterModel) report(now time.Time) Identity {
	return Identity{
		RunID:  string(rune('a' + m.run%26)),
		Uptime: now.Sub(m.boot).Truncate(time.Second),
		Marker: &Marker{LostAgo: now.Sub(m.lost), StartedAgo: now.Sub(m.boot), LostAt: m.lost.UnixMilli(), StartedAt: m.boot.UnixMilli()},
	}
}

// Proxies that start at different times, and so have seen different parts
// of a master's life, agree at every instant on whether its votes count:
// the decision rests on what the master reports.
func TestWatchStrictProxiesAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for range 500 {
		m := masterModel{boot: t0.Add(-time.Duration(rng.Int64N(int64(time.Hour))))}
		m.lost = m.boot
		now := t0
		var watches []*Watch
		for range 30 {
			now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
			switch rng.IntN(6) {
			case 0: // restart: whatever it reloaded, writes may be lost
				m.boot, m.run, m.lost = now, m.run+1, now
			case 1: // a promotion, a resync, a flush, an eviction: writes lost now
				m.lost = now
			case 2: // a new proxy starts
				watches = append(watches, &Watch{Rule: RestartRule{Hold: hold}})
			}
			id := m.report(now)
			var first bool
			for i, w := range watches {
				w.Observe(id, now)
				counts := w.Counts(now)
				if i == 0 {
					first = counts
				} else if counts != first {
					t.Fatalf("at %v proxies disagree: proxy 0 counts=%v, proxy %d counts=%v (until %v vs %v)",
						now.Sub(t0), first, i, counts, watches[0].QuarantinedUntil().Sub(t0), w.QuarantinedUntil().Sub(t0))
				}
				// Never counts before Hold has passed since writes were lost,
				// nor since it started.
				if counts && now.Before(m.lost.Add(hold)) {
					t.Fatalf("counts at %v, %v after it lost writes", now.Sub(t0), now.Sub(m.lost))
				}
				if counts && now.Before(m.boot.Add(hold)) {
					t.Fatalf("counts at %v, %v after it started", now.Sub(t0), now.Sub(m.boot))
				}
			}
		}
	}
}

// Under the run-id rule a proxy trusts what its first sight of a master
// shows, and from then on decides as the strict rule does: a loss or a
// restart recorded on the marker after its first sight keeps the master
// out for the hold, and a proxy that first saw the master later trusts
// more, never less, than one that saw it earlier.
func TestWatchRunIDTrustsOnlyWhatCameBeforeItsFirstSight(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 500 {
		m := masterModel{boot: t0.Add(-time.Duration(rng.Int64N(int64(time.Minute))))}
		m.lost = m.boot
		now := t0
		w := &Watch{Rule: RestartRule{Hold: hold, Mode: RuleRunID}}
		w.Observe(m.report(now), now)
		if !w.Counts(now) {
			t.Fatalf("a master first seen %v after its start is not trusted on first sight", now.Sub(m.boot))
		}
		var lossSeen time.Time // the latest loss after the first sight
		for range 20 {
			now = now.Add(time.Duration(rng.Int64N(int64(20 * time.Second))))
			switch rng.IntN(4) {
			case 0:
				m.boot, m.run, m.lost = now, m.run+1, now
				lossSeen = now
			case 1:
				m.lost = now
				lossSeen = now
			}
			w.Observe(m.report(now), now)
			if !lossSeen.IsZero() && w.Counts(now) && now.Before(lossSeen.Add(hold)) {
				t.Fatalf("counts %v after a loss it saw happen", now.Sub(lossSeen))
			}
			if (lossSeen.IsZero() || !now.Before(lossSeen.Add(hold))) && !w.Counts(now) {
				t.Fatalf("out at %v with no loss since its first sight within the hold (until %v)", now.Sub(t0), w.QuarantinedUntil().Sub(t0))
			}
		}
	}
}

// A loss the marker dates in the master's future (recorded while its clock
// was ahead, read after it went back) was no later than now: it
// quarantines for the hold from now, under either rule, never not at all.
func TestLossDatedInTheMastersFutureQuarantinesFromNow(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	const hold = 30 * time.Second
	for _, mode := range []RestartMode{RuleStrict, RuleRunID} {
		w := &Watch{Rule: RestartRule{Hold: hold, Mode: mode}}
		old := &Marker{LostAgo: 24 * time.Hour, StartedAgo: 24 * time.Hour, LostAt: 1, StartedAt: 1}
		w.Observe(Identity{RunID: "r1", Uptime: 24 * time.Hour, Marker: old}, t0)
		if !w.Counts(t0) {
			t.Fatalf("mode %v: an old master with an old loss does not count", mode)
		}
		now := t0.Add(time.Second)
		future := &Marker{Change: "clock", LostAgo: -4 * time.Second, StartedAgo: 24 * time.Hour, LostAt: 2, StartedAt: 1}
		w.Observe(Identity{RunID: "r1", Uptime: 24 * time.Hour, Marker: future}, now)
		if w.Counts(now.Add(hold - time.Millisecond)) {
			t.Fatalf("mode %v: a loss dated 4s in the master's future: counts again before the hold from now (until %v)", mode, w.QuarantinedUntil().Sub(now))
		}
	}
}

// A hold from the marker's loss ends early at the end the other masters'
// records give it, never one from a later loss, and never past its
// ceiling.
func TestHoldEndsEarlyOnlyForTheLossItWasComputedFor(t *testing.T) {
	now := time.Unix(1000, 0)
	w := Watch{Rule: RestartRule{Hold: time.Minute}}
	m := &Marker{Change: "restarted", LostAgo: time.Second, StartedAgo: time.Second, LostAt: 5000, StartedAt: 5000}
	w.Observe(Identity{RunID: "r", Uptime: 2 * time.Second, Marker: m}, now)
	at, ok := w.Anchor()
	if !ok || w.Counts(now.Add(10*time.Second)) {
		t.Fatalf("anchor %v %v; counts %v", at, ok, w.Counts(now.Add(10*time.Second)))
	}
	w.EndEarly(at, now.Add(5*time.Second))
	if !w.Early() || w.Counts(now.Add(4*time.Second)) || !w.Counts(now.Add(5*time.Second)) {
		t.Fatalf("early %v; want the hold to end at the records' end", w.Early())
	}
	if !w.Ceiling().After(now.Add(50 * time.Second)) {
		t.Fatalf("ceiling %v moved", w.Ceiling().Sub(now))
	}
	// A later loss: the early end was for the one before.
	later := &Marker{Change: "evicted", LostAgo: 0, StartedAgo: 8 * time.Second, LostAt: 12000, StartedAt: 5000}
	w.Observe(Identity{RunID: "r", Uptime: 9 * time.Second, Marker: later}, now.Add(7*time.Second))
	if w.Early() || w.Counts(now.Add(8*time.Second)) {
		t.Fatal("a later loss is ended by the records of the one before")
	}
	w.EndEarly(at, now.Add(8*time.Second))
	if w.Early() {
		t.Fatal("an end computed for an earlier loss ends the hold of a later one")
	}
}

// The record VOUCH writes ends the quarantine its first sight gave a fresh
// master, at the check that reads it, as it would for a Watch that first
// saw the master then; a loss recorded on top of it, or a quarantine no
// record gave, is held as ever.
func TestVouchedRecordEndsTheQuarantineOfTheRecordsBefore(t *testing.T) {
	fresh := Identity{RunID: "r", Uptime: 2 * time.Second, Marker: &Marker{Change: ReasonNew, StartedAgo: time.Second, LostAt: 1000, StartedAt: 1000}}
	long := hold + 2*time.Second
	vouched := func(now time.Time, change Reason) Identity {
		return Identity{RunID: "r", Uptime: 3 * time.Second, Marker: &Marker{Change: change, Why: ReasonVouched,
			LostAgo: long, StartedAgo: long, LostAt: 2000, StartedAt: 2000}}
	}
	now := at(time.Second)

	w := Watch{Rule: RestartRule{Hold: hold}}
	w.Observe(fresh, t0)
	checkQuarantine(t, &w, at(hold))
	w.Observe(vouched(now, ReasonNone), now)
	checkQuarantine(t, &w, time.Time{})
	if _, ok := w.Anchor(); ok && w.Early() {
		t.Error("a vouched master is left with an early end to wait for")
	}

	// A proxy with a longer hold than the one that vouched waits the rest
	// of its own, from the record's instants.
	longer := Watch{Rule: RestartRule{Hold: 2 * hold}}
	longer.Observe(fresh, t0)
	longer.Observe(vouched(now, ReasonNone), now)
	checkQuarantine(t, &longer, now.Add(2*hold-long))

	// A loss recorded on top of the vouched record gives the record its
	// word, and a quarantine that the checks after it keep.
	later := at(5 * time.Second)
	loss := Identity{RunID: "r", Uptime: 7 * time.Second, Marker: &Marker{Change: ReasonEvicted, Why: ReasonEvicted,
		StartedAgo: long, LostAt: 7000, StartedAt: 2000}}
	w.Observe(loss, later)
	checkQuarantine(t, &w, later.Add(hold))
	loss.Marker.Change, loss.Marker.LostAgo = ReasonNone, time.Second
	w.Observe(loss, later.Add(time.Second))
	checkQuarantine(t, &w, later.Add(hold))

	// A quarantine no marker gave stays.
	unmarked := Watch{Rule: RestartRule{Hold: hold}}
	unmarked.Observe(ident("r", 2*time.Second), t0)
	unmarked.Observe(vouched(now, ReasonNone), now)
	checkQuarantine(t, &unmarked, at(hold))
}

// A Watch that saw the master in another run keeps the quarantine its
// records gave when a vouched record appears: the restart may have lost
// grants this proxy saw there, which the master's new record cannot show.
func TestVouchedRecordLeavesTheQuarantineOfAnotherRun(t *testing.T) {
	fresh := Identity{RunID: "r", Uptime: 2 * time.Second, Marker: &Marker{Change: ReasonNew, StartedAgo: time.Second, LostAt: 1000, StartedAt: 1000}}
	restarted := Identity{RunID: "r2", Uptime: 2 * time.Second, Marker: &Marker{Change: ReasonNew, Why: ReasonNew, StartedAgo: time.Second, LostAt: 4000, StartedAt: 4000}}
	long := hold + 2*time.Second
	vouched := Identity{RunID: "r2", Uptime: 3 * time.Second, Marker: &Marker{Change: ReasonNone, Why: ReasonVouched,
		LostAgo: long, StartedAgo: long, LostAt: 5000, StartedAt: 5000}}
	w := Watch{Rule: RestartRule{Hold: hold}}
	w.Observe(fresh, t0)
	w.Observe(restarted, at(4*time.Second))
	checkQuarantine(t, &w, at(4*time.Second).Add(hold))
	w.Observe(vouched, at(5*time.Second))
	checkQuarantine(t, &w, at(4*time.Second).Add(hold))
}
