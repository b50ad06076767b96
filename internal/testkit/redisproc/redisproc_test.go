package redisproc

import (
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
