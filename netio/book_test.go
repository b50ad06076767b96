package netio

import (
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

func TestBookTellsAnOlderCopyFromWhatItLearnedBefore(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBook(3)
	b.seen("E1", "p", 10, t0)
	b.seen("E1", "q", 4, t0.Add(time.Second))
	cases := []struct {
		name   string
		epoch  string
		counts map[string]int64
		sent   time.Time
		stale  bool
	}{
		{"as seen", "E1", map[string]int64{"p": 10, "q": 4}, t0.Add(2 * time.Second), false},
		{"further on", "E1", map[string]int64{"p": 12, "q": 4}, t0.Add(2 * time.Second), false},
		{"one proxy's count lower", "E1", map[string]int64{"p": 9, "q": 4}, t0.Add(2 * time.Second), true},
		{"a proxy's count missing", "E1", map[string]int64{"p": 10}, t0.Add(2 * time.Second), true},
		{"learned after the check was sent", "E1", map[string]int64{"p": 10}, t0.Add(500 * time.Millisecond), false},
		{"an epoch never seen", "E0", nil, t0.Add(2 * time.Second), false},
	}
	for _, c := range cases {
		if got := b.stale(c.epoch, c.counts, c.sent); got != c.stale {
			t.Errorf("%s: stale %v, want %v", c.name, got, c.stale)
		}
	}
	b.retire("E1", t0.Add(3*time.Second))
	if !b.stale("E1", map[string]int64{"p": 99, "q": 99}, t0.Add(4*time.Second)) {
		t.Error("a retired epoch is not taken for an older copy")
	}
	if b.stale("E1", map[string]int64{"p": 99, "q": 99}, t0.Add(2*time.Second)) {
		t.Error("a check sent before the epoch was retired is judged by the retirement")
	}
}

func TestBookLearnsFromTheTablesOfOtherMasters(t *testing.T) {
	t0 := time.Unix(1000, 0)
	told := newBook(3)
	told.seen("E1", "p", 10, t0)
	told.retire("E0", t0)
	pairs := told.tell(nil)
	b := newBook(3)
	b.table(pairs, t0.Add(time.Second))
	if !b.stale("E1", map[string]int64{"p": 9}, t0.Add(2*time.Second)) {
		t.Errorf("a count learned from a table (%q) is not compared", pairs)
	}
	if !b.stale("E0", nil, t0.Add(2*time.Second)) {
		t.Errorf("a retirement learned from a table (%q) is not compared", pairs)
	}
}

// The continuity checks compare other proxies' counts: the latest of
// each, those learned last first, never this proxy's own, at most max.
func TestBookWitnessesAreTheCountsLearnedLast(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBook(3)
	b.seen("E1", "p", 10, t0)
	b.seen("E1", "q", 4, t0.Add(time.Second))
	b.seen("E1", "p", 12, t0.Add(3*time.Second))
	b.seen("E1", "r", 7, t0.Add(2*time.Second))
	b.seen("E1", b.id, 50, t0.Add(4*time.Second))
	b.seen("E2", "s", 1, t0.Add(5*time.Second))
	got := b.witnesses("E1", b.id, 2)
	want := []witness{{"p", 12}, {"r", 7}}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("witnesses %v, want %v", got, want)
	}
	if got := b.witnesses("E3", b.id, 2); len(got) != 0 {
		t.Fatalf("witnesses of an epoch never seen: %v", got)
	}
}

func TestBookReadsAClusterWholeOnlyWhenEveryShardIs(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newBook(3)
	b.setCluster(1, []string{"m:a", "m:b"})
	r := quorum.Reading{Sent: t0, Got: t0, Left: time.Second, Whole: true}
	b.read(1, "m:a", r, 0)
	if _, ok := b.backends[1].reading(); ok {
		t.Fatal("a cluster with a shard unread has a reading")
	}
	later := r
	later.Left = 5 * time.Second
	b.read(1, "m:b", later, 0)
	got, ok := b.backends[1].reading()
	if !ok || !got.Whole || got.Got.Add(got.Left) != t0.Add(5*time.Second) {
		t.Fatalf("cluster reading %+v, %v; want whole, bounded by the latest shard's", got, ok)
	}
	later.Whole = false
	b.read(1, "m:b", later, 0)
	if got, _ := b.backends[1].reading(); got.Whole {
		t.Fatal("a cluster with a shard not whole reads whole")
	}
}

func TestEpochBeforeComparesOneRunsEpochs(t *testing.T) {
	if !epochBefore("run:100.5", "run:100.7") || epochBefore("run:100.7", "run:100.5") {
		t.Error("epochs of one run are not ordered by their instant")
	}
	if epochBefore("a:100.5", "b:200.0") {
		t.Error("epochs of two runs are compared")
	}
}

// A bound waits the longest settle time any master reported, not only the
// one its caller knows (the lost master's own marker may be gone): a
// reading sent before it is no reading.
func TestBookBoundWaitsTheLongestSettleAnyMasterReported(t *testing.T) {
	lost := time.Unix(1000, 0)
	b := newBook(3)
	early := quorum.Reading{Sent: lost.Add(time.Second), Got: lost.Add(time.Second), Whole: true}
	b.read(1, "m", early, 10*time.Second) // a slower proxy's settle, in master 1's marker
	b.read(2, "m", early, 200*time.Millisecond)
	if _, ok := b.end(0, lost, 200*time.Millisecond); ok {
		t.Fatal("readings sent 1 s after the loss bound it, while a proxy's grant may take 10 s to land")
	}
	late := quorum.Reading{Sent: lost.Add(11 * time.Second), Got: lost.Add(11 * time.Second), Whole: true}
	b.read(1, "m", late, 10*time.Second)
	b.read(2, "m", late, 200*time.Millisecond)
	if _, ok := b.end(0, lost, 200*time.Millisecond); !ok {
		t.Fatal("readings sent after the longest settle time do not bound the loss")
	}
}
