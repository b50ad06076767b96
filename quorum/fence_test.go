package quorum

import (
	"math/rand/v2"
	"testing"
	"time"
)

// fenceMaster models one master as the fencing scripts see it: the lock
// (the token it holds), the Paxos state of the current grant (which lives
// beside the lock), its counter and its clock.
type fenceMaster struct {
	token       string // the lock's value here; "" when it does not hold the key
	stateToken  string // the grant the state below belongs to
	promised    uint64
	accB, accV  uint64
	counter     uint64
	quarantined bool  // restarted less than the hold ago: its votes do not count
	skewMs      int64 // its clock's offset: clocks agree to within the hold
}

func (m *fenceMaster) prepare(token string, b uint64, nowMs int64) Promise {
	p := Promise{Answered: true, Counts: !m.quarantined, NowMs: nowMs + m.skewMs}
	if m.token != token {
		return p
	}
	p.Holds, p.Remaining = true, time.Second
	if m.stateToken != token {
		m.stateToken, m.promised, m.accB, m.accV = token, 0, 0, 0
	}
	if b <= m.promised {
		p.Higher = m.promised
		return p
	}
	m.promised = b
	p.Promised, p.AccBallot, p.AccValue, p.Counter = true, m.accB, m.accV, m.counter
	return p
}

func (m *fenceMaster) accept(token string, b, v uint64) bool {
	if m.token != token || m.stateToken != token || b < m.promised {
		return false
	}
	m.promised, m.accB, m.accV = b, b, v
	m.counter = max(m.counter, v)
	return true
}

// proposer runs FENCE for one grant as the proxy does, step by step, so
// that several can interleave; lossy drops requests and answers.
type proposer struct {
	id      uint64
	round   uint64
	b       uint64 // the ballot of the prepare in progress
	token   string
	phase   int // 0 prepare, 1 accept, 2 done
	value   uint64
	result  uint64 // the reply: 0 for nil
	retries int
}

func (p *proposer) ballot() uint64 { return p.round<<8 | p.id }

func (p *proposer) step(ms []*fenceMaster, rng *rand.Rand, loss float64, nowMs int64) {
	n := len(ms)
	switch p.phase {
	case 0:
		ps := make([]Promise, n)
		b := p.ballot()
		p.b = b
		higher := uint64(0)
		for i, m := range ms {
			if rng.Float64() < loss {
				continue // the request is lost
			}
			pr := m.prepare(p.token, b, nowMs)
			if rng.Float64() < loss {
				continue // the answer is lost
			}
			ps[i] = pr
			higher = max(higher, pr.Higher)
		}
		res, v, _ := Prepare(n, ps)
		if res == Retry && higher>>8 >= p.round {
			p.round = higher>>8 + 1
		}
		switch res {
		case NotHeld:
			p.phase = 2
		case Chosen:
			p.result, p.phase = v, 2
		case Propose:
			p.value, p.phase = v, 1
		case Retry:
			p.round++
			p.giveUp()
		}
	case 1:
		acc, counts := make([]bool, n), make([]bool, n)
		for i, m := range ms {
			if rng.Float64() < loss {
				continue
			}
			a := m.accept(p.token, p.b, p.value)
			if rng.Float64() < loss {
				continue
			}
			acc[i], counts[i] = a, !m.quarantined
		}
		if Accepted(n, acc, counts) {
			p.result, p.phase = p.value, 2
			return
		}
		p.round++
		p.phase = 0
		p.giveUp()
	}
}

func (p *proposer) giveUp() {
	p.retries++
	if p.retries > 20 {
		p.phase = 2 // the proxy answers an error after a few retries
	}
}

// Against the model: every FENCE of one grant that answers a number
// answers the same one, whatever the interleaving of concurrent calls and
// lost messages; and every number of a later grant (made after the earlier
// one's validity ended) is larger, also across masters that restart and
// lose their counters (then the clock floor carries the order).
func TestFenceNumbersAgainstAModel(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for trial := 0; trial < 2000; trial++ {
		n := 3 + 2*rng.IntN(2)
		ms := make([]*fenceMaster, n)
		for i := range ms {
			ms[i] = &fenceMaster{skewMs: rng.Int64N(1500)}
		}
		nowMs := int64(1_700_000_000_000) + rng.Int64N(1000)
		const holdMs = 2000
		loss := []float64{0, 0.1, 0.3}[rng.IntN(3)]
		var prevMax uint64
		for g := 0; g < 12; g++ {
			token := string(rune('a' + g))
			// The grant: a majority (at least) of masters hold the token.
			for i, m := range ms {
				m.token = ""
				if i < Majority(n) || rng.IntN(2) == 0 {
					m.token = token
				}
			}
			// Concurrent FENCE calls through several proxies.
			ps := make([]*proposer, 1+rng.IntN(3))
			for i := range ps {
				ps[i] = &proposer{id: uint64(i + 1), round: 1 + uint64(rng.IntN(3)), token: token}
			}
			for busy := true; busy; {
				busy = false
				for _, i := range rng.Perm(len(ps)) {
					if ps[i].phase < 2 {
						ps[i].step(ms, rng, loss, nowMs)
						busy = true
					}
				}
				nowMs += int64(rng.IntN(2))
			}
			var got uint64
			for _, p := range ps {
				if p.result == 0 {
					continue
				}
				if got != 0 && p.result != got {
					t.Fatalf("trial %d grant %d: two FENCE calls of one grant answered %d and %d", trial, g, got, p.result)
				}
				got = p.result
				if p.result <= prevMax {
					t.Fatalf("trial %d grant %d: number %d is not above the earlier grants' %d", trial, g, p.result, prevMax)
				}
			}
			if got > prevMax {
				prevMax = got
			}
			// The grant's validity ends; time passes. Sometimes a minority of
			// masters (or, with the floor, any number) restarts empty: it sits
			// out the hold, during which the clock moves on.
			nowMs += 1 + rng.Int64N(50)
			for _, m := range ms {
				m.quarantined = false
			}
			if rng.IntN(4) == 0 {
				for _, i := range rng.Perm(n)[:1+rng.IntN(n)] {
					*ms[i] = fenceMaster{quarantined: rng.IntN(2) == 0, skewMs: ms[i].skewMs}
				}
				nowMs += holdMs
			}
		}
	}
}

// A control: numbers taken from one proxy's own counter, without reading a
// majority, are not ordered across proxies. The model catches it.
func TestFenceControlLocalCounterIsNotMonotonic(t *testing.T) {
	local := map[int]uint64{}
	var prev uint64
	broke := false
	for g := 0; g < 10; g++ {
		proxy := g % 2 // grants alternate between two proxies
		local[proxy]++
		if local[proxy] <= prev {
			broke = true
		}
		prev = local[proxy]
	}
	if !broke {
		t.Fatal("the control did not break: the check cannot see a non-monotonic numbering")
	}
}

func TestPrepareNeedsAMajorityOfCountedHolders(t *testing.T) {
	held := Promise{Answered: true, Counts: true, Holds: true, Promised: true, Remaining: time.Second, NowMs: 1}
	notCounted := held
	notCounted.Counts = false
	if res, _, _ := Prepare(3, []Promise{held, notCounted, {}}); res != NotHeld {
		t.Fatalf("one counted holder of three: %v, want NotHeld", res)
	}
	if res, v, _ := Prepare(3, []Promise{held, held, {}}); res != Propose || v != 1<<FenceShift {
		t.Fatalf("two fresh promises: %v %d, want Propose %d", res, v, 1<<FenceShift)
	}
	acc := held
	acc.AccBallot, acc.AccValue = 7, 99
	if res, v, _ := Prepare(3, []Promise{acc, acc, held}); res != Chosen || v != 99 {
		t.Fatalf("a majority accepted ballot 7: %v %d, want Chosen 99", res, v)
	}
	if res, v, _ := Prepare(3, []Promise{acc, held, held}); res != Propose || v != 99 {
		t.Fatalf("one accepted ballot 7: %v %d, want Propose 99", res, v)
	}
	refused := held
	refused.Promised, refused.Higher = false, 50
	if res, _, _ := Prepare(3, []Promise{held, refused, refused}); res != Retry {
		t.Fatalf("a majority promised a higher ballot: %v, want Retry", res)
	}
}
