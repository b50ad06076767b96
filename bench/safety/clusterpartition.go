package safety

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// A Redis Cluster master that has been replaced must stop counting before
// its replacement counts. Each cluster of the scenario has its second
// shard's master on a loopback address of its own, which sorts before
// 127.0.0.1:PORT, and a long cluster-node-timeout (busCutSpec). Each round
// of the drive:
//  1. every cluster is whole, with those masters in place, and every proxy
//     counts every cluster;
//  2. on two clusters, that master is cut off from the cluster bus
//     (iptables rules on its address) while the proxies still reach it,
//     and its replica takes over (CLUSTER FAILOVER TAKEOVER); the old
//     master does not learn of it and goes on answering as the master of
//     its slots;
//  3. proxy 0, running since before, asks the masters in address order for
//     the slot map: the old master first;
//  4. the last proxy restarts, asks the seeds in their order (another
//     master first), and finds the new masters;
//  5. once it counts every cluster, client A takes a lock through it (in
//     the old masters' slots);
//  6. client C tries the lock through proxy 0 while A's validity lasts.
//     No majority of a cluster's other masters names an old master any
//     more: C must be refused;
//  7. the rules go; each old master learns of the takeover, rejoins as a
//     replica and, once in sync, takes its place back.

// partitionMaxTTL is the proxies' max_ttl in the partition scenarios.
const partitionMaxTTL = 3 * time.Second

// busCutSpec is cluster i of a BusCut scenario: shards masters with a
// replica each, the second master on an address of its own, 127.0.0.1NN
// (which sorts before 127.0.0.1:PORT), NN from base + i.
func busCutSpec(shards, base, i int) redisproc.ClusterSpec {
	reps := make([]int, shards)
	for j := range reps {
		reps[j] = 1
	}
	host := fmt.Sprintf("127.0.0.1%02d", 10+(base+i)%90)
	return redisproc.ClusterSpec{Shards: shards, Replicas: reps, Hosts: []string{"", host},
		Extra: []string{"--cluster-node-timeout", "30000"}}
}

// driveClusterPartition is the Drive of cluster-partition.
func driveClusterPartition(ctx context.Context, e *Env) error {
	if e.C.rc == nil || !e.C.Config.BusCut {
		return errors.New("cluster-partition needs Redis Cluster backends started for it (BusCut)")
	}
	c, a, closeClients := e.holderAndRival(5600, 40) // A on the last proxy, C on proxy 0
	defer closeClients()
	return repeatRounds(ctx, e, e.C.Hold()+15*time.Second, func(round int) (bool, error) {
		return e.clusterPartitionRound(ctx, a, c, round)
	})
}

// cutMaster is a master cut off from its cluster's bus, and its replica.
type cutMaster struct {
	cluster int
	old, r  *redisproc.Server
	heal    func() error
}

// clusterPartitionRound is one round of driveClusterPartition.
func (e *Env) clusterPartitionRound(ctx context.Context, a, c *Client, round int) (planned bool, err error) {
	settle, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for i := 0; i < e.C.NumBackends(); i++ {
		if err := e.restoreOwnMaster(settle, i); err != nil {
			return false, err
		}
	}
	if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
		return false, errors.New("the clusters never all counted again")
	}
	// A slot of the second shard's, not its highest (the marker's).
	lo, hi := keyslot.Slots/e.C.Config.Shards, 2*keyslot.Slots/e.C.Config.Shards-1
	s := lo + e.Intn(hi-lo)
	key := fmt.Sprintf("ctl:partition:{%s}", keyslot.Tag(uint16(s)))
	var cuts []*cutMaster
	defer func() {
		for _, ct := range cuts {
			if herr := ct.heal(); herr != nil {
				err = errors.Join(err, herr)
			}
		}
	}()
	for _, i := range e.pick(e.C.NumBackends())[:e.C.Majority()] {
		cl := e.C.RedisCluster(i)
		old := cl.Nodes[1]
		r := cl.ReplicaOf(old)
		if r == nil || cl.MasterOfSlot(s) != old {
			return false, fmt.Errorf("cluster %d: %s is not the master of slot %d with a replica", i, old.Addr, s)
		}
		heal, err := cl.CutBus(old)
		if err != nil {
			return false, err
		}
		cuts = append(cuts, &cutMaster{cluster: i, old: old, r: r, heal: heal})
		if v, err := r.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil || v != "OK" {
			return false, fmt.Errorf("cluster %d: CLUSTER FAILOVER TAKEOVER on %s: %q, %v", i, r.Addr, v, err)
		}
		e.Logf("round %d: cluster %d: master %s cut off from the cluster bus; its replica %s took over (TAKEOVER)", round, i, old.Addr, r.Addr)
	}
	named := e.waitNamedBy(ctx, cuts, s, time.Now().Add(10*time.Second))
	p := e.C.NumProxies() - 1
	if err := e.restartFresh(p); err != nil {
		return false, err
	}
	if !e.C.waitSlotCounting(ctx, p, e.C.Hold()+10*time.Second) {
		e.Logf("round %d: the restarted proxy %d never counted every cluster", round, p)
		return false, nil
	}
	la, ok := acquireWithin(ctx, a, key, e.C.Config.MaxTTL, time.Second)
	if !ok {
		e.Logf("round %d: client A could not take %s through proxy %d", round, key, p)
		return false, nil
	}
	va, _ := a.Read(la) // no fenced register in this scenario
	stillMaster := true
	var states []string
	for _, ct := range cuts {
		stillMaster = stillMaster && ct.old.OwnerOf(s) == ct.old.Addr
		states = append(states, fmt.Sprintf("cluster %d: proxy 0: %s; proxy %d: %s", ct.cluster, e.C.shardState(0, ct.cluster, s), p, e.C.shardState(p, ct.cluster, s)))
	}
	e.Logf("round %d: client A (proxy %d) holds %s (slot %d) as %s until %s; the other masters name the new ones: %v; the old ones still name themselves: %v; %s",
		round, p, key, s, la.Token, e.H.rel(la.ValidUntil), named, stillMaster, strings.Join(states, "; "))
	inside := tryInside(ctx, e, c, key, la, round)
	holderFinishes(ctx, e, a, la, va, inside)
	return inside || (named && stillMaster), nil
}

// waitNamedBy waits until every other master of each cut's cluster names
// the cut's replica as slot s's master, and reports whether they did
// before until.
func (e *Env) waitNamedBy(ctx context.Context, cuts []*cutMaster, s int, until time.Time) bool {
	for ctx.Err() == nil && time.Now().Before(until) {
		all := true
		for _, ct := range cuts {
			for _, n := range e.C.RedisCluster(ct.cluster).Nodes {
				if n != ct.old && n != ct.r && n.Role() == "master" {
					all = all && n.OwnerOf(s) == ct.r.Addr
				}
			}
		}
		if all {
			return true
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return false
}

// restoreOwnMaster settles cluster i with its second shard's master on its
// own address, as the round needs: an old master that rejoined as a
// replica after a round takes its place back once in sync (CLUSTER
// FAILOVER TAKEOVER).
func (e *Env) restoreOwnMaster(ctx context.Context, i int) error {
	cl := e.C.RedisCluster(i)
	own := cl.Nodes[1]
	deadline := time.Now().Add(45 * time.Second)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if err := e.settleRedisCluster(ctx, i, time.Until(deadline)); err != nil {
			return err
		}
		if e.ownsShard(i, own) {
			return nil
		}
		// TAKEOVER: it is in sync, and a manual failover's election may be
		// refused this soon after the takeover the round made.
		if v, err := own.Do("CLUSTER", "FAILOVER", "TAKEOVER"); err != nil || v != "OK" {
			e.Logf("cluster %d: CLUSTER FAILOVER TAKEOVER on %s: %q, %v", i, own.Addr, v, err)
		} else if err := cl.WaitMaster(own, 20*time.Second); err != nil {
			return fmt.Errorf("cluster %d: %w", i, err)
		} else if !e.waitOwns(ctx, i, own) {
			return fmt.Errorf("cluster %d: the nodes do not all name %s the master of its shard after its takeover", i, own.Addr)
		} else {
			e.Logf("cluster %d: %s, on its own address, is the master of its shard again", i, own.Addr)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return fmt.Errorf("cluster %d: %s never took its place back", i, own.Addr)
}

// ownsShard reports whether every running node of cluster i names master
// m as the owner of the second shard's first slot, and m says it is a
// master.
func (e *Env) ownsShard(i int, m *redisproc.Server) bool {
	slot := keyslot.Slots / e.C.Config.Shards
	for _, n := range e.C.RedisCluster(i).Nodes {
		if n.Running() && n.OwnerOf(slot) != m.Addr {
			return false
		}
	}
	return m.Role() == "master"
}

// waitOwns waits up to 10s until ownsShard(i, m).
func (e *Env) waitOwns(ctx context.Context, i int, m *redisproc.Server) bool {
	deadline := time.Now().Add(10 * time.Second)
	for !e.ownsShard(i, m) {
		if !time.Now().Before(deadline) || !sleepCtx(ctx, 50*time.Millisecond) {
			return false
		}
	}
	return true
}
