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
	deadline := time.Now().Add(within)
	for !a.Pool().Health()[i].Counts(time.Now()) {
		if time.Now().After(deadline) {
			t.Fatalf("backend %d never counted again within %v: %+v", i, within, a.Pool().Health()[i])
		}
		time.Sleep(20 * time.Millisecond)
	}
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
				// The lock is held from the reply until the release is sent,
				// or until its validity ends if the release is not granted.
				validEnd := t0.Add(ttl - ttl/100 - 2*time.Millisecond)
				time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
				t2 := time.Now()
				n, _ := releaseScript.Run(context.Background(), cl, []string{key}, token).Int()
				end := validEnd
				if n == 1 && t2.Before(validEnd) {
					end = t2
				}
				l.mu.Lock()
				l.holds[key] = append(l.holds[key], hold{token, t1, end})
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
					t.Errorf("second holder of %s: %s from %v while %s held it until %v", key, hs[i].token,
						hs[i].start.Format("15:04:05.000"), hs[j].token, hs[j].end.Format("15:04:05.000"))
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
	waitFor(t, "both proxies to follow", func() bool {
		return a.Pool().Health()[0].Addr == to.Addr && b.Pool().Health()[0].Addr == to.Addr
	})
	time.Sleep(100 * time.Millisecond)
	ha, hb := a.Pool().Health()[0], b.Pool().Health()[0]
	if !strings.Contains(ha.QuarantineReason, "promoted replica") || ha.QuarantineReason != hb.QuarantineReason {
		t.Fatalf("quarantine reasons %q and %q; want both the promotion", ha.QuarantineReason, hb.QuarantineReason)
	}
	if d := ha.QuarantinedUntil.Sub(hb.QuarantinedUntil).Abs(); d > 100*time.Millisecond {
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
