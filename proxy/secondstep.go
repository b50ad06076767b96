package proxy

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The extend's second step. An extend that sets a TTL (PEXPIRE of a
// token's key, most libraries' extend) would shorten a lock if it ran as
// asked on a master where the lock has more left: another proxy's later
// extend, or the same holder's. So it runs in two steps:
//
//  1. The first step (the reference script, with a nonce) re-arms each key
//     that holds the token to at least the TTL asked, never shorter, and
//     records the nonce in the key's companion. Every later write of the
//     key (another extend, a release, an acquisition) clears the nonce.
//  2. Once the extend succeeded and its reply leaves (final), the second
//     step (spec.Class.AppendSecondStep) sets the TTL asked on each key that
//     still holds the token and the nonce, so the lock ends as one Redis
//     would leave it.
//
// Invariant: a second step never undoes what a later command did. It is
// sent before the reply leaves, on the links the client's next command
// will follow, so on each master it runs before any command the client
// sends after the reply; a command that reached a master earlier (through
// another proxy) cleared the nonce, and the second step does nothing
// there. It goes only to the masters whose first step was granted before
// the reply (grantedNodesLocked), and the reply waits until every master
// answered its first step or timed out (readyLocked): a first step still
// on its way could run after the client's next command, and a second
// step behind it would then shorten what that command set.
//
// A master that misses the second step keeps the longer TTL, which only
// delays the next holder, so its answer is not awaited.

// grantedNodesLocked lists the backends whose grant arrived before the
// reply leaves: the only ones an extend's second step may go to. A
// backend whose first step is still on its way may run it after the
// client's next command; its second step would then shorten what that
// command set, so it keeps the longer TTL.
func (o *op) grantedNodesLocked() []int {
	var out []int
	for i := 0; i < o.e.n; i++ {
		if v, _ := o.tally.Vote(i); v == quorum.Granted {
			out = append(out, i)
		}
	}
	if o.e.veto && o.vetoVote == quorum.Granted {
		out = append(out, o.e.n)
	}
	return out
}

// sendSecondStep sends an extend's second step to nodes. Its answers are
// not needed: a backend that misses it keeps the longer TTL, which only
// delays the next holder.
func (o *op) sendSecondStep(nodes []int, now time.Time) {
	for _, n := range nodes {
		o.e.be.Send(n, o.secondStep, spec.SecondStep(), netio.Discard, n, now.Add(o.e.timeout), 0)
	}
}

// nonceSeq and nonceBase make extend nonces unique across proxies and
// calls.
var (
	nonceSeq  atomic.Uint64
	nonceBase = func() string {
		var b [8]byte
		rand.Read(b[:])
		return hex.EncodeToString(b[:])
	}()
)

// newNonce returns a value no other extend of any proxy uses.
func newNonce() string {
	return nonceBase + strconv.FormatUint(nonceSeq.Add(1), 36)
}
