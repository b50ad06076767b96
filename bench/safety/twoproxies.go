package safety

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Two proxies at unequal distances from the masters, and holders that
// extend through both: a connection pool spread over proxies behind a load
// balancer does this. The last proxy slot reaches the masters through
// relays of its own (Cluster.SlowRelays), delayed by a few milliseconds;
// slot 0 through the shared relays. A holder extends to a short TTL
// through the slow proxy, then at once to a long one through the fast
// proxy: whatever the slow proxy still sends for its extend reaches the
// masters after the fast proxy's extend, and must not shorten the lock
// the later extend set.

// twoProxyIDs are the client ids of the two-proxy holders.
const twoProxyIDs = 50000

// scheduleTwoProxies returns a schedule that runs holders extending
// through both proxies (slot 0, and the last slot, on the slow path) and
// sets the slow path's delay to 1-6ms each way, changing every 0.5-1.5s,
// until the faults' deadline.
//
// With lateStep (the control), each holder also does what a proxy whose
// extend ends with an unconditional second step did: right after its long
// extend through the fast proxy succeeded, it sets the short TTL of the
// extend before on every master directly (a compare-and-PEXPIRE), as
// that step arriving late would. The lock then ends long before the
// holder's validity, and the contenders take it.
func scheduleTwoProxies(holders int, lateStep bool) func(ctx context.Context, e *Env) {
	return func(ctx context.Context, e *Env) {
		if len(e.C.SlowRelays) == 0 {
			e.Problemf("the two-proxy holders need a cluster with a slow path")
			return
		}
		slow := e.C.NumProxies() - 1
		hctx, stop := context.WithDeadline(ctx, e.Deadline)
		defer stop()
		var late func(key, token string, ttl time.Duration)
		if lateStep {
			var mu sync.Mutex
			var rdbs []*redis.Client
			for i := 0; i < e.C.NumBackends(); i++ {
				rdbs = append(rdbs, direct(e.C.Server(i).Addr))
			}
			defer func() {
				for _, r := range rdbs {
					r.Close()
				}
			}()
			late = func(key, token string, ttl time.Duration) {
				mu.Lock() // one client per master, shared by the holders
				defer mu.Unlock()
				time.Sleep(2 * time.Millisecond) // the slow path's delay
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				defer cancel()
				for _, r := range rdbs {
					r.Eval(ctx, lateStepScript, []string{key}, token, ttl.Milliseconds())
				}
			}
		}
		var wg sync.WaitGroup
		for h := 0; h < holders; h++ {
			cl := NewClient(twoProxyIDs+h, 0, e.C, e.H, uint64(e.Intn(1<<30)))
			cl.ExtendsVia(slow)
			wg.Add(1)
			go func() { // ends at the faults' deadline; waited for below
				defer wg.Done()
				defer cl.Close()
				cl.TwoProxyLoop(hctx, e.Workload, late)
			}()
		}
		if lateStep {
			e.Logf("%d holders extend through proxy 0 and proxy %d (the slow path), each long extend followed by a late second step sent to the masters directly", holders, slow)
		} else {
			e.Logf("%d holders extend through proxy 0 and proxy %d (the slow path)", holders, slow)
		}
		for ok := true; ok; ok = sleepCtx(hctx, e.Between(500*time.Millisecond, 1500*time.Millisecond)) {
			d := e.Between(time.Millisecond, 6*time.Millisecond)
			for _, r := range e.C.SlowRelays {
				r.Delay(d)
			}
			e.Logf("proxy %d's links to the masters delayed by %v each way", slow, d.Round(100*time.Microsecond))
		}
		stop()
		wg.Wait()
		for _, r := range e.C.SlowRelays {
			r.Delay(0)
		}
		e.Logf("proxy %d's links healed", slow)
	}
}

// lateStepScript is the second step the control emulates: the TTL of an
// earlier extend set again on a key that still holds the token, with no
// regard to what a later command set.
const lateStepScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end return 0`

// TwoProxyLoop is a holder that extends through two proxies in turn:
// acquire (through its own proxy); then one to three times: after a short
// while, extend to a short TTL (150-300ms) through the second proxy (see
// ExtendsVia), then at once to a long one (0.8-1.5s) through its own;
// then hold on past the short TTL, do the guarded update and release. Its
// validity follows the last extend (an extend sets the TTL it asks for):
// after a short extend it is short, after a long one long; an extend whose
// outcome is unknown may have set its TTL, so the holder keeps the shorter
// of the two. late, when set, runs after every long extend that succeeded
// (the control's late step).
func (c *Client) TwoProxyLoop(ctx context.Context, w WorkloadConfig, late func(key, token string, ttl time.Duration)) {
	for ctx.Err() == nil {
		key := w.Keys[c.rng.IntN(len(w.Keys))]
		l, out := c.Acquire(key, w.ttl(c.rng))
		if out != OK {
			sleepCtx(ctx, time.Duration(c.rng.Int64N(int64(w.RetryMax)+1)))
			continue
		}
		for n := 1 + c.rng.IntN(3); n > 0 && ctx.Err() == nil; n-- {
			sleepCtx(ctx, 10*time.Millisecond+time.Duration(c.rng.Int64N(int64(50*time.Millisecond))))
			if !l.Valid(time.Now(), w.Margin) {
				break
			}
			short := (150*time.Millisecond + time.Duration(c.rng.Int64N(int64(150*time.Millisecond)))).Round(time.Millisecond)
			l, _ = c.extendKeeping(l, short, true)
			if !l.Valid(time.Now(), w.Margin) {
				break
			}
			long := (800*time.Millisecond + time.Duration(c.rng.Int64N(int64(700*time.Millisecond)))).Round(time.Millisecond)
			var got Outcome
			if l, got = c.extendKeeping(l, long, false); got == OK && late != nil {
				late(key, l.Token, short)
			}
		}
		// Past the short TTL: a lock that a late step shortened would be
		// taken by a contender meanwhile.
		sleepCtx(ctx, min(300*time.Millisecond+time.Duration(c.rng.Int64N(int64(200*time.Millisecond))), time.Until(l.ValidUntil)-w.Margin))
		c.Work(l, w.Think, w.Margin)
		c.Release(l)
	}
}

// extendKeeping extends l to ttl, through the second proxy when second is
// set, and returns the lease the holder may rely on after it: the new one
// when granted; the old one when refused; when the outcome is unknown, the
// old one cut to what the extend, had it run, would have left.
func (c *Client) extendKeeping(l Lease, ttl time.Duration, second bool) (Lease, Outcome) {
	t0 := time.Now()
	var next Lease
	var out Outcome
	if second {
		next, out = c.ExtendVia(l, ttl)
	} else {
		next, out = c.Extend(l, ttl)
	}
	switch out {
	case OK:
		return next, out
	case Unknown:
		if v := t0.Add(ttl - Drift(ttl)); v.Before(l.ValidUntil) {
			l.ValidUntil = v
		}
	}
	return l, out
}
