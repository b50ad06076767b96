package netio

import (
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// A master flushed under a live connection has forgotten every lock it
// held. The proxy cannot see keys deleted behind its back as they go, but
// the next marker check (every health interval) finds the marker gone, and
// from then on the master stays out of every quorum count for the hold.
func TestStrictRuleFlushIsSeenAtTheNextMarkerCheck(t *testing.T) {
	s := startRedis(t)
	interval := 100 * time.Millisecond
	l := startLink(t, Options{Addr: s.Addr, Restart: quorum.RestartRule{Hold: 2 * time.Second}, HealthInterval: interval})
	waitFor(t, "the master to count", func() bool { return counts(t, l) })
	if _, err := s.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * interval)
	c := newCollector()
	l.Send(cmd("SET", "lock", "second-holder", "NX", "PX", "10000"), nil, c, 0, soon())
	x := c.next(t)
	if x.r.Err != nil || !x.r.V.IsOK() {
		t.Fatalf("SET NX after the flush: %+v", x.r)
	}
	if x.r.Counts {
		t.Fatalf("a master flushed %v ago (three marker checks) still counts (health %+v)", 3*interval, l.Health())
	}
}

func TestEvalFormCarriesTheScriptsText(t *testing.T) {
	sc := resp.NewScript([]byte("return redis.call('GET', KEYS[1])"))
	sha := resp.AppendCommand(nil, "EVALSHA", sc.Sha, "1", "k")
	want := string(resp.AppendCommand(nil, "EVAL", string(sc.Body), "1", "k"))
	if got := string(appendEvalForm([]byte("x"), sha, sc)); got != "x"+want {
		t.Fatalf("appendEvalForm = %q; want %q", got, "x"+want)
	}
	if got := string(evalForm(sha, sc)); got != want {
		t.Fatalf("evalForm = %q; want %q", got, want)
	}
	other := resp.NewScript([]byte("return 1"))
	if got := string(appendEvalForm(nil, sha, other)); got != string(sha) {
		t.Fatalf("the EVALSHA of another script was rewritten: %q", got)
	}
	plain := resp.AppendCommand(nil, "GET", "k")
	if got := string(appendEvalForm(nil, plain, sc)); got != string(plain) {
		t.Fatalf("a GET was rewritten: %q", got)
	}
}
