package quorum

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

// A round is written as one character per node, in node order:
//
//	G  granted, counted        g  granted, quarantined (not counted)
//	R  refused, counted        r  refused, quarantined
//	U  unknown, counted        u  unknown, quarantined
//	.  pending (no answer yet)
//
// so "GGr.." is a round over five nodes where nodes 0 and 1 granted, node 2
// (quarantined) refused and nodes 3 and 4 have not answered.

type cast struct {
	v      Vote
	counts bool
}

var symbols = map[byte]cast{
	'G': {Granted, true}, 'g': {Granted, false},
	'R': {Refused, true}, 'r': {Refused, false},
	'U': {Unknown, true}, 'u': {Unknown, false},
	'.': {Pending, false},
}

// castsOf parses a round written as above.
func castsOf(t testing.TB, round string) []cast {
	t.Helper()
	cs := make([]cast, len(round))
	for i := range len(round) {
		c, ok := symbols[round[i]]
		if !ok {
			t.Fatalf("bad round %q: unknown symbol %q", round, round[i])
		}
		cs[i] = c
	}
	return cs
}

// tallyOf builds the tally of a round written as above, recording votes in
// node order.
func tallyOf(t testing.TB, round string) Tally {
	t.Helper()
	ta := NewTally(len(round))
	for i, c := range castsOf(t, round) {
		if c.v == Pending {
			continue
		}
		if !ta.Record(i, c.v, c.counts) {
			t.Fatalf("round %q: Record(%d, %v, %v) = false on a pending node", round, i, c.v, c.counts)
		}
	}
	return ta
}

func TestMajority(t *testing.T) {
	want := map[int]int{1: 1, 2: 2, 3: 2, 4: 3, 5: 3, 6: 4, 7: 4}
	for n := 1; n <= 7; n++ {
		m := Majority(n)
		if m != want[n] {
			t.Errorf("Majority(%d) = %d, want %d", n, m, want[n])
		}
		// A majority is more than half, and one fewer is not.
		if 2*m <= n {
			t.Errorf("Majority(%d) = %d: two of them (%d) do not exceed n", n, m, 2*m)
		}
		if 2*(m-1) > n {
			t.Errorf("Majority(%d) = %d is not the least majority: %d already exceeds half", n, m, m-1)
		}
	}
}

func TestVoteAndOutcomeString(t *testing.T) {
	for _, tc := range []struct {
		got, want string
	}{
		{Pending.String(), "pending"},
		{Granted.String(), "granted"},
		{Refused.String(), "refused"},
		{Unknown.String(), "unknown"},
		{Vote(9).String(), "Vote(9)"},
		{Undecided.String(), "undecided"},
		{Won.String(), "won"},
		{Lost.String(), "lost"},
		{Outcome(7).String(), "Outcome(7)"},
	} {
		if tc.got != tc.want {
			t.Errorf("String() = %q, want %q", tc.got, tc.want)
		}
	}
}

func TestNewTally(t *testing.T) {
	for n := 1; n <= 7; n++ {
		ta := NewTally(n)
		if ta.N() != n || ta.Pending() != n || ta.Granted() != 0 || ta.Refused() != 0 {
			t.Errorf("NewTally(%d): N=%d Pending=%d Granted=%d Refused=%d, want %d %d 0 0",
				n, ta.N(), ta.Pending(), ta.Granted(), ta.Refused(), n, n)
		}
		if o := ta.Outcome(); o != Undecided {
			t.Errorf("NewTally(%d).Outcome() = %v, want undecided", n, o)
		}
		if ta.Done() {
			t.Errorf("NewTally(%d).Done() = true before any vote", n)
		}
		for i := range n {
			if v, counts := ta.Vote(i); v != Pending || counts {
				t.Errorf("NewTally(%d).Vote(%d) = %v, %v; want pending, false", n, i, v, counts)
			}
		}
	}
}

func seq(n int) []int {
	s := make([]int, n)
	for i := range s {
		s[i] = i
	}
	return s
}

func TestTallyOutcome(t *testing.T) {
	for _, tc := range []struct {
		round                     string
		want                      Outcome
		granted, refused, pending int
	}{
		// n = 1: majority 1.
		{".", Undecided, 0, 0, 1},
		{"G", Won, 1, 0, 0},
		{"g", Lost, 0, 0, 0},
		{"R", Lost, 0, 1, 0},
		{"r", Lost, 0, 0, 0},
		{"U", Lost, 0, 0, 0},
		{"u", Lost, 0, 0, 0},

		// n = 2: majority 2, so one failure loses.
		{"..", Undecided, 0, 0, 2},
		{"G.", Undecided, 1, 0, 1},
		{"GG", Won, 2, 0, 0},
		{"R.", Lost, 0, 1, 1},
		{"U.", Lost, 0, 0, 1},
		{"g.", Lost, 0, 0, 1},
		{"Gg", Lost, 1, 0, 0},

		// n = 3: majority 2.
		{"...", Undecided, 0, 0, 3},
		{"G..", Undecided, 1, 0, 2},
		{"GG.", Won, 2, 0, 1}, // early: the third vote cannot matter
		{"G.G", Won, 2, 0, 1},
		{"GR.", Undecided, 1, 1, 1},
		{"RR.", Lost, 0, 2, 1}, // early: even a grant from node 2 is not enough
		{"RU.", Lost, 0, 1, 1},
		{"UU.", Lost, 0, 0, 1},
		{"Gg.", Undecided, 1, 0, 1}, // the quarantined grant does not count...
		{"Ggg", Lost, 1, 0, 0},      // ...even when it would make a majority
		{"gg.", Lost, 0, 0, 1},
		{"GrR", Lost, 1, 1, 0},
		{"GGR", Won, 2, 1, 0},
		{"GUG", Won, 2, 0, 0},

		// n = 4: majority 3.
		{"GG..", Undecided, 2, 0, 2},
		{"GGG.", Won, 3, 0, 1},
		{"GGR.", Undecided, 2, 1, 1},
		{"GRR.", Lost, 1, 2, 1},
		{"GGRR", Lost, 2, 2, 0},
		{"GGgG", Won, 3, 0, 0},

		// n = 5: majority 3.
		{".....", Undecided, 0, 0, 5},
		{"GG...", Undecided, 2, 0, 3},
		{"GGG..", Won, 3, 0, 2},
		{"RRR..", Lost, 0, 3, 2},
		{"RRU..", Lost, 0, 2, 2},
		{"GRU..", Undecided, 1, 1, 2},
		{"GRU.G", Undecided, 2, 1, 1},
		{"GRUUG", Lost, 2, 1, 0},
		{"GGggg", Lost, 2, 0, 0}, // five grants, three of them quarantined
		{"GGgg.", Undecided, 2, 0, 1},
		{"GGggG", Won, 3, 0, 0},
		{"rrr..", Lost, 0, 0, 2}, // quarantined refusals still rule the node out
		{"rr...", Undecided, 0, 0, 3},

		// n = 6: majority 4.
		{"GGG...", Undecided, 3, 0, 3},
		{"GGGG..", Won, 4, 0, 2},
		{"GGGRR.", Undecided, 3, 2, 1},
		{"GGRRR.", Lost, 2, 3, 1},
		{"GGGRRR", Lost, 3, 3, 0}, // a tie is not a majority

		// n = 7: majority 4.
		{".......", Undecided, 0, 0, 7},
		{"GGG....", Undecided, 3, 0, 4},
		{"GGGG...", Won, 4, 0, 3},
		{"RRRR...", Lost, 0, 4, 3},
		{"GGGRRR.", Undecided, 3, 3, 1},
		{"GGGRRRG", Won, 4, 3, 0},
		{"GGGRRRg", Lost, 3, 3, 0},
		{"GgGgGg.", Undecided, 3, 0, 1},
		{"UUUGGG.", Undecided, 3, 0, 1},
		{"uuuuGGG", Lost, 3, 0, 0},
	} {
		t.Run(tc.round, func(t *testing.T) {
			ta := tallyOf(t, tc.round)
			if o := ta.Outcome(); o != tc.want {
				t.Errorf("Outcome() = %v, want %v (majority %d of %d)", o, tc.want, Majority(len(tc.round)), len(tc.round))
			}
			if ta.Granted() != tc.granted || ta.Refused() != tc.refused || ta.Pending() != tc.pending {
				t.Errorf("Granted/Refused/Pending = %d/%d/%d, want %d/%d/%d",
					ta.Granted(), ta.Refused(), ta.Pending(), tc.granted, tc.refused, tc.pending)
			}
			if ta.Done() != (tc.pending == 0) {
				t.Errorf("Done() = %v with %d pending", ta.Done(), tc.pending)
			}
		})
	}
}

func TestTallyRecord(t *testing.T) {
	ta := NewTally(3)
	for _, bad := range []int{-1, 3, 100} {
		if ta.Record(bad, Granted, true) {
			t.Errorf("Record(%d) on a 3-node round = true, want false", bad)
		}
	}
	if ta.Record(0, Pending, true) {
		t.Error("Record(0, Pending) = true, want false: pending is not a vote")
	}
	if v, _ := ta.Vote(0); v != Pending || ta.Pending() != 3 {
		t.Errorf("after Record(0, Pending): vote %v, %d pending; want pending, 3", v, ta.Pending())
	}
	if !ta.Record(0, Granted, false) {
		t.Fatal("first Record(0, Granted, false) = false")
	}
	if v, counts := ta.Vote(0); v != Granted || counts {
		t.Errorf("Vote(0) = %v, %v; want granted, false (quarantined vote is recorded)", v, counts)
	}
	if ta.Granted() != 0 || ta.Pending() != 2 {
		t.Errorf("after a quarantined grant: Granted=%d Pending=%d, want 0 2", ta.Granted(), ta.Pending())
	}
}

// A node votes once: whatever a later Record says, nothing changes.
func TestTallyRecordDuplicateIgnored(t *testing.T) {
	for _, first := range []cast{{Granted, true}, {Granted, false}, {Refused, true}, {Refused, false}, {Unknown, true}, {Unknown, false}} {
		for _, again := range []cast{{Granted, true}, {Granted, false}, {Refused, true}, {Refused, false}, {Unknown, true}, {Unknown, false}, {Pending, true}} {
			name := fmt.Sprintf("%v,%v then %v,%v", first.v, first.counts, again.v, again.counts)
			t.Run(name, func(t *testing.T) {
				ta := NewTally(3)
				ta.Record(1, first.v, first.counts)
				g, r, p, o := ta.Granted(), ta.Refused(), ta.Pending(), ta.Outcome()
				if ta.Record(1, again.v, again.counts) {
					t.Error("second Record for node 1 = true, want false")
				}
				if v, counts := ta.Vote(1); v != first.v || counts != first.counts {
					t.Errorf("Vote(1) = %v, %v after duplicate; want the first vote %v, %v", v, counts, first.v, first.counts)
				}
				if ta.Granted() != g || ta.Refused() != r || ta.Pending() != p || ta.Outcome() != o {
					t.Errorf("duplicate changed the tally: %d/%d/%d %v -> %d/%d/%d %v",
						g, r, p, o, ta.Granted(), ta.Refused(), ta.Pending(), ta.Outcome())
				}
			})
		}
	}
}

func TestTallyRefusedCountsOnlyCounted(t *testing.T) {
	for _, tc := range []struct {
		round string
		want  int
	}{
		{"rrrrr", 0},
		{"Rrrrr", 1},
		{"RRRrr", 3},
		{"RUuGg", 1},
		{"RRRRR", 5},
		{".....", 0},
		{"UUUUU", 0}, // an unknown is not a refusal
	} {
		ta := tallyOf(t, tc.round)
		if got := ta.Refused(); got != tc.want {
			t.Errorf("%q: Refused() = %d, want %d", tc.round, got, tc.want)
		}
	}
}

// outcomeOracle decides a round by brute force over every way its pending
// nodes could still answer (each a counted grant or a refusal), independently
// of the formula in Tally.Outcome.
func outcomeOracle(cs []cast) (want Outcome, canWin, canLose bool) {
	m := Majority(len(cs))
	var granted int
	var pending []int
	for i, c := range cs {
		switch {
		case c.v == Pending:
			pending = append(pending, i)
		case c.v == Granted && c.counts:
			granted++
		}
	}
	for mask := 0; mask < 1<<len(pending); mask++ {
		g := granted
		for b := range pending {
			if mask&(1<<b) != 0 {
				g++
			}
		}
		if g >= m {
			canWin = true
		} else {
			canLose = true
		}
	}
	switch {
	case granted >= m:
		want = Won
	case !canWin:
		want = Lost
	default:
		want = Undecided
	}
	return want, canWin, canLose
}

// checkRound records cs in the given order and checks, after every vote, that
// the outcome is what the oracle says (decided exactly when it can no longer
// change) and that a decided outcome never changes.
func checkRound(t *testing.T, cs []cast, order []int) {
	t.Helper()
	n := len(cs)
	ta := NewTally(n)
	cur := make([]cast, n) // the votes recorded so far; the rest pending
	prev := Undecided
	for step, node := range order {
		c := cs[node]
		if c.v == Pending {
			continue
		}
		ta.Record(node, c.v, c.counts)
		cur[node] = c
		got := ta.Outcome()
		want, canWin, canLose := outcomeOracle(cur)
		if got != want {
			t.Fatalf("votes %v, order %v, after step %d: Outcome() = %v, want %v (can win %v, can lose %v)",
				cs, order, step, got, want, canWin, canLose)
		}
		if got == Lost && canWin {
			t.Fatalf("votes %v, order %v, step %d: Lost declared while a majority is still reachable", cs, order, step)
		}
		if got == Undecided && !(canWin && canLose) {
			t.Fatalf("votes %v, order %v, step %d: Undecided although the outcome is settled", cs, order, step)
		}
		if prev != Undecided && got != prev {
			t.Fatalf("votes %v, order %v, step %d: decided outcome changed from %v to %v", cs, order, step, prev, got)
		}
		prev = got
	}
}

var allCasts = []cast{{Granted, true}, {Granted, false}, {Refused, true}, {Refused, false}, {Unknown, true}, {Unknown, false}, {Pending, false}}

// Every assignment of votes for n up to 5, recorded in node order and in
// reverse: Outcome agrees with the brute-force oracle at every step.
func TestTallyOutcomeExhaustive(t *testing.T) {
	for n := 1; n <= 5; n++ {
		cs := make([]cast, n)
		fwd := seq(n)
		rev := slices.Clone(fwd)
		slices.Reverse(rev)
		var walk func(i int)
		walk = func(i int) {
			if i == n {
				checkRound(t, cs, fwd)
				checkRound(t, cs, rev)
				return
			}
			for _, c := range allCasts {
				cs[i] = c
				walk(i + 1)
			}
		}
		walk(0)
	}
}

// Random rounds for n = 1..7 in random orders: decided outcomes are never
// premature and never change.
func TestTallyOutcomeMonotonicRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 1; n <= 7; n++ {
		for range 3000 {
			cs := make([]cast, n)
			for i := range cs {
				cs[i] = allCasts[rng.IntN(len(allCasts))]
			}
			order := seq(n)
			rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
			checkRound(t, cs, order)
		}
	}
}

// Two rounds compete for the same n nodes. Each node grants to at most one of
// them; in the other it refuses, fails (unknown), or never answers. Whatever
// the quarantine flags and the interleaving, both rounds never reach Won.
func TestTallyDisjointVotersNeverBothWin(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	other := []Vote{Refused, Unknown, Pending}
	for n := 1; n <= 7; n++ {
		for range 5000 {
			a, b := NewTally(n), NewTally(n)
			type ev struct {
				round  *Tally
				node   int
				v      Vote
				counts bool
			}
			var evs []ev
			for node := range n {
				va, vb := other[rng.IntN(3)], other[rng.IntN(3)]
				switch rng.IntN(3) {
				case 0:
					va = Granted
				case 1:
					vb = Granted
				} // case 2: grants to neither
				evs = append(evs,
					ev{&a, node, va, rng.IntN(4) != 0},
					ev{&b, node, vb, rng.IntN(4) != 0})
			}
			rng.Shuffle(len(evs), func(i, j int) { evs[i], evs[j] = evs[j], evs[i] })
			for _, e := range evs {
				if e.v != Pending {
					e.round.Record(e.node, e.v, e.counts)
				}
				if a.Outcome() == Won && b.Outcome() == Won {
					t.Fatalf("n=%d: both rounds won (A granted %d, B granted %d, majority %d)",
						n, a.Granted(), b.Granted(), Majority(n))
				}
			}
		}
	}
}

// A backend that restarted forgot the lock of the first round and may grant
// the second one too; it is quarantined, so at most one of its two grants
// counts. Both rounds still never win.
func TestTallyRestartedNodeGrantingTwiceNeverBothWin(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for n := 1; n <= 7; n++ {
		for range 5000 {
			a, b := NewTally(n), NewTally(n)
			for node := range n {
				switch rng.IntN(4) {
				case 0: // healthy, grants A
					a.Record(node, Granted, true)
					b.Record(node, Refused, true)
				case 1: // healthy, grants B
					a.Record(node, Refused, true)
					b.Record(node, Granted, true)
				case 2: // restarted between the rounds: grants both, one uncounted
					countsInA := rng.IntN(2) == 0
					a.Record(node, Granted, countsInA)
					b.Record(node, Granted, !countsInA)
				case 3: // unreachable
					a.Record(node, Unknown, true)
					b.Record(node, Unknown, true)
				}
			}
			if a.Outcome() == Won && b.Outcome() == Won {
				t.Fatalf("n=%d: both rounds won (A %d, B %d counted grants, majority %d)", n, a.Granted(), b.Granted(), Majority(n))
			}
		}
	}
}

// Exhaustively for n up to 6: every way to split nodes among round A, round
// B and neither leaves at most one round with a majority.
func TestTallyDisjointVotersExhaustive(t *testing.T) {
	for n := 1; n <= 6; n++ {
		total := 1
		for range n {
			total *= 3
		}
		for code := range total {
			a, b := NewTally(n), NewTally(n)
			c := code
			for node := range n {
				switch c % 3 {
				case 0:
					a.Record(node, Granted, true)
					b.Record(node, Refused, true)
				case 1:
					a.Record(node, Refused, true)
					b.Record(node, Granted, true)
				}
				c /= 3
			}
			if a.Outcome() == Won && b.Outcome() == Won {
				t.Fatalf("n=%d split %d: both rounds won", n, code)
			}
		}
	}
}
