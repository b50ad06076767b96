package netio

import (
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Only masters vote: a replica's answers repeat its master's state, so a
// replica configured as a backend must never count, under either rule.
// Under the run-id rule the identity check reads INFO server, which does
// not say the role.
func TestReplicaNeverVotesUnderEitherRule(t *testing.T) {
	master := startRedis(t)
	port := strings.TrimPrefix(master.Addr, "127.0.0.1:")
	replica, err := redisproc.Start(t.TempDir(), "--replicaof", "127.0.0.1", port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(replica.Stop)
	for _, mode := range []quorum.RestartMode{quorum.RuleStrict, quorum.RuleRunID} {
		l := NewLink(Options{Addr: replica.Addr, Restart: quorum.RestartRule{Hold: 10 * time.Millisecond, Mode: mode}, Logger: quiet()})
		l.Start()
		time.Sleep(500 * time.Millisecond) // the identity check, and the hold, are long over
		h := l.Health()
		l.Close()
		if h.Up || h.Counts(time.Now()) {
			t.Fatalf("mode %v: a replica is up and counts: %+v", mode, h)
		}
	}
}
