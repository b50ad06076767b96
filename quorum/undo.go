package quorum

// Fate is what became of one node's command, as far as undoing it goes.
type Fate uint8

// The fates of a command on a node.
const (
	// FateOpen: no final answer yet. The node has not answered, or its
	// answer timed out: a late reply, or the loss of the connection it was
	// sent on, will tell.
	FateOpen Fate = iota
	// FateHolds: it may have taken effect. The node granted it, answered
	// with an error (a script may write before it fails), or the connection
	// it was sent on was lost before the reply.
	FateHolds
	// FateClear: it did not take effect. The node refused it, or it was
	// never sent.
	FateClear
	// FateUndone: it may have taken effect and its undo has been sent.
	FateUndone
)

// Undo decides which nodes of a failed attempt get a compare-and-delete:
// exactly those where the attempt may have taken effect, each once, as soon
// as that is known. A node that refused is never undone, so an attempt
// whose token another client also holds (tokens that are not unique) never
// deletes that client's lock where it was refused; a node whose answer
// timed out is undone only once a late grant or a lost connection shows it
// may hold the token. The zero value is not usable; call Init. An Undo is
// not safe for concurrent use.
type Undo struct {
	fates  []Fate
	failed bool
	small  [16]Fate
}

// Init starts tracking n nodes, all open, without allocating when n is at
// most 16. An Undo set up by Init must not be copied afterwards.
func (u *Undo) Init(n int) {
	if n <= len(u.small) {
		u.fates = u.small[:n]
		clear(u.fates)
	} else {
		u.fates = make([]Fate, n)
	}
	u.failed = false
}

// Settle records node's final fate. Open is ignored, and a final fate is
// never changed: the first final answer is the one that counts.
func (u *Undo) Settle(node int, f Fate) {
	if node < 0 || node >= len(u.fates) || f == FateOpen || f == FateUndone || u.fates[node] != FateOpen {
		return
	}
	u.fates[node] = f
}

// Fail marks the attempt as failed: from now on every node that may hold
// its effect is to be undone.
func (u *Undo) Fail() { u.failed = true }

// Failed reports whether Fail was called.
func (u *Undo) Failed() bool { return u.failed }

// Take appends to dst the nodes to undo now (the attempt failed and their
// fate is FateHolds) and marks them undone, so each is returned once.
func (u *Undo) Take(dst []int) []int {
	if !u.failed {
		return dst
	}
	for i, f := range u.fates {
		if f == FateHolds {
			u.fates[i] = FateUndone
			dst = append(dst, i)
		}
	}
	return dst
}

// Settled reports whether every node's fate is final: no command of the
// attempt can take effect any more without the undo knowing of it.
func (u *Undo) Settled() bool {
	for _, f := range u.fates {
		if f == FateOpen {
			return false
		}
	}
	return true
}

// Fate returns node's fate.
func (u *Undo) Fate(node int) Fate { return u.fates[node] }
