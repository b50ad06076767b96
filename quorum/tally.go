package quorum

import "fmt"

// Vote is one node's answer in one round.
type Vote uint8

// The votes a node can cast.
const (
	Pending Vote = iota // no answer yet
	Granted             // the node did what was asked (set, deleted, extended)
	Refused             // the node definitively said no (held by another, not ours)
	Unknown             // error, timeout, lost connection: it may or may not have acted
)

func (v Vote) String() string {
	switch v {
	case Pending:
		return "pending"
	case Granted:
		return "granted"
	case Refused:
		return "refused"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Vote(%d)", uint8(v))
}

// Outcome is the state of a round.
type Outcome uint8

// A round is Undecided until a majority granted (Won) or a majority can no
// longer be reached (Lost).
const (
	Undecided Outcome = iota
	Won
	Lost
)

func (o Outcome) String() string {
	switch o {
	case Undecided:
		return "undecided"
	case Won:
		return "won"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Majority is the number of nodes out of n that form a majority: n/2+1.
func Majority(n int) int { return n/2 + 1 }

// Tally counts the votes of one round over n nodes. The zero value is not
// usable; call NewTally. A Tally is not safe for concurrent use.
type Tally struct {
	votes   []Vote
	counted []bool // whether the node's recorded vote counts toward the majority
	granted int    // counted grants
	pending int    // nodes that have not answered yet
	refused int    // counted refusals

	small  [16]Vote // storage for Init, so a round over few nodes allocates nothing
	smallC [16]bool
}

// NewTally starts a round over n nodes, all pending.
func NewTally(n int) Tally {
	return Tally{votes: make([]Vote, n), counted: make([]bool, n), pending: n}
}

// Init starts a round over n nodes in place, without allocating when n is
// at most 16. A Tally set up by Init must not be copied afterwards.
func (t *Tally) Init(n int) {
	if n <= len(t.small) {
		t.votes, t.counted = t.small[:n], t.smallC[:n]
		clear(t.votes)
		clear(t.counted)
	} else {
		t.votes, t.counted = make([]Vote, n), make([]bool, n)
	}
	t.granted, t.refused, t.pending = 0, 0, n
}

// N is the number of nodes in the round.
func (t *Tally) N() int { return len(t.votes) }

// Record sets node's vote. counts is false for a node that is quarantined or
// whose identity is unverified: its vote is kept (an uncounted grant must
// still be undone) but it does not count toward the majority. A node votes
// once; later calls for the same node are ignored and return false.
func (t *Tally) Record(node int, v Vote, counts bool) bool {
	if node < 0 || node >= len(t.votes) || t.votes[node] != Pending || v == Pending {
		return false
	}
	t.votes[node] = v
	t.counted[node] = counts
	t.pending--
	switch v {
	case Granted:
		if counts {
			t.granted++
		}
	case Refused:
		if counts {
			t.refused++
		}
	}
	return true
}

// Granted is the number of counted grants.
func (t *Tally) Granted() int { return t.granted }

// Refused is the number of counted refusals.
func (t *Tally) Refused() int { return t.refused }

// Pending is the number of nodes that have not answered.
func (t *Tally) Pending() int { return t.pending }

// Vote returns node's vote and whether it counts.
func (t *Tally) Vote(node int) (Vote, bool) { return t.votes[node], t.counted[node] }

// Outcome decides the round as early as possible: Won once a majority of
// counted grants is in, Lost once even all pending nodes granting could not
// make a majority, Undecided otherwise. A pending node is assumed to be
// able to count, so Lost is never declared too early.
func (t *Tally) Outcome() Outcome {
	m := Majority(len(t.votes))
	switch {
	case t.granted >= m:
		return Won
	case t.granted+t.pending < m:
		return Lost
	}
	return Undecided
}

// Done reports whether every node has answered.
func (t *Tally) Done() bool { return t.pending == 0 }
