package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The cluster nemesis: shard masters of the Redis Cluster backends fail
// over to replicas, and slots move between shards, under the contenders'
// load. Its orchestrated round makes the dangerous interleaving happen:
// a lock client A holds whose copy is missing on the promoted shard
// masters of a majority of the clusters.

// driveClusterShards is the Drive of cluster-shards. Each round:
//  1. every cluster is whole (every node up, one slot map, every replica
//     caught up) and every proxy counts every cluster;
//  2. a probe key of a random slot; on the clusters that will fail over,
//     the replica of the master that owns the slot is stopped (SIGSTOP)
//     and the master drops its replication connection (CLIENT KILL TYPE
//     replica): nothing the master writes from then on reaches it;
//  3. client A (proxy 0) takes the probe key. Either it gets it on every
//     cluster, and a majority of them will fail over (the wide round), or
//     a token left on one cluster's master for 500ms (what a partial
//     acquisition leaves until its undo) refuses it there, A holds on a
//     bare majority, and one of those will fail over while the refusing
//     cluster counts as usual (the narrow round: one shard's rule alone
//     stands between C and the lock);
//  4. at once, on each cluster that fails over, the master is killed (-9)
//     or stopped (SIGSTOP), the replica continues, and it takes over: by
//     the cluster's own failover (the master failed) or by CLUSTER
//     FAILOVER FORCE; meanwhile, on the other clusters that hold A's lock,
//     the probe key's slot moves to another shard (A's lock with it, as
//     keys move: MIGRATE), and so do the slots of two hot keys, sometimes
//     followed by a resharding of a few hundred slots (redis-cli --cluster
//     reshard);
//  5. once every proxy routes the slot to the promoted replicas, whose data
//     lacks A's lock (and the leftover token expired), a stopped old
//     master continues (it rejoins as a replica and resynchronises without
//     the lock), either now or after C's tries;
//  6. client C (the last proxy) tries the probe key while A's validity
//     lasts. A promoted shard master does not count for max_ttl + drift,
//     and a moved slot keeps A's lock: C must be refused;
//  7. a killed old master starts again and rejoins as a replica.
//
// Between rounds, when the run is long enough, random faults run under
// the load for a few seconds (see clusterFault), on one cluster or two at
// once. The rounds repeat until the faults' deadline, at least once.
func driveClusterShards(ctx context.Context, e *Env) error {
	if e.C.rc == nil {
		return errors.New("cluster-shards needs Redis Cluster backends")
	}
	ttl := e.C.Config.MaxTTL
	a, c, closeClients := e.holderAndRival(5400, 20)
	defer closeClients()
	// A round: settling, the failovers and the migrations, A's validity,
	// the old masters back.
	need := ttl + e.C.Hold() + 4*time.Second
	err := repeatRounds(ctx, e, need, func(round int) (bool, error) {
		if round > 1 {
			if chaos := min(6*time.Second, e.Left()-need); chaos > time.Second {
				if err := e.clusterChaos(ctx, chaos); err != nil {
					return false, err
				}
			}
		}
		return e.clusterShardsRound(ctx, a, c, round)
	})
	// Every cluster whole again, for what follows (the end of the run
	// reads every master).
	settle, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	return errors.Join(err, e.settleRedisClusters(settle, 45*time.Second))
}

// fork is a random source of its own for a goroutine of the nemesis,
// seeded from the run's: what it draws does not depend on when the others
// draw theirs.
func (e *Env) fork() *rand.Rand {
	return rand.New(rand.NewPCG(uint64(e.Intn(1<<62)), uint64(e.Intn(1<<62))))
}

// shardCut is a shard whose replica no longer receives what its master
// writes, and what became of them.
type shardCut struct {
	cluster int
	m, r    *redisproc.Server // the master and its replica
	// rStopped: the replica is stopped; mStopped, mKilled: the master is
	// stopped, or was killed and has not started again.
	rStopped, mStopped, mKilled bool
	how                         string
}

// cutShardReplication stops the replica of the master of slot s in cluster i
// (SIGSTOP) and has the master drop its replication connection: what the
// master writes from then on does not reach the replica. The cut is
// returned whenever the replica was stopped (heal continues it), with
// ok false when the master had no replica connected to drop.
func (e *Env) cutShardReplication(i, s int) (ct *shardCut, ok bool, err error) {
	cl := e.C.RedisCluster(i)
	m := cl.MasterOfSlot(s)
	if m == nil {
		return nil, false, fmt.Errorf("cluster %d: no master serves slot %d", i, s)
	}
	r := cl.ReplicaOf(m)
	if r == nil {
		return nil, false, fmt.Errorf("cluster %d: master %s has no replica", i, m.Addr)
	}
	ct = &shardCut{cluster: i, m: m, r: r}
	if err := r.Pause(); err != nil {
		return nil, false, fmt.Errorf("cluster %d: SIGSTOP replica %s: %w", i, r.Addr, err)
	}
	ct.rStopped = true
	v, err := m.Do("CLIENT", "KILL", "TYPE", "replica")
	if err != nil {
		return ct, false, fmt.Errorf("cluster %d: CLIENT KILL TYPE replica on %s: %w", i, m.Addr, err)
	}
	if v != "1" {
		e.Logf("cluster %d: CLIENT KILL TYPE replica on %s answered %q: its replica was not connected", i, m.Addr, v)
		return ct, false, nil
	}
	e.Logf("cluster %d: replica %s of master %s (slot %d) stopped (SIGSTOP), the master dropped its replication connection: what it writes now stays there", i, r.Addr, m.Addr, s)
	return ct, true, nil
}

// cutShards cuts the replication of slot s's shard on each of the
// clusters (see cutShardReplication), and returns the cuts made, which
// healCuts undoes; ok is false when a replica could not be cut off.
func (e *Env) cutShards(clusters []int, s int) (cuts []*shardCut, ok bool, err error) {
	for _, i := range clusters {
		ct, ok, err := e.cutShardReplication(i, s)
		if ct != nil {
			cuts = append(cuts, ct)
		}
		if err != nil || !ok {
			return cuts, false, err
		}
	}
	return cuts, true, nil
}

// healCuts heals every cut (see shardCut.heal).
func healCuts(e *Env, cuts []*shardCut) {
	for _, ct := range cuts {
		ct.heal(e)
	}
}

// failOver ends the cut shard's master (kill -9 or SIGSTOP), continues its
// replica and waits until the replica has taken over: by the cluster's
// own failover, or by CLUSTER FAILOVER FORCE.
func (e *Env) failOver(ct *shardCut, rng *rand.Rand) error {
	cl := e.C.RedisCluster(ct.cluster)
	kill, force := rng.IntN(2) == 0, rng.IntN(2) == 0
	if kill {
		ct.m.Kill()
		ct.mKilled = true
		ct.how = "killed (-9)"
	} else {
		if err := ct.m.Pause(); err != nil {
			return fmt.Errorf("cluster %d: SIGSTOP master %s: %w", ct.cluster, ct.m.Addr, err)
		}
		ct.mStopped = true
		ct.how = "stopped (SIGSTOP)"
	}
	if err := ct.r.Resume(); err != nil {
		return fmt.Errorf("cluster %d: SIGCONT replica %s: %w", ct.cluster, ct.r.Addr, err)
	}
	ct.rStopped = false
	by := "the cluster's failover"
	if force {
		by = "CLUSTER FAILOVER FORCE"
		deadline := time.Now().Add(3 * time.Second)
		for {
			v, err := ct.r.Do("CLUSTER", "FAILOVER", "FORCE")
			if err == nil && v == "OK" {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("cluster %d: CLUSTER FAILOVER FORCE on %s: %q, %v", ct.cluster, ct.r.Addr, v, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	began := time.Now()
	if err := cl.WaitMaster(ct.r, 20*time.Second); err != nil {
		return fmt.Errorf("cluster %d: %w", ct.cluster, err)
	}
	e.Logf("cluster %d: master %s %s, replica %s continued; %s promoted it in %v", ct.cluster, ct.m.Addr, ct.how, ct.r.Addr, by, time.Since(began).Round(time.Millisecond))
	return nil
}

// resumeOld continues a stopped old master: it learns it was failed over
// and rejoins as a replica of the new one, resynchronising from it.
func (e *Env) resumeOld(ct *shardCut, when string) {
	if !ct.mStopped {
		return
	}
	if err := ct.m.Resume(); err != nil {
		e.Logf("cluster %d: SIGCONT old master %s FAILED: %v", ct.cluster, ct.m.Addr, err)
		return
	}
	ct.mStopped = false
	e.Logf("cluster %d: old master %s continued (SIGCONT) %s: it rejoins as a replica of %s", ct.cluster, ct.m.Addr, when, ct.r.Addr)
}

// heal undoes what is left of a cut: a stopped node continues, a killed
// master starts again (it rejoins as a replica).
func (ct *shardCut) heal(e *Env) {
	if ct.rStopped {
		ct.r.Resume()
		ct.rStopped = false
	}
	e.resumeOld(ct, "after the round")
	if ct.mKilled {
		if err := ct.m.Restart(); err != nil {
			e.Logf("cluster %d: restart of old master %s FAILED: %v", ct.cluster, ct.m.Addr, err)
			return
		}
		ct.mKilled = false
		e.Logf("cluster %d: old master %s started again (no data): it rejoins as a replica of %s", ct.cluster, ct.m.Addr, ct.r.Addr)
	}
}

// otherMaster is a master of cluster cl other than m, at random (nil when
// none).
func (e *Env) otherMaster(cl *redisproc.Cluster, m *redisproc.Server, rng *rand.Rand) *redisproc.Server {
	var out []*redisproc.Server
	for _, s := range cl.Masters() {
		if s != m {
			out = append(out, s)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out[rng.IntN(len(out))]
}

// moveSlot moves slot s of cluster i from its master to another, keys and
// all (MoveSlot: SETSLOT IMPORTING and MIGRATING, MIGRATE, SETSLOT NODE).
func (e *Env) moveSlot(i, s int, what string, rng *rand.Rand) (to *redisproc.Server, err error) {
	cl := e.C.RedisCluster(i)
	from := cl.MasterOfSlot(s)
	if from == nil {
		return nil, fmt.Errorf("cluster %d: no master serves slot %d", i, s)
	}
	if to = e.otherMaster(cl, from, rng); to == nil {
		return nil, fmt.Errorf("cluster %d: no other master to move slot %d to", i, s)
	}
	return to, e.moveSlotTo(i, s, to, what)
}

// moveSlotTo moves slot s of cluster i from its master to master to, keys
// and all.
func (e *Env) moveSlotTo(i, s int, to *redisproc.Server, what string) error {
	cl := e.C.RedisCluster(i)
	from := cl.MasterOfSlot(s)
	if from == nil || to == nil || from == to {
		return fmt.Errorf("cluster %d: cannot move slot %d from %v to %v", i, s, from, to)
	}
	began := time.Now()
	if err := cl.MoveSlot(s, from, to); err != nil {
		return fmt.Errorf("cluster %d: moving slot %d: %w", i, s, err)
	}
	e.Logf("cluster %d: slot %d (%s) moved from %s to %s under load, keys and all, in %v", i, s, what, from.Addr, to.Addr, time.Since(began).Round(time.Millisecond))
	return nil
}

// reshard moves n slots of cluster i between two random masters with
// redis-cli --cluster reshard, as an operator does.
func (e *Env) reshard(ctx context.Context, i, n int, rng *rand.Rand) error {
	cl := e.C.RedisCluster(i)
	ms := cl.Masters()
	if len(ms) < 2 {
		return fmt.Errorf("cluster %d: %d masters, nothing to reshard between", i, len(ms))
	}
	from := ms[rng.IntN(len(ms))]
	to := e.otherMaster(cl, from, rng)
	began := time.Now()
	rctx, cancel := context.WithTimeout(ctx, time.Minute) // redis-cli has no end of its own
	defer cancel()
	if err := cl.Reshard(rctx, from, to, n); err != nil {
		return fmt.Errorf("cluster %d: %w", i, err)
	}
	e.Logf("cluster %d: redis-cli --cluster reshard moved %d slots from %s to %s under load in %v", i, n, from.Addr, to.Addr, time.Since(began).Round(time.Millisecond))
	return nil
}

// migrateUnderLock moves, on cluster i, slot s (the probe's: A's lock
// moves with it) and the slots of two hot keys to other shards, and
// sometimes reshards a few hundred slots after them.
func (e *Env) migrateUnderLock(ctx context.Context, i, s int, key, token string, rng *rand.Rand) error {
	to, err := e.moveSlot(i, s, "client A's lock "+key, rng)
	if err != nil {
		return err
	}
	if v := valueOn(ctx, to, key); v != token {
		e.Logf("cluster %d: A's lock is not on %s after its slot moved there (%q): it expired, or it moved wrong", i, to.Addr, v)
	}
	for j := 0; j < 2 && len(e.Workload.Keys) > 0; j++ {
		k := e.Workload.Keys[rng.IntN(len(e.Workload.Keys))]
		if _, err := e.moveSlot(i, int(keyslot.OfString(k)), "hot key "+k, rng); err != nil {
			return err
		}
	}
	if rng.IntN(2) == 0 {
		if err := e.C.RedisCluster(i).WaitOK(10 * time.Second); err != nil {
			return fmt.Errorf("cluster %d: %w", i, err)
		}
		return e.reshard(ctx, i, 100+rng.IntN(400), rng)
	}
	return nil
}

// wholeAndCounting waits until every cluster is whole again (see
// settleRedisCluster) and every proxy counts every cluster.
func (e *Env) wholeAndCounting(ctx context.Context) error {
	settle, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	if err := e.settleRedisClusters(settle, 45*time.Second); err != nil {
		return err
	}
	if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
		return errors.New("the clusters never all counted again")
	}
	return nil
}

// clusterShardsRound is one round of driveClusterShards.
func (e *Env) clusterShardsRound(ctx context.Context, a, c *Client, round int) (bool, error) {
	ttl := e.C.Config.MaxTTL
	if err := e.wholeAndCounting(ctx); err != nil {
		return false, err
	}
	s := e.Intn(keyslot.Slots)
	key := fmt.Sprintf("ctl:shards:{%s}", keyslot.Tag(uint16(s)))
	// Which clusters fail the probe's shard over, which move its slot, and
	// which refuse A (a leftover token there): either A holds on every
	// cluster and a majority fails over, or A holds on a bare majority and
	// one of them fails over while the others count as usual.
	n, maj := e.C.NumBackends(), e.C.Majority()
	order := e.pick(n)
	var failing, migrating, refusing []int
	narrow := e.Intn(2) == 0
	if narrow {
		refusing, failing, migrating = order[:n-maj], order[n-maj:n-maj+1], order[n-maj+1:]
	} else {
		failing, migrating = order[:maj], order[maj:]
	}

	cuts, ok, err := e.cutShards(failing, s)
	defer healCuts(e, cuts)
	if err != nil || !ok {
		return false, err
	}
	leftover := fmt.Sprintf("leftover-%d", round)
	for _, i := range refusing {
		// What a partial acquisition that reached only this cluster leaves
		// until its undo or its TTL: A is refused here, and the key is free
		// again long before C tries.
		m := e.C.RedisCluster(i).MasterOfSlot(s)
		if m == nil {
			return false, fmt.Errorf("cluster %d: no master serves slot %d", i, s)
		}
		if v, err := m.Do("SET", key, leftover, "PX", "500"); err != nil || v != "OK" {
			return false, fmt.Errorf("cluster %d: SET %s on %s: %q, %v", i, key, m.Addr, v, err)
		}
		e.Logf("cluster %d: %s set to %s for 500ms on its master %s directly (a partial acquisition's leftover): A will be refused there", i, key, leftover, m.Addr)
	}
	la, ok := acquireWithin(ctx, a, key, ttl, time.Second)
	if !ok {
		return false, nil
	}
	for _, i := range refusing {
		if m := e.C.RedisCluster(i).MasterOfSlot(s); m == nil || valueOn(ctx, m, key) == la.Token {
			e.Logf("round %d: cluster %d holds A's lock after all (the leftover expired first)", round, i)
			a.Release(la)
			return false, nil
		}
	}
	va, _ := a.Read(la) // no fenced register in this scenario
	held := "every cluster"
	if narrow {
		held = fmt.Sprintf("clusters %v only (cluster %v refused it)", append(append([]int(nil), failing...), migrating...), refusing)
	}
	e.Logf("round %d: client A (proxy 0) holds %s (slot %d) as %s until %s, on %s; the replicas of its shards on clusters %v do not have it", round, key, s, la.Token, e.H.rel(la.ValidUntil), held, failing)

	// The failovers, and the migrations on the other clusters, at once.
	errs := make([]error, len(cuts)+len(migrating))
	var wg sync.WaitGroup
	for j, ct := range cuts {
		rng := e.fork()
		wg.Add(1)
		go func() { // ends when the replica has taken over (or failed to)
			defer wg.Done()
			errs[j] = e.failOver(ct, rng)
		}()
	}
	for j, i := range migrating {
		rng := e.fork()
		wg.Add(1)
		go func() { // ends when the slots have moved (or failed to)
			defer wg.Done()
			errs[len(cuts)+j] = e.migrateUnderLock(ctx, i, s, key, la.Token, rng)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return false, err
	}

	// Every proxy must route the slot to the promoted replicas, and the
	// leftovers must be gone, before A's validity ends, or the round
	// proves nothing.
	planned := false
	for ctx.Err() == nil && time.Now().Before(la.ValidUntil.Add(-300*time.Millisecond)) {
		planned = true
		for _, p := range e.C.Running() {
			for _, ct := range cuts {
				planned = planned && e.C.routes(p, ct.cluster, s, ct.r.Addr)
			}
		}
		for _, i := range refusing {
			m := e.C.RedisCluster(i).MasterOfSlot(s)
			planned = planned && m != nil && valueOn(ctx, m, key) == ""
		}
		if planned {
			break
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	lost := true
	var states []string
	for _, ct := range cuts {
		lost = lost && valueOn(ctx, ct.r, key) != la.Token
		for _, p := range e.C.Running() {
			states = append(states, fmt.Sprintf("proxy %d on cluster %d: %s", p, ct.cluster, e.C.shardState(p, ct.cluster, s)))
		}
	}
	for _, i := range refusing {
		for _, p := range e.C.Running() {
			states = append(states, fmt.Sprintf("proxy %d on cluster %d: %s", p, i, e.C.shardState(p, i, s)))
		}
	}
	e.Logf("round %d: every proxy routes slot %d to the promoted replicas (and the leftovers expired): %v; A's lock missing on them: %v; %s", round, s, planned, lost, strings.Join(states, "; "))
	early := e.Intn(2) == 0
	if early {
		for _, ct := range cuts {
			e.resumeOld(ct, "before C's tries")
		}
	}
	inside := tryInside(ctx, e, c, key, la, round)
	holderFinishes(ctx, e, a, la, va, inside)
	return inside || (planned && lost), nil
}

// clusterChaos runs clusterFault on one cluster, or on two at once, again
// and again for d.
func (e *Env) clusterChaos(ctx context.Context, d time.Duration) error {
	end := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(end) {
		is := e.pick(e.C.NumBackends())[:1+e.Intn(2)]
		errs := make([]error, len(is))
		var wg sync.WaitGroup
		for j, i := range is {
			rng := e.fork()
			wg.Add(1)
			go func() { // ends when the fault has healed
				defer wg.Done()
				errs[j] = e.clusterFault(ctx, i, rng)
			}()
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return err
		}
		sleepCtx(ctx, e.Between(200*time.Millisecond, 600*time.Millisecond))
	}
	return nil
}

// clusterFault runs one fault on cluster i under the load, and waits until
// the cluster is whole again: a graceful CLUSTER FAILOVER of a random
// shard (its replica caught up first, so nothing is lost, but the new
// master is a promotion all the same), a kill -9 of a random master and
// the cluster's own failover to its replica (which may lack the last
// writes), the slot of a hot key moved to another shard, or a resharding
// of 100-1000 slots between two shards. A fault that could not be injected
// is logged; a cluster that does not come back whole is an error.
func (e *Env) clusterFault(ctx context.Context, i int, rng *rand.Rand) error {
	cl := e.C.RedisCluster(i)
	settle := func() error {
		sctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		return e.settleRedisCluster(sctx, i, 45*time.Second)
	}
	if err := settle(); err != nil {
		return err
	}
	ms := cl.Masters()
	if len(ms) == 0 {
		return fmt.Errorf("safety: Redis Cluster %d: no master answers", i)
	}
	m := ms[rng.IntN(len(ms))]
	switch rng.IntN(4) {
	case 0:
		r := cl.ReplicaOf(m)
		if r == nil {
			e.Logf("cluster %d: master %s has no replica: no failover", i, m.Addr)
			break
		}
		if v, err := r.Do("CLUSTER", "FAILOVER"); err != nil || v != "OK" {
			e.Logf("cluster %d: CLUSTER FAILOVER on %s FAILED: %q, %v", i, r.Addr, v, err)
			break
		}
		began := time.Now()
		if err := cl.WaitMaster(r, 20*time.Second); err != nil {
			e.Logf("cluster %d: CLUSTER FAILOVER on %s did not complete: %v", i, r.Addr, err)
			break
		}
		e.Logf("cluster %d: CLUSTER FAILOVER on replica %s: it took over from %s in %v (a graceful failover: it caught up first)", i, r.Addr, m.Addr, time.Since(began).Round(time.Millisecond))
	case 1:
		r := cl.ReplicaOf(m)
		if r == nil {
			e.Logf("cluster %d: master %s has no replica: not killed", i, m.Addr)
			break
		}
		m.Kill()
		began := time.Now()
		err := cl.WaitMaster(r, 20*time.Second)
		if err != nil {
			e.Logf("cluster %d: master %s killed (-9), its replica %s did not take over: %v", i, m.Addr, r.Addr, err)
		} else {
			e.Logf("cluster %d: master %s killed (-9); the cluster promoted its replica %s in %v", i, m.Addr, r.Addr, time.Since(began).Round(time.Millisecond))
		}
		if err := m.Restart(); err != nil {
			return fmt.Errorf("cluster %d: restarting %s: %w", i, m.Addr, err)
		}
		e.Logf("cluster %d: old master %s started again (no data): it rejoins as a replica", i, m.Addr)
	case 2:
		if len(e.Workload.Keys) == 0 {
			break
		}
		k := e.Workload.Keys[rng.IntN(len(e.Workload.Keys))]
		if _, err := e.moveSlot(i, int(keyslot.OfString(k)), "hot key "+k, rng); err != nil {
			e.Logf("%v", err)
		}
	case 3:
		if err := e.reshard(ctx, i, 100+rng.IntN(900), rng); err != nil {
			e.Logf("resharding FAILED: %v", err)
		}
	}
	return settle()
}
