package netio

import (
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// A master flushed under a live connection has forgotten every lock it
// held. The contract keeps a master that may have lost writes (a flushed
// one is named) out of every quorum count for the hold from then on, so a
// grant it makes after the flush must not count. The health interval is
// long here only to make the window certain: with the default of one
// second, every grant made in the second after a flush counts.
func TestStrictRuleFlushUnderALiveConnectionStopsCounting(t *testing.T) {
	s := startRedis(t)
	l := startLink(t, Options{Addr: s.Addr, Restart: quorum.RestartRule{Hold: 500 * time.Millisecond}, HealthInterval: time.Hour})
	waitFor(t, "the master to count", func() bool { return counts(t, l) })
	if _, err := s.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	c := newCollector()
	l.Send(cmd("SET", "lock", "second-holder", "NX", "PX", "10000"), nil, c, 0, soon())
	x := c.next(t)
	if x.r.Err != nil || !x.r.V.IsOK() {
		t.Fatalf("SET NX after the flush: %+v", x.r)
	}
	if x.r.Counts {
		t.Fatalf("a master flushed under a live connection counted a grant made after the flush (health %+v)", l.Health())
	}
}
