package netio

import (
	"regexp"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// A backend is in the first state that applies: down, quarantined,
// unconfirmed, unsure, counting; Counts is exactly the counting state.
func TestStateOrder(t *testing.T) {
	now := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	later, earlier := now.Add(time.Second), now.Add(-time.Second)
	confirmed := &SentinelHealth{Confirmed: later}
	lapsed := &SentinelHealth{Confirmed: now}
	for _, c := range []struct {
		name   string
		h      Health
		want   State
		reason quorum.Reason
	}{
		{"down", Health{}, StateDown, quorum.ReasonNone},
		{"down while quarantined and unsure", Health{QuarantinedUntil: later, QuarantineCause: quorum.ReasonNew, Unsure: true}, StateDown, quorum.ReasonNone},
		{"counting", Health{Up: true}, StateCounting, quorum.ReasonNone},
		{"quarantine over", Health{Up: true, QuarantinedUntil: earlier, QuarantineCause: quorum.ReasonNew}, StateCounting, quorum.ReasonNone},
		{"quarantine ends now", Health{Up: true, QuarantinedUntil: now, QuarantineCause: quorum.ReasonNew}, StateCounting, quorum.ReasonNone},
		{"quarantined", Health{Up: true, QuarantinedUntil: later, QuarantineCause: quorum.ReasonRestarted}, StateQuarantined, quorum.ReasonRestarted},
		{"quarantined and unconfirmed", Health{Up: true, QuarantinedUntil: later, QuarantineCause: quorum.ReasonSwitched, Sentinel: lapsed}, StateQuarantined, quorum.ReasonSwitched},
		{"quarantined and unsure", Health{Up: true, QuarantinedUntil: later, QuarantineCause: quorum.ReasonClock, Unsure: true}, StateQuarantined, quorum.ReasonClock},
		{"unconfirmed", Health{Up: true, Sentinel: lapsed}, StateUnconfirmed, quorum.ReasonNone},
		{"unconfirmed and unsure", Health{Up: true, Sentinel: lapsed, Unsure: true}, StateUnconfirmed, quorum.ReasonNone},
		{"unsure", Health{Up: true, Unsure: true}, StateUnsure, quorum.ReasonNone},
		{"unsure and confirmed", Health{Up: true, Sentinel: confirmed, Unsure: true}, StateUnsure, quorum.ReasonNone},
		{"confirmed", Health{Up: true, Sentinel: confirmed}, StateCounting, quorum.ReasonNone},
	} {
		got, reason := c.h.State(now)
		if got != c.want || reason != c.reason {
			t.Errorf("%s: State = %v, %q; want %v, %q", c.name, got, reason, c.want, c.reason)
		}
		if c.h.Counts(now) != (c.want == StateCounting) {
			t.Errorf("%s: Counts = %v in state %v", c.name, c.h.Counts(now), got)
		}
		if sh := (ShardHealth{Health: c.h}); sh.Counts(now) != c.h.Counts(now) {
			t.Errorf("%s: a shard's Counts differs from its link's", c.name)
		}
	}
}

// Every reason the marker script records is one of quorum's, so every
// proxy explains it and counts it under its metric cause.
func TestMarkerScriptReasonsAreKnown(t *testing.T) {
	words := regexp.MustCompile(`loss\('([a-z]+)'`).FindAllSubmatch(markerLua, -1)
	if len(words) < 8 {
		t.Fatalf("found %d losses in the marker script; the pattern no longer matches it", len(words))
	}
	for _, w := range words {
		if r := quorum.Reason(w[1]); !r.Known() {
			t.Errorf("the marker script records the loss %q, which quorum.Reason does not name", r)
		}
	}
}
