package redisproc

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func waitReply(t *testing.T, s *Server, want string, args ...string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.Do(args...)
		if err == nil && got == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %v: got %q (%v), want %q", s.Addr, args, got, err, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func writable(t *testing.T, s *Server, key string) bool {
	t.Helper()
	got, err := s.Do("SET", key, "v")
	if err != nil {
		t.Fatalf("SET on %s: %v", s.Addr, err)
	}
	if got != "OK" && !strings.HasPrefix(got, "READONLY") {
		t.Fatalf("SET on %s: %q", s.Addr, got)
	}
	return got == "OK"
}

// A replica accepts no writes; Promote makes it a master and Follow a
// replica again, and a restart keeps the role it was last given.
func TestPromotedAndFollowingServersKeepTheirRoleAcrossRestarts(t *testing.T) {
	if _, err := Binary(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	// Without the delay a master waits 5s before it serves a replica a
	// full synchronisation.
	noDelay := []string{"--repl-diskless-sync-delay", "0"}
	m, err := Start(dir, noDelay...)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	r, err := StartReplica(dir, m.Addr, noDelay...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()

	if writable(t, r, "x") {
		t.Fatal("a replica accepted a write")
	}
	if !writable(t, m, "k") {
		t.Fatal("the master refused a write")
	}
	waitReply(t, r, "1", "EXISTS", "k")

	if err := r.Promote(); err != nil {
		t.Fatal(err)
	}
	if !writable(t, r, "k2") {
		t.Fatal("a promoted replica refused a write")
	}
	waitReply(t, r, "1", "EXISTS", "k") // it keeps what it replicated
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if !writable(t, r, "k3") {
		t.Fatal("a promoted replica came back from a restart as a replica")
	}

	if err := m.Follow(r.Addr); err != nil {
		t.Fatal(err)
	}
	waitReply(t, m, "1", "EXISTS", "k3") // synchronised from its new master
	if writable(t, m, "y") {
		t.Fatal("a master turned into a replica accepted a write")
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if writable(t, m, "z") {
		t.Fatal("a replica came back from a restart as a master")
	}
	waitReply(t, m, "1", "EXISTS", "k3")
}

// A Sentinel started from its generated configuration finds the master's
// replica, and SENTINEL FAILOVER promotes it: the replica becomes a
// master and Sentinel names it as the group's master.
func TestSentinelFailoverPromotesTheReplica(t *testing.T) {
	if _, err := SentinelBinary(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	noDelay := []string{"--repl-diskless-sync-delay", "0"}
	m, err := Start(dir, noDelay...)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Stop()
	r, err := StartReplica(dir, m.Addr, noDelay...)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	s, err := StartSentinel(dir, SentinelConfig{Monitors: []Monitor{{Name: "g", Addr: m.Addr}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if got, err := s.MasterAddr("g"); err != nil || got != m.Addr {
		t.Fatalf("master of g = %q, %v; want %s", got, err, m.Addr)
	}
	// Sentinel learns the replica from the master's INFO, at once.
	deadline := time.Now().Add(10 * time.Second)
	for err = s.Failover("g"); err != nil; err = s.Failover("g") {
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		info, _ := r.Info("replication")
		addr, _ := s.MasterAddr("g")
		if strings.Contains(info, "role:master") && addr == r.Addr {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after SENTINEL FAILOVER: replica's INFO %q, Sentinel's master %q", info, addr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestAShiftedClockExpiresTheServersKeysEarly(t *testing.T) {
	s, c, err := StartWithClock(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	defer c.Close()
	if _, err := s.Do("SET", "k", "v", "PX", "5000"); err != nil {
		t.Fatal(err)
	}
	clock := func() (string, error) { return s.Do("EVAL", "return tonumber(redis.call('TIME')[1])", "0") }
	before, err := clock()
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Shift(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	after, err := clock()
	if err != nil {
		t.Fatal(err)
	}
	secs := func(reply string) int64 {
		n, _ := strconv.ParseInt(reply, 10, 64)
		return n
	}
	if d := secs(after) - secs(before); d < 9 || d > 11 {
		t.Fatalf("TIME moved by %ds across a 10s shift (%q, then %q)", d, before, after)
	}
	if v, _ := s.Do("PTTL", "k"); v != "-2" {
		t.Fatalf("PTTL of a 5s key after a 10s shift = %q; want -2 (expired)", v)
	}
	if now := time.Now().Unix(); now-secs(before) > 2 {
		t.Fatalf("the machine's clock moved too: %d, then %d", secs(before), now)
	}
}
