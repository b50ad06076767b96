package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The clock check of a proxy compares each reading of a master's clock
// with its own earlier readings, and with the marker's count of steps
// back against the count it read before. A proxy that starts after a
// master's clock came forward has neither: it must take the master's own
// record of its clock found behind lately for a jump.

// The wall clocks of masters 0 and 1 are set back 20 s and A takes its
// lock through P0, whose readings see them set back (the marker counts
// the step back). P0 then stops (a deploy, a crash) and the clocks are
// set right again before any proxy reads them: A's lock expires there
// 20 s early. P1, started now, has no earlier reading of its own: it must
// take the master's latest reading found behind, 20 s back, for a jump.
func TestClockSetBackThenRightAgainWhileNoProxyRunsDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	servers, clocks := startRedisWithClocks(t, 3, 2)
	b := newBackInTime(t, servers)
	shiftClocks(t, clocks, -20*time.Second)
	b.acquire("clock-back-proxy-restarted")
	b.c.stopApp()
	shiftClocks(t, clocks, 20*time.Second)
	b.lostToNewProxy("the clocks were set right again")
}

// As above, but P0 goes on running: P1 starts just after the clocks are
// set right again and B's acquire through it comes before P0's next
// periodic check reads the clocks (and records the loss).
func TestClockSetBackThenRightAgainBeforeAProxyStartsDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	servers, clocks := startRedisWithClocks(t, 3, 2)
	b := newBackInTime(t, servers)
	shiftClocks(t, clocks, -20*time.Second)
	b.acquire("clock-back-proxy-joins")
	shiftClocks(t, clocks, 20*time.Second)
	b.lostToNewProxy("the clocks were set right again")
}

// Two proxies, P0 and P1, over the same masters, both counting them and
// both having read their clocks. The wall clocks of masters 0 and 1 are
// set back 1.2 s in steps of 15 ms, a grant through P0 after each (so P0
// reads them after every step, each reading less than 20 ms below the
// one before: the marker must add the steps up), A takes a 1 s lock through
// P0, and the clocks are set right again at once: A's lock expires there
// at once. P1 read the clocks before the first step and reads them next
// after the step forward, so only the marker's count can tell it: B's
// acquire through P1 comes before P0's next periodic check. Once the
// count moved, a proxy that did not see the steps takes them for a jump
// and the masters stop counting, which ends the run early. When P1's
// periodic check happens to read the clocks while they are back (it sees
// a jump with no step back counted), the run shows nothing: it is tried
// again.
func TestClockSetBackInSmallStepsThenRightAgainBetweenAnotherProxysReadings(t *testing.T) {
	waits(t)
	servers, clocks := startRedisWithClocks(t, 3, 2)
	b := newBackInTime(t, servers)
	p1 := startSecondProxyStrictApp(t, b.c)
	viaP0, viaP1 := b.c.client(2), proxyClient(t, p1.Addr(), 2)
	ctx := context.Background()
	shift := func(d time.Duration) { shiftClocks(t, clocks, d) }
	backCount := func() string {
		v, _ := b.c.direct[0].HGet(ctx, "redlock-proxy:marker", "back").Result()
		return v
	}
	clks := func() [2]string {
		var out [2]string
		for i := range out {
			out[i], _ = b.c.direct[i].HGet(ctx, "redlock-proxy:marker", "clk").Result()
		}
		return out
	}
	const step, steps, lockTTL = 15 * time.Millisecond, 80, time.Second
	for try := 0; try < 3; try++ {
		waitAllCount(t, b.c)
		waitAppCounts(t, p1)
		if ok, err := viaP1.SetNX(ctx, uniqueKey("other"), "C", time.Second).Result(); !ok || err != nil {
			t.Fatalf("a grant through P1 before the steps = %v, %v", ok, err)
		}
		jumps := p1.Pool().Health()[0].ClockJumps
		before := backCount()
		for i := 0; i < steps; i++ {
			was := clks()
			shift(-step)
			if ok, err := viaP0.SetNX(ctx, uniqueKey("step"), "C", time.Second).Result(); !ok || err != nil {
				// Refused: the steps added up were counted and a proxy
				// that did not see them took them as a jump, a loss
				// recorded before any lock could expire early.
				if backCount() == before {
					t.Fatalf("a grant through P0 after step %d = %v, %v, with no step back counted", i, ok, err)
				}
				t.Logf("the steps were counted at step %d (back %s, was %s): the masters stopped counting", i, backCount(), before)
				return
			}
			// The reply comes once a majority answered: the next step
			// waits until both shifted masters read their clocks.
			waitFor(t, time.Second, "the shifted masters to read their clocks", func() error {
				if now := clks(); now[0] == was[0] || now[1] == was[1] {
					return fmt.Errorf("clk %v, was %v", now, was)
				}
				return nil
			})
		}
		b.key = uniqueKey("clock-back-small-steps")
		start := time.Now()
		if ok, err := viaP0.SetNX(ctx, b.key, "A", lockTTL).Result(); !ok || err != nil {
			t.Fatalf("A's SET NX = %v, %v", ok, err)
		}
		b.heldUntil = start.Add(lockTTL - 100*time.Millisecond)
		shift(steps * step)
		if h := b.c.holders(b.key, "A"); len(h) != 1 || h[0] != 2 {
			t.Fatalf("after the clocks were set right again, A's lock is on masters %v; want only on master 2 (the test shows nothing)", h)
		}
		counted := backCount() != before
		if rivalGetsBefore(viaP1, b.key, b.heldUntil) {
			t.Fatalf("B got L through P1 while A's lock, taken through P0, was still valid (the clocks went back %v in steps of %v)", steps*step, step)
		}
		if counted || p1.Pool().Health()[0].ClockJumps == jumps {
			return
		}
		t.Logf("P1 read the clocks while they were back (try %d): again", try)
		time.Sleep(lockTTL)
	}
	t.Fatal("P1 read the clocks while they were back at every try: the test shows nothing")
}

// rivalGetsBefore has B try key through cl while A's lock is valid (until
// heldUntil), and reports whether B got it then.
func rivalGetsBefore(cl *redis.Client, key string, heldUntil time.Time) bool {
	for time.Now().Before(heldUntil.Add(-100 * time.Millisecond)) {
		if ok, _ := cl.SetNX(context.Background(), key, "B", backInTimeTTL).Result(); ok {
			return time.Now().Before(heldUntil)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return false
}

// shiftClocks moves every clock by d.
func shiftClocks(t *testing.T, clocks []*redisproc.Clock, d time.Duration) {
	t.Helper()
	for _, c := range clocks {
		if err := c.Shift(d); err != nil {
			t.Fatal(err)
		}
	}
}

// lostToNewProxy checks that masters 0 and 1 no longer hold L (the fault
// did what it should), then that B is refused through a proxy started now.
func (b *backInTime) lostToNewProxy(after string) {
	b.t.Helper()
	if h := b.c.holders(b.key, "A"); len(h) != 1 || h[0] != 2 {
		b.t.Fatalf("after %s, A's lock is on masters %v; want only on master 2 (the test shows nothing)", after, h)
	}
	if b.rivalGets(proxyClient(b.t, startSecondProxyStrict(b.t, b.c), 2)) {
		b.t.Fatalf("B got L through a proxy started after %s, while A's lock was still valid", after)
	}
}
