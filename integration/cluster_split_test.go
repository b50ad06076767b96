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

// A Redis Cluster split in two, whose halves each name a master of the
// same slot, counts once even when masters join one half. The cluster
// (one vote of three, beside two plain masters) has three shards A, B and
// C, and A's replica A'. The cluster bus is split: A, B and C on one
// side, A' on the other, where three new masters D, E and F join it
// (CLUSTER MEET) and each gets one of the slots A' took over with CLUSTER
// FAILOVER TAKEOVER. Every node still answers every proxy. Proxy P1,
// running since before, reads only A, B and C, which know nothing of the
// other side: B and C, the whole of the other masters they know, name A.
// Proxy P2, started after, reads every node: D, E and F, three of the
// five masters other than A and A' that some node names, name A'. A
// majority of one half's masters and a majority of the other's share no
// master, so they must not both count. An earlier holder's key lingers
// on one plain master while client X takes the lock through P2, and is
// gone when client Y tries through P1: only the cluster's vote may stand
// between them. The control, restart_quarantine off, hands the lock out
// twice.
func TestClusterSplitWithNewMastersCountsOnce(t *testing.T) {
	for _, tc := range []struct {
		name  string
		rule  string
		twice bool
	}{{"strict", "strict", false}, {"control-no-quarantine", "off", true}} {
		t.Run(tc.name, func(t *testing.T) {
			// An address that sorts before 127.0.0.1:PORT.
			side := fmt.Sprintf("127.0.0.1%02d", 10+rand.Intn(90))
			slow := []string{"--cluster-node-timeout", "60000"}
			c, err := redisproc.StartClusterSpec(t.TempDir(), redisproc.ClusterSpec{Shards: 3, Replicas: []int{1},
				Hosts: []string{"", "", "", side}, Extra: slow})
			if err != nil {
				t.Fatalf("cluster: %v (run ./test.sh, which installs redis-server)", err)
			}
			t.Cleanup(c.Stop)
			a, b, cc, a2 := c.Nodes[0], c.Nodes[1], c.Nodes[2], c.Nodes[3]
			var fresh []*redisproc.Server
			for range 3 {
				n, err := c.AddNode(side, slow...)
				if err != nil {
					t.Fatal(err)
				}
				fresh = append(fresh, n)
			}
			plain := startRedis(t, 2)
			const maxTTL = 3 * time.Second
			proxy := func(seeds ...*redisproc.Server) *app.App {
				p, _ := startAppOver(t, []string{"cluster://" + strings.Join(addrsOf(seeds), ","), plain[0].Addr, plain[1].Addr}, 2,
					func(cfg *config.Config) { cfg.MaxTTL, cfg.RestartQuarantine = maxTTL, tc.rule })
				return p
			}
			p1 := proxy(a, b, cc)
			waitFor(t, 10*time.Second, "P1 to count every backend (the fresh markers' hold)", func() error {
				for _, h := range p1.Pool().Health() {
					if !h.Counts(time.Now()) {
						return fmt.Errorf("%+v", h)
					}
				}
				return nil
			})

			heal, err := c.SplitBus(append([]*redisproc.Server{a2}, fresh...)...)
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
			waitFor(t, 10*time.Second, "A' to name itself", func() error { return holds(a2.OwnerOf(slot) == a2.Addr) })
			knows := func(x, y *redisproc.Server) error {
				id, err := y.ID()
				if err != nil {
					return err
				}
				nodes, _ := x.DoAll("CLUSTER", "NODES")
				for _, l := range strings.Split(nodes, "\n") {
					if strings.HasPrefix(l, id) && !strings.Contains(l, "handshake") && !strings.Contains(l, "noaddr") {
						return nil
					}
				}
				return fmt.Errorf("%s does not know %s yet", x.Addr, y.Addr)
			}
			for i, n := range fresh {
				if err := c.Meet(a2, n); err != nil {
					t.Fatal(err)
				}
				waitFor(t, 10*time.Second, "A' and a new master to meet", func() error {
					if err := knows(a2, n); err != nil {
						return err
					}
					return knows(n, a2)
				})
				if err := c.MoveSlot(i, a2, n); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, 10*time.Second, "each side to name its owner of the slot", func() error {
				for i, n := range fresh {
					for _, m := range append([]*redisproc.Server{a2}, fresh...) {
						if m.OwnerOf(i) != n.Addr {
							return fmt.Errorf("%s names %q for slot %d", m.Addr, m.OwnerOf(i), i)
						}
					}
					if n.OwnerOf(slot) != a2.Addr {
						return fmt.Errorf("%s names %q", n.Addr, n.OwnerOf(slot))
					}
				}
				for _, n := range []*redisproc.Server{a, b, cc} {
					if n.OwnerOf(slot) != a.Addr {
						return fmt.Errorf("%s names %q", n.Addr, n.OwnerOf(slot))
					}
				}
				return nil
			})

			p2 := proxy(append([]*redisproc.Server{a2}, fresh...)...)
			waitFor(t, 20*time.Second, "P2's link to A' to count (its hold passed)", func() error {
				h := p2.Pool().Health()[0]
				for _, sh := range h.Shards {
					if sh.Addr == a2.Addr && sh.Counts(time.Now()) && !time.Now().Before(h.QuarantinedUntil) {
						return nil
					}
				}
				return fmt.Errorf("%+v", h)
			})
			ctx := context.Background()
			key := fmt.Sprintf("held{%s}", keyslot.Tag(slot))
			x, y := proxyClient(t, p2.Addr(), 2), proxyClient(t, p1.Addr(), 2)
			if _, err := plain[1].Do("SET", key, "W"); err != nil {
				t.Fatal(err)
			}
			xok, _ := x.SetNX(ctx, key, "X", maxTTL).Result()
			validUntil := time.Now().Add(maxTTL - 300*time.Millisecond)
			if _, err := plain[1].Do("DEL", key); err != nil {
				t.Fatal(err)
			}
			yok, _ := y.SetNX(ctx, key, "Y", maxTTL).Result()
			if !time.Now().Before(validUntil) {
				t.Fatal("the machine was too slow: X's lock ran out before Y tried")
			}
			onA2, _ := a2.DoAll("GET", key)
			onA, _ := a.DoAll("GET", key)
			if (xok && yok) != tc.twice {
				t.Fatalf("X through P2 and Y through P1 both hold the lock = %v; want %v (A' holds %q, A holds %q)\nP1's cluster: %+v\nP2's cluster: %+v",
					xok && yok, tc.twice, strings.TrimSpace(onA2), strings.TrimSpace(onA), p1.Pool().Health()[0], p2.Pool().Health()[0])
			}
			if tc.twice && (strings.TrimSpace(onA2) != "X" || strings.TrimSpace(onA) != "Y") {
				t.Fatalf("A' holds %q and A %q: the control shows nothing", onA2, onA)
			}
			if v, _ := a.DoAll("ROLE"); !strings.HasPrefix(v, "master") {
				t.Fatalf("A is no master any more (%q): the test shows nothing", v)
			}
		})
	}
}
