package quorum

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// For random orders of settling and failing, every node whose fate is
// FateHolds is undone exactly once, after the failure, and no other node
// ever is.
func TestUndoProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	fates := []Fate{FateOpen, FateHolds, FateClear}
	for n := 1; n <= 20; n++ {
		for range 500 {
			var u Undo
			u.Init(n)
			final := make([]Fate, n)
			for i := range final {
				final[i] = fates[rng.IntN(len(fates))]
			}
			failAt := rng.IntN(n + 1)
			order := rng.Perm(n)
			undone := map[int]int{}
			for step, node := range order {
				if step == failAt {
					u.Fail()
				}
				u.Settle(node, final[node])
				if final[node] != FateOpen {
					u.Settle(node, fates[rng.IntN(len(fates))]) // a second answer changes nothing
				}
				for _, x := range u.Take(nil) {
					if !u.Failed() {
						t.Fatal("Take returned nodes before the failure")
					}
					undone[x]++
				}
			}
			if failAt == n {
				u.Fail()
				for _, x := range u.Take(nil) {
					undone[x]++
				}
			}
			for i, f := range final {
				want := 0
				if f == FateHolds {
					want = 1
				}
				if undone[i] != want {
					t.Fatalf("n=%d fates %v: node %d undone %d times, want %d", n, final, i, undone[i], want)
				}
			}
		}
	}
}

func TestUndoNothingBeforeFailure(t *testing.T) {
	var u Undo
	u.Init(3)
	u.Settle(0, FateHolds)
	if got := u.Take(nil); len(got) != 0 {
		t.Fatalf("Take before Fail = %v, want nothing", got)
	}
	u.Fail()
	if got := u.Take([]int{9}); !slices.Equal(got, []int{9, 0}) {
		t.Fatalf("Take([9]) = %v, want [9 0]", got)
	}
}
