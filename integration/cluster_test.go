package integration

import (
	"context"
	"fmt"
	"io"
	"math/rand"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// Redis Clusters as backends: each cluster is one vote, each key answered
// by the master of its slot.

// clusterSet is Redis Clusters with a proxy in front.
type clusterSet struct {
	t        *testing.T
	clusters []*redisproc.Cluster
	direct   []*redis.ClusterClient
	app      *app.App
	stop     func()
}

// startClusters starts n clusters of shards masters, replicas replicas
// each (in parallel), stopped at cleanup.
func startClusters(t *testing.T, n, shards int, replicas ...int) []*redisproc.Cluster {
	t.Helper()
	out := make([]*redisproc.Cluster, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range out {
		r := 0
		if i < len(replicas) {
			r = replicas[i]
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[i], errs[i] = redisproc.StartCluster(t.TempDir(), shards, r)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if out[i] != nil {
			c := out[i]
			t.Cleanup(c.Stop)
		}
		if err != nil {
			t.Fatalf("cluster %d: %v", i, err)
		}
	}
	return out
}

// proxyOverClusters runs a proxy whose backends are the clusters.
func proxyOverClusters(t *testing.T, cs []*redisproc.Cluster, mutate ...func(*config.Config)) *clusterSet {
	t.Helper()
	s := &clusterSet{t: t, clusters: cs}
	var entries []string
	for _, c := range cs {
		entries = append(entries, c.Entry())
		d := redis.NewClusterClient(&redis.ClusterOptions{Addrs: strings.Split(c.Seeds(), ","), MaxRedirects: 8, ReadTimeout: 2 * time.Second})
		s.direct = append(s.direct, d)
		t.Cleanup(func() { d.Close() })
	}
	s.app, s.stop = startApp(t, entries, mutate...)
	return s
}

// holders is how many clusters hold value under key.
func (s *clusterSet) holders(key, value string) int {
	n := 0
	for _, d := range s.direct {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, err := d.Get(ctx, key).Result()
		cancel()
		if err == nil && v == value {
			n++
		}
	}
	return n
}

// leftKeys lists the keys on every running node of every cluster but the
// proxy's markers and FENCE counters (which outlive locks by design).
func (s *clusterSet) leftKeys() []string {
	var out []string
	for ci, c := range s.clusters {
		for _, n := range c.Masters() {
			keys, err := n.DoAll("KEYS", "*")
			if err != nil {
				s.t.Fatalf("KEYS on %s: %v", n.Addr, err)
			}
			for _, k := range strings.Fields(keys) {
				if !strings.HasPrefix(k, "redlock-proxy:marker:") && !strings.HasPrefix(k, "redlock-proxy:fence-counter:") &&
					!strings.HasPrefix(k, netio.ClusterHoldsPrefix) {
					v, _ := n.DoAll("GET", k)
					pt, _ := n.DoAll("PTTL", k)
					out = append(out, fmt.Sprintf("cluster %d %s: %s=%s pttl %s", ci, n.Addr, k, v, pt))
				}
			}
		}
	}
	return out
}

func (s *clusterSet) info(t *testing.T) string {
	t.Helper()
	v, err := proxyClient(t, s.app.Addr(), 2).Info(context.Background(), "proxy").Result()
	if err != nil {
		t.Fatalf("INFO proxy: %v", err)
	}
	return v
}

func (s *clusterSet) readyz(t *testing.T) (int, string) {
	t.Helper()
	r, err := http.Get("http://" + s.app.AdminAddr() + "/readyz")
	if err != nil {
		t.Fatalf("/readyz: %v", err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(b)
}

func (s *clusterSet) metrics(t *testing.T) string {
	t.Helper()
	r, err := http.Get("http://" + s.app.AdminAddr() + "/metrics")
	if err != nil {
		t.Fatalf("/metrics: %v", err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return string(b)
}

// keysOverAllSlots is n keys spread over every slot range: keys with a
// hash tag of slot i*16384/n.
func keysOverAllSlots(prefix string, n int) []string {
	var out []string
	for i := 0; i < n; i++ {
		out = append(out, fmt.Sprintf("%s{%s}:%d", prefix, keyslot.Tag(uint16(i*keyslot.Slots/n)), i))
	}
	return out
}

// Locks over three clusters of three shards: keys over all slots, each
// grant held on a majority of clusters (here all three), FENCE numbers
// agreed and rising, releases leave nothing; multi-key scripts within one
// slot work and across slots are refused in Redis Cluster's words, with
// nothing sent; operators see every shard.
func TestLocksOverThreeClustersOfThreeShards(t *testing.T) {
	s := proxyOverClusters(t, startClusters(t, 3, 3))
	ctx := context.Background()
	cl := proxyClient(t, s.app.Addr(), 2)
	keys := keysOverAllSlots("lock", 300)
	slotsSeen := map[int]bool{}
	for i, k := range keys {
		tok := fmt.Sprintf("tok-%d", i)
		ok, err := cl.SetNX(ctx, k, tok, 10*time.Second).Result()
		if err != nil || !ok {
			t.Fatalf("SET NX %s: %v %v", k, ok, err)
		}
		if n := s.holders(k, tok); n < 2 {
			t.Fatalf("%s granted but held on %d clusters", k, n)
		}
		if ok, _ := cl.SetNX(ctx, k, "other", 10*time.Second).Result(); ok {
			t.Fatalf("%s granted twice", k)
		}
		slotsSeen[int(keyslot.OfString(k))*3/keyslot.Slots] = true
	}
	if len(slotsSeen) != 3 {
		t.Fatalf("the keys reach %d of the 3 shards", len(slotsSeen))
	}
	// FENCE: one number per grant, through the same call again; a later
	// grant of the same key gets a larger one.
	var firsts []int64
	for i, k := range keys[:30] {
		tok := fmt.Sprintf("tok-%d", i)
		n1, err := cl.Do(ctx, "FENCE", k, tok).Int64()
		if err != nil || n1 <= 0 {
			t.Fatalf("FENCE %s: %d %v", k, n1, err)
		}
		n2, _ := cl.Do(ctx, "FENCE", k, tok).Int64()
		if n2 != n1 {
			t.Fatalf("FENCE %s gave %d then %d", k, n1, n2)
		}
		firsts = append(firsts, n1)
	}
	for i, k := range keys {
		n, err := cl.Eval(ctx, seedRelease, []string{k}, fmt.Sprintf("tok-%d", i)).Int64()
		if err != nil || n != 1 {
			t.Fatalf("release %s: %d %v", k, n, err)
		}
	}
	for i, k := range keys[:30] {
		if ok, _ := cl.SetNX(ctx, k, "again", 10*time.Second).Result(); !ok {
			t.Fatalf("re-acquire %s refused", k)
		}
		n, err := cl.Do(ctx, "FENCE", k, "again").Int64()
		if err != nil || n <= firsts[i] {
			t.Fatalf("FENCE of a later grant of %s: %d (the earlier %d) %v", k, n, firsts[i], err)
		}
		if n, _ := cl.Eval(ctx, seedRelease, []string{k}, "again").Int64(); n != 1 {
			t.Fatalf("release %s", k)
		}
	}
	if left := s.leftKeys(); len(left) > 0 {
		t.Fatalf("keys left after every release: %v", left[:min(len(left), 10)])
	}

	// Multi-key scripts: within one slot (a hash tag) they work; across
	// slots they are refused before anything is sent.
	multi := `for i, k in ipairs(KEYS) do if redis.call("exists", k) == 1 then return 0 end end
for i, k in ipairs(KEYS) do redis.call("set", k, ARGV[1], "px", ARGV[2]) end
return 1`
	same := []string{"{order:7}:a", "{order:7}:b", "{order:7}:c"}
	if n, err := cl.Eval(ctx, multi, same, "m1", 10000).Int64(); err != nil || n != 1 {
		t.Fatalf("a multi-key acquire within one slot: %d %v", n, err)
	}
	for _, k := range same {
		if h := s.holders(k, "m1"); h < 2 {
			t.Fatalf("%s held on %d clusters", k, h)
		}
	}
	multiRelease := `local n = 0
for i, k in ipairs(KEYS) do if redis.call("get", k) == ARGV[1] then n = n + redis.call("del", k) end end
return n`
	if n, err := cl.Eval(ctx, multiRelease, same, "m1").Int64(); err != nil || n != 3 {
		t.Fatalf("a multi-key release within one slot: %d %v", n, err)
	}
	across := []string{"order:a", "order:b"}
	if keyslot.OfString(across[0]) == keyslot.OfString(across[1]) {
		t.Fatal("the keys share a slot")
	}
	_, err := cl.Eval(ctx, multi, across, "m2", 10000).Result()
	if err == nil || err.Error() != "CROSSSLOT Keys in request don't hash to the same slot" {
		t.Fatalf("a multi-key acquire across slots: %v, want Redis Cluster's CROSSSLOT", err)
	}
	if left := s.leftKeys(); len(left) > 0 {
		t.Fatalf("keys left: %v", left)
	}

	info := s.info(t)
	for i := range s.clusters {
		for _, want := range []string{fmt.Sprintf("backend%d_shards:3", i), fmt.Sprintf("backend%d_shards_counting:3", i),
			fmt.Sprintf("backend%d_shard0:addr=", i), "slots=0-5460"} {
			if !strings.Contains(info, want) {
				t.Fatalf("INFO proxy lacks %q:\n%s", want, info)
			}
		}
	}
	if code, body := s.readyz(t); code != 200 || !strings.Contains(body, "ready: 3 of 3 backends count") {
		t.Fatalf("/readyz %d: %s", code, body)
	}
	if m := s.metrics(t); !strings.Contains(m, `redlock_proxy_backend_shard_counting{backend="cluster://`) {
		t.Fatalf("/metrics lacks the shard series")
	}
}

// A shard's master killed and its replica promoted by the cluster, in two
// of the three clusters, the replicas lacking a held lock: the promoted
// shards do not count for the hold (no second holder), the other shards
// keep counting, and the promoted ones count again once it ends. The
// control, with restart_quarantine off, hands out the held lock.
func TestClusterShardFailoverDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	cs := startClusters(t, 3, 3, 1, 1, 0)
	const maxTTL = 2 * time.Second
	s := proxyOverClusters(t, cs, func(c *config.Config) {
		c.RestartQuarantine = "strict"
		c.MaxTTL = maxTTL
	})
	ctx := context.Background()
	cl := proxyClient(t, s.app.Addr(), 2)
	waitClusterCounting(t, s, 3, 10*time.Second) // fresh markers: the hold first

	// A key of each shard: shard 0's for the failover, shard 1's and 2's
	// must keep counting.
	keyOf := func(shard int, name string) string {
		return fmt.Sprintf("%s{%s}", name, keyslot.Tag(uint16(shard*5461+100)))
	}
	held, other := keyOf(0, "held"), keyOf(1, "other")
	if ok, err := cl.SetNX(ctx, held, "first", maxTTL).Result(); err != nil || !ok {
		t.Fatalf("first acquire: %v %v", ok, err)
	}
	failShard(t, cs[0], held)
	failShard(t, cs[1], held)

	// The promoted replicas lack the lock: without their quarantine, two
	// clusters of three would grant it to a second client.
	if ok, _ := cl.SetNX(ctx, held, "second", maxTTL).Result(); ok {
		t.Fatalf("a second holder: the promoted shards counted at once")
	}
	if ok, err := cl.SetNX(ctx, other, "o", maxTTL).Result(); err != nil || !ok {
		t.Fatalf("another shard's key, during the quarantine: %v %v (the other shards must keep counting)", ok, err)
	}
	info := s.info(t)
	if !strings.Contains(info, "backend0_shard0:") || !strings.Contains(info, "state=quarantined") ||
		!strings.Contains(info, "promoted replica") && !strings.Contains(info, "(a failover)") {
		t.Fatalf("INFO proxy does not show the quarantined shard:\n%s", info)
	}
	if code, body := s.readyz(t); code != 503 || !strings.Contains(body, "backend 0 (cluster://") || !strings.Contains(body, "shard ") {
		t.Fatalf("/readyz %d does not name the shard: %s", code, body)
	}
	// Once the hold ends, the promoted shards count again.
	waitClusterCounting(t, s, 3, 4*maxTTL)
	if ok, err := cl.SetNX(ctx, held+"x", "after", maxTTL).Result(); err != nil || !ok {
		t.Fatalf("shard 0's keys after the quarantine: %v %v", ok, err)
	}
	s.stop()

	// The control: restart_quarantine off, the same failover of shard 1.
	ctl := proxyOverClusters(t, cs, func(c *config.Config) { c.RestartQuarantine = "off"; c.MaxTTL = maxTTL })
	ccl := proxyClient(t, ctl.app.Addr(), 2)
	key1 := keyOf(1, "ctl")
	if ok, err := ccl.SetNX(ctx, key1, "first", maxTTL).Result(); err != nil || !ok {
		t.Fatalf("control's first acquire: %v %v", ok, err)
	}
	failShard(t, cs[0], key1)
	failShard(t, cs[1], key1)
	// The control shows what the quarantine prevents.
	waitFor(t, 5*time.Second, "control: a second holder without the quarantine (else the test cannot fail)", func() error {
		ok, err := ccl.SetNX(ctx, key1, "second", maxTTL).Result()
		if !ok {
			return fmt.Errorf("refused (%v)", err)
		}
		return nil
	})
}

// failShard deletes key on the replica of its shard's master (so the
// replica lacks the lock), kills the master and waits for the cluster to
// promote the replica.
func failShard(t *testing.T, c *redisproc.Cluster, key string) {
	t.Helper()
	m := c.MasterOfSlot(int(keyslot.OfString(key)))
	if m == nil {
		t.Fatalf("no master for %s", key)
	}
	r := c.ReplicaOf(m)
	if r == nil {
		t.Fatalf("no replica of %s", m.Addr)
	}
	deadline := time.Now().Add(3 * time.Second)
	for { // the lock reaches the replica, then the replica loses it
		if v, _ := r.Do("READONLY"); v == "OK" {
			if got, _ := r.DoAll("GET", key); strings.TrimSpace(got) != "" || time.Now().After(deadline) {
				break
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if _, err := r.Do("CONFIG", "SET", "replica-read-only", "no"); err != nil {
		t.Fatal(err)
	}
	r.Do("DEL", key)
	m.Kill()
	if err := c.WaitMaster(r, 15*time.Second); err != nil {
		t.Fatal(err)
	}
}

// waitClusterCounting waits until n backends count as a whole.
func waitClusterCounting(t *testing.T, s *clusterSet, n int, within time.Duration) {
	t.Helper()
	waitFor(t, within, fmt.Sprintf("%d clusters to count", n), func() error {
		c := 0
		for _, h := range s.app.Pool().Health() {
			if h.Counts(time.Now()) {
				c++
			}
		}
		if c < n {
			return fmt.Errorf("%d count:\n%s", c, s.info(t))
		}
		return nil
	})
}

// A resharding under load (redis-cli --cluster reshard in two clusters):
// clients contend for keys over every slot with acquires, FENCE and
// releases; no lock has two holders, and once they stop no key is left:
// no undo was lost, whatever moved.
func TestClusterReshardUnderLoad(t *testing.T) {
	cs := startClusters(t, 3, 3)
	s := proxyOverClusters(t, cs)
	keys := keysOverAllSlots("load", 40)
	var holding sync.Map    // key -> token of the client that believes it holds it
	var unreleased sync.Map // key -> the replies of a release that never answered 1
	var grants, refusals, second atomic.Int64
	var bad atomic.Value
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cl := proxyClient(t, s.app.Addr(), 2)
			rnd := rand.New(rand.NewSource(int64(w)))
			for i := 0; ctx.Err() == nil; i++ {
				k := keys[rnd.Intn(len(keys))]
				tok := fmt.Sprintf("w%d-%d", w, i)
				ok, err := cl.SetNX(context.Background(), k, tok, 5*time.Second).Result()
				if err != nil || !ok {
					refusals.Add(1)
					continue
				}
				grants.Add(1)
				if prev, loaded := holding.LoadOrStore(k, tok); loaded {
					second.Add(1)
					bad.Store(fmt.Sprintf("%s granted to %s while %s held it", k, tok, prev))
				}
				if i%4 == 0 {
					cl.Do(context.Background(), "FENCE", k, tok)
				}
				holding.Delete(k)
				var tries []string
				for try := 0; try < 20; try++ {
					n, err := cl.Eval(context.Background(), seedRelease, []string{k}, tok).Int64()
					if err == nil && n == 1 {
						tries = nil
						break
					}
					tries = append(tries, fmt.Sprint(n, err))
					time.Sleep(20 * time.Millisecond)
				}
				if tries != nil {
					unreleased.Store(k, fmt.Sprintf("%s's release answered %v", tok, tries))
				}
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	m0, m1 := cs[0].MasterOfSlot(0), cs[0].MasterOfSlot(6000)
	n1, n2 := cs[1].MasterOfSlot(12000), cs[1].MasterOfSlot(0)
	errc := make(chan error, 2)
	go func() { errc <- cs[0].Reshard(context.Background(), m0, m1, 2000) }()
	go func() { errc <- cs[1].Reshard(context.Background(), n1, n2, 2000) }()
	for i := 0; i < 2; i++ {
		if err := <-errc; err != nil {
			cancel()
			wg.Wait()
			t.Fatal(err)
		}
	}
	time.Sleep(300 * time.Millisecond)
	cancel()
	wg.Wait()
	if second.Load() > 0 {
		t.Fatalf("%d second holders: %v", second.Load(), bad.Load())
	}
	if grants.Load() < 50 {
		t.Fatalf("only %d grants under load (%d refused)", grants.Load(), refusals.Load())
	}
	// Undos and releases run just after their replies: give them a moment.
	deadline := time.Now().Add(3 * time.Second)
	for {
		left := s.leftKeys()
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			var failed []string
			unreleased.Range(func(k, v any) bool { failed = append(failed, fmt.Sprintf("%s: %s", k, v)); return len(failed) < 10 })
			t.Fatalf("after %d grants and %d refusals, keys left (a lost undo or release): %v; releases that failed: %v",
				grants.Load(), refusals.Load(), left[:min(10, len(left))], failed)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("%d grants, %d refusals through the resharding", grants.Load(), refusals.Load())
}

// A Redis Cluster loss follows its data. A lock is held on a cluster (one
// vote) and two plain masters; one plain master then loses it (deleted
// behind the proxy's back, as a master beyond a partition would miss it).
// The shard A that holds the lock's slot loses its data (FLUSHALL) and
// stops counting; then the slot moves to another shard B, which counts,
// keys and all (there is no lock left to move). The slot stays out of the
// vote until A's hold ends, wherever it is: through the proxy that saw
// the loss, and through one started after the resharding (strict, once
// every fresh marker's hold has passed), which reads the hold the first
// recorded on the masters. The control, restart_quarantine off, hands the
// lock out a second time.
func TestClusterLossFollowsItsSlotAcrossAResharding(t *testing.T) {
	waits(t)
	for _, tc := range []struct {
		name   string
		rule   string
		second bool // the second client gets the lock
	}{{"strict", "run-id", false}, {"control-no-quarantine", "off", true}} {
		t.Run(tc.name, func(t *testing.T) {
			c := startClusters(t, 1, 3)[0]
			plain := startRedis(t, 2)
			backends := []string{c.Entry(), plain[0].Addr, plain[1].Addr}
			const maxTTL = 8 * time.Second
			proxy := func(rule string) *app.App {
				a, _ := startApp(t, backends, func(cfg *config.Config) { cfg.MaxTTL, cfg.RestartQuarantine = maxTTL, rule })
				return a
			}
			x := proxy(tc.rule)
			began := time.Now()
			const slot = 100
			key := fmt.Sprintf("held{%s}", keyslot.Tag(slot))
			a, b := c.MasterOfSlot(slot), c.MasterOfSlot(6000)
			ctx := context.Background()
			if tc.rule != "off" {
				// The fresh markers' hold passes first, so that a strict proxy
				// started later counts every master but A.
				time.Sleep(maxTTL + 3*time.Second)
			}
			if ok, err := proxyClient(t, x.Addr(), 2).SetNX(ctx, key, "A", maxTTL).Result(); !ok || err != nil {
				t.Fatalf("A's SET NX: %v, %v", ok, err)
			}
			heldUntil := time.Now().Add(maxTTL - 300*time.Millisecond)
			if _, err := plain[1].Do("DEL", key); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			if tc.rule != "off" {
				waitFor(t, 10*time.Second, "the proxy to see A's loss", func() error {
					for _, sh := range x.Pool().Health()[0].Shards {
						if sh.Addr == a.Addr && sh.QuarantinedUntil.After(time.Now()) {
							return nil
						}
					}
					return errNotYet
				})
			}
			if err := c.MoveSlot(slot, a, b); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the proxy to route the slot to B", func() error {
				for _, sh := range x.Pool().Health()[0].Shards {
					if sh.Addr == b.Addr && strings.HasPrefix(sh.Slots, fmt.Sprintf("%d,", slot)) {
						return holds(sh.Up)
					}
				}
				return errNotYet
			})
			tries := []*app.App{x}
			if tc.rule != "off" {
				tries = append(tries, proxy("strict")) // started after the resharding
			}
			for i, p := range tries {
				ok, _ := proxyClient(t, p.Addr(), 2).SetNX(ctx, key, fmt.Sprintf("B%d", i), maxTTL).Result()
				if !time.Now().Before(heldUntil) {
					t.Fatalf("the machine was too slow: A's lock ran out before B%d tried (%v after the start)", i, time.Since(began))
				}
				if ok != tc.second {
					t.Fatalf("B%d's SET NX while A held the lock = %v; want %v (health %+v)", i, ok, tc.second, p.Pool().Health()[0])
				}
				if tc.second {
					break
				}
			}
		})
	}
}
