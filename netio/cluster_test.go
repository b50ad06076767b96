package netio

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

func startTestCluster(t *testing.T, shards int) *redisproc.Cluster {
	t.Helper()
	c, err := redisproc.StartCluster(t.TempDir(), shards, 0)
	if err != nil {
		t.Fatalf("cluster: %v (run ./test.sh, which installs redis-server and redis-cli)", err)
	}
	t.Cleanup(c.Stop)
	return c
}

func startClusterBackend(t *testing.T, c *redisproc.Cluster, rule quorum.RestartRule) *Cluster {
	t.Helper()
	cl := NewCluster(Options{Addr: c.Entry(), Logger: quiet(), Timeout: time.Second, Restart: rule,
		Cluster: &ClusterOptions{Seeds: strings.Split(c.Seeds(), ","), Refresh: 100 * time.Millisecond}})
	cl.Start()
	t.Cleanup(func() { cl.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for ctx.Err() == nil && !cl.Health().Up {
		time.Sleep(10 * time.Millisecond)
	}
	if !cl.Health().Up {
		t.Fatalf("cluster backend not up: %s", cl.Health().LastError)
	}
	return cl
}

// undoOf is a compare-and-delete of key's token, in both forms.
func undoOf(key, tok string, via any) UndoCmd {
	cmd := resp.AppendCommand(nil, "EVAL", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) end return 0`, "1", key, tok)
	return UndoCmd{Now: cmd, Later: func(time.Duration, bool) []byte { return cmd }, Keys: key, TTL: 10 * time.Second, Via: via}
}

func getOn(t *testing.T, s *redisproc.Server, key string) string {
	t.Helper()
	v, err := s.DoAll("GET", key)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(v)
}

// An undo reaches the key where its command ran, even when the slot moved
// since (keys and all): the node it ran on answers MOVED, and the undo
// follows to the new owner. Without following, the partial acquisition
// would stay until its TTL.
func TestClusterUndoFollowsItsKeyAfterAMigration(t *testing.T) {
	c := startTestCluster(t, 3)
	cl := startClusterBackend(t, c, quorum.RestartRule{})
	key := "lock{" + keyslot.Tag(100) + "}"
	from, to := c.MasterOfSlot(100), c.MasterOfSlot(10000)
	col := newCollector()
	cl.Send(resp.AppendCommand(nil, "SET", key, "tok", "PX", "10000"), nil, col, 7, time.Now().Add(time.Second))
	r := col.next(t)
	if r.tag != 7 || r.r.Err != nil || !r.r.V.IsOK() || r.r.Via == nil {
		t.Fatalf("SET: %+v", r)
	}
	if err := c.MoveSlot(100, from, to); err != nil {
		t.Fatal(err)
	}
	if getOn(t, to, key) != "tok" {
		t.Fatal("the key did not move with its slot")
	}
	cl.Undo(undoOf(key, "tok", r.r.Via), col, 8)
	u := col.next(t)
	if u.tag != 8 || u.r.Err != nil || u.r.V.Int != 1 {
		t.Fatalf("undo after the migration: %+v (want 1: deleted where the key is now)", u)
	}
	if v := getOn(t, to, key); v != "" {
		t.Fatalf("the key is still on its new owner: %q", v)
	}
}

// A command sent on a stale slot map is answered MOVED by the old owner,
// sent once more to the new one, and its result names the link it ran on:
// its undo goes there, after it.
func TestClusterCommandFollowsMovedAndItsUndoGoesWhereItRan(t *testing.T) {
	c := startTestCluster(t, 3)
	cl := startClusterBackend(t, c, quorum.RestartRule{})
	from, to := c.MasterOfSlot(200), c.MasterOfSlot(10000)
	// Stop the map's refresh from seeing the move: the first send goes to
	// the old owner.
	cl.stop()
	cl.wg.Wait()
	if err := c.MoveSlot(200, from, to); err != nil {
		t.Fatal(err)
	}
	key := "k{" + keyslot.Tag(200) + "}"
	col := newCollector()
	cl.Send(resp.AppendCommand(nil, "SET", key, "tok", "PX", "10000"), nil, col, 1, time.Now().Add(time.Second))
	r := col.next(t)
	if r.r.Err != nil || !r.r.V.IsOK() {
		t.Fatalf("SET through a stale map: %+v", r)
	}
	if v, ok := r.r.Via.(*via); !ok || v.link.Addr() != to.Addr {
		t.Fatalf("the result names %v, want the new owner %s", r.r.Via, to.Addr)
	}
	if getOn(t, to, key) != "tok" {
		t.Fatal("the SET did not run on the new owner")
	}
	cl.Undo(undoOf(key, "tok", r.r.Via), col, 2)
	if u := col.next(t); u.r.Err != nil || u.r.V.Int != 1 {
		t.Fatalf("undo: %+v", u)
	}
}

// A command whose slot is being migrated, its key already moved, is
// answered ASK: it runs, after ASKING, on the importing node.
func TestClusterCommandFollowsAsk(t *testing.T) {
	c := startTestCluster(t, 3)
	cl := startClusterBackend(t, c, quorum.RestartRule{})
	from, to := c.MasterOfSlot(300), c.MasterOfSlot(10000)
	fid, _ := from.ID()
	tid, _ := to.ID()
	if _, err := to.Do("CLUSTER", "SETSLOT", "300", "IMPORTING", fid); err != nil {
		t.Fatal(err)
	}
	if _, err := from.Do("CLUSTER", "SETSLOT", "300", "MIGRATING", tid); err != nil {
		t.Fatal(err)
	}
	key := "a{" + keyslot.Tag(300) + "}"
	col := newCollector()
	cl.Send(resp.AppendCommand(nil, "SET", key, "tok", "NX", "PX", "10000"), nil, col, 1, time.Now().Add(time.Second))
	r := col.next(t)
	if r.r.Err != nil || !r.r.V.IsOK() {
		t.Fatalf("SET during the migration: %+v", r)
	}
	if v, ok := r.r.Via.(*via); !ok || v.link.Addr() != to.Addr || !v.asking {
		t.Fatalf("the result names %+v, want the importing node %s after ASKING", r.r.Via, to.Addr)
	}
	cl.Undo(undoOf(key, "tok", r.r.Via), col, 2)
	if u := col.next(t); u.r.Err != nil || u.r.V.Int != 1 {
		t.Fatalf("undo on the importing node: %+v", u)
	}
}

// Under the strict rule each shard keeps its marker in a slot it owns;
// when that slot leaves the shard, the marker moves to another of its
// slots and the shard stops counting for the hold, while the other shards
// count on.
func TestClusterMarkerSlotMovedQuarantinesItsShard(t *testing.T) {
	c := startTestCluster(t, 3)
	rule := quorum.RestartRule{Hold: 1500 * time.Millisecond, Mode: quorum.RuleStrict}
	cl := startClusterBackend(t, c, rule)
	deadline := time.Now().Add(10 * time.Second)
	for !cl.Health().Counts(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatal("the shards never counted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h := cl.Health()
	if len(h.Shards) != 3 || h.Shards[0].MarkerSlot != 5460 || h.Shards[1].MarkerSlot != 10922 || h.Shards[2].MarkerSlot != 16383 {
		t.Fatalf("marker slots %+v, want each shard's highest", h.Shards)
	}
	low, high := c.MasterOfSlot(0), c.MasterOfSlot(16383)
	if err := c.MoveSlot(5460, low, high); err != nil {
		t.Fatal(err)
	}
	deadline = time.Now().Add(5 * time.Second)
	for {
		h = cl.Health()
		if len(h.Shards) == 3 && h.Shards[0].MarkerSlot == 5459 && h.Shards[0].Up && time.Now().Before(h.Shards[0].QuarantinedUntil) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the shard whose marker slot moved: %+v", h.Shards)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(h.Shards[0].QuarantineReason, "slot of its replication marker") {
		t.Fatalf("reason %q", h.Shards[0].QuarantineReason)
	}
	if !h.Shards[1].Counts(time.Now()) || !h.Shards[2].Counts(time.Now()) {
		t.Fatalf("the other shard stopped counting: %+v", h.Shards[1])
	}
	// The marker record that moved with its slot was written by the other
	// node: the shard that now holds it does not take it for its own.
	if v, _ := high.DoAll("HGET", keyslot.InSlot(ClusterMarkerPrefix, 5460), "node"); strings.TrimSpace(v) == "" {
		t.Fatal("the moved marker names no node")
	}
	// A vote from the quarantined shard does not count; one from the
	// other does.
	col := newCollector()
	cl.SendWith(resp.AppendCommand(nil, "SET", "q{"+keyslot.Tag(10)+"}", "t", "NX", "PX", "1000"), nil, col, 1, time.Now().Add(time.Second), Checked)
	cl.SendWith(resp.AppendCommand(nil, "SET", "q{"+keyslot.Tag(12000)+"}", "t", "NX", "PX", "1000"), nil, col, 2, time.Now().Add(time.Second), Checked)
	for i := 0; i < 2; i++ {
		r := col.next(t)
		if r.r.Err != nil || !r.r.V.IsOK() || r.r.Counts != (r.tag == 2) {
			t.Fatalf("SET %d: %+v, counts must be %v", r.tag, r.r, r.tag == 2)
		}
	}
}

// A slot's commands keep their order when its master changes while some
// are in flight at the old one: those come back MOVED and go on to the new
// master, and a command sent after the proxy learnt of the move waits for
// them instead of overtaking them there. Out of order, a release sent
// after its acquisition ran first on the new master, found nothing, and
// the acquisition then left the lock there until its TTL.
func TestClusterSlotKeepsItsOrderAcrossAMove(t *testing.T) {
	c := startTestCluster(t, 3)
	cl := NewCluster(Options{Addr: c.Entry(), Logger: quiet(), Timeout: 5 * time.Second,
		Cluster: &ClusterOptions{Seeds: strings.Split(c.Seeds(), ","), Refresh: time.Hour}})
	cl.Start()
	t.Cleanup(func() { cl.Close() })
	waitFor(t, "the cluster backend", func() bool { return cl.Health().Up })
	key := "order{" + keyslot.Tag(100) + "}"
	from, to := c.MasterOfSlot(100), c.MasterOfSlot(10000)
	if err := c.MoveSlot(100, from, to); err != nil {
		t.Fatal(err)
	}
	// The proxy's map still names the old master: the acquisition goes
	// there, and waits while it is stopped.
	if err := from.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			from.Resume()
		}
	}()
	col := newCollector()
	cl.SendWith(resp.AppendCommand(nil, "SET", key, "tok", "NX", "PX", "10000"), nil, col, 1, time.Now().Add(5*time.Second), 0)
	time.Sleep(50 * time.Millisecond)
	// Another command's MOVED (or a refresh) tells the proxy of the move.
	cl.moved(100, to.Addr)
	release := undoOf(key, "tok", nil).Now
	cl.SendWith(release, nil, col, 2, time.Now().Add(5*time.Second), 0)
	time.Sleep(50 * time.Millisecond)
	if err := from.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	set, rel := col.next(t), col.next(t)
	if set.tag != 1 || set.r.Err != nil || !set.r.V.IsOK() {
		t.Fatalf("first result: %+v; want the acquisition's OK", set)
	}
	if rel.tag != 2 || rel.r.Err != nil || rel.r.V.Int != 1 {
		t.Fatalf("second result: %+v; want the release's 1 (it ran after the acquisition)", rel)
	}
	if v := getOn(t, to, key); v != "" {
		t.Fatalf("the new master holds %q after the release", v)
	}
	// The slot's commands go straight to its master again.
	cl.SendWith(resp.AppendCommand(nil, "SET", key, "tok2", "NX", "PX", "10000"), nil, col, 3, time.Now().Add(5*time.Second), 0)
	if x := col.next(t); x.tag != 3 || !x.r.V.IsOK() {
		t.Fatalf("after the move: %+v", x)
	}
	cl.mu.Lock()
	left := len(cl.moving)
	cl.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d slots still held back after their moves", left)
	}
}
