package app

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/netio"
)

// records keeps what a logger wrote, one line per record:
// "LEVEL message key=value ...".
type records struct {
	mu    sync.Mutex
	lines []string
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	var b strings.Builder
	b.WriteString(rec.Level.String() + " " + rec.Message)
	rec.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	r.mu.Lock()
	r.lines = append(r.lines, b.String())
	r.mu.Unlock()
	return nil
}

// take returns the lines logged since the last call.
func (r *records) take() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := r.lines
	r.lines = nil
	return out
}

// backends builds the health of backends at now: "up", "down", "unsure"
// (a continuity check failed), "unconfirmed" (its Sentinels do not name
// it), or a quarantine of the given length ("q30s").
func backends(now time.Time, states ...string) []netio.Health {
	var hs []netio.Health
	for i, s := range states {
		h := netio.Health{Node: i, Addr: fmt.Sprintf("10.0.0.%d:6379", i+1)}
		switch {
		case s == "up":
			h.Up = true
		case s == "unsure":
			h.Up, h.Unsure = true, true
		case s == "unconfirmed":
			h.Up, h.Sentinel = true, &netio.SentinelHealth{Name: "g", Sentinels: 3, Confirmed: now}
		case strings.HasPrefix(s, "q"):
			d, _ := time.ParseDuration(s[1:])
			h.Up, h.QuarantinedUntil = true, now.Add(d)
		}
		hs = append(hs, h)
	}
	return hs
}

// The watch logs each change of the quorum once: none at start after a
// grace, lost, regained; nothing while it stays as it was.
func TestQuorumWatchLogsEachChangeOnce(t *testing.T) {
	var rec records
	t0 := time.Now()
	var states []string
	w := &quorumWatch{log: slog.New(&rec), started: t0}
	w.health = func() []netio.Health { return backends(t0, states...) }
	steps := []struct {
		at     time.Duration
		states []string
		want   []string
	}{
		{100 * time.Millisecond, []string{"down", "down", "down"}, nil}, // still connecting
		{1900 * time.Millisecond, []string{"down", "up", "down"}, nil},
		{2100 * time.Millisecond, []string{"down", "up", "down"}, []string{"WARN no quorum yet: 1 of 3 backends count, 2 needed; locks are refused down=2 quarantined=0"}},
		{2200 * time.Millisecond, []string{"down", "up", "down"}, nil},
		// There never was a quorum: it is reached, not regained.
		{3 * time.Second, []string{"up", "up", "down"}, []string{"INFO quorum reached: 2 of 3 backends count, 2 needed; locks are granted since_start=3s"}},
		{4 * time.Second, []string{"up", "up", "up"}, nil},
		{5 * time.Second, []string{"up", "down", "up"}, nil}, // 2 of 3 still count
		{6 * time.Second, []string{"up", "down", "down"}, []string{"WARN quorum lost: 1 of 3 backends count, 2 needed; locks are refused down=2 quarantined=0"}},
		{7 * time.Second, []string{"up", "down", "down"}, nil},
		// A backend back from a restart does not count yet: still lost.
		{8 * time.Second, []string{"up", "down", "q30s"}, nil},
		{9 * time.Second, []string{"up", "up", "up"}, []string{"INFO quorum regained: 3 of 3 backends count, 2 needed; locks are granted again lost_for=3s"}},
	}
	for _, s := range steps {
		states = s.states
		w.step(t0.Add(s.at))
		got := rec.take()
		if strings.Join(got, "\n") != strings.Join(s.want, "\n") {
			t.Errorf("at %v with %v: logged %q; want %q", s.at, s.states, got, s.want)
		}
	}
}

// A quorum present from the start is reported once, at INFO; a quorum that
// waits for quarantines to end says when it will be back.
func TestQuorumWatchStartAndQuarantine(t *testing.T) {
	var rec records
	t0 := time.Now()
	states := []string{"up", "up", "down"}
	w := &quorumWatch{log: slog.New(&rec), started: t0}
	w.health = func() []netio.Health { return backends(t0, states...) }
	w.step(t0.Add(50 * time.Millisecond))
	if got := rec.take(); len(got) != 1 || got[0] != "INFO quorum: 2 of 3 backends count, 2 needed; locks are granted" {
		t.Errorf("at start: %q", got)
	}
	states = []string{"q20s", "q50s", "down"}
	w.step(t0.Add(time.Second))
	want := "WARN quorum lost: 0 of 3 backends count, 2 needed; locks are refused down=1 quarantined=2 quorum_in=49s"
	if got := rec.take(); len(got) != 1 || got[0] != want {
		t.Errorf("two quarantined: %q; want %q", got, want)
	}
}

// Fresh masters at the first start: no quorum yet while they are
// quarantined; once their quarantines end, the quorum is reached (never
// "regained"), and only after the links have had the time to log each
// quarantine's end.
func TestQuorumWatchFreshMasters(t *testing.T) {
	var rec records
	t0 := time.Now()
	w := &quorumWatch{log: slog.New(&rec), started: t0}
	w.health = func() []netio.Health { return backends(t0, "q60s", "q60s", "q60s") }
	for _, s := range []struct {
		at   time.Duration
		want string
	}{
		{100 * time.Millisecond, ""},
		{2100 * time.Millisecond, "WARN no quorum yet: 0 of 3 backends count, 2 needed; locks are refused down=0 quarantined=3 quorum_in=58s"},
		{30 * time.Second, ""},
		{60 * time.Second, ""},            // the quarantines end now...
		{60*time.Second + endedLag/2, ""}, // ...and the links log it within their health interval
		{60*time.Second + endedLag, "INFO quorum reached: 3 of 3 backends count, 2 needed; locks are granted since_start=1m1.1s"},
		{61 * time.Second, ""},
		{62 * time.Second, ""},
	} {
		w.step(t0.Add(s.at))
		if got := strings.Join(rec.take(), "\n"); got != s.want {
			t.Errorf("at %v: logged %q; want %q", s.at, got, s.want)
		}
	}
}

// A backend whose continuity check failed is in a state of its own, as is
// one its Sentinels do not confirm: neither counts, neither is quarantined
// nor down, in /readyz and in the quorum log alike (INFO's agreement is
// TestInfoStatesAgree in proxy).
func TestUnsureAndUnconfirmedAreTheirOwnStates(t *testing.T) {
	now := time.Now()
	hs := backends(now, "up", "unsure", "unconfirmed", "q30s", "down")
	ready, text := readiness(hs, now)
	for _, want := range []string{
		"not ready: 1 of 5 backends count, 3 needed; locks are refused; 1 quarantined, the last counts in 30s\n",
		"backend 1 (10.0.0.2:6379): not counted: a continuity check failed; it is checked again\n",
		"backend 2 (g, master 10.0.0.3:6379): not counted: no majority of its 3 Sentinels confirms its master",
		"backend 3 (10.0.0.4:6379): quarantined for 30s",
		"backend 4 (10.0.0.5:6379): down: ",
	} {
		if ready || !strings.Contains(text, want) {
			t.Errorf("readiness %v, %q; want it to contain %q", ready, text, want)
		}
	}
	q := countQuorum(hs, now, 0)
	if q.counting != 1 || q.quarantined != 1 || q.unsure != 1 || q.unconfirmed != 1 || q.down != 1 {
		t.Errorf("countQuorum = %+v; want one in each state", q)
	}
	// Once checked, the unsure backend and the quarantined one make the
	// majority: the quarantine's end is when.
	if q.in != 30*time.Second {
		t.Errorf("quorum in %v; want 30s", q.in)
	}
	var rec records
	w := &quorumWatch{log: slog.New(&rec), started: now, state: quorumHeld}
	w.health = func() []netio.Health { return hs }
	w.step(now)
	want := "WARN quorum lost: 1 of 5 backends count, 3 needed; locks are refused down=1 quarantined=1 unconfirmed=1 unsure=1 quorum_in=30s"
	if got := rec.take(); len(got) != 1 || got[0] != want {
		t.Errorf("logged %q; want %q", got, want)
	}
}
