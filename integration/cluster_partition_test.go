package integration

import (
	"context"
	"fmt"
	"math/rand"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// A Redis Cluster master that has been replaced stops counting before its
// replacement counts. The cluster (one vote of three, beside two plain
// masters) has three shards; shard A's master runs on a loopback address
// of its own, and firewall rules the test makes cut it off from the
// cluster bus while the proxies still reach it. Its replica A' takes over
// (CLUSTER FAILOVER TAKEOVER); with a long cluster-node-timeout, A goes on
// answering as the master of its slots. Proxy P1, running since before,
// reads the slot map from A first (its address sorts first); proxy P2,
// started after the takeover, reads it from another master, which names
// A'. Client X takes a lock through P2 (on A' and both plain masters), one
// plain master then loses it (deleted behind the proxy's back), and
// client Y tries it through P1: A's vote must not count, since no
// majority of the cluster's other masters names A any more. The control,
// restart_quarantine off, hands the lock out a second time.
func TestClusterReplacedMasterStopsCountingBeforeItsReplacementCounts(t *testing.T) {
	for _, tc := range []struct {
		name   string
		rule   string
		second bool
	}{{"strict", "strict", false}, {"control-no-quarantine", "off", true}} {
		t.Run(tc.name, func(t *testing.T) {
			// An address that sorts before 127.0.0.1:PORT.
			hostA := fmt.Sprintf("127.0.0.1%02d", 10+rand.Intn(90))
			c, err := redisproc.StartClusterSpec(t.TempDir(), redisproc.ClusterSpec{Shards: 3, Replicas: []int{1},
				Hosts: []string{hostA}, Extra: []string{"--cluster-node-timeout", "60000"}})
			if err != nil {
				t.Fatalf("cluster: %v (run ./test.sh, which installs redis-server)", err)
			}
			t.Cleanup(c.Stop)
			a, b, cc, a2 := c.Nodes[0], c.Nodes[1], c.Nodes[2], c.Nodes[3]
			plain := startRedis(t, 2)
			const maxTTL = 3 * time.Second
			proxy := func(seeds ...*redisproc.Server) *app.App {
				addrs := addrsOf(seeds)
				p, _ := startApp(t, []string{"cluster://" + strings.Join(addrs, ","), plain[0].Addr, plain[1].Addr}, func(cfg *config.Config) {
					cfg.MaxTTL, cfg.RestartQuarantine = maxTTL, tc.rule
				})
				return p
			}
			p1 := proxy(a, b, cc, a2)
			counting := func(p *app.App) bool {
				for _, h := range p.Pool().Health() {
					if !h.Counts(time.Now()) {
						return false
					}
				}
				return true
			}
			waitFor(t, 10*time.Second, "P1 to count every backend (the fresh markers' hold)", func() error { return holds(counting(p1)) })
			heal, err := c.CutBus(a)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if err := heal(); err != nil {
					t.Error(err)
				}
			})
			if v, err := a2.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil || v != "OK" {
				t.Fatalf("CLUSTER FAILOVER TAKEOVER: %q %v", v, err)
			}
			const slot = 100
			key := fmt.Sprintf("held{%s}", keyslot.Tag(slot))
			waitFor(t, 10*time.Second, "the other masters to name A'", func() error {
				for _, n := range []*redisproc.Server{b, cc} {
					if n.OwnerOf(slot) != a2.Addr {
						return errNotYet
					}
				}
				return holds(a.OwnerOf(slot) == a.Addr)
			})
			p2 := proxy(b, cc, a2, a)
			ctx := context.Background()
			x, y := proxyClient(t, p2.Addr(), 2), proxyClient(t, p1.Addr(), 2)
			// X takes the lock once the cluster counts for P2 (A' once its
			// hold has passed), so that its vote is A''s.
			waitFor(t, 20*time.Second, "the cluster to count for P2", func() error {
				if h := p2.Pool().Health()[0]; !h.Counts(time.Now()) {
					return fmt.Errorf("%+v", h)
				}
				return nil
			})
			if ok, err := x.SetNX(ctx, key, "X", maxTTL).Result(); !ok || err != nil {
				t.Fatalf("X's SET NX through P2: %v, %v", ok, err)
			}
			validUntil := time.Now().Add(maxTTL - 300*time.Millisecond)
			if v, _ := a2.DoAll("GET", key); strings.TrimSpace(v) != "X" {
				t.Fatalf("A' holds %q: the test shows nothing", v)
			}
			if _, err := plain[1].Do("DEL", key); err != nil {
				t.Fatal(err)
			}
			ok, _ := y.SetNX(ctx, key, "Y", maxTTL).Result()
			if !time.Now().Before(validUntil) {
				t.Fatal("the machine was too slow: X's lock ran out before Y tried")
			}
			if ok != tc.second {
				t.Fatalf("Y's SET NX through P1 while X held the lock = %v; want %v (P1's cluster: %+v\nA: %s\nA': %s)", ok, tc.second, p1.Pool().Health()[0], a.Addr, a2.Addr)
			}
			if v, _ := a.DoAll("ROLE"); !strings.HasPrefix(v, "master") {
				t.Fatalf("A is no master any more (%q): the test shows nothing", v)
			}
		})
	}
}
