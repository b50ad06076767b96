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
		{"a shorter extend ends the holder's window sooner", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 1900, OK), ext(h, 0, "k", "a", 100, 105, 400, OK),
				acq(h, 1, "k", "b", 500, 505, 1400, OK),
			}
		}, 0},
		{"an unknown shorter extend may have shortened the lease", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 1900, OK), ext(h, 0, "k", "a", 100, 105, 400, Unknown),
				acq(h, 1, "k", "b", 500, 505, 1400, OK),
			}
		}, 0},
		{"a lock shortened behind a later, longer extend", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 1900, OK), ext(h, 0, "k", "a", 100, 105, 400, OK),
				ext(h, 0, "k", "a", 106, 110, 1600, OK),
				acq(h, 1, "k", "b", 500, 505, 1400, OK),
			}
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

// read reads a plain register.
func read(c *Client, l Lease) int64 {
	v, _ := c.Read(l)
	return v
}

func TestRegisterChecker(t *testing.T) {
	h := NewHistory()
	a := &Client{ID: 0, h: h}
	b := &Client{ID: 1, h: h}
	la := Lease{Key: "k", Token: "a", ValidUntil: time.Now().Add(time.Hour)}
	lb := Lease{Key: "k", Token: "b", ValidUntil: time.Now().Add(time.Hour)}
	a.Write(la, read(a, la)) // 0 -> 1
	b.Write(lb, read(b, lb)) // 1 -> 2
	a.Close()
	b.Close()
	if lost, _, ex := CheckRegisters(h); lost != 0 {
		t.Fatalf("serial updates: lost = %d (%q)", lost, ex)
	}
	va, vb := read(a, la), read(b, lb) // both read 2
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
	va = read(a, expired)
	b.Write(lb, read(b, lb))
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
		{"an extend sets the TTL it asks for, shorter too", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 1900, OK), ext(h, 0, "k", "a", 100, 105, 400, OK),
				acq(h, 1, "k", "b", 500, 505, 1400, OK),
			}
		}, true},
		{"a later, longer extend's lease holds", func(h *History) []Op {
			return []Op{
				acq(h, 0, "k", "a", 0, 5, 1900, OK), ext(h, 0, "k", "a", 100, 105, 400, OK),
				ext(h, 0, "k", "a", 106, 110, 1600, OK),
				acq(h, 1, "k", "b", 500, 505, 1400, OK),
			}
		}, false},
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
	if len(faults)+len(controls) != len(all) || len(controls) != 20 {
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

// num records n as the number FENCE gave the grant op.
func num(op Op, n int64) Op {
	op.Fence = FenceAnswer{Asked: true, Outcome: OK, N: n, Call: op.Return, Return: op.Return}
	return op
}

func TestFenceChecker(t *testing.T) {
	for _, tc := range []struct {
		name string
		ops  func(h *History) []Op
		want int
	}{
		{"numbers rise grant after grant", func(h *History) []Op {
			return []Op{
				num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10), rel(h, 0, "k", "a", 100, 105, OK),
				num(acq(h, 1, "k", "b", 101, 106, 1000, OK), 11), rel(h, 1, "k", "b", 200, 205, OK),
				num(acq(h, 2, "k", "c", 1950, 1960, 2900, OK), 20),
			}
		}, 0},
		{"a later grant with a lower number", func(h *History) []Op {
			return []Op{
				num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10), rel(h, 0, "k", "a", 100, 105, OK),
				num(acq(h, 1, "k", "b", 101, 106, 1000, OK), 9),
			}
		}, 1},
		{"a later grant with the same number", func(h *History) []Op {
			return []Op{
				num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10),
				num(acq(h, 1, "k", "b", 950, 960, 1900, OK), 10),
			}
		}, 1},
		{"below a grant that ended before, though not the last one", func(h *History) []Op {
			return []Op{
				num(acq(h, 0, "k", "a", 0, 5, 900, OK), 50),
				num(acq(h, 1, "k", "b", 950, 960, 1900, OK), 60),
				num(acq(h, 2, "k", "c", 1950, 1960, 2900, OK), 55), // above a, below b
			}
		}, 1},
		{"grants made before the other's validity ended are not ordered", func(h *History) []Op {
			// b was sent while a's validity ran (a late release, say): the
			// masters decide which came first.
			return []Op{
				num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10),
				num(acq(h, 1, "k", "b", 800, 950, 1700, OK), 9),
			}
		}, 0},
		{"another key's numbers do not matter", func(h *History) []Op {
			return []Op{num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10), num(acq(h, 1, "j", "b", 950, 960, 1900, OK), 3)}
		}, 0},
		{"two grants of a key sharing a number, unordered", func(h *History) []Op {
			return []Op{num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10), num(acq(h, 1, "k", "b", 800, 950, 1700, OK), 10)}
		}, 1},
		{"extends keep the grant and its number", func(h *History) []Op {
			return []Op{
				num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10),
				num(ext(h, 0, "k", "a", 800, 805, 1700, OK), 10),
				num(ext(h, 0, "k", "a", 1600, 1605, 2500, OK), 10),
				num(acq(h, 1, "k", "b", 2550, 2560, 3500, OK), 11),
			}
		}, 0},
		{"an extend of the same grant with another number", func(h *History) []Op {
			return []Op{num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10), num(ext(h, 0, "k", "a", 800, 805, 1700, OK), 12)}
		}, 1},
		{"a grant is ordered from the end of its last extend", func(h *History) []Op {
			return []Op{
				num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10),
				num(ext(h, 0, "k", "a", 800, 805, 1700, OK), 10),
				num(acq(h, 1, "k", "b", 1000, 1005, 1900, OK), 9), // sent inside a's extended validity
				num(acq(h, 2, "k", "c", 1750, 1760, 2700, OK), 10),
			}
		}, 1},
		{"an extend that takes the lock again after the validity is a grant of its own", func(h *History) []Op {
			return []Op{
				num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10),
				num(ext(h, 0, "k", "a", 950, 955, 1800, OK), 10), // the masters may still hold it: same number allowed
				num(ext(h, 0, "k", "a", 1900, 1905, 2800, OK), 14),
			}
		}, 0},
		{"refused, unknown and unasked numbers are not judged", func(h *History) []Op {
			nilAns := acq(h, 1, "k", "b", 950, 960, 1900, OK)
			nilAns.Fence = FenceAnswer{Asked: true, Outcome: Refused}
			errAns := acq(h, 2, "k", "c", 1950, 1960, 2900, OK)
			errAns.Fence = FenceAnswer{Asked: true, Outcome: Unknown, Err: "timeout"}
			return []Op{num(acq(h, 0, "k", "a", 0, 5, 900, OK), 10), nilAns, errAns, acq(h, 3, "k", "d", 2950, 2960, 3900, OK)}
		}, 0},
		{"a number that is not positive", func(h *History) []Op {
			return []Op{num(acq(h, 0, "k", "a", 0, 5, 900, OK), 0)}
		}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHistory()
			h.AddOps(tc.ops(h)...)
			got, st, ex := CheckFences(h)
			if got != tc.want {
				t.Fatalf("violations = %d, want %d (%q)", got, tc.want, ex)
			}
			if got > 0 && (len(ex) == 0 || !strings.Contains(ex[0], "fencing: key")) {
				t.Fatalf("examples %q do not explain", ex)
			}
			if st.Numbered == 0 {
				t.Fatalf("no number counted: %+v", st)
			}
		})
	}
}

// The fencing control's source: each proxy's counter rises, and gives a
// grant the same number again, but grants numbered through two proxies
// interleave out of order, which the checker must see.
func TestLocalFencesOutOfOrder(t *testing.T) {
	p0, p1 := newLocalFences(), newLocalFences()
	if a, again := p0.number("k", "a"), p0.number("k", "a"); a != 1 || again != 1 {
		t.Fatalf("one grant through one proxy: %d then %d, want 1 and 1", a, again)
	}
	if b := p0.number("k", "b"); b != 2 {
		t.Fatalf("the next grant through the same proxy: %d, want 2", b)
	}
	h := NewHistory()
	h.AddOps(
		num(acq(h, 0, "k", "a", 0, 5, 900, OK), 1),
		num(acq(h, 0, "k", "b", 950, 960, 1900, OK), 2),
		num(acq(h, 1, "k", "c", 1950, 1960, 2900, OK), p1.number("k", "c")), // 1: below b
	)
	if n, _, ex := CheckFences(h); n != 1 || !strings.Contains(strings.Join(ex, "\n"), "is not above an earlier one's: c (") {
		t.Fatalf("violations = %d (%q), want the third grant", n, ex)
	}
}

// A fenced register refuses reads and writes whose number is lower than
// the highest it has seen, or missing: the paused holder of control-pause
// loses no update on it.
func TestFencedRegister(t *testing.T) {
	h := NewHistory()
	h.FencedRegisters = true
	a, b, c := &Client{ID: 0, h: h}, &Client{ID: 1, h: h}, &Client{ID: 2, h: h}
	far := time.Now().Add(time.Hour)
	la := Lease{Key: "k", Token: "a", Fence: 10, ValidUntil: time.Now().Add(-time.Millisecond)} // paused past it
	lb := Lease{Key: "k", Token: "b", Fence: 11, ValidUntil: far}
	lc := Lease{Key: "k", Token: "c", ValidUntil: far} // FENCE gave no number

	va, ok := a.Read(la)
	if !ok || va != 0 {
		t.Fatalf("first read: %d, %v", va, ok)
	}
	if !b.Work(lb, 0, 0) {
		t.Fatal("the next holder's update was refused")
	}
	if a.Write(la, va) {
		t.Fatal("the paused holder's write, with a lower number, was taken")
	}
	if _, ok := a.Read(la); ok {
		t.Fatal("a read with a lower number was served")
	}
	if _, ok := c.Read(lc); ok || c.Write(lc, 5) {
		t.Fatal("a holder without a number was served")
	}
	if !b.Write(lb, read(b, lb)) {
		t.Fatal("the same number again was refused")
	}
	a.Close()
	b.Close()
	c.Close()
	lost, _, ex := CheckRegisters(h)
	if lost != 0 {
		t.Fatalf("lost = %d (%q)", lost, ex)
	}
	st := h.Registers()["k"]
	if st.Value != 2 || st.Increments != 2 || !st.Fenced || st.Refused != 4 {
		t.Fatalf("register %+v, want value 2, 2 increments, 4 refusals", st)
	}
	refused := 0
	for _, w := range h.Writes() {
		if w.Refused {
			refused++
		}
	}
	if refused != 2 {
		t.Fatalf("%d writes recorded as refused, want 2", refused)
	}

	// The same interleaving on a plain register loses the update.
	h = NewHistory()
	a, b = &Client{ID: 0, h: h}, &Client{ID: 1, h: h}
	va = read(a, la)
	b.Work(lb, 0, 0)
	a.Write(la, va)
	a.Close()
	b.Close()
	if lost, _, _ := CheckRegisters(h); lost != 1 {
		t.Fatalf("plain register: lost = %d, want 1", lost)
	}
}

// The keys of the undos a stopped proxy logged as left pending, per key
// the masters it named.
func TestParseLeftUndos(t *testing.T) {
	got := parseLeftUndos(`backend 0 (127.0.0.1:1): "probe:0"; backend 3 (127.0.0.1:4): "probe:0" "a \"b\""; backend 4 (127.0.0.1:5): "x"; and 2 more`)
	want := map[string]int{"probe:0": 2, `a "b"`: 1, "x": 1}
	if len(got) != len(want) {
		t.Fatalf("parsed %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("parsed %v, want %v", got, want)
		}
	}
}

// The losses of the run that first showed restored records compounding
// their drift: each loss whose records were read after another master's
// hold was bounded (and its record restored) may read through it.
func TestRestoreHopsFollowTheChainOfRestoredRecords(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	losses := []loss{
		{master: 1, at: at(909), detected: at(950), bounded: at(1500), next: at(5841)},
		{master: 0, at: at(1342), detected: at(2600), bounded: at(3000), next: at(7234)},
		{master: 3, at: at(4549), detected: at(4600), bounded: at(5000)},
		{master: 1, at: at(5841), detected: at(5870), bounded: at(6300)},
		{master: 0, at: at(7234), detected: at(7266), bounded: at(7800)},
		// Listed last, read first (before any other was bounded): one hop,
		// and every other loss may read through its restored record.
		{master: 2, at: at(100), detected: at(150), bounded: at(1400)},
	}
	got := restoreHops(losses)
	want := []int{2, 3, 4, 5, 6, 1}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("hops %v, want %v", got, want)
		}
	}
	// Not bounded yet: the records are read by the judge's latest time.
	late := restoreHops([]loss{
		{master: 1, at: at(0), detected: at(50), bounded: at(1000)},
		{master: 2, at: at(100), detected: at(150)},
	})
	if late[1] != 2 {
		t.Errorf("a loss not bounded, read after another's bound: %d hops, want 2", late[1])
	}
}
