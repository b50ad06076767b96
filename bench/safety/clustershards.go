package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// Redis Clusters as the proxies' backends (ClusterConfig.Shards): each
// backend is a real Redis Cluster (redis-server --cluster-enabled yes,
// joined by redis-cli --cluster create), each shard's master with one
// replica, reached directly (a cluster's nodes announce their own
// addresses in CLUSTER SLOTS, MOVED and ASK, so no relay stands between
// them and the proxies). Each cluster is one vote; the proxies route every
// key to its slot's master and hold each shard's master to the rule of a
// plain master on its own.

// redisClusters are the Redis Clusters of a run.
type redisClusters struct {
	cls []*redisproc.Cluster
}

// count is the number of clusters (0 without any).
func (rc *redisClusters) count() int {
	if rc == nil {
		return 0
	}
	return len(rc.cls)
}

// entries are the proxies' backend entries: cluster://seeds, one per
// cluster.
func (rc *redisClusters) entries() []string {
	if rc == nil {
		return nil
	}
	var out []string
	for _, cl := range rc.cls {
		out = append(out, cl.Entry())
	}
	return out
}

// stop ends every node of every cluster.
func (rc *redisClusters) stop() {
	if rc == nil {
		return
	}
	for _, cl := range rc.cls {
		if cl != nil {
			cl.Stop()
		}
	}
}

// startOverRedisClusters starts cfg.Backends Redis Clusters of cfg.Shards
// shards, each master with a replica (in parallel), and the proxies over
// them, and waits until every proxy counts every cluster (every shard out
// of the quarantine of a fresh marker). On error everything started is
// stopped.
func startOverRedisClusters(cfg ClusterConfig) (c *Cluster, err error) {
	if cfg.Replicas || cfg.Sentinels > 0 || cfg.Durable || cfg.SlowPath || cfg.Groups || cfg.OldRedis || cfg.UpgradeFrom {
		return nil, errors.New("safety: Redis Cluster backends have replicas of their own and no relays: no Replicas, Sentinels, Durable, SlowPath, Groups, OldRedis or UpgradeFrom")
	}
	c = newCluster(cfg)
	c.rc = &redisClusters{cls: make([]*redisproc.Cluster, cfg.Backends)}
	partial := c // a return of nil, err sets c to nil before this runs
	defer func() {
		if err != nil {
			partial.Close()
			c = nil
		}
	}()
	errs := make([]error, cfg.Backends)
	base := rand.IntN(90) // the addresses of their own of a BusCut scenario
	var wg sync.WaitGroup
	for i := range c.rc.cls {
		wg.Add(1)
		go func() { // ends when the cluster is up (or failed)
			defer wg.Done()
			if cfg.BusCut {
				c.rc.cls[i], errs[i] = redisproc.StartClusterSpec(cfg.Dir, busCutSpec(cfg.Shards, base, i))
			} else {
				c.rc.cls[i], errs[i] = redisproc.StartCluster(cfg.Dir, cfg.Shards, 1)
			}
			if errs[i] != nil {
				errs[i] = fmt.Errorf("safety: Redis Cluster %d: %w", i, errs[i])
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := c.startProxies(20*time.Second, "clusters"); err != nil {
		return nil, err
	}
	if !c.waitCounting(context.Background(), 2*c.Hold()+5*time.Second) {
		return nil, fmt.Errorf("safety: the proxies do not count every cluster %v after they started", 2*c.Hold()+5*time.Second)
	}
	return c, nil
}

// RedisCluster is backend i when the backends are Redis Clusters (nil
// otherwise).
func (c *Cluster) RedisCluster(i int) *redisproc.Cluster {
	if c.rc == nil {
		return nil
	}
	return c.rc.cls[i]
}

// settleRedisCluster waits up to d until cluster i is whole again: every
// node runs, every node agrees on one slot map with the cluster ok, and
// every master has a replica whose link is up and which has replicated
// what the master had written when it was asked. A cluster whose nodes
// still disagree after 15s is repaired as an operator would (redis-cli
// --cluster fix: a master killed right after a resharding gave it a slot
// may leave its promoted replica without that slot), and noted.
func (e *Env) settleRedisCluster(ctx context.Context, i int, d time.Duration) error {
	cl := e.C.RedisCluster(i)
	deadline := time.Now().Add(d)
	last := ""
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if err := cl.WaitOK(min(15*time.Second, time.Until(deadline))); err != nil {
			if time.Until(deadline) < 5*time.Second {
				return fmt.Errorf("safety: Redis Cluster %d: %w", i, err)
			}
			fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
			ferr := cl.Fix(fctx)
			cancel()
			e.Logf("cluster %d: %v; redis-cli --cluster fix run (%v)", i, err, ferr)
			continue
		}
		last = ""
		ms := cl.Masters()
		for _, n := range cl.Nodes {
			if !n.Running() {
				last = n.Addr + " is not running"
			}
		}
		for _, m := range ms {
			if last != "" {
				break
			}
			mi, err := infoFields(ctx, m.Addr, "replication")
			if err != nil {
				last = err.Error()
				break
			}
			r := cl.ReplicaOf(m)
			if r == nil {
				last = "master " + m.Addr + " has no replica"
				break
			}
			ri, err := infoFields(ctx, r.Addr, "replication")
			if err != nil {
				last = err.Error()
				break
			}
			mo, _ := strconv.ParseInt(mi["master_repl_offset"], 10, 64)
			ro, _ := strconv.ParseInt(ri["slave_repl_offset"], 10, 64)
			if ri["master_link_status"] != "up" || ro < mo {
				last = fmt.Sprintf("replica %s of %s: link %s, offset %d of %d", r.Addr, m.Addr, ri["master_link_status"], ro, mo)
			}
		}
		if last == "" && len(ms) > 0 {
			return nil
		}
		sleepCtx(ctx, 50*time.Millisecond)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("safety: Redis Cluster %d not whole after %v: %s", i, d, last)
}

// settleRedisClusters settles every cluster (see settleRedisCluster).
func (e *Env) settleRedisClusters(ctx context.Context, d time.Duration) error {
	for i := 0; i < e.C.rc.count(); i++ {
		if err := e.settleRedisCluster(ctx, i, d); err != nil {
			return err
		}
	}
	return nil
}

// routes reports whether the proxy in slot p routes slot s of cluster i to
// the master at addr, connected and verified.
func (c *Cluster) routes(p, i, s int, addr string) bool {
	a := c.Proxy(p)
	if a == nil {
		return false
	}
	hs := a.Pool().Health()
	if i >= len(hs) {
		return false
	}
	for _, sh := range hs[i].Shards {
		if sh.Addr == addr && sh.Up && inRanges(sh.Slots, s) {
			return true
		}
	}
	return false
}

// shardState describes what the proxy in slot p makes of the shard that
// serves slot s in cluster i, for the log.
func (c *Cluster) shardState(p, i, s int) string {
	a := c.Proxy(p)
	if a == nil {
		return "no proxy"
	}
	hs := a.Pool().Health()
	if i >= len(hs) {
		return "no such backend"
	}
	now := time.Now()
	for _, sh := range hs[i].Shards {
		if inRanges(sh.Slots, s) {
			return shardWords(sh, now)
		}
	}
	return "no shard serves it"
}

func shardWords(sh netio.ShardHealth, now time.Time) string {
	switch state, _ := sh.State(now); state {
	case netio.StateDown:
		return fmt.Sprintf("%s down (%s)", sh.Addr, sh.LastError)
	case netio.StateCounting:
		return sh.Addr + " counting"
	case netio.StateQuarantined:
		return fmt.Sprintf("%s quarantined for %v (%s)", sh.Addr, sh.QuarantinedUntil.Sub(now).Round(time.Millisecond), sh.QuarantineReason)
	default:
		return fmt.Sprintf("%s not counting: %s", sh.Addr, state)
	}
}

// inRanges reports whether slot s is in ranges written as CLUSTER NODES
// writes them (0-5460,5462).
func inRanges(ranges string, s int) bool {
	for _, r := range strings.Split(ranges, ",") {
		from, to, ok := strings.Cut(r, "-")
		if !ok {
			to = from
		}
		f, err1 := strconv.Atoi(from)
		t, err2 := strconv.Atoi(to)
		if err1 == nil && err2 == nil && f <= s && s <= t {
			return true
		}
	}
	return false
}

// valueOn reads key on node n directly ("" when it has none, or does not
// serve the key's slot).
func valueOn(ctx context.Context, n *redisproc.Server, key string) string {
	rdb := direct(n.Addr)
	defer rdb.Close()
	v, _ := rdb.Get(ctx, key).Result()
	return v
}

// snapshotRedisClusters is Snapshot for Redis Cluster backends: every key
// on every master of each cluster, read directly; a key's value on
// backend i is what a master of cluster i holds (the slot's source, while
// a migration moves it, when both have it).
func (e *Env) snapshotRedisClusters(why string) {
	s := Snapshot{At: time.Now(), Why: why, Values: map[string][]string{}}
	n := e.C.NumBackends()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := 0; i < n; i++ {
		ms := e.C.RedisCluster(i).Masters()
		if len(ms) == 0 {
			s.Unread = append(s.Unread, i)
			continue
		}
		for _, m := range ms {
			rdb := direct(m.Addr)
			var keys []string
			err := rdb.Keys(ctx, "*").ScanSlice(&keys)
			if err == nil {
				for _, k := range keys {
					v, gerr := rdb.Get(ctx, k).Result()
					if gerr != nil {
						continue // expired since, or a key of a slot being imported (MOVED)
					}
					if s.Values[k] == nil {
						s.Values[k] = make([]string, n)
					}
					if s.Values[k][i] == "" {
						s.Values[k][i] = v
					}
				}
			}
			rdb.Close()
			if err != nil {
				s.Unread = append(s.Unread, i)
			}
		}
	}
	e.H.AddSnapshot(s)
	if len(s.Unread) > 0 {
		e.Logf("snapshot (%s): clusters %v could not be read whole", why, s.Unread)
	}
}
