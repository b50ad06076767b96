package integration

import (
	"testing"
	"time"
)

// The clock check of a proxy compares each reading of a master's clock
// with its own earlier readings, and with the marker's count of steps
// back against the count it read before. A proxy that starts after a
// master's clock came forward has neither: these tests show what it then
// counts.

// The wall clocks of masters 0 and 1 are set back 20 s and A takes its
// lock through P0, whose readings see them set back (the marker counts
// the step back). P0 then stops (a deploy, a crash) and the clocks are
// set right again before any proxy reads them: A's lock expires there
// 20 s early. P1, started now, has no earlier reading of its own and
// takes the marker's count as it finds it, so it sees no jump.
func TestClockSetBackThenRightAgainWhileNoProxyRunsDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	servers, clocks := startRedisWithClocks(t, 3, 2)
	b := newBackInTime(t, servers)
	shift := func(d time.Duration) {
		for _, c := range clocks {
			if err := c.Shift(d); err != nil {
				t.Fatal(err)
			}
		}
	}
	shift(-20 * time.Second)
	b.acquire("clock-back-proxy-restarted")
	b.c.stopApp()
	shift(20 * time.Second)
	if h := b.c.holders(b.key, "A"); len(h) != 1 || h[0] != 2 {
		t.Fatalf("after the clocks were set right again, A's lock is on masters %v; want only on master 2 (the test shows nothing)", h)
	}
	p1 := startSecondProxyStrictApp(t, b.c)
	if b.rivalGets(proxyClient(t, p1.Addr(), 2)) {
		t.Fatalf("B got L through a proxy started after the clocks were set right again, while A's lock was still valid")
	}
}

// As above, but P0 goes on running: P1 starts just after the clocks are
// set right again and B's acquire through it comes before P0's next
// periodic check reads the clocks (and records the loss).
func TestClockSetBackThenRightAgainBeforeAProxyStartsDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	servers, clocks := startRedisWithClocks(t, 3, 2)
	b := newBackInTime(t, servers)
	shift := func(d time.Duration) {
		for _, c := range clocks {
			if err := c.Shift(d); err != nil {
				t.Fatal(err)
			}
		}
	}
	shift(-20 * time.Second)
	b.acquire("clock-back-proxy-joins")
	shift(20 * time.Second)
	p1 := startSecondProxyStrictApp(t, b.c)
	if b.rivalGets(proxyClient(t, p1.Addr(), 2)) {
		t.Fatalf("B got L through a proxy started after the clocks were set right again, while A's lock was still valid")
	}
}

// The plain step ahead, while no proxy runs: A takes its lock through P0,
// P0 stops, the wall clocks of masters 0 and 1 step ahead 30 s (A's lock
// expires there at once), and P1 starts.
func TestClockStepAheadWhileNoProxyRunsDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	servers, clocks := startRedisWithClocks(t, 3, 2)
	b := newBackInTime(t, servers)
	b.acquire("clock-ahead-proxy-restarted")
	b.c.stopApp()
	for _, c := range clocks {
		if err := c.Shift(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	if h := b.c.holders(b.key, "A"); len(h) != 1 || h[0] != 2 {
		t.Fatalf("after the step ahead, A's lock is on masters %v; want only on master 2 (the test shows nothing)", h)
	}
	p1 := startSecondProxyStrictApp(t, b.c)
	if b.rivalGets(proxyClient(t, p1.Addr(), 2)) {
		t.Fatalf("B got L through a proxy started after the step ahead, while A's lock was still valid")
	}
}
