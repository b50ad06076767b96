package integration

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// sentinelGroups starts n Sentinel-managed groups (a master, a replica and
// three Sentinels each) at once, named locks-a, locks-b...; stopped at
// cleanup.
func sentinelGroups(t *testing.T, n int) []*redisproc.Group {
	t.Helper()
	groups := make([]*redisproc.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range groups {
		wg.Add(1)
		go func() { // waited for below
			defer wg.Done()
			groups[i], errs[i] = redisproc.StartGroup(t.TempDir(), fmt.Sprintf("locks-%c", 'a'+i), redisproc.GroupOptions{})
		}()
	}
	wg.Wait()
	for i, g := range groups {
		if g != nil {
			t.Cleanup(g.Stop)
		}
		if errs[i] != nil {
			t.Fatalf("Sentinel group %d: %v (run ./test.sh, which installs redis-server and redis-sentinel)", i, errs[i])
		}
	}
	return groups
}

func entries(groups []*redisproc.Group) []string {
	var out []string
	for _, g := range groups {
		out = append(out, g.Entry())
	}
	return out
}

// sentinelProxy runs a proxy over the groups, with its log kept in logs,
// and waits until every group's master is up. maxTTL sets max_ttl: the
// hold of a promoted master is max_ttl + drift + the Sentinels' 2 s lease.
func sentinelProxy(t *testing.T, backends []string, logs *syncBuffer, maxTTL time.Duration, mutate ...func(*config.Config)) *app.App {
	t.Helper()
	a := startLogged(t, backends, logs, append([]func(*config.Config){func(c *config.Config) {
		c.MaxTTL = maxTTL
		c.BackendTimeout = 200 * time.Millisecond
	}}, mutate...)...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Pool().WaitUp(ctx, len(backends)); err != nil {
		t.Fatalf("backends not up: %v (%+v)", err, a.Pool().Health())
	}
	return a
}

// waitCounts waits until backend i of a counts.
func waitCounts(t *testing.T, a *app.App, i int, within time.Duration) {
	t.Helper()
	waitFor(t, within, fmt.Sprintf("backend %d to count again", i), func() error {
		if h := a.Pool().Health()[i]; !h.Counts(time.Now()) {
			return fmt.Errorf("%+v", h)
		}
		return nil
	})
}

// currentValue reads key on the group's current master.
func currentValue(t *testing.T, g *redisproc.Group, key string) string {
	t.Helper()
	m, err := g.Current()
	if err != nil {
		t.Fatal(err)
	}
	v, err := redisproc.DoReply(m.Addr, nil, "GET", key)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := v.(string)
	return s
}

// lockLoad is clients taking and releasing locks on a few keys through a
// proxy, recording when each believed it held a lock, and which attempts
// failed.
type lockLoad struct {
	ttl  time.Duration
	stop chan struct{}
	wg   sync.WaitGroup

	granted, refused atomic.Int64
	mu               sync.Mutex
	holds            map[string][]hold
	failed           []attempt
	errs             []error
}

type hold struct {
	token      string
	start, end time.Time
	released   int64 // the release's reply
	err        error
}

type attempt struct {
	key, token string
	at         time.Time
}

var releaseScript = redis.NewScript(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)

// startLoad runs workers clients over keys through the proxy at addr.
func startLoad(t *testing.T, addr string, workers int, keys []string, ttl time.Duration) *lockLoad {
	l := &lockLoad{ttl: ttl, stop: make(chan struct{}), holds: map[string][]hold{}}
	for w := 0; w < workers; w++ {
		cl := proxyClient(t, addr, 2)
		l.wg.Add(1)
		go func() { // stopped and waited for by finish
			defer l.wg.Done()
			for n := 0; ; n++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := keys[rand.IntN(len(keys))]
				token := fmt.Sprintf("w%d-%d-%d", w, n, time.Now().UnixNano())
				t0 := time.Now()
				ok, err := cl.SetNX(context.Background(), key, token, ttl).Result()
				t1 := time.Now()
				if err != nil && err != redis.Nil {
					l.mu.Lock()
					l.errs = append(l.errs, err)
					l.mu.Unlock()
					continue
				}
				if !ok {
					l.refused.Add(1)
					l.mu.Lock()
					l.failed = append(l.failed, attempt{key, token, t0})
					l.mu.Unlock()
					time.Sleep(5 * time.Millisecond)
					continue
				}
				l.granted.Add(1)
				// The lock is held from the reply until the release is sent
				// (whatever its reply: the holder has given it up), or until
				// its validity ends, if sooner.
				validEnd := t0.Add(ttl - ttl/100 - 2*time.Millisecond)
				time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
				t2 := time.Now()
				n, rerr := releaseScript.Run(context.Background(), cl, []string{key}, token).Int64()
				end := validEnd
				if t2.Before(validEnd) {
					end = t2
				}
				l.mu.Lock()
				l.holds[key] = append(l.holds[key], hold{token, t1, end, n, rerr})
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// finish stops the clients and checks that no two of them held a lock on
// the same key at once.
func (l *lockLoad) finish(t *testing.T) {
	t.Helper()
	close(l.stop)
	l.wg.Wait()
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, hs := range l.holds {
		sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
		for i := 1; i < len(hs); i++ {
			for j := 0; j < i; j++ {
				if hs[i].start.Before(hs[j].end) {
					t.Errorf("second holder of %s: %s from %v while %s held it until %v (its release: %d, %v)", key, hs[i].token,
						hs[i].start.Format("15:04:05.000"), hs[j].token, hs[j].end.Format("15:04:05.000"), hs[j].released, hs[j].err)
				}
			}
		}
	}
	if len(l.errs) > 0 {
		t.Logf("%d client errors, the first: %v", len(l.errs), l.errs[0])
	}
}

// leftovers checks that no failed attempt's token is on any group's
// current master, among the attempts whose lock would not have expired
// yet; it returns how many it could check.
func (l *lockLoad) leftovers(t *testing.T, groups []*redisproc.Group) int {
	t.Helper()
	l.mu.Lock()
	failed := append([]attempt(nil), l.failed...)
	l.mu.Unlock()
	checked := 0
	for _, a := range failed {
		if time.Since(a.at) > l.ttl-200*time.Millisecond {
			continue
		}
		checked++
		for _, g := range groups {
			if v := currentValue(t, g, a.key); v == a.token {
				t.Errorf("a failed attempt's lock (%s = %s) is left on %s's master", a.key, a.token, g.Name)
			}
		}
	}
	return checked
}

// Locks through the proxy over three Sentinel groups, while one group
// fails over (SENTINEL FAILOVER) under load and a second proxy follows the
// same groups: no second holder, the other groups' votes keep the locks
// coming, the group counts again after its quarantine (as a promoted
// replica, decided alike by both proxies), no failed attempt is left on a
// master, and operators see the switch once in the log, in INFO proxy,
// /readyz and the metrics, labelled by the configured entry.
func TestSentinelFailoverUnderLoad(t *testing.T) {
	groups := sentinelGroups(t, 3)
	var logs, logs2 syncBuffer
	const maxTTL = 2 * time.Second
	a := sentinelProxy(t, entries(groups), &logs, maxTTL)
	b := sentinelProxy(t, entries(groups), &logs2, maxTTL)
	ctx := context.Background()
	key := uniqueKey("sentinel")
	if ok, err := proxyClient(t, a.Addr(), 2).SetNX(ctx, key, "t1", time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX over three Sentinel groups: %v, %v", ok, err)
	}
	for _, g := range groups {
		if v := currentValue(t, g, key); v != "t1" {
			t.Fatalf("%s's master holds %q; want the lock", g.Name, v)
		}
	}
	if ok, _ := proxyClient(t, b.Addr(), 2).SetNX(ctx, key, "t2", time.Second).Result(); ok {
		t.Fatal("a second client got the lock through the second proxy")
	}

	keys := []string{uniqueKey("s"), uniqueKey("s"), uniqueKey("s")}
	load := startLoad(t, a.Addr(), 3, keys, maxTTL)
	load2 := startLoad(t, b.Addr(), 3, keys, maxTTL)
	time.Sleep(300 * time.Millisecond)
	from, to, err := groups[0].Failover()
	if err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	waitFor(t, 10*time.Second, "both proxies to follow", func() error {
		return holds(a.Pool().Health()[0].Addr == to.Addr && b.Pool().Health()[0].Addr == to.Addr)
	})
	time.Sleep(100 * time.Millisecond)
	ha, hb := a.Pool().Health()[0], b.Pool().Health()[0]
	if !strings.Contains(ha.QuarantineReason, "promoted replica") || ha.QuarantineReason != hb.QuarantineReason {
		t.Fatalf("quarantine reasons %q and %q; want both the promotion", ha.QuarantineReason, hb.QuarantineReason)
	}
	// Both convert the one recorded loss with their own check's latency:
	// they agree to within a round trip under load, not to the instant.
	if d := ha.QuarantinedUntil.Sub(hb.QuarantinedUntil).Abs(); d > 250*time.Millisecond {
		t.Fatalf("the proxies end the quarantine %v apart (%v, %v)", d, ha.QuarantinedUntil, hb.QuarantinedUntil)
	}
	if ha.QuarantinedUntil.Before(switched.Add(maxTTL + 2*time.Second - 200*time.Millisecond)) {
		t.Fatalf("quarantined until %v, switched at %v: shorter than max_ttl + drift + the lease", ha.QuarantinedUntil, switched)
	}

	// What operators see while it is quarantined.
	info, err := proxyClient(t, a.Addr(), 2).Info(ctx, "proxy").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"backend0:addr=" + to.Addr + ",state=quarantined",
		"backend0_sentinel:name=locks-a,master=" + to.Addr + ",sentinels=3,agree=3,reachable=3,switches=1,last_switch_from=" + from.Addr,
		"backend0_quarantine_reason:it is a promoted replica"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO proxy lacks %q:\n%s", want, info)
		}
	}
	_, ready := httpGet(t, "http://"+a.AdminAddr()+"/readyz")
	if want := "backend 0 (locks-a, master " + to.Addr + "): quarantined for "; !strings.Contains(ready, want) || !strings.Contains(ready, "Sentinel switched master "+from.Addr+" -> "+to.Addr) {
		t.Errorf("/readyz lacks %q and the switch:\n%s", want, ready)
	}
	_, metrics := httpGet(t, "http://"+a.AdminAddr()+"/metrics")
	label := `{backend="` + groups[0].Entry() + `"}`
	if sample(metrics, "redlock_proxy_backend_sentinel_switches_total"+label) != 1 || sample(metrics, "redlock_proxy_backend_quarantined"+label) != 1 ||
		sample(metrics, "redlock_proxy_backend_sentinel_confirmed"+label) != 1 {
		t.Errorf("metrics for %s: switches, quarantined, confirmed not 1, 1, 1", label)
	}
	if strings.Contains(metrics, `backend="`+to.Addr+`"`) || strings.Contains(metrics, `backend="`+from.Addr+`"`) {
		t.Errorf("a metric is labelled by a master's address")
	}
	grantedBefore := load.granted.Load() + load2.granted.Load()

	waitCounts(t, a, 0, 10*time.Second)
	waitCounts(t, b, 0, time.Second)
	if granted := load.granted.Load() + load2.granted.Load() - grantedBefore; granted == 0 {
		t.Errorf("no lock was granted while locks-a was quarantined: the other groups' votes should have kept them coming")
	}
	time.Sleep(300 * time.Millisecond)
	load.finish(t)
	load2.finish(t)
	time.Sleep(200 * time.Millisecond) // the last undos
	checked := load.leftovers(t, groups) + load2.leftovers(t, groups)
	t.Logf("granted %d, refused %d; %d failed attempts checked for leftovers",
		load.granted.Load()+load2.granted.Load(), load.refused.Load()+load2.refused.Load(), checked)

	line := "backend locks-a: Sentinel switched master " + from.Addr + " -> " + to.Addr + "; it counts in "
	for _, l := range []*syncBuffer{&logs, &logs2} {
		if n := countLines(l, line); n != 1 {
			t.Errorf("the failover was logged %d times by a proxy; want once (%q)", n, line)
		}
	}
}

// A lock held through the proxy, then a failover of two of the three
// groups to replicas that lack it (asynchronous replication loses the
// last writes; here the lock is deleted on the replicas, made writable, to
// stand for that): a second client is refused while the first one's lock
// is valid, because the promoted masters are quarantined. The control,
// restart_quarantine off, shows the check fails without the quarantine.
func TestSentinelPromotionDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	for _, tc := range []struct {
		name, rule string
		second     bool // the second client gets the lock
	}{{"strict", "strict", false}, {"control-no-quarantine", "off", true}} {
		t.Run(tc.name, func(t *testing.T) {
			groups := sentinelGroups(t, 3)
			var logs syncBuffer
			rule := tc.rule
			if rule == "strict" {
				rule = "run-id" // the masters are fresh: trusted at first sight; a promotion seen later is not
			}
			a := sentinelProxy(t, entries(groups), &logs, 6*time.Second, func(c *config.Config) { c.RestartQuarantine = rule })
			cl := proxyClient(t, a.Addr(), 2)
			ctx := context.Background()
			key := uniqueKey("promoted")
			const ttl = 5 * time.Second
			if ok, err := cl.SetNX(ctx, key, "A", ttl).Result(); !ok || err != nil {
				t.Fatalf("A's SET NX: %v, %v", ok, err)
			}
			heldUntil := time.Now().Add(ttl - 200*time.Millisecond)
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for i, g := range groups[:2] {
				replica := g.Servers[1]
				waitFor(t, 10*time.Second, "the lock to reach the replica", func() error {
					v, _ := redisproc.DoReply(replica.Addr, nil, "GET", key)
					return holds(v == "A")
				})
				for _, args := range [][]string{{"CONFIG", "SET", "replica-read-only", "no"}, {"DEL", key}} {
					if _, err := redisproc.DoReply(replica.Addr, nil, args...); err != nil {
						t.Fatal(err)
					}
				}
				wg.Add(1)
				go func() { // waited for below
					defer wg.Done()
					_, _, errs[i] = g.Failover()
				}()
			}
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			for i, g := range groups[:2] {
				if v := currentValue(t, g, key); v != "" {
					t.Fatalf("%s's new master holds %q: the test shows nothing", g.Name, v)
				}
				waitFor(t, 10*time.Second, "the proxy to follow", func() error { h := a.Pool().Health()[i]; return holds(h.Up && h.Addr == g.Servers[1].Addr) })
			}
			ok, _ := cl.SetNX(ctx, key, "B", ttl).Result()
			if !time.Now().Before(heldUntil) {
				t.Fatal("the machine was too slow: A's lock ran out before B tried")
			}
			if ok != tc.second {
				t.Fatalf("B's SET NX while A held the lock = %v; want %v (health %+v)", ok, tc.second, a.Pool().Health())
			}
		})
	}
}

// A kill -9 of one group's master, which the Sentinels fail over by
// themselves, then a SENTINEL FAILOVER of each other group, one after
// another, each once the group before counts again, under load: no second
// holder, and each failover costs its group's vote for the quarantine
// only.
func TestSentinelGroupsFailOverOneAfterAnother(t *testing.T) {
	waits(t)
	groups := sentinelGroups(t, 3)
	var logs syncBuffer
	const maxTTL = time.Second
	a := sentinelProxy(t, entries(groups), &logs, maxTTL)
	keys := []string{uniqueKey("one-after-another"), uniqueKey("one-after-another")}
	load := startLoad(t, a.Addr(), 4, keys, maxTTL)
	for i, g := range groups {
		var from, to *redisproc.Server
		var err error
		if i == 0 {
			if from, err = g.KillMaster(); err == nil {
				to, err = g.WaitSwitch(from, 20*time.Second)
			}
		} else {
			from, to, err = g.Failover()
		}
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, 10*time.Second, "the proxy to follow "+g.Name, func() error { h := a.Pool().Health()[i]; return holds(h.Up && h.Addr == to.Addr) })
		counting := 0
		for j, h := range a.Pool().Health() {
			if j != i && h.Counts(time.Now()) {
				counting++
			}
		}
		if counting != 2 {
			t.Fatalf("while %s fails over, %d other groups count; want 2: %+v", g.Name, counting, a.Pool().Health())
		}
		before := load.granted.Load()
		waitCounts(t, a, i, 10*time.Second)
		if load.granted.Load() == before {
			t.Errorf("no lock granted while %s was quarantined", g.Name)
		}
		if n := countLines(&logs, "backend "+g.Name+": Sentinel switched master "+from.Addr+" -> "+to.Addr); n != 1 {
			t.Errorf("%s's failover logged %d times; want once", g.Name, n)
		}
	}
	load.finish(t)
	t.Logf("granted %d, refused %d", load.granted.Load(), load.refused.Load())
}

// Failover and failback in one group, beside two plain masters: the proxy
// follows the group's master there and back; on the way back the old
// master, resynced from the new one and promoted again, is quarantined
// again (its replication history changed), and each switch is logged
// once.
func TestSentinelFailoverAndFailback(t *testing.T) {
	waits(t)
	group := sentinelGroups(t, 1)[0]
	plain := startRedis(t, 2)
	var logs syncBuffer
	a := sentinelProxy(t, []string{group.Entry(), plain[0].Addr, plain[1].Addr}, &logs, time.Second)
	first, second, err := group.Failover()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the proxy to follow", func() error { h := a.Pool().Health()[0]; return holds(h.Up && h.Addr == second.Addr) })
	waitCounts(t, a, 0, 10*time.Second)
	key := uniqueKey("failback")
	if ok, err := proxyClient(t, a.Addr(), 2).SetNX(context.Background(), key, "t", time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX after the failover: %v, %v", ok, err)
	}
	if v := currentValue(t, group, key); v != "t" {
		t.Fatalf("the new master holds %q", v)
	}
	// The Sentinels turn the old master into a replica some seconds after
	// the failover; do it now, as they would.
	if err := first.Follow(second.Addr); err != nil {
		t.Fatal(err)
	}
	if err := redisproc.WaitFollowing(first, second, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	from, back, err := group.Failover()
	if err != nil {
		t.Fatal(err)
	}
	if from != second || back != first {
		t.Fatalf("the failback went from %s to %s", from.Addr, back.Addr)
	}
	waitFor(t, 10*time.Second, "the proxy to follow back", func() error { h := a.Pool().Health()[0]; return holds(h.Up && h.Addr == first.Addr) })
	h := a.Pool().Health()[0]
	if h.Counts(time.Now()) || (!strings.Contains(h.QuarantineReason, "replication history changed") && !strings.Contains(h.QuarantineReason, "promoted replica")) {
		t.Fatalf("after the failback: counts %v, quarantine reason %q; want a quarantine for the resync", h.Counts(time.Now()), h.QuarantineReason)
	}
	if h.Sentinel.Switches != 2 {
		t.Fatalf("%d switches seen; want 2", h.Sentinel.Switches)
	}
	waitCounts(t, a, 0, 10*time.Second)
	for _, line := range []string{"Sentinel switched master " + first.Addr + " -> " + second.Addr, "Sentinel switched master " + second.Addr + " -> " + first.Addr} {
		if n := countLines(&logs, line); n != 1 {
			t.Errorf("%q logged %d times; want once", line, n)
		}
	}
}

// One Sentinel of three lies: it keeps naming the old master, which after
// a SENTINEL FAILOVER still answers as a master for seconds. The proxy
// follows the two that name the new master and sends nothing to the old
// one. While a second honest Sentinel lags (stopped), no master has a
// majority, and the group's vote stops counting until it answers again.
func TestSentinelThatLiesOrLags(t *testing.T) {
	waits(t)
	group := sentinelGroups(t, 1)[0]
	plain := startRedis(t, 2)
	old := group.Servers[0]
	liar, err := redisproc.StartLiar(old.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(liar.Close)
	entry := "sentinel://" + liar.Addr() + "," + group.Sentinels[0].Addr + "," + group.Sentinels[1].Addr + "/" + group.Name
	var logs syncBuffer
	a := sentinelProxy(t, []string{entry, plain[0].Addr, plain[1].Addr}, &logs, time.Second)
	_, to, err := group.Failover()
	if err != nil {
		t.Fatal(err)
	}
	waitFor(t, 10*time.Second, "the proxy to follow the majority", func() error { h := a.Pool().Health()[0]; return holds(h.Up && h.Addr == to.Addr) })
	if info, _ := old.Info("replication"); !strings.Contains(info, "role:master") {
		t.Fatalf("the old master is a replica already: the test shows nothing")
	}
	key := uniqueKey("liar")
	cl := proxyClient(t, a.Addr(), 2)
	waitCounts(t, a, 0, 10*time.Second)
	if ok, err := cl.SetNX(context.Background(), key, "t", time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX: %v, %v", ok, err)
	}
	if v, _ := redisproc.DoReply(old.Addr, nil, "GET", key); v != "" {
		t.Fatalf("the lock reached the old master, which the liar names")
	}
	if v, _ := redisproc.DoReply(to.Addr, nil, "GET", key); v != "t" {
		t.Fatalf("the new master holds %q", v)
	}

	if err := group.Sentinels[1].Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { group.Sentinels[1].Resume() })
	waitFor(t, 10*time.Second, "the group's vote to stop counting", func() error { return holds(!a.Pool().Health()[0].Counts(time.Now())) })
	info, _ := cl.Info(context.Background(), "proxy").Result()
	if !strings.Contains(info, "backend0:addr="+to.Addr+",state=unconfirmed") || !strings.Contains(info, "backend0_sentinel_answers:"+liar.Addr()+" names "+old.Addr) {
		t.Errorf("INFO proxy does not show the group unconfirmed, with the Sentinels' answers:\n%s", info)
	}
	waitLog(t, &logs, "backend locks-a: no majority of its 3 Sentinels names a master", time.Second)
	group.Sentinels[1].Resume()
	waitCounts(t, a, 0, 5*time.Second)
	if h := a.Pool().Health()[0]; h.Addr != to.Addr {
		t.Fatalf("the proxy went to %s", h.Addr)
	}
}

// Sentinels that require a password and are reached over TLS: the proxy
// authenticates with sentinel_password and verifies their certificates
// with sentinel_tls_ca_file; without the password it names the setting.
func TestSentinelOverTLSWithAuth(t *testing.T) {
	cs := newCerts(t)
	g, err := redisproc.StartGroup(t.TempDir(), "locks-tls", redisproc.GroupOptions{SentinelPassword: "s3nt",
		SentinelTLS: &redisproc.TLSFiles{Cert: cs.ServerCert, Key: cs.ServerKey, CA: cs.CA, Client: cs.clientTLS()}})
	if err != nil {
		t.Fatalf("Sentinel group: %v", err)
	}
	t.Cleanup(g.Stop)
	plain := startRedis(t, 2)
	backends := []string{g.TLSEntry(), plain[0].Addr, plain[1].Addr}
	var logs syncBuffer
	a := sentinelProxy(t, backends, &logs, time.Second, func(c *config.Config) {
		c.SentinelPassword, c.SentinelTLS, c.SentinelTLSCAFile = "s3nt", true, cs.CA
	})
	if h := a.Pool().Health()[0]; h.Addr != g.Servers[0].Addr || h.Sentinel.Agree != 3 {
		t.Fatalf("health %+v (sentinel %+v)", h, h.Sentinel)
	}

	var logs2 syncBuffer
	startLogged(t, backends, &logs2, func(c *config.Config) { c.SentinelTLS, c.SentinelTLSCAFile = true, cs.CA })
	waitLog(t, &logs2, "NOAUTH Authentication required. (set sentinel_password", 5*time.Second)
}

// A failback to a master the Sentinels never demoted: the group fails over
// from M to R, R counts once its hold has passed, a lock is taken on it;
// then a second failover names M again, which was never a replica (the
// Sentinels cannot demote it here: see refuseDemotion), so it has
// the same run, replication id and marker as before, and lacks the lock.
// A plain master that lost the lock (deleted behind the proxy's back, as
// a master beyond a partition would miss it) makes M's vote decide. The
// switch is a loss dated at the switch: for the proxy that follows it
// (follows), and for one started after it, which never saw the switch and
// tells it from the group's config epoch that M's marker records (after).
// The control, restart_quarantine off, hands the lock out a second time.
func TestSentinelFailbackToAMasterNeverDemotedDoesNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	for _, tc := range []struct {
		name   string
		rule   string
		after  bool // a proxy started after the failback tries (the first stopped before it)
		second bool // the second client gets the lock
	}{{"follows", "run-id", false, false}, {"after", "run-id", true, false}, {"control-no-quarantine", "off", false, true}} {
		t.Run(tc.name, func(t *testing.T) {
			group := sentinelGroups(t, 1)[0]
			refuseDemotion(t, group.Servers[0])
			plain := startRedis(t, 2)
			backends := []string{group.Entry(), plain[0].Addr, plain[1].Addr}
			const maxTTL = 5 * time.Second
			proxy := func(rule string) (*app.App, func()) {
				return startApp(t, backends, func(c *config.Config) {
					c.MaxTTL, c.BackendTimeout, c.RestartQuarantine = maxTTL, 200*time.Millisecond, rule
				})
			}
			a, stopA := proxy(tc.rule)
			m, r, err := group.Failover()
			if err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the proxy to follow R", func() error { h := a.Pool().Health()[0]; return holds(h.Up && h.Addr == r.Addr) })
			waitCounts(t, a, 0, 3*maxTTL)
			ctx := context.Background()
			key := uniqueKey("failback")
			if ok, err := proxyClient(t, a.Addr(), 2).SetNX(ctx, key, "A", maxTTL).Result(); !ok || err != nil {
				t.Fatalf("A's SET NX: %v, %v", ok, err)
			}
			heldUntil := time.Now().Add(maxTTL - 200*time.Millisecond)
			if _, err := redisproc.DoReply(plain[1].Addr, nil, "DEL", key); err != nil {
				t.Fatal(err)
			}
			if tc.after {
				stopA()
			}
			from, back, err := group.Failover()
			if err != nil {
				t.Fatal(err)
			}
			if from != r || back != m {
				t.Fatalf("the failback went from %s to %s", from.Addr, back.Addr)
			}
			if v, _ := redisproc.DoReply(m.Addr, nil, "GET", key); v != "" {
				t.Fatalf("M holds %q: the test shows nothing", v)
			}
			if tc.after {
				a, _ = proxy("strict")
			}
			waitFor(t, 10*time.Second, "the proxy to follow M", func() error { h := a.Pool().Health()[0]; return holds(h.Up && h.Addr == m.Addr) })
			ok, _ := proxyClient(t, a.Addr(), 2).SetNX(ctx, key, "B", maxTTL).Result()
			if !time.Now().Before(heldUntil) {
				t.Fatal("the machine was too slow: A's lock ran out before B tried")
			}
			if ok != tc.second {
				t.Fatalf("B's SET NX while A held the lock = %v; want %v (health %+v)", ok, tc.second, a.Pool().Health()[0])
			}
			if !tc.second {
				if h := a.Pool().Health()[0]; !strings.Contains(h.QuarantineReason, "switched the group's master") {
					t.Fatalf("M's quarantine reason %q; want the switch", h.QuarantineReason)
				}
			}
		})
	}
}

// refuseDemotion makes s refuse REPLICAOF and SLAVEOF (an ACL on the
// default user, which the Sentinels use): a master the Sentinels fail
// over from then stays a master with its data, as one does until they
// demote it (some seconds after the failover), for as long as a test
// needs.
func refuseDemotion(t *testing.T, s *redisproc.Server) {
	t.Helper()
	if v, err := s.Do("ACL", "SETUSER", "default", "-replicaof", "-slaveof"); err != nil || v != "OK" {
		t.Fatalf("ACL SETUSER on %s: %q %v", s.Addr, v, err)
	}
}

// Sentinels that forget a group and learn it again (SENTINEL REMOVE and
// SENTINEL MONITOR, as Sentinels restarted without their saved
// configuration do) name it under config epoch 0 again, at whatever
// master they are told. Here: a proxy uses the group at M and stops (M's
// marker is whole, checked under epoch 0); the group fails over to R
// (epoch 1), M is never demoted (refuseDemotion); a second proxy, started
// then, sees only R, waits out its hold and grants a lock on it; a plain
// master loses the lock; the Sentinels are made to monitor M again, under
// epoch 0. The second proxy sees the switch R -> M: a switch is a loss
// whatever the epochs say (M lacks every lock granted on R), so M's vote
// does not count and the lock is not handed out again.
func TestSentinelsThatForgetTheGroupDoNotHandOutAHeldLock(t *testing.T) {
	waits(t)
	group := sentinelGroups(t, 1)[0]
	m := group.Servers[0]
	refuseDemotion(t, m)
	plain := startRedis(t, 2)
	backends := []string{group.Entry(), plain[0].Addr, plain[1].Addr}
	const maxTTL = 5 * time.Second
	proxy := func() (*app.App, func()) {
		return startApp(t, backends, func(c *config.Config) {
			c.MaxTTL, c.BackendTimeout, c.RestartQuarantine = maxTTL, 200*time.Millisecond, "strict"
		})
	}
	first, stopFirst := proxy()
	waitCounts(t, first, 0, 4*maxTTL)
	stopFirst()

	from, r, err := group.Failover()
	if err != nil {
		t.Fatal(err)
	}
	if from != m {
		t.Fatalf("the failover went from %s", from.Addr)
	}
	a, _ := proxy()
	waitFor(t, 10*time.Second, "the proxy to use R", func() error { h := a.Pool().Health()[0]; return holds(h.Up && h.Addr == r.Addr) })
	waitCounts(t, a, 0, 4*maxTTL)
	ctx := context.Background()
	cl := proxyClient(t, a.Addr(), 2)
	key := uniqueKey("forgotten")
	if ok, err := cl.SetNX(ctx, key, "A", maxTTL).Result(); !ok || err != nil {
		t.Fatalf("A's SET NX: %v, %v", ok, err)
	}
	heldUntil := time.Now().Add(maxTTL - 200*time.Millisecond)
	if _, err := redisproc.DoReply(plain[1].Addr, nil, "DEL", key); err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(m.Addr, ":")
	for _, s := range group.Sentinels {
		if v, err := s.Do("SENTINEL", "REMOVE", group.Name); err != nil || v != "OK" {
			t.Fatalf("SENTINEL REMOVE: %v %v", v, err)
		}
	}
	for _, s := range group.Sentinels {
		if v, err := s.Do("SENTINEL", "MONITOR", group.Name, "127.0.0.1", port, "2"); err != nil || v != "OK" {
			t.Fatalf("SENTINEL MONITOR: %v %v", v, err)
		}
	}
	if info, _ := m.Info("replication"); !strings.Contains(info, "role:master") {
		t.Fatal("M is not a master: the test shows nothing")
	}
	if v, _ := redisproc.DoReply(m.Addr, nil, "GET", key); v != "" {
		t.Fatalf("M holds %q: the test shows nothing", v)
	}
	waitFor(t, 10*time.Second, "the proxy to follow M", func() error { h := a.Pool().Health()[0]; return holds(h.Up && h.Addr == m.Addr) })
	ok, _ := cl.SetNX(ctx, key, "B", maxTTL).Result()
	if !time.Now().Before(heldUntil) {
		t.Fatal("the machine was too slow: A's lock ran out before B tried")
	}
	if ok {
		t.Fatalf("B's SET NX while A held the lock succeeded (health %+v)", a.Pool().Health()[0])
	}
	if h := a.Pool().Health()[0]; !strings.Contains(h.QuarantineReason, "switched the group's master") {
		t.Fatalf("M's quarantine reason %q; want the switch", h.QuarantineReason)
	}
}
