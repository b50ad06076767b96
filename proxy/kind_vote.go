package proxy

import (
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// ruleVote is a script the classifier refused, run under the vote policy
// (startVote): every answer is a vote for itself, and the client gets the
// reply a majority of counted backends gave, or an error when every
// backend answered and no majority agree. Since it may take a free key,
// its grants are checked for continuity like an acquire's.
var ruleVote rules = voteRules{}

type voteRules struct{ plain }

func (voteRules) effects(*op) effect { return effTakes | effWrites }

func (voteRules) vote(*op, resp.Value) quorum.Vote { return quorum.Granted }

func (voteRules) decide(o *op) bool {
	if v, _, ok := o.agreedLocked(); ok {
		o.result = v
		return o.answered(true)
	}
	if !o.tally.Done() {
		return false
	}
	o.result = resp.ErrorValue(msgNoAgreedReply)
	return o.answered(true)
}

// agreedLocked returns a reply that at least a majority of counted
// backends gave, with its vote, if there is one.
func (o *op) agreedLocked() (resp.Value, quorum.Vote, bool) {
	m := quorum.Majority(o.e.n)
	for i := range o.replies {
		v, counted := o.tally.Vote(i)
		if v == quorum.Pending || v == quorum.Unknown || !counted {
			continue
		}
		agree := 0
		for j := range o.replies {
			if w, c := o.tally.Vote(j); c && w != quorum.Pending && w != quorum.Unknown && o.replies[j].Equal(o.replies[i]) {
				agree++
			}
		}
		if agree >= m {
			return o.replies[i], v, true
		}
	}
	return resp.Value{}, quorum.Pending, false
}
