package proxy

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Fencing numbers (FENCE key token). The number of a grant is agreed by the
// masters with single-decree Paxos (see quorum.Prepare): a prepare and, the
// first time, an accept, each one script run atomically on every master.
// The Paxos state of a grant lives in a hash beside the lock, which expires
// with it; each master also keeps a counter of the largest number it ever
// accepted. Ballots and numbers travel as 20-digit decimal strings, so the
// scripts compare them exactly as strings (Lua numbers lose precision
// above 2^53).

// Both keys share the lock key's slot, for a Redis Cluster backend (and the
// same bytes serve every kind of backend): the state is
// redlock-proxy:fence:{TAG}KEY and the counter redlock-proxy:fence-counter:{TAG},
// TAG naming the lock key's slot (keyslot.Tag), so each slot has its counter.
const (
	fenceStatePrefix   = "redlock-proxy:fence:"
	fenceCounterPrefix = "redlock-proxy:fence-counter:"
	fenceZero          = "00000000000000000000"
	fenceAttempts      = 4 // prepares before FENCE gives up under contention
)

// proxyBallotID tells this proxy's ballots from every other's.
var proxyBallotID = func() uint64 {
	var b [2]byte
	rand.Read(b[:])
	return uint64(binary.BigEndian.Uint16(b[:]))
}()

func pad20(n uint64) string { return fmt.Sprintf("%020d", n) }

// fenceOp is one FENCE command: prepares and accepts until the grant's
// number is known, the caller is found not to hold the lock, or contention
// outlasts fenceAttempts.
type fenceOp struct {
	e          *engine
	done       chan<- struct{}
	key, token []byte
	t1         time.Time

	mu       sync.Mutex
	accept   bool // the phase in flight: accept, else prepare
	ballot   uint64
	value    uint64
	attempts int
	answered int
	promises []quorum.Promise
	accepted []bool
	counts   []bool
	left     time.Duration // the majority's remaining PTTL, from the last prepare
	result   resp.Value
	// With an upgrade's veto (veto.go), the number is given only if the
	// veto holds the token too: its answer to a read, awaited before the
	// reply.
	vetoPending, vetoHolds, finished bool
}

func handleFence(c *client, args [][]byte) {
	if len(args[2]) > c.s.cfg.Limits.MaxToken {
		c.replyErr(msgTokenTooLong(len(args[2]), c.s.cfg.Limits.MaxToken))
		return
	}
	c.reserve(1)
	f := startFence(c, args[1], args[2])
	c.slots = append(c.slots, slot{fence: f, resp3: c.resp3.Load()})
}

// startFence starts a FENCE of key for token, which signals c's done when
// it is answered (one more in flight).
func startFence(c *client, key, token []byte) *fenceOp {
	n := c.s.eng.n
	f := &fenceOp{
		e: &c.s.eng, done: c.done, key: key, token: token,
		promises: make([]quorum.Promise, n), accepted: make([]bool, n), counts: make([]bool, n),
	}
	// The arguments may live in the client's read buffer: keep copies.
	f.key = append([]byte(nil), f.key...)
	f.token = append([]byte(nil), f.token...)
	f.t1 = time.Now()
	f.ballot = nextBallot(0)
	c.inflight++
	if f.e.veto {
		f.vetoPending = true
		f.e.be.Send(n, appendBoundedRead(nil, getScript, f.key, c.s.cfg.Limits.MaxToken), getScript, f, n, time.Now().Add(f.e.timeout), 0)
	}
	f.send(f.prepareCmd(), fencePrepare)
	return f
}

// nextBallot is a ballot above seen: the clock in ms above this proxy's id.
func nextBallot(seen uint64) uint64 {
	b := uint64(time.Now().UnixMilli())<<16 | proxyBallotID
	for b <= seen {
		b += 1 << 16
	}
	return b
}

func (f *fenceOp) keys(b []byte) []byte {
	b = resp.AppendBulkString(b, "3")
	b = resp.AppendBulk(b, f.key)
	b = resp.AppendBulk(b, keyslot.Companion(nil, fenceStatePrefix, f.key))
	b = resp.AppendBulkString(b, keyslot.InSlot(fenceCounterPrefix, keyslot.Of(f.key)))
	return resp.AppendBulk(b, f.token)
}

func (f *fenceOp) prepareCmd() []byte {
	b := resp.AppendArrayHeader(nil, 8)
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, fencePrepare.Sha)
	b = f.keys(b)
	return resp.AppendBulkString(b, pad20(f.ballot))
}

func (f *fenceOp) acceptCmd() []byte {
	b := resp.AppendArrayHeader(nil, 9)
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, fenceAccept.Sha)
	b = f.keys(b)
	b = resp.AppendBulkString(b, pad20(f.ballot))
	return resp.AppendBulkString(b, pad20(f.value))
}

// send starts a phase on every backend.
func (f *fenceOp) send(cmd []byte, sc *resp.Script) {
	deadline := time.Now().Add(f.e.timeout)
	for i := 0; i < f.e.n; i++ {
		f.e.be.Send(i, cmd, sc, f, i, deadline, netio.Checked)
	}
}

// Receive records one backend's answer to the phase in flight; the last
// answer decides what comes next.
func (f *fenceOp) Receive(node int, r netio.Result) {
	f.mu.Lock()
	if node == f.e.n {
		f.vetoPending = false
		f.vetoHolds = r.Err == nil && r.V.Kind == resp.KindBulk && string(r.V.Str) == string(f.token)
		signal := f.finished
		f.mu.Unlock()
		if signal {
			f.done <- struct{}{}
		}
		return
	}
	if f.accept {
		f.accepted[node] = r.Err == nil && r.V.Kind == resp.KindInt && r.V.Int == 1
		f.counts[node] = r.Counts
	} else {
		f.promises[node] = parsePromise(r)
	}
	f.answered++
	if f.answered < f.e.n {
		f.mu.Unlock()
		return
	}
	cmd, sc, finished := f.nextLocked()
	f.finished = finished
	wait := f.vetoPending
	f.mu.Unlock()
	if finished {
		if !wait {
			f.done <- struct{}{}
		}
		return
	}
	f.send(cmd, sc)
}

// nextLocked decides, once every backend answered a phase, the next phase
// or the result.
func (f *fenceOp) nextLocked() (cmd []byte, sc *resp.Script, finished bool) {
	f.answered = 0
	if f.accept {
		f.accept = false
		if quorum.Accepted(f.e.n, f.accepted, f.counts) {
			return f.finishLocked(f.value)
		}
		clear(f.accepted)
		return f.retryLocked(f.ballot)
	}
	res, v, left := quorum.Prepare(f.e.n, f.promises)
	f.left = left
	var higher uint64
	for _, p := range f.promises {
		higher = max(higher, p.Higher)
	}
	clear(f.promises)
	switch res {
	case quorum.NotHeld:
		f.result = resp.Nil
		return nil, nil, true
	case quorum.Chosen:
		return f.finishLocked(v)
	case quorum.Propose:
		f.value, f.accept = v, true
		return f.acceptCmd(), fenceAccept, false
	}
	return f.retryLocked(max(higher, f.ballot))
}

// finishLocked answers the number, or nil when the lock's validity ran out.
func (f *fenceOp) finishLocked(v uint64) ([]byte, *resp.Script, bool) {
	if f.left != quorum.NoExpiry && f.e.timing.RemainingValidity(f.left, time.Since(f.t1)) <= 0 {
		f.result = resp.Nil
	} else {
		f.result = resp.IntValue(int64(v))
	}
	return nil, nil, true
}

func (f *fenceOp) retryLocked(seen uint64) ([]byte, *resp.Script, bool) {
	f.attempts++
	if f.attempts >= fenceAttempts {
		f.result = resp.ErrorValue(msgFenceContention)
		return nil, nil, true
	}
	f.ballot = nextBallot(seen)
	return f.prepareCmd(), fencePrepare, false
}

// final is the reply as it leaves at now, after the done signal. The
// lock's validity is judged again here, as a grant's is: a number whose
// reply waited behind slower commands of the same pipeline until the
// validity ran out is answered nil.
func (f *fenceOp) final(now time.Time) resp.Value {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.result.Kind == resp.KindInt && f.left != quorum.NoExpiry && f.e.timing.RemainingValidity(f.left, now.Sub(f.t1)) <= 0 {
		f.result = resp.Nil
	}
	if f.result.Kind == resp.KindInt && f.e.veto && !f.vetoHolds {
		f.result = resp.Nil // the old Redis does not hold the token: not a grant old clients respect
	}
	if f.e.stats != nil {
		result := ResultOK
		switch f.result.Kind {
		case resp.KindNil:
			result = ResultRefused
		case resp.KindError:
			result = ResultNoQuorum
		}
		f.e.stats.decided("fence", result, time.Since(f.t1))
	}
	return f.result
}

// parsePromise reads a prepare's answer.
func parsePromise(r netio.Result) quorum.Promise {
	if r.Err != nil || r.V.Kind != resp.KindArray || len(r.V.Elems) == 0 {
		return quorum.Promise{}
	}
	e := r.V.Elems
	p := quorum.Promise{Answered: true, Counts: r.Counts}
	if e[0].Int != 1 || len(e) != 8 {
		return p
	}
	num := func(v resp.Value) uint64 {
		n, _ := strconv.ParseUint(string(v.Str), 10, 64)
		return n
	}
	p.Holds = true
	p.Remaining = time.Duration(e[1].Int) * time.Millisecond
	if e[1].Int < 0 {
		p.Remaining = quorum.NoExpiry
	}
	p.Promised = e[2].Int == 1
	p.Higher = num(e[3])
	p.AccBallot, p.AccValue = num(e[4]), num(e[5])
	p.Counter = num(e[6])
	p.NowMs = e[7].Int
	return p
}
