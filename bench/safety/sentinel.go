package safety

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// Sentinel-managed masters: each master's group ("m0", "m1", ...) is
// watched by every Sentinel of the cluster, which knows the master's
// replica. The proxies know nothing of Sentinel: they keep reaching the
// masters' own addresses through the relays, as plain backends, while
// Sentinel moves the master role between a master and its replica.

// group is the name Sentinel knows master i's group by.
func group(i int) string { return fmt.Sprintf("m%d", i) }

// startSentinels starts the configured Sentinels, watching every master,
// and waits until each knows every master's replica and the other
// Sentinels.
func (c *Cluster) startSentinels() error {
	n := c.Config.Sentinels
	if n <= 0 {
		return nil
	}
	var mons []redisproc.Monitor
	for i, s := range c.servers {
		mons = append(mons, redisproc.Monitor{Name: group(i), Addr: s.Addr, Quorum: n/2 + 1})
	}
	for k := 0; k < n; k++ {
		s, err := redisproc.StartSentinel(c.Config.Dir, redisproc.SentinelConfig{Monitors: mons})
		if err != nil {
			return fmt.Errorf("safety: sentinel %d: %w", k, err)
		}
		c.Sentinels = append(c.Sentinels, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := range c.servers {
		if err := c.WaitSentinelsSettled(ctx, i); err != nil {
			return err
		}
	}
	return nil
}

// sentinelClient is a client of Sentinel k.
func (c *Cluster) sentinelClient(k int) *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{
		Addr: c.Sentinels[k].Addr, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
}

// sentinelView is what one Sentinel says of master i's group: the master's
// address, whether it knows the replica (Server i's or Replica i's,
// whichever is not the master) with its link to the master up, and how
// many other Sentinels it knows.
func (c *Cluster) sentinelView(ctx context.Context, k, i int) (master string, replicaOK bool, others int, err error) {
	sc := c.sentinelClient(k)
	defer sc.Close()
	addr, err := sc.GetMasterAddrByName(ctx, group(i)).Result()
	if err != nil {
		return "", false, 0, fmt.Errorf("sentinel %d on %s: %w", k, group(i), err)
	}
	if len(addr) != 2 {
		return "", false, 0, fmt.Errorf("sentinel %d on %s: master address %v", k, group(i), addr)
	}
	master = addr[0] + ":" + addr[1]
	want := c.Replica(i).Addr
	if master == want {
		want = c.Server(i).Addr
	}
	reps, err := sc.Replicas(ctx, group(i)).Result()
	if err != nil {
		return master, false, 0, fmt.Errorf("sentinel %d on %s: %w", k, group(i), err)
	}
	for _, r := range reps {
		if r["ip"]+":"+r["port"] == want && r["master-link-status"] == "ok" &&
			!strings.Contains(r["flags"], "down") && !strings.Contains(r["flags"], "disconnected") && r["role-reported"] == "slave" {
			replicaOK = true
		}
	}
	m, err := sc.Master(ctx, group(i)).Result()
	if err != nil {
		return master, replicaOK, 0, fmt.Errorf("sentinel %d on %s: %w", k, group(i), err)
	}
	fmt.Sscan(m["num-other-sentinels"], &others)
	return master, replicaOK, others, nil
}

// WaitSentinelsSettled waits until every Sentinel agrees on master i's
// group: the same master, its replica known and replicating, and every
// other Sentinel known.
func (c *Cluster) WaitSentinelsSettled(ctx context.Context, i int) error {
	var last string
	for ctx.Err() == nil {
		settled := true
		var masters []string
		for k := range c.Sentinels {
			m, ok, others, err := c.sentinelView(ctx, k, i)
			if err != nil {
				last, settled = err.Error(), false
				break
			}
			masters = append(masters, m)
			if !ok || others != len(c.Sentinels)-1 || m != masters[0] {
				last = fmt.Sprintf("sentinel %d: master %s, replica known and up %v, %d other sentinels", k, m, ok, others)
				settled = false
			}
		}
		if settled {
			return nil
		}
		sleepCtx(ctx, 100*time.Millisecond)
	}
	return fmt.Errorf("safety: the sentinels do not agree on %s: %s: %w", group(i), last, ctx.Err())
}

// SentinelFailover has Sentinel 0 fail master i's group over (SENTINEL
// FAILOVER): it promotes whichever of Server i and Replica i is the
// replica now, and will turn the other into its replica once it sees it
// answer as a master (Sentinel waits about ten seconds for that). A
// Sentinel that does not yet count the replica as fit (NOGOODSLAVE), or
// is still in the last failover (INPROG), is asked again for up to d.
func (c *Cluster) SentinelFailover(ctx context.Context, i int, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := c.Sentinels[0].Failover(group(i))
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || !sleepCtx(ctx, 100*time.Millisecond) {
			return err
		}
	}
}

// waitRole waits up to d until the redis-server at addr reports role
// (master, or slave with its link to its master up); with d = 0 it looks
// once.
func waitRole(ctx context.Context, addr, role string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		info, err := infoFields(ctx, addr, "replication")
		last := ""
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("role %s, link %s", info["role"], info["master_link_status"])
			if info["role"] == role && (role != "slave" || info["master_link_status"] == "up") {
				return nil
			}
		}
		if !time.Now().Before(deadline) || !sleepCtx(ctx, 20*time.Millisecond) {
			return fmt.Errorf("safety: %s not %s after %v: %s", addr, role, d, last)
		}
	}
}
