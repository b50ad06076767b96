package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// backInTime is three masters behind a proxy under the default strict rule,
// with a short max_ttl so that the quarantine of fresh masters passes
// quickly, and a lock L held by A on every master. Each test then makes the
// data of masters 0 and 1 go back in time, behind the proxy's back, and
// checks that a second client B is refused while A's lock is still valid.
type backInTime struct {
	t         *testing.T
	c         *cluster
	key       string
	heldUntil time.Time
}

const backInTimeTTL = 5 * time.Second

func newBackInTime(t *testing.T, servers []*redisproc.Server) *backInTime {
	t.Helper()
	c := clusterOver(t, servers, func(cfg *config.Config) {
		cfg.MaxTTL = 6 * time.Second
		cfg.BackendTimeout = 200 * time.Millisecond
		cfg.RestartQuarantine = "strict"
	})
	waitAllCount(t, c)
	return &backInTime{t: t, c: c}
}

// waitAllCount waits until every master's votes count (the strict rule
// quarantines fresh masters for max_ttl + drift).
func waitAllCount(t *testing.T, c *cluster) {
	t.Helper()
	waitAppCounts(t, c.app)
}

// waitAppCounts waits until every master's votes count in proxy a.
func waitAppCounts(t *testing.T, a *app.App) {
	t.Helper()
	waitFor(t, 20*time.Second, "the masters all to count", func() error {
		for _, h := range a.Pool().Health() {
			if !h.Counts(time.Now()) {
				return fmt.Errorf("%+v", a.Pool().Health())
			}
		}
		return nil
	})
}

// acquire takes L for A.
func (b *backInTime) acquire(name string) {
	b.t.Helper()
	b.key = uniqueKey(name)
	if ok, err := b.c.client(2).SetNX(context.Background(), b.key, "A", backInTimeTTL).Result(); !ok || err != nil {
		b.t.Fatalf("A's SET NX = %v, %v", ok, err)
	}
	b.heldUntil = time.Now().Add(backInTimeTTL - 100*time.Millisecond)
	if h := b.c.holders(b.key, "A"); len(h) != 3 {
		b.t.Fatalf("A holds L on %v; want every master", h)
	}
}

// lost checks that masters 0 and 1 no longer hold L (the fault did what it
// should), then that B is refused, through this proxy and through a proxy
// started now.
func (b *backInTime) lost(what string) {
	b.t.Helper()
	if h := b.c.holders(b.key, "A"); len(h) != 1 || h[0] != 2 {
		b.t.Fatalf("after %s, A's lock is on masters %v; want only on master 2 (the test shows nothing)", what, h)
	}
	if b.rivalGets(proxyClient(b.t, b.c.app.Addr(), 2)) {
		b.t.Fatalf("after %s, B got L while A's lock was still valid (health %+v)", what, b.c.app.Pool().Health())
	}
	if b.rivalGets(proxyClient(b.t, startSecondProxyStrict(b.t, b.c), 2)) {
		b.t.Fatalf("after %s, B got L through a proxy started after it while A's lock was still valid", what)
	}
}

// rivalGets has B try L through cl a few times over a second (a proxy
// that refused once may count a master at its next check), and reports
// whether B got it while A's lock was valid.
func (b *backInTime) rivalGets(cl *redis.Client) bool {
	b.t.Helper()
	ctx := context.Background()
	for end := time.Now().Add(time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		ok, _ := cl.SetNX(ctx, b.key, "B", backInTimeTTL).Result()
		if !time.Now().Before(b.heldUntil) {
			b.t.Fatalf("the machine was too slow: A's lock ran out before B tried")
		}
		if ok {
			return true
		}
	}
	return false
}

// startSecondProxyStrict runs another proxy with the cluster's settings.
func startSecondProxyStrict(t *testing.T, c *cluster) string {
	t.Helper()
	return startSecondProxyStrictApp(t, c).Addr()
}

// startSecondProxyStrictApp is startSecondProxyStrict that returns the
// proxy.
func startSecondProxyStrictApp(t *testing.T, c *cluster) *app.App {
	t.Helper()
	var addrs []string
	for _, s := range c.servers {
		addrs = append(addrs, s.Addr)
	}
	a, _ := startApp(t, addrs, func(cfg *config.Config) {
		cfg.MaxTTL = 6 * time.Second
		cfg.BackendTimeout = 200 * time.Millisecond
		cfg.RestartQuarantine = "strict"
	})
	return a
}

// A failover to replicas no proxy uses, then a failback: masters 0 and 1
// resync from their promoted replicas (losing L) and are promoted again,
// all by hand, under the proxy's live connections.
func TestFailbackDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	quick := []string{"--repl-diskless-sync-delay", "0"}
	servers := startRedis(t, 3, quick...)
	var replicas []*redisproc.Server
	for _, m := range servers[:2] {
		r, err := redisproc.StartReplica(t.TempDir(), m.Addr, quick...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Stop)
		replicas = append(replicas, r)
	}
	b := newBackInTime(t, servers)
	for _, r := range replicas {
		waitFor(t, 10*time.Second, "a replica to sync", func() error {
			info, _ := r.Info("replication")
			return holds(strings.Contains(info, "master_link_status:up"))
		})
	}
	waitAllCount(t, b.c) // a first replica gives a master a new replication id
	for _, r := range replicas {
		if err := r.Promote(); err != nil {
			t.Fatal(err)
		}
	}
	b.acquire("failback")
	for i, m := range servers[:2] {
		if err := m.Follow(replicas[i].Addr); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range servers[:2] {
		waitFor(t, 10*time.Second, "an old master to resync", func() error {
			info, _ := m.Info("replication")
			return holds(strings.Contains(info, "master_link_status:up"))
		})
		if err := m.Promote(); err != nil {
			t.Fatal(err)
		}
	}
	b.lost("a failover and a failback")
}

// Durability judged from the run that took the writes: masters with
// appendonly yes and appendfsync always, whose appendonly is switched off
// at runtime before A's grant, then killed and restarted with their durable
// configuration. What the new run says of itself proves nothing.
func TestRestartWithDurableSettingsAfterAppendonlyOffDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	servers := startRedis(t, 3, "--appendonly", "yes", "--appendfsync", "always")
	b := newBackInTime(t, servers)
	for _, m := range servers[:2] {
		if _, err := m.Do("CONFIG", "SET", "appendonly", "no"); err != nil {
			t.Fatal(err)
		}
	}
	b.acquire("appendonly-off")
	for _, m := range servers[:2] {
		if err := m.Restart(); err != nil {
			t.Fatal(err)
		}
	}
	b.lost("appendonly switched off, a kill -9 and a restart with appendfsync always")
}

// Eviction switched on, a lock evicted, and the policy reverted at once,
// within one periodic marker check.
func TestEvictionSwitchedOnAndOffDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	b := newBackInTime(t, startRedis(t, 3))
	b.acquire("evicted")
	for _, m := range b.c.servers[:2] {
		for _, args := range [][]string{
			{"CONFIG", "SET", "maxmemory-policy", "volatile-ttl"},
			{"CONFIG", "SET", "maxmemory", "1"},
			{"SET", "filler", "x"},
			{"CONFIG", "SET", "maxmemory", "0"},
			{"CONFIG", "SET", "maxmemory-policy", "noeviction"},
		} {
			m.Do(args...)
		}
	}
	b.lost("an eviction switched on and off")
}

// Eviction switched on long enough for the periodic check to see the
// policy, then reverted: the masters stay out for the hold from the last
// moment they could evict, not from the revert's next check.
func TestEvictionSeenThenRevertedDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	b := newBackInTime(t, startRedis(t, 3))
	b.acquire("evicting")
	for _, m := range b.c.servers[:2] {
		m.Do("CONFIG", "SET", "maxmemory-policy", "volatile-ttl")
		m.Do("CONFIG", "SET", "maxmemory", "1")
		m.Do("SET", "filler", "x")
	}
	time.Sleep(1500 * time.Millisecond) // a periodic check sees the policy
	for _, m := range b.c.servers[:2] {
		m.Do("CONFIG", "SET", "maxmemory", "0")
		m.Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	}
	b.lost("an eviction policy seen, then reverted")
}

// A flush of two masters, and B's acquire at once, before any periodic
// check.
func TestFlushDoesNotHandOutAHeldLockEvenAtOnce(t *testing.T) {
	waits(t)
	b := newBackInTime(t, startRedis(t, 3))
	b.acquire("flushed")
	for _, m := range b.c.servers[:2] {
		if _, err := m.Do("FLUSHALL"); err != nil {
			t.Fatal(err)
		}
	}
	b.lost("a flush")
}

// startRedisWithClocks starts n masters, the first shifted of them with a
// wall clock the test can move.
func startRedisWithClocks(t *testing.T, n, shifted int) ([]*redisproc.Server, []*redisproc.Clock) {
	t.Helper()
	dir := t.TempDir()
	var clocks []*redisproc.Clock
	var servers []*redisproc.Server
	for i := 0; i < shifted; i++ {
		s, c, err := redisproc.StartWithClock(dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Stop(); c.Close() })
		servers, clocks = append(servers, s), append(clocks, c)
	}
	return append(servers, startRedis(t, n-shifted)...), clocks
}

// The wall clocks of masters 0 and 1 step ahead by 30 s (an NTP step, a
// date set by hand): A's lock expires there at once, by their clocks,
// while A's validity lasts. B's acquire comes at once, before any
// periodic check.
func TestClockStepAheadDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	servers, clocks := startRedisWithClocks(t, 3, 2)
	b := newBackInTime(t, servers)
	b.acquire("clock-ahead")
	for _, c := range clocks {
		if err := c.Shift(30 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	b.lost("a clock step of 30 s ahead")
	for _, h := range b.c.app.Pool().Health()[:2] {
		if !strings.Contains(h.QuarantineReason, "clock jumped ahead") || h.Counts(time.Now()) {
			t.Fatalf("master %d after its clock jumped: counts %v, reason %q; want out, for its clock", h.Node, h.Counts(time.Now()), h.QuarantineReason)
		}
	}
}

// The wall clocks of masters 0 and 1 are set back 20 s, A takes its lock,
// and they are set right again: A's lock, written while they were behind,
// expires there 20 s early. No reading ever shows them ahead of where they
// were before they were set back.
func TestClockSetBackThenRightAgainDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	servers, clocks := startRedisWithClocks(t, 3, 2)
	b := newBackInTime(t, servers)
	for _, c := range clocks {
		if err := c.Shift(-20 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	b.acquire("clock-back-forward")
	for _, c := range clocks {
		if err := c.Shift(20 * time.Second); err != nil {
			t.Fatal(err)
		}
	}
	b.lost("a clock set back 20 s, then right again")
}

// Two proxies, P0 and P1, over the same masters, both counting them and
// both having read their clocks. The wall clocks of masters 0 and 1 are
// set back 20 s, A takes its lock through P0 at once (P0 reads the clocks
// set back), and they are set right again at once: A's lock expires there
// 20 s early. P1 read the clocks before the step back and reads them next
// after the step forward: its own readings agree. B's acquire through P1
// comes at once, before any periodic check of P0 records the loss.
func TestClockSetBackThenRightAgainBetweenAnotherProxysReadings(t *testing.T) {
	waits(t)
	servers, clocks := startRedisWithClocks(t, 3, 2)
	b := newBackInTime(t, servers)
	p1 := startSecondProxyStrictApp(t, b.c)
	waitAppCounts(t, p1)
	viaP1 := proxyClient(t, p1.Addr(), 2)
	if ok, err := viaP1.SetNX(context.Background(), uniqueKey("other"), "C", time.Second).Result(); !ok || err != nil {
		t.Fatalf("a grant through P1 before the steps = %v, %v", ok, err)
	}
	shift := func(d time.Duration) {
		for _, c := range clocks {
			if err := c.Shift(d); err != nil {
				t.Fatal(err)
			}
		}
	}
	shift(-20 * time.Second)
	b.acquire("clock-back-forward-two-proxies")
	shift(20 * time.Second)
	if h := b.c.holders(b.key, "A"); len(h) != 1 || h[0] != 2 {
		t.Fatalf("after the clocks were set right again, A's lock is on masters %v; want only on master 2 (the test shows nothing)", h)
	}
	if b.rivalGets(viaP1) {
		t.Fatalf("B got L through P1 while A's lock, taken through P0, was still valid (P1's health %+v)", p1.Pool().Health())
	}
}

// Two backend entries that reach one server (two names for one address)
// would give it two votes: the second is refused, with why, and the locks
// need a majority of the others.
func TestOneServerVotesOnce(t *testing.T) {
	servers := startRedis(t, 2)
	port := servers[0].Addr[strings.LastIndexByte(servers[0].Addr, ':')+1:]
	addrs := []string{servers[0].Addr, servers[1].Addr, "localhost:" + port}
	a, _ := startAppOver(t, addrs, 2)
	waitFor(t, 10*time.Second, "a backend refused as the same server", func() error {
		hs := a.Pool().Health()
		refused := 0
		for _, h := range hs {
			if !h.Up && strings.Contains(h.LastError, "the same Redis server") {
				refused++
			}
		}
		if refused != 1 {
			return fmt.Errorf("%+v", hs)
		}
		return nil
	})
}

// snapshot copies each master's replication marker to database 1: an
// older copy of its data, which SWAPDB brings back within the same run
// with everything INFO reports unchanged.
func snapshot(t *testing.T, masters []*redisproc.Server) {
	t.Helper()
	for _, m := range masters {
		if _, err := m.Do("COPY", "redlock-proxy:marker", "redlock-proxy:marker", "DB", "1", "REPLACE"); err != nil {
			t.Fatal(err)
		}
	}
}

// swapBack brings the copies of snapshot back (SWAPDB 0 1).
func swapBack(t *testing.T, masters []*redisproc.Server) {
	t.Helper()
	for _, m := range masters {
		if _, err := m.Do("SWAPDB", "0", "1"); err != nil {
			t.Fatal(err)
		}
	}
}

// The data of masters 0 and 1 goes back, within one run, to a copy taken
// before A's grant: the run, the replication ids, the counters and the
// marker's epoch are all as they were; only its sequence is lower.
func TestDataRolledBackWithinARunDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	b := newBackInTime(t, startRedis(t, 3))
	snapshot(t, b.c.servers[:2])
	b.acquire("rolled-back")
	swapBack(t, b.c.servers[:2])
	b.lost("the data brought back to a copy taken before the grant")
	for _, h := range b.c.app.Pool().Health()[:2] {
		if !strings.Contains(h.QuarantineReason, "older copy") {
			t.Fatalf("master %d after its data went back: reason %q", h.Node, h.QuarantineReason)
		}
	}
}

// The copy brought back is older than a loss the masters recorded since:
// its epoch is one that loss retired.
func TestDataRolledBackToARetiredEpochDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	b := newBackInTime(t, startRedis(t, 3))
	snapshot(t, b.c.servers[:2])
	for _, m := range b.c.servers[:2] {
		// A loss recorded with the data intact: an eviction policy seen.
		m.Do("CONFIG", "SET", "maxmemory-policy", "allkeys-lru")
		m.Do("CONFIG", "SET", "maxmemory", "1gb")
	}
	time.Sleep(1500 * time.Millisecond)
	for _, m := range b.c.servers[:2] {
		m.Do("CONFIG", "SET", "maxmemory", "0")
		m.Do("CONFIG", "SET", "maxmemory-policy", "noeviction")
	}
	waitAllCount(t, b.c)
	b.acquire("rolled-back-epoch")
	swapBack(t, b.c.servers[:2])
	b.lost("the data brought back to a copy from before a recorded loss")
}

// A second proxy that made no grant since before the copy: its own count in
// the markers is the same in the copy as in the newer data, so only the
// counts of the proxy that granted tell the copy from the newer data. Once
// it has read them (its marker checks), its very next grant after the data
// went back must not count those masters, before any marker check of its
// own runs again.
func TestDataRolledBackUnderAnIdleProxyDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	b := newBackInTime(t, startRedis(t, 3))
	idle := startSecondProxyStrictApp(t, b.c)
	waitAppCounts(t, idle)
	viaIdle := proxyClient(t, idle.Addr(), 2)
	if err := viaIdle.Ping(context.Background()).Err(); err != nil {
		t.Fatal(err)
	}
	snapshot(t, b.c.servers[:2])
	b.acquire("rolled-back-idle-proxy")
	// The idle proxy's marker checks (every second) read A's proxy's
	// counts on every master.
	time.Sleep(2500 * time.Millisecond)
	swapBack(t, b.c.servers[:2])
	if h := b.c.holders(b.key, "A"); len(h) != 1 || h[0] != 2 {
		t.Fatalf("A's lock is on masters %v; want only on master 2 (the test shows nothing)", h)
	}
	if b.rivalGets(viaIdle) {
		t.Fatalf("B got L through a proxy that made no grant since the copy, while A's lock was still valid (health %+v)", idle.Pool().Health())
	}
}

// A proxy that never saw the newer data: the only proxy that did stops
// before the masters' data goes back, and a proxy started after it learns
// the masters' sequences from the master whose data did not go back.
func TestProxyStartedAfterDataWentBackSeesIt(t *testing.T) {
	waits(t)
	servers := startRedis(t, 3)
	strict := func(cfg *config.Config) {
		cfg.MaxTTL = 10 * time.Second
		cfg.BackendTimeout = 200 * time.Millisecond
		cfg.RestartQuarantine = "strict"
	}
	first := clusterOver(t, servers, strict)
	waitAllCount(t, first)
	snapshot(t, servers[:2])
	key := uniqueKey("rolled-back-unseen")
	const ttl = 9 * time.Second
	if ok, err := first.client(2).SetNX(context.Background(), key, "A", ttl).Result(); !ok || err != nil {
		t.Fatalf("A's SET NX = %v, %v", ok, err)
	}
	heldUntil := time.Now().Add(ttl - 200*time.Millisecond)
	time.Sleep(2500 * time.Millisecond) // the first proxy tells master 2 what it saw
	first.stopApp()
	swapBack(t, servers[:2])
	if h := first.holders(key, "A"); len(h) != 1 || h[0] != 2 {
		t.Fatalf("A's lock is on masters %v; want only on master 2", h)
	}
	addrs := addrsOf(servers)
	second, _ := startApp(t, addrs, strict)
	b := &backInTime{t: t, key: key, heldUntil: heldUntil}
	if b.rivalGets(proxyClient(t, second.Addr(), 2)) {
		t.Fatal("B got L through a proxy started after the data went back, while A's lock was still valid")
	}
}
