package safety

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
)

// A Redis Cluster loss follows its data. Each round of the drive:
//  1. every cluster is whole and every proxy counts every cluster;
//  2. on a majority of the clusters, the replica of the probe slot's master
//     is cut off (as in cluster-shards): it will lack what comes next;
//  3. client A (proxy 0) takes the probe key, on every cluster;
//  4. on those clusters the replica takes over (its master killed or
//     stopped): its shard stops counting for the hold, as it lacks A's
//     lock;
//  5. once every proxy routes the slot to the promoted replicas (a
//     stopped old master continues, as a replica), the slot moves on to
//     another shard, which counts (MoveSlot: keys and all, and there is
//     no lock to move);
//  6. in every other round (the first included) the last proxy restarts
//     (a proxy started after the resharding, with no memory of the loss);
//  7. client C (the last proxy) tries the probe key while A's validity
//     lasts. The slot's hold follows it to its new shard: C must be
//     refused.

// lossMaxTTL is the proxies' max_ttl in the loss-follows-data scenarios:
// A's lock outlasts a failover, a slot's move and a proxy's restart.
const lossMaxTTL = 6 * time.Second

// driveClusterLossFollows is the Drive of cluster-loss-follows.
func driveClusterLossFollows(ctx context.Context, e *Env) error {
	if e.C.rc == nil {
		return errors.New("cluster-loss-follows needs Redis Cluster backends")
	}
	a, c, closeClients := e.holderAndRival(5500, 30)
	defer closeClients()
	err := repeatRounds(ctx, e, e.C.Config.MaxTTL+e.C.Hold()+6*time.Second, func(round int) (bool, error) {
		return e.clusterLossRound(ctx, a, c, round)
	})
	settle, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return errors.Join(err, e.settleRedisClusters(settle, 45*time.Second))
}

// clusterLossRound is one round of driveClusterLossFollows.
func (e *Env) clusterLossRound(ctx context.Context, a, c *Client, round int) (bool, error) {
	if err := e.wholeAndCounting(ctx); err != nil {
		return false, err
	}
	// The slot moves to the master of the highest slot, which keeps its
	// marker where it is: a proxy started later then finds that shard's
	// marker as every proxy knows it (a shard that gains a slot above its
	// marker's costs a fresh proxy the hold, which would hide what the
	// round looks for).
	failing := e.pick(e.C.NumBackends())[:e.C.Majority()]
	s := e.Intn(keyslot.Slots)
	for tries := 0; e.ownsTop(failing, s) && tries < 100; tries++ {
		s = e.Intn(keyslot.Slots)
	}
	key := fmt.Sprintf("ctl:loss:{%s}", keyslot.Tag(uint16(s)))
	cuts, ok, err := e.cutShards(failing, s)
	defer healCuts(e, cuts)
	if err != nil || !ok {
		return false, err
	}
	la, ok := acquireWithin(ctx, a, key, e.C.Config.MaxTTL, time.Second)
	if !ok {
		return false, nil
	}
	va, _ := a.Read(la) // no fenced register in this scenario
	e.Logf("round %d: client A (proxy 0) holds %s (slot %d) as %s until %s; the replicas of its shards on clusters %v do not have it", round, key, s, la.Token, e.H.rel(la.ValidUntil), failing)
	errs := make([]error, len(cuts))
	var wg sync.WaitGroup
	for j, ct := range cuts {
		rng := e.fork()
		wg.Add(1)
		go func() { // ends when the replica has taken over (or failed to)
			defer wg.Done()
			errs[j] = e.failOver(ct, rng)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	// The promoted shards must be the slot's route everywhere (and out of
	// the vote) before the slot moves on.
	until := la.ValidUntil.Add(-300 * time.Millisecond)
	routed := e.waitRoutes(ctx, cuts, s, func(ct *shardCut) string { return ct.r.Addr }, until)
	// A stopped old master continues first (it rejoins as a replica): a
	// move asks every master, and a stopped one would hold it up.
	dest := make([]string, len(cuts))
	for j, ct := range cuts {
		e.resumeOld(ct, "before the slot moves on")
		wg.Add(1)
		go func() { // ends when the slot has moved (or failed to)
			defer wg.Done()
			cl := e.C.RedisCluster(ct.cluster)
			to := cl.MasterOfSlot(keyslot.Slots - 1)
			if errs[j] = e.moveSlotTo(ct.cluster, s, to, "client A's lock "+key+", lost on its shard"); errs[j] == nil {
				dest[j] = to.Addr
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	if round%2 == 1 {
		p := e.C.NumProxies() - 1
		if err := e.restartFresh(p); err != nil {
			return false, err
		}
		e.Logf("round %d: proxy %d restarted after the resharding: it never saw the loss", round, p)
	}
	moved := e.waitRoutes(ctx, cuts, s, func(ct *shardCut) string {
		for j := range cuts {
			if cuts[j] == ct {
				return dest[j]
			}
		}
		return ""
	}, until)
	lost := true
	var states []string
	for j, ct := range cuts {
		m := e.C.RedisCluster(ct.cluster).Node(dest[j])
		lost = lost && m != nil && valueOn(ctx, m, key) != la.Token
		for _, p := range e.C.Running() {
			states = append(states, fmt.Sprintf("proxy %d on cluster %d: %s", p, ct.cluster, e.C.shardState(p, ct.cluster, s)))
		}
	}
	e.Logf("round %d: every proxy routed slot %d to the promoted replicas: %v, then to the shards it moved to: %v; A's lock missing there: %v; %s",
		round, s, routed, moved, lost, strings.Join(states, "; "))
	inside := tryInside(ctx, e, c, key, la, round)
	holderFinishes(ctx, e, a, la, va, inside)
	return inside || (routed && moved && lost), nil
}

// waitRoutes waits until every running proxy routes slot s, on each cut's
// cluster, to the master at addr(cut), connected and verified, and
// reports whether they did before until.
func (e *Env) waitRoutes(ctx context.Context, cuts []*shardCut, s int, addr func(*shardCut) string, until time.Time) bool {
	for ctx.Err() == nil && time.Now().Before(until) {
		all := true
		for _, p := range e.C.Running() {
			for _, ct := range cuts {
				all = all && e.C.routes(p, ct.cluster, s, addr(ct))
			}
		}
		if all {
			return true
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return false
}

// ownsTop reports whether, on any of the clusters, slot s's master also
// owns the highest slot.
func (e *Env) ownsTop(clusters []int, s int) bool {
	for _, i := range clusters {
		cl := e.C.RedisCluster(i)
		if m := cl.MasterOfSlot(s); m == nil || m == cl.MasterOfSlot(keyslot.Slots-1) {
			return true
		}
	}
	return false
}

// restartFresh stops the proxy in slot p and starts a new one there, with
// no memory of the masters. Undos the old one could not run within its
// shutdown_grace (a partial acquisition on a master that was killed) are
// logged, not failed: it reports them, and they stay until their TTL as
// the contract says.
func (e *Env) restartFresh(p int) error {
	if left, runErr := e.C.StopProxyReporting(p); runErr != nil {
		e.Logf("proxy %d stopped: %v (undos left: %v)", p, runErr, left)
	}
	return e.C.StartProxy(p)
}
