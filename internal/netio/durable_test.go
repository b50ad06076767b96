package netio

import (
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The contract spares a restart's wait only to a master that persists
// every write before answering. With no-appendfsync-on-rewrite yes, a
// master under appendfsync always answers writes without fsync while an
// AOF rewrite or a snapshot runs, so a machine crash then loses writes it
// acknowledged: it must wait after a restart like any other.
func TestStrictRuleFsyncSkippedDuringRewritesIsNotDurable(t *testing.T) {
	s, err := redisproc.Start(t.TempDir(), "--appendonly", "yes", "--appendfsync", "always", "--no-appendfsync-on-rewrite", "yes")
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
	if h := l.Health(); h.QuarantinedUntil.Before(restarted.Add(hold)) {
		t.Fatalf("health %+v: a master that may skip fsync was treated as durable after its restart", h)
	}
}
