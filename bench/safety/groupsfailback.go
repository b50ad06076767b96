package safety

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// A failback to a master the Sentinels never demoted. After a failover
// the old master goes on answering as a master, with its data, until the
// Sentinels turn it into a replica (some seconds later); a second
// failover in that window names it again. It was never a replica: it has
// the same run, replication id and marker as before, and lacks every lock
// granted on the master in between. Each round of the drive, on a
// majority of the groups: their masters M refuse REPLICAOF (an ACL, which
// holds the window open for as long as the round needs); the groups fail
// over to their replicas R, and once every proxy counts R, client A takes
// a lock; the groups fail back to M, and client C tries the lock through
// another proxy while A's validity lasts. Every switch of a group's
// master is a loss dated at the switch: C must be refused.

// failbackMaxTTL is the proxies' max_ttl in the failback scenarios: A's
// lock outlasts one failover and the proxies following it.
const failbackMaxTTL = 3 * time.Second

// driveGroupsFailback is the Drive of sentinel-failback-undemoted: rounds
// (see failbackRound) until the run's deadline, at least one as planned.
func driveGroupsFailback(ctx context.Context, e *Env) error {
	if len(e.C.Groups) == 0 {
		return errors.New("the failback rounds need Sentinel groups as backends")
	}
	p := newGroupProbes(e)
	defer p.close()
	return repeatRounds(ctx, e, 2*e.C.Hold()+10*time.Second, func(round int) (bool, error) {
		return failbackRound(ctx, e, p, round)
	})
}

// setDemotable lets the Sentinels demote s (REPLICAOF and SLAVEOF allowed
// to the default user, which they use), or not.
func setDemotable(s *redisproc.Server, ok bool) error {
	sign := "-"
	if ok {
		sign = "+"
	}
	if v, err := s.Do("ACL", "SETUSER", "default", sign+"replicaof", sign+"slaveof"); err != nil || v != "OK" {
		return fmt.Errorf("ACL SETUSER default %sreplicaof on %s: %q, %v", sign, s.Addr, v, err)
	}
	return nil
}

// failOverAll fails the groups in ms over at once (SENTINEL FAILOVER) and
// waits for the switches.
func (e *Env) failOverAll(ctx context.Context, ms []int, how string) ([]*groupFault, error) {
	var faults []*groupFault
	for _, i := range ms {
		f, err := e.beginFailover(ctx, i, false)
		if err != nil {
			return nil, err
		}
		faults = append(faults, f)
	}
	if err := completing(ctx, e, faults, false)(); err != nil {
		return nil, err
	}
	noMajority(e, ms, faults, how)
	return faults, nil
}

// failbackRound is one round of driveGroupsFailback. It reports whether
// the round ran as planned (see probeAfterFailovers).
func failbackRound(ctx context.Context, e *Env, p *groupProbes, round int) (planned bool, err error) {
	const key = "ctl:failback"
	k := e.C.Majority()
	ms := e.readyGroups(ctx, k, 30*time.Second)
	if len(ms) < k {
		return false, nil
	}
	olds := make([]*redisproc.Server, len(ms))
	for j, i := range ms {
		olds[j] = e.C.Server(i)
		if err := setDemotable(olds[j], false); err != nil {
			return false, err
		}
	}
	defer func() {
		for _, s := range olds {
			err = errors.Join(err, setDemotable(s, true))
		}
	}()
	e.Logf("round %d: the masters of groups %v refuse REPLICAOF: the Sentinels cannot demote them", round, ms)
	if _, err := e.failOverAll(ctx, ms, "SENTINEL FAILOVER to the replicas"); err != nil {
		return false, fmt.Errorf("round %d: %w", round, err)
	}
	if err := e.waitCounted(ctx, ms); err != nil {
		return false, fmt.Errorf("round %d: %w", round, err)
	}
	la, ok := acquireWithin(ctx, p.a, key, e.C.Config.MaxTTL, time.Second)
	if !ok {
		e.Logf("round %d: client A could not take %s", round, key)
		return false, nil
	}
	va, _ := p.a.Read(la) // no fenced register in this scenario
	e.Logf("round %d: client A (proxy 0) holds %s as %s until %s; the old masters of groups %v, never demoted, lack it", round, key, la.Token, e.H.rel(la.ValidUntil), ms)
	var backs []*groupFault
	for j, i := range ms {
		f, err := e.beginFailover(ctx, i, false)
		if err != nil {
			return false, fmt.Errorf("round %d: %w", round, err)
		}
		if f.to != olds[j] {
			return false, fmt.Errorf("round %d: group %d fails back to %s, not %s", round, i, f.to.Addr, olds[j].Addr)
		}
		backs = append(backs, f)
	}
	return e.probeAfterFailovers(ctx, p, ms, backs, false, key, la, va, round, "old masters", "SENTINEL FAILOVER back to masters never demoted")
}
