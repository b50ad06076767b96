package netio

import (
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// logBuffer collects a link's log lines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (w *logBuffer) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func (w *logBuffer) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.String()
}

func startGroup(t *testing.T, name string) *redisproc.Group {
	t.Helper()
	g, err := redisproc.StartGroup(t.TempDir(), name, redisproc.GroupOptions{})
	if err != nil {
		t.Fatalf("Sentinel group: %v (run ./test.sh, which installs redis-server and redis-sentinel)", err)
	}
	t.Cleanup(g.Stop)
	return g
}

// sentinelLink connects a link to the master the Sentinels at addrs name,
// under the strict rule with the given hold.
func sentinelLink(t *testing.T, addrs []string, name string, hold time.Duration, log *logBuffer) *Link {
	t.Helper()
	o := Options{Addr: "sentinel://" + name, Restart: quorum.RestartRule{Hold: hold}, HealthInterval: 50 * time.Millisecond,
		Sentinel: &SentinelOptions{Addrs: addrs, Name: name, Interval: 100 * time.Millisecond, Lease: time.Second}}
	if log != nil {
		o.Logger = slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return startLink(t, o)
}

func sentinelAddrs(g *redisproc.Group) []string {
	var out []string
	for _, s := range g.Sentinels {
		out = append(out, s.Addr)
	}
	return out
}

// Two links (two proxies) follow a SENTINEL FAILOVER to the promoted
// replica: the old master's votes stop counting at the switch, though it
// still says it is a master for seconds; the new one is quarantined as a
// promoted replica by both, until the same instant (not as "another server
// at the address", which the second link to reach it would record anew),
// and the switch is logged once with its cost.
func TestSentinelLinkFollowsAFailover(t *testing.T) {
	g := startGroup(t, "locks-a")
	var log, log2 logBuffer
	hold := 1500 * time.Millisecond
	l := sentinelLink(t, sentinelAddrs(g), "locks-a", hold, &log)
	l2 := sentinelLink(t, sentinelAddrs(g), "locks-a", hold, &log2)
	old := g.Servers[0]
	if h := l.Health(); h.Addr != old.Addr || h.Sentinel == nil || h.Sentinel.Agree != 3 || h.Sentinel.Master != old.Addr {
		t.Fatalf("health %+v (sentinel %+v): want the first master, named by all three Sentinels", h, h.Sentinel)
	}
	waitFor(t, "the fresh master's quarantine to end", func() bool { return counts(t, l) })

	_, to, err := g.Failover()
	if err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	waitFor(t, "the links to follow", func() bool {
		h, h2 := l.Health(), l2.Health()
		return h.Up && h.Addr == to.Addr && h2.Up && h2.Addr == to.Addr
	})
	if followed := time.Since(switched); followed > time.Second {
		t.Errorf("the link followed %v after every Sentinel named the new master", followed)
	}
	if info, _ := old.Info("replication"); !strings.Contains(info, "role:master") {
		t.Logf("the old master is a replica already; the test did not see it answer as a master")
	}
	h := l.Health()
	if !strings.Contains(h.QuarantineReason, "promoted replica") || !h.QuarantinedUntil.After(switched.Add(hold-200*time.Millisecond)) {
		t.Fatalf("after the switch: quarantined until %v (switched at %v) for %q; want the hold, for a promotion", h.QuarantinedUntil, switched, h.QuarantineReason)
	}
	if counts(t, l) || counts(t, l2) {
		t.Fatalf("the promoted master counted at once")
	}
	time.Sleep(200 * time.Millisecond) // a few periodic marker checks
	h, h2 := l.Health(), l2.Health()
	if d := h.QuarantinedUntil.Sub(h2.QuarantinedUntil).Abs(); d > 50*time.Millisecond || h.QuarantineReason != h2.QuarantineReason {
		t.Fatalf("the two links decide apart: until %v for %q, and %v for %q", h.QuarantinedUntil, h.QuarantineReason, h2.QuarantinedUntil, h2.QuarantineReason)
	}
	if h.Sentinel.Switches != 1 || h.Sentinel.From != old.Addr || h.Sentinel.Master != to.Addr {
		t.Fatalf("sentinel health %+v: want one switch from %s to %s", h.Sentinel, old.Addr, to.Addr)
	}
	waitFor(t, "the promoted master's quarantine to end", func() bool { return counts(t, l) })
	line := "backend locks-a: Sentinel switched master " + old.Addr + " -> " + to.Addr + "; it counts in "
	if n := strings.Count(log.String(), line); n != 1 {
		t.Fatalf("the switch was logged %d times (want once, %q):\n%s", n, line, log.String())
	}
	if all := log.String() + log2.String(); strings.Contains(all, "another server") {
		t.Fatalf("the new master was taken for another server at the address:\n%s", all)
	}
}

// One Sentinel of three that names another master, listed first, is
// outvoted: the link goes to the master the other two name, not to the
// liar's, which is a master too (a link that took the first answer would
// count it). With only the liar and one honest Sentinel answering, no
// address has a majority of three, and the link counts neither.
func TestSentinelThatLiesIsOutvoted(t *testing.T) {
	g := startGroup(t, "locks-b")
	other := startRedis(t) // a master, as an old master cut off from the Sentinels would still be
	liar, err := redisproc.StartLiar(other.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(liar.Close)
	addrs := append([]string{liar.Addr()}, sentinelAddrs(g)[:2]...)
	var log logBuffer
	l := sentinelLink(t, addrs, "locks-b", time.Millisecond, &log)
	time.Sleep(300 * time.Millisecond)
	if h := l.Health(); h.Addr != g.Servers[0].Addr || h.Sentinel.Agree != 2 || !counts(t, l) {
		t.Fatalf("health %+v (sentinel %+v): want the master the two honest Sentinels name, counting", h, h.Sentinel)
	}

	if err := g.Sentinels[1].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Sentinels[1].Resume() })
	waitFor(t, "the link to stop counting", func() bool { return !l.Health().Counts(time.Now()) })
	if h := l.Health(); h.Sentinel.Master != g.Servers[0].Addr || h.Sentinel.Answers == "" {
		t.Fatalf("sentinel health %+v: want the last majority's master kept, and the answers of the round without one", h.Sentinel)
	}
	time.Sleep(500 * time.Millisecond)
	if l.Health().Addr == other.Addr {
		t.Fatalf("the link went to the liar's master")
	}
	if !strings.Contains(log.String(), "no majority of its 3 Sentinels names a master") {
		t.Fatalf("the round without a majority was not logged:\n%s", log.String())
	}
	g.Sentinels[1].Resume()
	waitFor(t, "the link to count again", func() bool { return l.Health().Counts(time.Now()) })
}

// With every Sentinel unreachable (stopped), the master's votes stop
// counting within the lease although it answers as before: the proxy
// cannot tell a Sentinel outage from a failover it does not see. They
// count again once the Sentinels answer.
func TestSentinelsUnreachableStopTheVoteWithinTheLease(t *testing.T) {
	g := startGroup(t, "locks-c")
	l := sentinelLink(t, sentinelAddrs(g), "locks-c", time.Millisecond, nil)
	waitFor(t, "the master to count", func() bool { return counts(t, l) })
	for _, s := range g.Sentinels {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Resume() })
	}
	paused := time.Now()
	waitFor(t, "the votes to stop counting", func() bool { return !counts(t, l) })
	if took := time.Since(paused); took > time.Second+300*time.Millisecond {
		t.Fatalf("the votes stopped counting %v after the Sentinels stopped answering; the lease is 1s", took)
	}
	if !l.Health().Up {
		t.Fatalf("the link dropped a master that answers")
	}
	for _, s := range g.Sentinels {
		s.Resume()
	}
	waitFor(t, "the votes to count again", func() bool { return counts(t, l) })
}

// A switch is logged once, against the master it switched to: a dial to
// an address a newer round has replaced does not take it, and a new
// config epoch at the same master is worded as such.
func TestSwitchIsLoggedAgainstTheMasterItSwitchedTo(t *testing.T) {
	l := NewLink(Options{Addr: "sentinel://locks-a", Sentinel: &SentinelOptions{Addrs: []string{"127.0.0.1:1"}, Name: "locks-a"}})
	defer l.Close()
	now := time.Now()
	l.applyRound(round{at: now, master: "10.0.0.1:6379", epoch: 1, agree: 1, reachable: 1})
	// The Sentinels move to a new epoch before they name the promoted
	// replica, then name it.
	l.applyRound(round{at: now, master: "10.0.0.1:6379", epoch: 2, agree: 1, reachable: 1})
	l.applyRound(round{at: now, master: "10.0.0.2:6379", epoch: 2, agree: 1, reachable: 1})
	l.mu.Lock()
	stale := l.switchedLocked("10.0.0.1:6379") // a dial to the old master, started before the last round, failed
	from := l.switchedLocked("10.0.0.2:6379")  // the new master's connection
	again := l.switchedLocked("10.0.0.2:6379")
	l.mu.Unlock()
	if stale != "" {
		t.Errorf("a dial to the replaced master took the switch (from %q)", stale)
	}
	if from != "10.0.0.1:6379" || again != "" {
		t.Errorf("the new master's connection took %q, then %q; want the old master once", from, again)
	}
	if got := l.switchLine(from, "10.0.0.2:6379"); got != "backend locks-a: Sentinel switched master 10.0.0.1:6379 -> 10.0.0.2:6379" {
		t.Errorf("switch line %q", got)
	}
	if got := l.switchLine("10.0.0.2:6379", "10.0.0.2:6379"); strings.Contains(got, "->") || !strings.Contains(got, "new config epoch") {
		t.Errorf("an epoch-only switch is worded %q", got)
	}
}
