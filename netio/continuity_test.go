package netio

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/faultnet"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// patientLink is a strict link whose periodic marker check never runs
// during a test: only the continuity checks that follow grants can see what
// happens to the master.
func patientLink(t *testing.T, addr string, hold time.Duration) *Link {
	t.Helper()
	return startLink(t, Options{Addr: addr, Restart: quorum.RestartRule{Hold: hold}, HealthInterval: time.Hour})
}

// grant sends SET key value NX PX 10000 as a grant (Checked) and
// returns its result.
func grant(t *testing.T, l *Link, key, value string) tagged {
	t.Helper()
	c := newCollector()
	l.SendWith(cmd("SET", key, value, "NX", "PX", "10000"), nil, c, 0, soon(), Checked)
	return c.next(t)
}

// grantCounts reports whether a grant on a fresh key counts.
func grantCounts(t *testing.T, l *Link) bool {
	t.Helper()
	x := grant(t, l, "probe:"+time.Now().Format(time.RFC3339Nano), "v")
	if x.r.Err != nil || !x.r.V.IsOK() {
		t.Fatalf("grant: %+v", x.r)
	}
	return x.r.Counts
}

// waitCounting waits for the link's first quarantine to end.
func waitCounting(t *testing.T, l *Link) {
	t.Helper()
	waitFor(t, "the master to count", func() bool { return grantCounts(t, l) })
}

// freshLinkQuarantined checks that a link that has seen nothing of the
// master (a proxy started now) keeps it out for about the hold from now,
// for the reason given.
func freshLinkQuarantined(t *testing.T, addr string, hold time.Duration, reason string) {
	t.Helper()
	from := time.Now()
	l := patientLink(t, addr, hold)
	h := l.Health()
	if h.QuarantinedUntil.Before(from.Add(hold/2)) || !strings.Contains(h.QuarantineReason, reason) {
		t.Fatalf("a proxy started after the loss: health %+v; want a quarantine for %q until about %v", h, reason, from.Add(hold))
	}
	if grantCounts(t, l) {
		t.Fatal("a proxy started after the loss counts the master")
	}
}

// A flush under a live connection: the very next grant does not count,
// with no periodic check in between, and every proxy keeps the master out.
func TestGrantAfterAFlushDoesNotCount(t *testing.T) {
	s := startRedis(t)
	hold := 3 * time.Second
	l := patientLink(t, s.Addr, hold)
	waitCounting(t, l)
	if x := grant(t, l, "lock", "first-holder"); !x.r.Counts {
		t.Fatalf("the first grant does not count: %+v", x.r)
	}
	if _, err := s.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	x := grant(t, l, "lock", "second-holder")
	if x.r.Err != nil || !x.r.V.IsOK() {
		t.Fatalf("SET NX after the flush: %+v", x.r)
	}
	if x.r.Counts {
		t.Fatalf("a grant right after a flush counts (health %+v)", l.Health())
	}
	waitFor(t, "the loss to be recorded", func() bool { return !l.Health().Unsure })
	if grantCounts(t, l) {
		t.Fatalf("the flushed master counts again at once (health %+v)", l.Health())
	}
	freshLinkQuarantined(t, s.Addr, hold, "replication marker")
}

// Eviction switched on and off again between two grants: the keys it
// evicted are gone, the policy is back to noeviction, and still the next
// grant does not count, nor does any proxy count the master for the hold.
func TestGrantAfterEvictionSwitchedOnAndOffDoesNotCount(t *testing.T) {
	s := startRedis(t)
	hold := 3 * time.Second
	l := patientLink(t, s.Addr, hold)
	waitCounting(t, l)
	if x := grant(t, l, "lock", "first-holder"); !x.r.Counts {
		t.Fatalf("the first grant does not count: %+v", x.r)
	}
	evictAndRevert(s, "volatile-ttl")
	if r, _ := s.Do("EXISTS", "lock"); r != "0" {
		t.Fatalf("the lock was not evicted (EXISTS %s): the test shows nothing", r)
	}
	x := grant(t, l, "lock", "second-holder")
	if x.r.Err != nil || !x.r.V.IsOK() {
		t.Fatalf("SET NX after the eviction: %+v", x.r)
	}
	if x.r.Counts {
		t.Fatalf("a grant right after an eviction counts (health %+v)", l.Health())
	}
	waitFor(t, "the loss to be recorded", func() bool { return !l.Health().Unsure })
	freshLinkQuarantined(t, s.Addr, hold, "evicted keys")
}

// An eviction followed by CONFIG RESETSTAT (which puts evicted_keys back to
// 0) is still seen: the commands processed went back.
func TestGrantAfterEvictionAndAStatisticsResetDoesNotCount(t *testing.T) {
	s := startRedis(t)
	l := patientLink(t, s.Addr, 3*time.Second)
	waitCounting(t, l)
	grant(t, l, "lock", "first-holder")
	// Only keys with a TTL go: the marker stays, so that only the count
	// of commands processed, which the reset takes back, shows it.
	evictAndRevert(s, "volatile-random")
	s.Do("CONFIG", "RESETSTAT")
	if x := grant(t, l, "lock", "second-holder"); x.r.Counts {
		t.Fatalf("a grant after an eviction hidden by CONFIG RESETSTAT counts: %+v", x.r)
	}
}

// evictAndRevert switches eviction on with policy, makes the master evict
// (a write over maxmemory 1), and switches it off again.
func evictAndRevert(s *redisproc.Server, policy string) {
	for _, args := range [][]string{
		{"CONFIG", "SET", "maxmemory-policy", policy},
		{"CONFIG", "SET", "maxmemory", "1"},
		{"SET", "filler", "x"}, // may be refused (OOM) once all is evicted
		{"CONFIG", "SET", "maxmemory", "0"},
		{"CONFIG", "SET", "maxmemory-policy", "noeviction"},
	} {
		s.Do(args...)
	}
}

// A failover and a failback done by hand under a live connection: the
// replica is promoted, the master resyncs from it (losing what it held
// since) and is promoted again. The next grant does not count, and a proxy
// that starts after the failback keeps the master out for the hold.
func TestGrantAfterAFailbackDoesNotCount(t *testing.T) {
	m := startRedis(t)
	hold := 3 * time.Second
	l := patientLink(t, m.Addr, hold)
	waitCounting(t, l)
	r, err := redisproc.StartReplica(t.TempDir(), m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	waitFor(t, "the replica to sync", func() bool { v, _ := r.Do("EXISTS", MarkerKey); return v == "1" })
	// A first replica gives the master a new replication id: the grant
	// that sees it does not count, and the marker check that follows finds
	// the data as it was.
	waitCounting(t, l)
	if err := r.Promote(); err != nil {
		t.Fatal(err)
	}
	if x := grant(t, l, "lock", "first-holder"); !x.r.Counts {
		t.Fatalf("a grant on the master before the failback does not count: %+v", x.r)
	}
	if err := m.Follow(r.Addr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old master to resync", func() bool {
		info, _ := m.Info("replication")
		return strings.Contains(info, "master_link_status:up")
	})
	if err := m.Promote(); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Do("EXISTS", "lock"); v != "0" {
		t.Fatal("the failed-back master still holds the lock: the test shows nothing")
	}
	if x := grant(t, l, "lock", "second-holder"); x.r.Err == nil && x.r.V.IsOK() && x.r.Counts {
		t.Fatalf("a grant on a failed-back master counts (health %+v)", l.Health())
	}
	waitFor(t, "the loss to be recorded", func() bool { h := l.Health(); return h.Up && !h.Unsure })
	freshLinkQuarantined(t, m.Addr, hold, "replication history changed")
}

// Another server answering at the master's address (a moved virtual IP, a
// DNS change) is not the master this proxy knew, whatever marker it holds.
func TestAnotherServerAtTheAddressIsQuarantined(t *testing.T) {
	a, b := startRedis(t), startRedis(t)
	hold := 3 * time.Second
	// b is a master other proxies already use: its marker is old.
	lb := patientLink(t, b.Addr, hold)
	waitCounting(t, lb)
	rl, err := faultnet.Listen(a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	l := patientLink(t, rl.Addr(), hold)
	waitCounting(t, l)
	moved := time.Now()
	rl.Retarget(b.Addr)
	waitFor(t, "the reconnect", func() bool { h := l.Health(); return h.Up && h.Connects >= 2 })
	h := l.Health()
	if h.QuarantinedUntil.Before(moved.Add(hold)) || !strings.Contains(h.QuarantineReason, "another server") {
		t.Fatalf("health %+v after the address moved to another master: want quarantined as replaced", h)
	}
}

// Replies reach their receivers in the order their commands were sent,
// though a grant's reply waits for the continuity check behind it: a
// command sent after the grant, in the same write, is answered after it.
// (A Cluster re-sends redirected commands in the order their replies
// arrive: a release that overtook its acquisition would run first on the
// new owner and leave the lock there.)
func TestRepliesKeepTheirOrderBehindAHeldGrant(t *testing.T) {
	s := startRedis(t)
	l := patientLink(t, s.Addr, 10*time.Millisecond) // a restart rule: grants are checked
	waitCounting(t, l)
	c := newCollector()
	const rounds = 50
	for r := 0; r < rounds; r++ {
		// Stopped, the master answers nothing: what is sent meanwhile
		// goes out in one write when it resumes.
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		base := r * 4
		l.Send(cmd("PING"), nil, c, base, soon())
		key := fmt.Sprintf("order:%d", r)
		l.SendWith(cmd("SET", key, "v", "NX", "PX", "10000"), nil, c, base+1, soon(), Checked)
		l.Send(cmd("GET", key), nil, c, base+2, soon())
		l.Send(cmd("DEL", key), nil, c, base+3, soon())
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			if x := c.next(t); x.tag != base+i || x.r.Err != nil {
				t.Fatalf("round %d: reply %d went to tag %d (%+v); want tag %d: replies out of their commands' order", r, i, x.tag, x.r, base+i)
			}
		}
	}
}

// The check's command carries the marker's findings and this proxy's
// count as the script reads them (continuity.lua's ARGV), and is encoded
// with no allocation once its buffer has grown: one goes with every write
// of grants.
func TestCheckEncoding(t *testing.T) {
	c := contState{replid: "8e3c4038da8c51ab96b3a3d4f45f94999d82968c", epoch: "e7", evicted: "*", cmds: 1234567, seq: 42}
	got := string(c.encode("redlock-proxy:marker", "px1", 300*time.Second))
	want := string(cmd("EVALSHA", contScript.Sha, "1", "redlock-proxy:marker", c.replid, "e7", "*", "1234567", "px1", "42", "300000"))
	if got != want {
		t.Fatalf("check encoded as\n%q\nwant\n%q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { c.encode("redlock-proxy:marker", "px1", 300*time.Second) }); n != 0 {
		t.Errorf("%.0f allocations per check", n)
	}
}
