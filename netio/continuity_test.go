package netio

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/faultnet"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/respconn"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// patientLink is a strict link whose periodic marker check never runs
// during a test: only the continuity checks that follow grants can see what
// happens to the master.
func patientLink(t *testing.T, addr string, hold time.Duration) *Link {
	t.Helper()
	return startLink(t, Options{Addr: addr, Restart: quorum.RestartRule{Hold: hold}, HealthInterval: time.Hour})
}

// grant sends SET key value NX PX 10000 as a grant (Checked) and
// returns its result.
func grant(t *testing.T, l *Link, key, value string) tagged {
	t.Helper()
	c := newCollector()
	l.SendWith(cmd("SET", key, value, "NX", "PX", "10000"), nil, c, 0, soon(), Checked)
	return c.next(t)
}

// grantCounts reports whether a grant on a fresh key counts.
func grantCounts(t *testing.T, l *Link) bool {
	t.Helper()
	x := grant(t, l, "probe:"+time.Now().Format(time.RFC3339Nano), "v")
	if x.r.Err != nil || !x.r.V.IsOK() {
		t.Fatalf("grant: %+v", x.r)
	}
	return x.r.Counts
}

// waitCounting waits for the link's first quarantine to end.
func waitCounting(t *testing.T, l *Link) {
	t.Helper()
	waitFor(t, "the master to count", func() bool { return grantCounts(t, l) })
}

// freshLinkQuarantined checks that a link that has seen nothing of the
// master (a proxy started now) keeps it out for about the hold from now,
// for the reason given.
func freshLinkQuarantined(t *testing.T, addr string, hold time.Duration, reason string) {
	t.Helper()
	from := time.Now()
	l := patientLink(t, addr, hold)
	h := l.Health()
	if h.QuarantinedUntil.Before(from.Add(hold/2)) || !strings.Contains(h.QuarantineReason, reason) {
		t.Fatalf("a proxy started after the loss: health %+v; want a quarantine for %q until about %v", h, reason, from.Add(hold))
	}
	if grantCounts(t, l) {
		t.Fatal("a proxy started after the loss counts the master")
	}
}

// A flush under a live connection: the very next grant does not count,
// with no periodic check in between, and every proxy keeps the master out.
func TestGrantAfterAFlushDoesNotCount(t *testing.T) {
	s := startRedis(t)
	hold := 3 * time.Second
	l := patientLink(t, s.Addr, hold)
	waitCounting(t, l)
	if x := grant(t, l, "lock", "first-holder"); !x.r.Counts {
		t.Fatalf("the first grant does not count: %+v", x.r)
	}
	if _, err := s.Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	x := grant(t, l, "lock", "second-holder")
	if x.r.Err != nil || !x.r.V.IsOK() {
		t.Fatalf("SET NX after the flush: %+v", x.r)
	}
	if x.r.Counts {
		t.Fatalf("a grant right after a flush counts (health %+v)", l.Health())
	}
	waitFor(t, "the loss to be recorded", func() bool { return !l.Health().Unsure })
	if grantCounts(t, l) {
		t.Fatalf("the flushed master counts again at once (health %+v)", l.Health())
	}
	freshLinkQuarantined(t, s.Addr, hold, "replication marker")
}

// Eviction switched on and off again between two grants: the keys it
// evicted are gone, the policy is back to noeviction, and still the next
// grant does not count, nor does any proxy count the master for the hold.
func TestGrantAfterEvictionSwitchedOnAndOffDoesNotCount(t *testing.T) {
	s := startRedis(t)
	hold := 3 * time.Second
	l := patientLink(t, s.Addr, hold)
	waitCounting(t, l)
	if x := grant(t, l, "lock", "first-holder"); !x.r.Counts {
		t.Fatalf("the first grant does not count: %+v", x.r)
	}
	evictAndRevert(s, "volatile-ttl")
	if r, _ := s.Do("EXISTS", "lock"); r != "0" {
		t.Fatalf("the lock was not evicted (EXISTS %s): the test shows nothing", r)
	}
	x := grant(t, l, "lock", "second-holder")
	if x.r.Err != nil || !x.r.V.IsOK() {
		t.Fatalf("SET NX after the eviction: %+v", x.r)
	}
	if x.r.Counts {
		t.Fatalf("a grant right after an eviction counts (health %+v)", l.Health())
	}
	waitFor(t, "the loss to be recorded", func() bool { return !l.Health().Unsure })
	freshLinkQuarantined(t, s.Addr, hold, "evicted keys")
}

// An eviction followed by CONFIG RESETSTAT (which puts evicted_keys back to
// 0) is still seen: the commands processed went back.
func TestGrantAfterEvictionAndAStatisticsResetDoesNotCount(t *testing.T) {
	s := startRedis(t)
	l := patientLink(t, s.Addr, 3*time.Second)
	waitCounting(t, l)
	grant(t, l, "lock", "first-holder")
	// Only keys with a TTL go: the marker stays, so that only the count
	// of commands processed, which the reset takes back, shows it.
	evictAndRevert(s, "volatile-random")
	s.Do("CONFIG", "RESETSTAT")
	if x := grant(t, l, "lock", "second-holder"); x.r.Counts {
		t.Fatalf("a grant after an eviction hidden by CONFIG RESETSTAT counts: %+v", x.r)
	}
}

// evictAndRevert switches eviction on with policy, makes the master evict
// (a write over maxmemory 1), and switches it off again.
func evictAndRevert(s *redisproc.Server, policy string) {
	for _, args := range [][]string{
		{"CONFIG", "SET", "maxmemory-policy", policy},
		{"CONFIG", "SET", "maxmemory", "1"},
		{"SET", "filler", "x"}, // may be refused (OOM) once all is evicted
		{"CONFIG", "SET", "maxmemory", "0"},
		{"CONFIG", "SET", "maxmemory-policy", "noeviction"},
	} {
		s.Do(args...)
	}
}

// A failover and a failback done by hand under a live connection: the
// replica is promoted, the master resyncs from it (losing what it held
// since) and is promoted again. The next grant does not count, and a proxy
// that starts after the failback keeps the master out for the hold.
func TestGrantAfterAFailbackDoesNotCount(t *testing.T) {
	m := startRedis(t)
	hold := 3 * time.Second
	l := patientLink(t, m.Addr, hold)
	waitCounting(t, l)
	r, err := redisproc.StartReplica(t.TempDir(), m.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	waitFor(t, "the replica to sync", func() bool { v, _ := r.Do("EXISTS", MarkerKey); return v == "1" })
	// A first replica gives the master a new replication id: the grant
	// that sees it does not count, and the marker check that follows finds
	// the data as it was.
	waitCounting(t, l)
	if err := r.Promote(); err != nil {
		t.Fatal(err)
	}
	if x := grant(t, l, "lock", "first-holder"); !x.r.Counts {
		t.Fatalf("a grant on the master before the failback does not count: %+v", x.r)
	}
	if err := m.Follow(r.Addr); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the old master to resync", func() bool {
		info, _ := m.Info("replication")
		return strings.Contains(info, "master_link_status:up")
	})
	if err := m.Promote(); err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Do("EXISTS", "lock"); v != "0" {
		t.Fatal("the failed-back master still holds the lock: the test shows nothing")
	}
	if x := grant(t, l, "lock", "second-holder"); x.r.Err == nil && x.r.V.IsOK() && x.r.Counts {
		t.Fatalf("a grant on a failed-back master counts (health %+v)", l.Health())
	}
	waitFor(t, "the loss to be recorded", func() bool { h := l.Health(); return h.Up && !h.Unsure })
	freshLinkQuarantined(t, m.Addr, hold, "replication history changed")
}

// Another server answering at the master's address (a moved virtual IP, a
// DNS change) is not the master this proxy knew, whatever marker it holds.
func TestAnotherServerAtTheAddressIsQuarantined(t *testing.T) {
	a, b := startRedis(t), startRedis(t)
	hold := 3 * time.Second
	// b is a master other proxies already use: its marker is old.
	lb := patientLink(t, b.Addr, hold)
	waitCounting(t, lb)
	rl, err := faultnet.Listen(a.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rl.Close() })
	l := patientLink(t, rl.Addr(), hold)
	waitCounting(t, l)
	moved := time.Now()
	rl.Retarget(b.Addr)
	waitFor(t, "the reconnect", func() bool { h := l.Health(); return h.Up && h.Connects >= 2 })
	h := l.Health()
	if h.QuarantinedUntil.Before(moved.Add(hold)) || !strings.Contains(h.QuarantineReason, "another server") {
		t.Fatalf("health %+v after the address moved to another master: want quarantined as replaced", h)
	}
}

// Replies reach their receivers in the order their commands were sent,
// though a grant's reply waits for the continuity check behind it: a
// command sent after the grant, in the same write, is answered after it.
// (A Cluster re-sends redirected commands in the order their replies
// arrive: a release that overtook its acquisition would run first on the
// new owner and leave the lock there.)
func TestRepliesKeepTheirOrderBehindAHeldGrant(t *testing.T) {
	s := startRedis(t)
	l := patientLink(t, s.Addr, 10*time.Millisecond) // a restart rule: grants are checked
	waitCounting(t, l)
	c := newCollector()
	const rounds = 50
	for r := 0; r < rounds; r++ {
		// Stopped, the master answers nothing: what is sent meanwhile
		// goes out in one write when it resumes.
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		base := r * 4
		l.Send(cmd("PING"), nil, c, base, soon())
		key := fmt.Sprintf("order:%d", r)
		l.SendWith(cmd("SET", key, "v", "NX", "PX", "10000"), nil, c, base+1, soon(), Checked)
		l.Send(cmd("GET", key), nil, c, base+2, soon())
		l.Send(cmd("DEL", key), nil, c, base+3, soon())
		if err := s.Resume(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 4; i++ {
			if x := c.next(t); x.tag != base+i || x.r.Err != nil {
				t.Fatalf("round %d: reply %d went to tag %d (%+v); want tag %d: replies out of their commands' order", r, i, x.tag, x.r, base+i)
			}
		}
	}
}

// The check's command carries the marker's findings and this proxy's
// count as the script reads them (continuity.lua's ARGV), and is encoded
// with no allocation once its buffer has grown: one goes with every write
// of grants.
func TestCheckEncoding(t *testing.T) {
	c := contState{replid: "8e3c4038da8c51ab96b3a3d4f45f94999d82968c", epoch: "e7", evicted: "*", cmds: 1234567, seq: 42}
	got := string(c.encode("redlock-proxy:marker", "px1", 300*time.Second))
	want := string(cmd("EVALSHA", contScript.Sha, "1", "redlock-proxy:marker", c.replid, "e7", "*", "1234567", "px1", "42", "300000"))
	if got != want {
		t.Fatalf("check encoded as\n%q\nwant\n%q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { c.encode("redlock-proxy:marker", "px1", 300*time.Second) }); n != 0 {
		t.Errorf("%.0f allocations per check", n)
	}
	// The other proxies' counts learned follow, in pairs.
	c.witnesses = []witness{{"qx", 9}, {"zx", 1}}
	got = string(c.encode("redlock-proxy:marker", "px1", 300*time.Second))
	want = string(cmd("EVALSHA", contScript.Sha, "1", "redlock-proxy:marker", c.replid, "e7", "*", "1234567", "px1", "42", "300000", "qx", "9", "zx", "1"))
	if got != want {
		t.Fatalf("check with other proxies' counts encoded as\n%q\nwant\n%q", got, want)
	}
	if n := testing.AllocsPerRun(100, func() { c.encode("redlock-proxy:marker", "px1", 300*time.Second) }); n != 0 {
		t.Errorf("%.0f allocations per check with other proxies' counts", n)
	}
}

// TestContinuityScriptRefusesEachBreak runs the check itself on a real
// redis-server, once with what the last marker check read and once with
// each reading the data's history no longer matches: each must answer 0
// and move nothing. It also checks the record of the deadline: written
// half a second beyond the longest TTL, left alone by a check it covers.
func TestContinuityScriptRefusesEachBreak(t *testing.T) {
	r := respconn.Start(t)
	info := func(section, field string) string {
		v := r.Do("INFO", section)
		for _, line := range strings.Split(string(v.Str), "\r\n") {
			if val, ok := strings.CutPrefix(line, field+":"); ok {
				return val
			}
		}
		t.Fatalf("INFO %s has no %s", section, field)
		return ""
	}
	const mkey = "redlock-proxy:marker"
	r.Do("HSET", mkey, "epoch", "e1", "c:px", "7", "c:qx", "3")
	replid := info("replication", "master_replid")
	good := func() []string {
		return []string{replid, "e1", info("stats", "evicted_keys"), info("stats", "total_commands_processed"), "px", "7", "0"}
	}
	check := func(argv []string) resp.Value {
		t.Helper()
		return r.Eval(string(contLua), []string{mkey}, argv)
	}
	count := func() string { return string(r.Do("HGET", mkey, "c:px").Str) }

	breaks := map[string]func(a []string){
		"another replication id":         func(a []string) { a[0] = strings.Repeat("0", 40) },
		"a prefix of the replication id": func(a []string) { a[0] = replid[:39] },
		"another epoch":                  func(a []string) { a[1] = "e2" },
		"an eviction since":              func(a []string) { a[2] = "1" + a[2] },
		"fewer commands than before":     func(a []string) { a[3] = "1" + a[3] + "0" },
		"an older count of this proxy's": func(a []string) { a[5] = "8" },
	}
	for name, change := range breaks {
		before := count()
		a := good()
		change(a)
		if v := check(a); v.Kind != resp.KindInt || v.Int != 0 {
			t.Errorf("%s: the check answered %s; want 0", name, v.String())
		}
		if after := count(); after != before {
			t.Errorf("%s: the count moved from %s to %s", name, before, after)
		}
	}

	// Another proxy's count learned higher than the marker's: a copy
	// of the data from before that proxy's write (this proxy's own count
	// is as it was), as is a count of a proxy the marker lacks.
	for name, w := range map[string][]string{
		"an older count of another proxy's": {"qx", "4"},
		"no count of another proxy's":       {"zx", "1"},
		"one of two counts older":           {"qx", "3", "zx", "1"},
	} {
		before := count()
		if v := check(append(good(), w...)); v.Kind != resp.KindInt || v.Int != 0 {
			t.Errorf("%s: the check answered %s; want 0", name, v.String())
		}
		if after := count(); after != before {
			t.Errorf("%s: the count moved from %s to %s", name, before, after)
		}
	}

	a := append(good(), "qx", "3", "qx", "2")
	a[2] = "*" // the upgrade's old Redis: evictions are no loss
	if v := check(a); v.Kind != resp.KindArray || len(v.Elems) != 4 || v.Elems[1].Int != 8 || v.Elems[2].Int != 0 {
		t.Fatalf("an unbroken check answered %s; want {clock, 8, 0, 0}", v.String())
	}

	// The record: a 10 s TTL writes clock + 10.5 s; a shorter one that it
	// covers writes nothing; a longer one moves it on.
	a = good()
	a[6] = "10000"
	v := check(a)
	until := func() int64 {
		n, err := strconv.ParseInt(string(r.Do("HGET", mkey, "until").Str), 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if u, now := until(), v.Elems[0].Int; u != now+10500 {
		t.Fatalf("until = %d after a 10 s grant at %d; want %d", u, now, now+10500)
	}
	first := until()
	a = good()
	a[5], a[6] = "9", "5000"
	check(a)
	if u := until(); u != first {
		t.Fatalf("a 5 s grant moved until from %d to %d; a 10 s one covers it", first, u)
	}
	a = good()
	a[5], a[6] = "10", "60000"
	v = check(a)
	if u := until(); u != v.Elems[0].Int+60500 {
		t.Fatalf("until = %d after a 60 s grant at %d", u, v.Elems[0].Int)
	}

	// The master's last reading of its clock: a check that finds it more
	// than 20 ms ahead of its own counts a step back, with its size, and
	// every check writes its own reading.
	clk := func() int64 {
		n, _ := strconv.ParseInt(string(r.Do("HGET", mkey, "clk").Str), 10, 64)
		return n
	}
	if c := clk(); c != v.Elems[0].Int {
		t.Fatalf("clk = %d after a check that read %d", c, v.Elems[0].Int)
	}
	r.Do("HSET", mkey, "clk", strconv.FormatInt(v.Elems[0].Int+30000, 10))
	a = good()
	a[5] = "11"
	v = check(a)
	if len(v.Elems) != 4 || v.Elems[2].Int != 1 || v.Elems[3].Int < 29000 || v.Elems[3].Int > 30000 {
		t.Fatalf("a check 30 s behind the last reading answered %s; want {clock, 12, 1, ~30000}", v.String())
	}
	if c := clk(); c != v.Elems[0].Int {
		t.Fatalf("clk = %d after a check that read %d", c, v.Elems[0].Int)
	}
	a = good()
	a[5] = "12"
	if v = check(a); len(v.Elems) != 4 || v.Elems[2].Int != 1 {
		t.Fatalf("a check after it answered %s; want the count of 1 kept", v.String())
	}

	// A replica: whatever else matches, the check answers 0 and writes
	// nothing (a replica that accepts writes would still be replaced by
	// its master's data).
	r.Do("CONFIG", "SET", "replica-read-only", "no")
	r.Do("REPLICAOF", "127.0.0.1", "1")
	defer r.Do("REPLICAOF", "NO", "ONE")
	a = good()
	a[0], a[5] = replid, "13"
	if v := check(a); v.Kind != resp.KindInt || v.Int != 0 {
		t.Fatalf("on a replica the check answered %s; want 0", v.String())
	}
}
