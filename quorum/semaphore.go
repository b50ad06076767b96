package quorum

// Counting semaphores: at most limit holders at any moment, under any
// partial failure.
//
// A plain majority is not enough once the limit is 2 or more. Each master
// admits a caller while it has fewer than limit holders, so with three
// masters and a limit of 2, three callers each refused by a different
// master each hold two masters out of three: three "majorities" at once.
//
// The rule here makes a semaphore of limit L out of L mutexes. A permit is
// one of L slots; on each master a slot is held by at most one caller at a
// time (the masters' own rule, one atomic script), and a caller holds a
// permit only while a majority of counted masters hold the same slot for
// it. Two callers cannot both hold one slot, since any two majorities share
// a master and that master holds the slot for one of them only. So at most
// L callers hold permits, whatever was lost, delayed, refused or undone
// (TestSlotsNeverExceedTheLimit walks every interleaving of small cases).
// Like a lock, a slot is granted, extended and released by a majority, so
// a minority of masters down or quarantined costs nothing.

// NoSlot is the slot of a node that holds none for the caller (it refused,
// or has not answered).
const NoSlot = -1

// Slots decides one round of a semaphore command over n nodes: held[i] is
// the slot node i holds for the caller after the command (NoSlot if none,
// or no answer yet), counts[i] whether node i's answer counts, pending how
// many nodes have not answered. It is Won, with the slot, once a majority of
// counted nodes hold the same slot; Lost once no slot can reach a majority
// even if every pending node held it; Undecided otherwise. A node holds at
// most one slot for a caller, so at most one slot can be won.
func Slots(n int, held []int, counts []bool, pending int) (Outcome, int) {
	m := Majority(n)
	best := 0
	for i, s := range held {
		if s == NoSlot || !counts[i] {
			continue
		}
		c := 0
		for j := i; j < len(held); j++ {
			if held[j] == s && counts[j] {
				c++
			}
		}
		if c >= m {
			return Won, s
		}
		best = max(best, c)
	}
	if best+pending < m {
		return Lost, NoSlot
	}
	return Undecided, NoSlot
}
