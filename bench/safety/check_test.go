package safety

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// These tests feed the checkers hand-made histories, with no process
// started: each checker must accept what is legal and see what is not.

// at returns the history's origin plus ms milliseconds.
func at(h *History, ms int) time.Time { return h.Start.Add(time.Duration(ms) * time.Millisecond) }

func acq(h *History, client int, key, token string, call, ret, validUntil int, out Outcome) Op {
	return Op{Client: client, Key: key, Token: token, Kind: Acquire, Outcome: out, TTL: time.Second,
		Call: at(h, call), Return: at(h, ret), ValidUntil: at(h, validUntil)}
}

func ext(h *History, client int, key, token string, call, ret, validUntil int, out Outcome) Op {
	o := acq(h, client, key, token, call, ret, validUntil, out)
	o.Kind = Extend
	return o
}

func rel(h *History, client int, key, token string, call, ret int, out Outcome) Op {
	return Op{Client: client, Key: key, Token: token, Kind: Release, Outcome: out, Call: at(h, call), Return: at(h, ret)}
}

func TestWindowsChecker(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  func(h *History) []Op
		want int
	}{
		{"one after the other", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), rel(h, 0, "k", "a", 100, 105, OK),
				acq(h, 1, "k", "b", 101, 106, 1000, OK), rel(h, 1, "k", "b", 200, 205, OK),
			}
		}, 0},
		{"after the first expired", func(h *History) []Op {
			return []Op{acq(h, 0, "k", "a", 0, 5, 900, OK), acq(h, 1, "k", "b", 950, 960, 1900, OK)}
		}, 0},
		{"granted inside another's validity", func(h *History) []Op {
			return []Op{acq(h, 0, "k", "a", 0, 5, 900, OK), acq(h, 1, "k", "b", 400, 410, 1300, OK)}
		}, 1},
		{"inside a window that began before the furthest one", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 2000, OK),
				acq(h, 1, "k", "b", 100, 110, 300, OK), // overlaps a
				acq(h, 2, "k", "c", 500, 510, 800, OK), // overlaps a too
			}
		}, 2},
		{"other keys do not matter", func(h *History) []Op {
			return []Op{acq(h, 0, "k", "a", 0, 5, 900, OK), acq(h, 1, "j", "b", 400, 410, 1300, OK)}
		}, 0},
		{"refusals and unknowns are not holds", func(h *History) []Op {
			return []Op{acq(h, 0, "k", "a", 0, 5, 900, OK), acq(h, 1, "k", "b", 400, 410, 1300, Refused), acq(h, 2, "k", "c", 400, 410, 1300, Unknown)}
		}, 0},
		{"an empty window (OK arrived after the validity) is no hold", func(h *History) []Op {
			return []Op{acq(h, 0, "k", "a", 0, 950, 900, OK), acq(h, 1, "k", "b", 920, 930, 1800, OK)}
		}, 0},
		{"a granted extend keeps the holder's window open", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), ext(h, 0, "k", "a", 800, 805, 1700, OK),
				acq(h, 1, "k", "b", 1000, 1005, 1900, OK),
			}
		}, 1},
		{"a refused extend leaves the lease as it was", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), ext(h, 0, "k", "a", 300, 350, 1200, Refused),
				acq(h, 1, "k", "b", 400, 405, 1300, OK),
			}
		}, 1},
		{"after a refused extend, the lock is free once the lease ends", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), ext(h, 0, "k", "a", 300, 350, 1200, Refused),
				acq(h, 1, "k", "b", 901, 905, 1800, OK),
			}
		}, 0},
		{"an extend that takes a free lock is a hold", func(h *History) []Op {
			return []Op{ext(h, 0, "k", "a", 0, 5, 900, OK), acq(h, 1, "k", "b", 400, 410, 1300, OK)}
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory()
			h.AddOps(tc.ops(h)...)
			got, ex := CheckWindows(h)
			if got != tc.want {
				t.Fatalf("violations = %d, want %d; examples %q", got, tc.want, ex)
			}
			if got > 0 && (len(ex) == 0 || !strings.Contains(ex[0], "overlap")) {
				t.Fatalf("examples %q do not explain", ex)
			}
		})
	}
}

func TestRegisterChecker(t *testing.T) {
	h := NewHistory()
	a := &Client{ID: 0, h: h}
	b := &Client{ID: 1, h: h}
	la := Lease{Key: "k", Token: "a", ValidUntil: time.Now().Add(time.Hour)}
	lb := Lease{Key: "k", Token: "b", ValidUntil: time.Now().Add(time.Hour)}
	a.Write(la, a.Read("k")) // 0 -> 1
	b.Write(lb, b.Read("k")) // 1 -> 2
	a.Close()
	b.Close()
	if lost, _, ex := CheckRegisters(h); lost != 0 {
		t.Fatalf("serial updates: lost = %d (%q)", lost, ex)
	}
	va, vb := a.Read("k"), b.Read("k") // both read 2
	a.Write(la, va)
	b.Write(lb, vb) // 3 again: one update lost
	a.Close()
	b.Close()
	lost, paused, ex := CheckRegisters(h)
	if lost != 1 || paused != 0 {
		t.Fatalf("lost = %d (paused %d), want 1 (0) (%q)", lost, paused, ex)
	}
	if len(ex) < 2 || !strings.Contains(ex[0], "two holders inside their validity") || !strings.Contains(ex[1], "all read 2 and wrote 3") {
		t.Fatalf("examples %q do not name the writers that read the same value", ex)
	}

	// A writer whose write ends after its validity was paused: its lost
	// update is told apart.
	h = NewHistory()
	a, b = &Client{ID: 0, h: h}, &Client{ID: 1, h: h}
	expired := Lease{Key: "k", Token: "a", ValidUntil: time.Now().Add(-time.Millisecond)}
	va = a.Read("k")
	b.Write(lb, b.Read("k"))
	a.Write(expired, va)
	a.Close()
	b.Close()
	lost, paused, ex = CheckRegisters(h)
	if lost != 1 || paused != 1 || !strings.Contains(ex[0], "paused holders") || !strings.Contains(ex[1], "after its validity ended") {
		t.Fatalf("paused writer: lost %d, paused %d, examples %q", lost, paused, ex)
	}
}

func TestLockModel(t *testing.T) {
	for _, tc := range []struct {
		name  string
		ops   func(h *History) []Op
		legal bool
	}{
		{"acquire, release, acquire", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), rel(h, 0, "k", "a", 100, 105, OK),
				acq(h, 1, "k", "b", 106, 110, 1000, OK),
			}
		}, true},
		{"second grant while the first is valid", func(h *History) []Op {
			return []Op{acq(h, 0, "k", "a", 0, 5, 900, OK), acq(h, 1, "k", "b", 400, 410, 1300, OK)}
		}, false},
		{"second grant after the first's validity", func(h *History) []Op {
			return []Op{acq(h, 0, "k", "a", 0, 5, 900, OK), acq(h, 1, "k", "b", 890, 901, 1800, OK)}
		}, true},
		{"concurrent acquire and release may be ordered either way", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), rel(h, 0, "k", "a", 100, 200, OK),
				acq(h, 1, "k", "b", 150, 160, 1000, OK),
			}
		}, true},
		{"a release that said not held may have released", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), rel(h, 0, "k", "a", 100, 105, Refused),
				acq(h, 1, "k", "b", 110, 115, 1000, OK),
			}
		}, true},
		{"a release with an error may have released", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), rel(h, 0, "k", "a", 100, 105, Unknown),
				acq(h, 1, "k", "b", 110, 115, 1000, OK),
			}
		}, true},
		{"released by someone who does not hold it", func(h *History) []Op {
			return []Op{acq(h, 0, "k", "a", 0, 5, 900, OK), rel(h, 1, "k", "b", 100, 105, OK)}
		}, false},
		{"a granted extend keeps the lock", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), ext(h, 0, "k", "a", 800, 805, 1700, OK),
				acq(h, 1, "k", "b", 1000, 1005, 1900, OK),
			}
		}, false},
		{"a refused extend does not end the lease", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), ext(h, 0, "k", "a", 300, 350, 1200, Refused),
				acq(h, 1, "k", "b", 400, 405, 1300, OK),
			}
		}, false},
		{"an extend with an error may not have extended", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), ext(h, 0, "k", "a", 800, 805, 1700, Unknown),
				acq(h, 1, "k", "b", 1000, 1005, 1900, OK),
			}
		}, true},
		{"extend-or-acquire takes a free lock", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 900, OK), rel(h, 0, "k", "a", 100, 105, OK),
				ext(h, 1, "k", "b", 200, 205, 1100, OK),
			}
		}, true},
		{"extend-or-acquire granted while another holds the lock", func(h *History) []Op {
			return []Op{acq(h, 0, "k", "a", 0, 5, 900, OK), ext(h, 1, "k", "b", 200, 205, 1100, OK)}
		}, false},
		{"refusals are always legal", func(h *History) []Op {
			return []Op{
				acq(h, 1, "k", "b", 0, 3, 900, Refused),
				acq(h, 0, "k", "a", 0, 5, 900, OK), acq(h, 1, "k", "c", 10, 15, 900, Refused),
				acq(h, 2, "k", "d", 10, 15, 900, Unknown),
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory()
			ops := linOps(h, tc.ops(h))
			if got := porcupine.CheckOperations(LockModel.ToModel(), ops); got != tc.legal {
				t.Fatalf("linearizable = %v, want %v", got, tc.legal)
			}
			h.AddOps(tc.ops(h)...)
			res, err := CheckLinearizable(h, 10*time.Second, "")
			if err != nil {
				t.Fatal(err)
			}
			if (res.Illegal == 0) != tc.legal {
				t.Fatalf("CheckLinearizable = %+v, want legal %v", res, tc.legal)
			}
			if !tc.legal && (len(res.Examples) == 0 || !strings.Contains(res.Examples[0], "cannot place")) {
				t.Fatalf("examples %q do not explain", res.Examples)
			}
		})
	}
}

func TestVisualization(t *testing.T) {
	h := NewHistory()
	h.AddOps(acq(h, 0, "k:1", "a", 0, 5, 900, OK), acq(h, 1, "k:1", "b", 400, 410, 1300, OK))
	dir := t.TempDir()
	res, err := CheckLinearizable(h, 10*time.Second, dir)
	if err != nil {
		t.Fatal(err)
	}
	if res.Illegal != 1 || len(res.Visualized) != 1 || !strings.HasSuffix(res.Visualized[0], "k_1.html") {
		t.Fatalf("result %+v, want one illegal key visualized as k_1.html", res)
	}
}

func TestNoMajorityChecker(t *testing.T) {
	h := NewHistory()
	h.AddOps(
		acq(h, 0, "k", "before", 50, 120, 900, OK), // called before the interval
		acq(h, 0, "k", "inside", 200, 210, 900, OK),
		acq(h, 0, "k", "refused", 200, 210, 900, Refused),
		acq(h, 0, "k", "after", 450, 520, 900, OK), // returned after it
	)
	n, ex := CheckNoMajorityGrants(h, []Interval{{From: at(h, 100), To: at(h, 500), Why: "3 of 5 down"}})
	if n != 1 || len(ex) != 1 || !strings.Contains(ex[0], "inside") {
		t.Fatalf("n = %d, examples %q; want only the grant inside", n, ex)
	}
}

func TestLateGrantChecker(t *testing.T) {
	h := NewHistory()
	h.AddOps(
		acq(h, 0, "k", "in-time", 0, 20, 28, OK),
		acq(h, 1, "k", "late", 0, 51, 28, OK), // OK after its validity
		acq(h, 2, "k", "other", 30, 31, 60, OK),
		acq(h, 3, "k", "refused-late", 0, 51, 28, Refused),
		ext(h, 4, "j", "late-extend", 100, 200, 150, OK),
		acq(h, 5, "k", "stalled", 300, 900, 400, OK),             // 500ms late, a 600ms hiccup meanwhile
		acq(h, 6, "k", "late-past-hiccup", 1000, 1100, 1040, OK), // 60ms late, a 20ms hiccup meanwhile
	)
	late, stalled, ex := CheckLateGrants(h, []Interval{{From: at(h, 250), To: at(h, 850)}, {From: at(h, 1050), To: at(h, 1070)}})
	if late != 3 || stalled != 1 {
		t.Fatalf("late = %d, stalled = %d, want 2 and 1; examples %q", late, stalled, ex)
	}
	if len(ex) != 3 || !strings.Contains(ex[0], "late grant: key k: acquire late") || !strings.Contains(ex[0], "granted to other at +0.031s") ||
		!strings.Contains(ex[1], "extend late-extend") || !strings.Contains(ex[2], "late-past-hiccup") {
		t.Fatalf("examples %q do not explain", ex)
	}
}

func TestGhostLockChecker(t *testing.T) {
	h := NewHistory()
	h.AddOps(
		acq(h, 0, "k", "ghost", 0, 50, 900, Refused),
		acq(h, 1, "j", "minority", 0, 50, 900, Refused),
		acq(h, 2, "i", "held", 0, 5, 900, OK),
		acq(h, 3, "g", "recent", 1900, 1950, 2900, Refused),
	)
	snap := func(ms int, vals map[string][]string) Snapshot {
		return Snapshot{At: at(h, ms), Why: "test", Values: vals}
	}
	for _, s := range []Snapshot{
		snap(2000, map[string][]string{
			"k": {"ghost", "ghost", "ghost", "", ""},
			"j": {"minority", "minority", "", "", ""},
			"i": {"held", "held", "held", "held", "held"},
			"g": {"recent", "recent", "recent", "", ""},
		}),
		snap(2100, map[string][]string{"k": {"ghost", "ghost", "ghost", "", ""}}), // the same ghost counts once
	} {
		h.AddSnapshot(s)
	}
	n, ex := CheckGhostLocks(h, 3, time.Second)
	if n != 1 || len(ex) != 1 || !strings.Contains(ex[0], "key k: ghost") || !strings.Contains(ex[0], "3 of 5 masters") {
		t.Fatalf("ghosts = %d, examples %q; want the one on k", n, ex)
	}
}

func TestFreeRefusalChecker(t *testing.T) {
	h := NewHistory()
	free := func(o Op) Op { o.Free = true; return o }
	h.AddOps(
		free(acq(h, 0, "f:1", "a", 0, 5, 900, OK)),
		free(acq(h, 0, "f:2", "b", 10, 60, 900, Refused)),
		free(acq(h, 0, "f:3", "c", 100, 150, 900, Unknown)),
		free(acq(h, 0, "f:4", "d", 600, 650, 1500, Refused)), // in a stall
		acq(h, 1, "hot", "e", 10, 60, 900, Refused),          // contended: not judged
	)
	n, ex := CheckFreeRefusals(h, []Interval{{From: at(h, 500), To: at(h, 700)}})
	if n != 2 || len(ex) != 2 {
		t.Fatalf("free refusals = %d, examples %q; want b and c", n, ex)
	}
}

func TestLookup(t *testing.T) {
	all, err := Lookup("all")
	if err != nil || len(all) != len(Scenarios()) {
		t.Fatalf("all: %d scenarios, %v", len(all), err)
	}
	faults, _ := Lookup("faults")
	controls, _ := Lookup("controls")
	if len(faults)+len(controls) != len(all) || len(controls) != 3 {
		t.Fatalf("faults %d + controls %d != all %d", len(faults), len(controls), len(all))
	}
	two, err := Lookup("kill9, none,kill9")
	if err != nil || len(two) != 2 || two[0].Name != "kill9" || two[1].Name != "none" {
		t.Fatalf("kill9,none: %v, %v", two, err)
	}
	if _, err := Lookup("nope"); err == nil || !strings.Contains(err.Error(), "kill9-restart") {
		t.Fatalf("unknown scenario: %v", err)
	}
}
