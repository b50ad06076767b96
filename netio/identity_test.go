package netio

import (
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// strictLink connects a link under the strict rule with the given hold.
func strictLink(t *testing.T, addr string, hold time.Duration) *Link {
	t.Helper()
	return startLink(t, Options{Addr: addr, Restart: quorum.RestartRule{Hold: hold}, HealthInterval: 50 * time.Millisecond})
}

// counts sends a PING and reports whether its reply counts.
func counts(t *testing.T, l *Link) bool {
	t.Helper()
	c := newCollector()
	l.Send(cmd("PING"), nil, c, 0, soon())
	x := c.next(t)
	if x.r.Err != nil {
		t.Fatalf("PING: %v", x.r.Err)
	}
	return x.r.Counts
}

// A fresh master (no marker, just started) does not count for the hold,
// under the strict rule, from the first reply on; then it does.
func TestStrictRuleFreshMasterWaits(t *testing.T) {
	s := startRedis(t)
	hold := 1500 * time.Millisecond
	start := time.Now()
	l := strictLink(t, s.Addr, hold)
	if counts(t, l) {
		t.Fatalf("a fresh master counted at once under the strict rule (health %+v)", l.Health())
	}
	h := l.Health()
	if h.QuarantinedUntil.Before(start.Add(hold)) || h.QuarantineReason == "" {
		t.Fatalf("health %+v: want a quarantine until at least %v with a reason", h, start.Add(hold))
	}
	waitFor(t, "the quarantine to end", func() bool { return counts(t, l) })
	if late := time.Since(h.QuarantinedUntil); late > time.Second {
		t.Fatalf("counting only %v after the quarantine was due to end", late)
	}
}

// Proxies that start at different times decide alike: a link started
// later, which has seen nothing of the master, ends the quarantine at the
// same instant as the first.
func TestStrictRuleLinksAgree(t *testing.T) {
	s := startRedis(t)
	hold := 2 * time.Second
	first := strictLink(t, s.Addr, hold)
	time.Sleep(700 * time.Millisecond)
	second := strictLink(t, s.Addr, hold)
	a, b := first.Health().QuarantinedUntil, second.Health().QuarantinedUntil
	if a.IsZero() || b.IsZero() {
		t.Fatalf("quarantines %v and %v: a fresh master must be quarantined by both", a, b)
	}
	if d := a.Sub(b).Abs(); d > 100*time.Millisecond {
		t.Fatalf("the two links end the quarantine %v apart (%v vs %v)", d, a, b)
	}
}

// A master that restarts empty is quarantined again, and a link that
// first sees it after the restart agrees: it never counts a master that
// lost its memory less than the hold ago.
func TestStrictRuleRestartQuarantinesEveryLink(t *testing.T) {
	s := startRedis(t)
	hold := time.Second
	l := strictLink(t, s.Addr, hold)
	waitFor(t, "the first quarantine to end", func() bool { return counts(t, l) })
	restarted := time.Now() // it loses its memory after this instant
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reconnect", func() bool { return l.Health().Up })
	late := strictLink(t, s.Addr, hold)
	for _, x := range []*Link{l, late} {
		if time.Since(restarted) < hold/2 && counts(t, x) {
			t.Fatalf("a link counts a master that restarted %v ago (hold %v)", time.Since(restarted), hold)
		}
		if h := x.Health(); h.QuarantinedUntil.Before(restarted.Add(hold)) {
			t.Fatalf("quarantined until %v, want at least %v", h.QuarantinedUntil, restarted.Add(hold))
		}
	}
}

// A restart costs the hold from the restart, whatever the master's
// persistence: with appendonly yes and appendfsync always it reloads its
// file, but nothing it says of itself after the restart proves that file
// holds the last writes of the run before (appendonly switched off at
// runtime, a backup copied over it).
func TestStrictRuleRestartWaitsWhateverItsPersistence(t *testing.T) {
	s, err := redisproc.Start(t.TempDir(), "--appendonly", "yes", "--appendfsync", "always")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	hold := time.Second
	l := strictLink(t, s.Addr, hold)
	waitFor(t, "the first quarantine to end", func() bool { return counts(t, l) })
	restarted := time.Now()
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the reconnect", func() bool { h := l.Health(); return h.Up && h.Connects >= 2 })
	h := l.Health()
	if h.QuarantinedUntil.Before(restarted.Add(hold)) {
		t.Fatalf("health %+v: a master that restarted with appendfsync always must wait the hold from its restart", h)
	}
	if time.Since(restarted) < hold/2 && counts(t, l) {
		t.Fatal("a restarted master counted at once")
	}
}

// A replica never votes; once promoted it is quarantined for the hold,
// even by a link that never saw its old master.
func TestStrictRulePromotedReplica(t *testing.T) {
	master := startRedis(t)
	hold := time.Second
	ml := strictLink(t, master.Addr, hold) // writes the marker on the master
	waitFor(t, "the master to count", func() bool { return counts(t, ml) })
	port := strings.TrimPrefix(master.Addr, "127.0.0.1:")
	replica, err := redisproc.Start(t.TempDir(), "--replicaof", "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Stop)
	waitFor(t, "the replica to sync", func() bool {
		r, _ := replica.Do("EXISTS", MarkerKey)
		return r == "1"
	})
	l := NewLink(Options{Addr: replica.Addr, Restart: quorum.RestartRule{Hold: hold}, Logger: quiet(), HealthInterval: 50 * time.Millisecond})
	l.Start()
	t.Cleanup(func() { l.Close() })
	waitFor(t, "the replica to be refused", func() bool {
		h := l.Health()
		return strings.Contains(h.LastError, "not a master")
	})
	if l.Health().Up {
		t.Fatal("a replica is up")
	}
	if _, err := replica.Do("REPLICAOF", "NO", "ONE"); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	waitUp(t, l)
	h := l.Health()
	if !strings.Contains(h.QuarantineReason, "promoted replica") || h.QuarantinedUntil.Before(promoted.Add(hold)) {
		t.Fatalf("health after promotion %+v: want quarantined as promoted until at least %v", h, promoted.Add(hold))
	}
	if counts(t, l) {
		t.Fatal("a promoted replica counted at once")
	}
}

// A master that becomes a replica under a live connection stops counting:
// the periodic marker check sees its role.
func TestStrictRuleDemotionUnderALiveConnection(t *testing.T) {
	a, b := startRedis(t), startRedis(t)
	hold := 500 * time.Millisecond
	l := strictLink(t, a.Addr, hold)
	waitFor(t, "the master to count", func() bool { return counts(t, l) })
	port := strings.TrimPrefix(b.Addr, "127.0.0.1:")
	if _, err := a.Do("REPLICAOF", "127.0.0.1", port); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the link to drop the demoted master", func() bool {
		h := l.Health()
		return !h.Up && strings.Contains(h.LastError, "not a master")
	})
}

// A backend that answers the identity check with an error (a password the
// proxy lacks) is not verified: it never counts, and says why in its own
// words, under either rule.
func TestIdentityCheckErrorIsNotVerified(t *testing.T) {
	s, err := redisproc.Start(t.TempDir(), "--requirepass", "secret")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	for _, rule := range []quorum.RestartRule{{Hold: time.Second}, {Hold: time.Second, Mode: quorum.RuleRunID}, {}} {
		l := NewLink(Options{Addr: s.Addr, Restart: rule, Logger: quiet()})
		l.Start()
		waitFor(t, "the identity check to fail", func() bool { return strings.Contains(l.Health().LastError, "NOAUTH") })
		h := l.Health()
		if h.Up || h.Counts(time.Now()) {
			t.Fatalf("rule %+v: a backend that refused the identity check is up: %+v", rule, h)
		}
		c := newCollector()
		l.Send(cmd("PING"), nil, c, 0, soon())
		if x := c.next(t); !errors.Is(x.r.Err, ErrDown) {
			t.Fatalf("rule %+v: a command to an unverified backend got %+v, want ErrDown", rule, x.r)
		}
		l.Close()
	}
}

// A marker some proxy wrote with a longer hold applies to every proxy.
func TestStrictRuleLongestHoldWins(t *testing.T) {
	s := startRedis(t)
	long := strictLink(t, s.Addr, 3*time.Second)
	short := strictLink(t, s.Addr, 500*time.Millisecond)
	a, b := long.Health().QuarantinedUntil, short.Health().QuarantinedUntil
	if d := a.Sub(b).Abs(); d > 100*time.Millisecond {
		t.Fatalf("a proxy with a shorter max_ttl ends the quarantine %v earlier (%v vs %v)", a.Sub(b), b, a)
	}
}

// Fresh masters in the same state give the same reason for their
// quarantine, whether they started a moment or a few seconds before the
// proxy first saw them.
func TestStrictRuleFreshMastersGiveOneReason(t *testing.T) {
	older := startRedis(t)
	time.Sleep(2500 * time.Millisecond)
	younger := startRedis(t)
	hold := time.Minute
	a, b := strictLink(t, older.Addr, hold), strictLink(t, younger.Addr, hold)
	ra, rb := a.Health().QuarantineReason, b.Health().QuarantineReason
	if ra != rb || !strings.Contains(ra, "no replication marker") {
		t.Fatalf("two fresh masters give %q and %q; want the same, naming the missing marker", ra, rb)
	}
}

// A wrong password is said once, and stays said: the link never reports
// the backend up, and its last error keeps the backend's own words,
// however many times it redials.
func TestWrongPasswordIsSaidOnce(t *testing.T) {
	s, err := redisproc.Start(t.TempDir(), "--requirepass", "secret")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	var log logBuffer
	l := NewLink(Options{Addr: s.Addr, Password: "wrong", Restart: quorum.RestartRule{Hold: time.Second},
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	l.Start()
	t.Cleanup(func() { l.Close() })
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		if h := l.Health(); h.Up || (h.LastError != "" && !strings.Contains(h.LastError, "WRONGPASS")) {
			t.Fatalf("health with a wrong password: up %v, last error %q", h.Up, h.LastError)
		}
		time.Sleep(20 * time.Millisecond)
	}
	out := log.String()
	if n := strings.Count(out, "backend up"); n > 0 {
		t.Errorf("the log says the backend is up %d times:\n%s", n, out)
	}
	if n := strings.Count(out, "\n"); n > 3 {
		t.Errorf("%d log lines in 3 s for one wrong password:\n%s", n, out)
	}
}

// A link that names a database selects it on its connection before the
// marker check, so the marker and every command live there; one the
// server refuses keeps the link down, saying why.
func TestLinkSelectsItsDatabase(t *testing.T) {
	s := startRedis(t)
	l := startLink(t, Options{Addr: s.Addr, DB: 3, Restart: quorum.RestartRule{Hold: time.Second}, HealthInterval: 50 * time.Millisecond})
	c := newCollector()
	l.Send(cmd("CLIENT", "INFO"), nil, c, 0, soon())
	if x := c.next(t); x.r.Err != nil || !strings.Contains(string(x.r.V.Str), " db=3 ") {
		t.Fatalf("CLIENT INFO on the link = %q, %v; want db=3", x.r.V.Str, x.r.Err)
	}
	l.Send(cmd("EXISTS", MarkerKey), nil, c, 0, soon())
	if x := c.next(t); x.r.Err != nil || x.r.V.Int != 1 {
		t.Fatalf("EXISTS of the marker in database 3 = %+v", x.r)
	}

	bad := NewLink(Options{Addr: s.Addr, DB: 99, Restart: quorum.RestartRule{Hold: time.Second}, Logger: quiet()})
	bad.Start()
	t.Cleanup(func() { bad.Close() })
	waitFor(t, "the SELECT to fail", func() bool { return strings.Contains(bad.Health().LastError, "SELECT 99") })
	if h := bad.Health(); h.Up {
		t.Fatalf("a link whose SELECT was refused is up: %+v", h)
	}
}
