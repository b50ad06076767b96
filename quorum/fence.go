package quorum

import "time"

// Fencing numbers: each grant of a lock gets one number, the same on every
// call, and a grant made after an earlier grant's validity ended gets a
// larger one. The number of a grant is agreed by the masters with
// single-decree Paxos: the masters are the acceptors (their state for a
// grant lives beside the lock and expires with it), the proxies answering
// FENCE are the proposers, and every master keeps a counter of the largest
// number it ever accepted, so that a new grant's number, read from a
// majority, exceeds every number a majority accepted before.

// FenceShift leaves room below a millisecond timestamp: a fresh number is
// at least the master's clock in ms shifted by it, so numbers keep rising
// even past masters that lost their counters (see FreshFence).
const FenceShift = 10

// Promise is one master's answer to a prepare for a grant.
type Promise struct {
	Answered  bool          // false: no answer (timeout, error, down)
	Counts    bool          // the master's vote counts (verified, not quarantined)
	Holds     bool          // the lock holds the caller's token there
	Remaining time.Duration // the lock's PTTL there
	Promised  bool          // it promised the ballot (no higher ballot seen)
	Higher    uint64        // when not promised: the higher ballot it promised
	AccBallot uint64        // the highest ballot it accepted for this grant, 0 for none
	AccValue  uint64        // the value accepted with it
	Counter   uint64        // the largest number it ever accepted, for any grant
	NowMs     int64         // its clock, in ms since the epoch
}

// PrepareResult is what a proposer learns from the promises of a prepare.
type PrepareResult uint8

// Outcomes of a prepare.
const (
	NotHeld PrepareResult = iota + 1 // no majority holds the caller's token
	Retry                            // no majority promised (a higher ballot is about): try a higher ballot
	Chosen                           // a majority accepted the same ballot: its value is the grant's number
	Propose                          // propose Value with this ballot
)

// Prepare reads the promises of n masters (a missing answer is a zero
// Promise) and says what to do: the number is already chosen; or the value
// to propose (the value of the highest accepted ballot, or a fresh one); or
// that the caller does not hold a majority, or must retry. remaining is
// the majority's remaining PTTL (the majority-th largest among counted
// holders), for the validity check.
func Prepare(n int, ps []Promise) (res PrepareResult, value uint64, remaining time.Duration) {
	m := Majority(n)
	var holders []time.Duration
	promised := 0
	var best Promise
	for _, p := range ps {
		if !p.Answered || !p.Counts || !p.Holds {
			continue
		}
		holders = append(holders, p.Remaining)
		if p.Promised {
			promised++
			if p.AccBallot > best.AccBallot {
				best = p
			}
		}
	}
	remaining, ok := MajorityTTL(n, holders)
	if !ok {
		return NotHeld, 0, 0
	}
	if promised < m {
		return Retry, 0, remaining
	}
	if best.AccBallot != 0 {
		same := 0
		for _, p := range ps {
			if p.Answered && p.Counts && p.Holds && p.Promised && p.AccBallot == best.AccBallot {
				same++
			}
		}
		if same >= m {
			return Chosen, best.AccValue, remaining
		}
		return Propose, best.AccValue, remaining
	}
	return Propose, FreshFence(ps), remaining
}

// FreshFence is the number a new grant proposes: above every counter the
// promising masters report, and at least the latest of their clocks (in
// ms) shifted by FenceShift. The counters carry the order while a majority
// of masters keeps its memory; the clock floor carries it past masters that
// lost their counters (a restart without fsync, a promoted replica), as
// long as the masters' clocks agree to within the restart quarantine.
func FreshFence(ps []Promise) uint64 {
	var counter uint64
	var now int64
	for _, p := range ps {
		if !p.Answered || !p.Counts || !p.Holds || !p.Promised {
			continue
		}
		counter = max(counter, p.Counter)
		now = max(now, p.NowMs)
	}
	floor := uint64(0)
	if now > 0 {
		floor = uint64(now) << FenceShift
	}
	return max(counter+1, floor)
}

// Accepted reports whether a majority of counted masters accepted the
// proposal: then its value is the grant's number.
func Accepted(n int, accepted []bool, counts []bool) bool {
	k := 0
	for i := range accepted {
		if accepted[i] && counts[i] {
			k++
		}
	}
	return k >= Majority(n)
}
