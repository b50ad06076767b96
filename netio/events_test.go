package netio

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// restartCounter counts the restarts a link reports.
type restartCounter struct{ n atomic.Int64 }

func (r *restartCounter) Reply(int, time.Duration, bool) {}
func (r *restartCounter) Timeout(int)                    {}
func (r *restartCounter) StateChange(int, bool)          {}
func (r *restartCounter) Restarted(int, time.Time)       { r.n.Add(1) }
func (r *restartCounter) Reconnect(int)                  {}

// A master that nothing happens to is not reported as restarted: the
// periodic marker checks during its first quarantine re-read the same
// instants, and the metric redlock_proxy_backend_restarts_total (and the
// alert on it) must stay at zero, as Health.Restarts does.
func TestStrictRuleQuietMasterReportsNoRestart(t *testing.T) {
	s := startRedis(t)
	ev := &restartCounter{}
	l := startLink(t, Options{Addr: s.Addr, Restart: quorum.RestartRule{Hold: 1500 * time.Millisecond}, HealthInterval: 20 * time.Millisecond, Events: ev})
	waitFor(t, "the first quarantine to end", func() bool { return counts(t, l) })
	if h := l.Health(); h.Restarts != 0 {
		t.Fatalf("health %+v: restarts counted for a master that did not restart", h)
	}
	if n := ev.n.Load(); n != 0 {
		t.Fatalf("%d restarts reported for a master that only ran its first quarantine", n)
	}
}
