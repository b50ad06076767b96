package proxy

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// healthBackends answers INFO from given backend states.
type healthBackends struct {
	fakeBackends
	hs []netio.Health
}

func (b healthBackends) Health() []netio.Health { return b.hs }

// INFO proxy reports each backend in its netio.State, as /readyz and the
// quorum log do: one whose continuity check failed is unsure (not
// counting, not quarantined), one its Sentinels do not confirm is
// unconfirmed, and a shard likewise.
func TestInfoStatesAgree(t *testing.T) {
	now := time.Now()
	hs := []netio.Health{
		{Addr: "a:1", Up: true},
		{Addr: "b:1", Up: true, Unsure: true},
		{Addr: "c:1", Up: true, Sentinel: &netio.SentinelHealth{Confirmed: now.Add(-time.Second)}},
		{Addr: "d:1", Up: true, QuarantinedUntil: now.Add(time.Minute), QuarantineCause: quorum.ReasonNew, QuarantineReason: quorum.ReasonNew.Explain()},
		{Addr: "e:1", LastError: "connection refused"},
		{Addr: "f:1", Up: true, Unsure: true, Shards: []netio.ShardHealth{
			{Slots: "0-8191", Health: netio.Health{Addr: "f:2", Up: true}},
			{Slots: "8192-16383", Health: netio.Health{Addr: "f:3", Up: true, Unsure: true}},
		}},
	}
	s := New(Config{Logger: discardLogger()}, healthBackends{fakeBackends{n: len(hs)}, hs})
	info := s.infoProxy()
	for _, want := range []string{
		"backends:6\r\n", "backends_counting:1\r\n", "backends_quarantined:1\r\n", "backends_down:1\r\n",
		"backends_unconfirmed:1\r\n", "backends_unsure:2\r\n",
		"backend0:addr=a:1,state=up,", "backend1:addr=b:1,state=unsure,", "backend2:addr=c:1,state=unconfirmed,",
		"backend3:addr=d:1,state=quarantined,", "backend3_quarantine_reason:it has no replication marker",
		"backend4:addr=e:1,state=down,", "backend4_last_error:connection refused\r\n",
		"backend5:addr=f:1,state=unsure,", "backend5_shards_counting:1\r\n",
		"backend5_shard0:addr=f:2,id=,slots=0-8191,slot_count=0,state=up,", "backend5_shard1:addr=f:3,id=,slots=8192-16383,slot_count=0,state=unsure,",
	} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO proxy lacks %q:\n%s", want, info)
		}
	}
	counting := 0
	for _, h := range hs {
		if h.Counts(now) {
			counting++
		}
	}
	if !strings.Contains(info, fmt.Sprintf("backends_counting:%d\r\n", counting)) {
		t.Errorf("backends_counting disagrees with Health.Counts (%d):\n%s", counting, info)
	}
}

// INFO's lock counters count each op by its command table entry or its
// script role: SET acquires; DEL, DELIFEQ, DELEX and ZREM release; the
// acquire, extend-or-acquire, extend and release roles as named; every
// other name (reads, votes, shared locks, forced deletes) is none of them.
func TestLockKindsFromTheCommandTable(t *testing.T) {
	want := map[string]lockKind{
		"set": kindAcquire, "acquire": kindAcquire, "extend-or-acquire": kindAcquire,
		"extend":  kindExtend,
		"release": kindRelease, "del": kindRelease, "delifeq": kindRelease, "delex": kindRelease, "zrem": kindRelease,
	}
	for _, name := range append(CommandNames(), "fence") {
		if got := kindOf(name); got != want[name] {
			t.Errorf("kindOf(%q) = %d; want %d", name, got, want[name])
		}
	}
}
