package safety

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// Sentinel-managed groups as backends. Every backend is a group of its
// own: a master, a replica and three redis-sentinel processes watching
// them (redisproc.Group), named to the proxies as
// sentinel://HOST:PORT,.../NAME. A group is one vote: the proxies follow
// the master a majority of its Sentinels name (past no relay), and a
// master the Sentinels promote counts only after max_ttl + drift + the
// Sentinels' lease. The schedule fails groups over one after another,
// sometimes two at once, by SENTINEL FAILOVER or by a kill -9 of the
// master that the Sentinels fail over by themselves, often to a replica
// whose replication was cut first (it lacks the last locks its master
// granted), and each group fails back in its turn (its old master, a
// replica meanwhile, is promoted again).

// The groups' Sentinel timings: short, so that a killed master is failed
// over within a few seconds.
const (
	groupDownAfter       = time.Second     // down-after-milliseconds
	groupFailoverTimeout = 3 * time.Second // failover-timeout
)

// groupName is the name group i's Sentinels know its master by.
func groupName(i int) string { return fmt.Sprintf("g%d", i) }

// startGroups starts cfg.Backends groups at once and records each one's
// master and replica.
func (c *Cluster) startGroups() error {
	n := c.Config.Backends
	c.Groups = make([]*redisproc.Group, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range c.Groups {
		wg.Add(1)
		go func() { // waited for below
			defer wg.Done()
			c.Groups[i], errs[i] = redisproc.StartGroup(c.Config.Dir, groupName(i), redisproc.GroupOptions{
				DownAfter: groupDownAfter, FailoverTimeout: groupFailoverTimeout, ServerArgs: masterArgs,
			})
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("starting the Sentinel groups: %w", err)
	}
	for _, g := range c.Groups {
		c.servers = append(c.servers, g.Servers[0])
		c.replicas = append(c.replicas, g.Servers[1])
	}
	return nil
}

// setGroupMaster records m as group i's master (and the group's other
// server as its replica).
func (c *Cluster) setGroupMaster(i int, m *redisproc.Server) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.Groups[i].Servers {
		if s == m {
			c.servers[i] = m
		} else {
			c.replicas[i] = s
		}
	}
}

// followsGroup reports whether every running proxy is connected to group
// i's master now.
func (c *Cluster) followsGroup(i int) bool {
	addr := c.Server(i).Addr
	for _, p := range c.Running() {
		a := c.Proxy(p)
		if a == nil {
			continue
		}
		if h := a.Pool().Health()[i]; !h.Up || h.Addr != addr {
			return false
		}
	}
	return true
}

// waitFollowing waits up to d until every running proxy is connected to
// the masters of the groups in ms.
func (c *Cluster) waitFollowing(ctx context.Context, ms []int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		all := true
		for _, i := range ms {
			all = all && c.followsGroup(i)
		}
		if all {
			return true
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return false
}

// waitGroupCounting waits up to d until every running proxy counts group
// i's master (connected to it, out of quarantine, confirmed by its
// Sentinels).
func (c *Cluster) waitGroupCounting(ctx context.Context, i int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		all := c.followsGroup(i)
		now := time.Now()
		for _, p := range c.Running() {
			if a := c.Proxy(p); a != nil {
				all = all && a.Pool().Health()[i].Counts(now)
			}
		}
		if all {
			return true
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return false
}

// readyGroups returns k groups that can fail over again at once (see
// redisproc.Group.Ready), chosen at random among those ready, waiting up
// to d for enough of them; fewer when the wait ran out. A master the
// Sentinels switched to by themselves is recorded and logged.
func (e *Env) readyGroups(ctx context.Context, k int, d time.Duration) []int {
	deadline := time.Now().Add(d)
	var why []string
	for {
		var ready []int
		why = why[:0]
		for _, i := range e.pick(e.C.NumBackends()) {
			g := e.C.Groups[i]
			if err := g.Ready(); err != nil {
				why = append(why, fmt.Sprintf("group %d: %v", i, err))
				continue
			}
			if m, err := g.Current(); err == nil && m != e.C.Server(i) {
				e.Logf("group %d: its Sentinels switched to %s by themselves", i, m.Addr)
				e.C.setGroupMaster(i, m)
			}
			ready = append(ready, i)
		}
		if len(ready) >= k {
			return ready[:k]
		}
		if !time.Now().Before(deadline) || !sleepCtx(ctx, 200*time.Millisecond) {
			e.Logf("fewer than %d groups ready to fail over after %v: %s", k, d, strings.Join(why, "; "))
			return ready
		}
	}
}

// cutReplication cuts group i's replication: its replica is given a wrong
// masterauth and its link to the master closed, so that it cannot
// resynchronise. It lacks every write from then on, as a replica beyond a
// partition does; the Sentinels still count it fit for promotion (a link
// down for less than ten times down-after-milliseconds).
func (e *Env) cutReplication(ctx context.Context, i int) error {
	r := e.C.Replica(i)
	if reply, err := r.Do("CONFIG", "SET", "masterauth", "not-the-masters-password"); err != nil || reply != "OK" {
		return fmt.Errorf("cutting group %d's replication: CONFIG SET masterauth on %s: %q, %w", i, r.Addr, reply, err)
	}
	if _, err := r.Do("CLIENT", "KILL", "TYPE", "master"); err != nil {
		return fmt.Errorf("cutting group %d's replication: CLIENT KILL TYPE master on %s: %w", i, r.Addr, err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		info, err := infoFields(ctx, r.Addr, "replication")
		if err == nil && info["master_link_status"] == "down" {
			break
		}
		if !time.Now().Before(deadline) || !sleepCtx(ctx, 10*time.Millisecond) {
			return fmt.Errorf("cutting group %d's replication: %s's link to its master still up: %v", i, r.Addr, err)
		}
	}
	e.Logf("replication of group %d cut: its replica %s cannot resynchronise (a wrong masterauth) and lacks every write from now on", i, r.Addr)
	return nil
}

// healReplication lets server s replicate again (its masterauth cleared).
func healReplication(s *redisproc.Server) error {
	if reply, err := s.Do("CONFIG", "SET", "masterauth", ""); err != nil || reply != "OK" {
		return fmt.Errorf("CONFIG SET masterauth \"\" on %s: %q, %w", s.Addr, reply, err)
	}
	return nil
}

// groupFault is one failover of a group as a schedule saw it.
type groupFault struct {
	i        int
	kill     bool      // the master was killed (-9) and the Sentinels failed over by themselves
	at       time.Time // just before the kill or SENTINEL FAILOVER: the promotion is later
	named    time.Time // a majority of the group's Sentinels was seen naming the new master (zero: no switch)
	switched time.Time // every Sentinel was seen naming it
	from, to *redisproc.Server
}

// out is when group f.i surely cannot count, for every proxy that keeps
// the contract: a killed master from its kill; an old master that goes on
// answering from the Sentinels' lease after a majority of them named the
// new one (no round of questions that began later can find a majority
// naming the old one: two majorities share a Sentinel, and a Sentinel
// never goes back to an older configuration); until the promoted master's
// quarantine ends (max_ttl + drift + the lease after its promotion, which
// came after f.at).
func (f groupFault) out(hold time.Duration) (from, to time.Time) {
	from = f.at
	if !f.kill {
		if f.named.IsZero() {
			return time.Time{}, time.Time{}
		}
		from = f.named.Add(netio.DefaultSentinelLease)
	}
	return from, f.at.Add(hold)
}

// waitNamed waits up to d until a majority of group i's Sentinels name
// addr as its master, and returns when it saw them do so (zero: they did
// not).
func (c *Cluster) waitNamed(ctx context.Context, i int, addr string, d time.Duration) time.Time {
	g := c.Groups[i]
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		n := 0
		for _, s := range g.Sentinels {
			if a, err := s.MasterAddr(g.Name); err == nil && a == addr {
				n++
			}
		}
		if n > len(g.Sentinels)/2 {
			return time.Now()
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return time.Time{}
}

// beginFailover starts a failover of group i: a kill -9 of its master,
// which the Sentinels fail over by themselves, or SENTINEL FAILOVER
// (asked of each Sentinel in turn, again while they refuse, for up to
// 15s), after which the old master goes on answering as a master until
// the Sentinels turn it into a replica, about ten seconds later. Its
// replica, which the Sentinels promote, is recorded as the group's master
// at once; complete waits for the switch.
func (e *Env) beginFailover(ctx context.Context, i int, kill bool) (*groupFault, error) {
	g := e.C.Groups[i]
	f := &groupFault{i: i, kill: kill, from: e.C.Server(i), to: e.C.Replica(i)}
	if kill {
		f.at = time.Now()
		f.from.Kill()
		e.Logf("group %d: kill -9 of its master %s; its Sentinels fail it over to %s by themselves", i, f.from.Addr, f.to.Addr)
	} else {
		deadline := time.Now().Add(15 * time.Second)
		var last string
		for accepted := false; !accepted; {
			for _, s := range g.Sentinels {
				f.at = time.Now()
				r, err := s.Do("SENTINEL", "FAILOVER", g.Name)
				if err == nil && r == "OK" {
					accepted = true
					break
				}
				last = fmt.Sprintf("%v %v", r, err)
			}
			if !accepted && (!time.Now().Before(deadline) || !sleepCtx(ctx, 50*time.Millisecond)) {
				return nil, fmt.Errorf("SENTINEL FAILOVER %s refused for 15s: %s", g.Name, last)
			}
		}
		e.Logf("group %d: SENTINEL FAILOVER %s: its Sentinels promote %s; %s answers as a master until they turn it into a replica", i, g.Name, f.to.Addr, f.from.Addr)
	}
	e.C.setGroupMaster(i, f.to)
	return f, nil
}

// complete waits until every Sentinel names the new master (and that
// server says it is one); with healCut, it then heals the promoted
// replica's replication (cut before). A killed master starts again, empty,
// and follows the new one, as a server rejoining its group does; where
// the Sentinels did not fail over (the timings did not allow it), it
// starts again as the group's master, and the proxies quarantine it as a
// restart.
func (f *groupFault) complete(ctx context.Context, e *Env, healCut bool) error {
	g := e.C.Groups[f.i]
	deadline := time.Now().Add(20 * time.Second)
	f.named = e.C.waitNamed(ctx, f.i, f.to.Addr, time.Until(deadline))
	to, err := g.WaitSwitch(f.from, max(time.Until(deadline), time.Second))
	switch {
	case err != nil && f.kill:
		e.C.setGroupMaster(f.i, f.from)
		if rerr := f.from.Restart(); rerr != nil {
			return errors.Join(err, rerr)
		}
		e.Logf("group %d: no failover within 20s (%v); its master started again, empty", f.i, err)
		if healCut {
			return healReplication(e.C.Replica(f.i))
		}
		return nil
	case err != nil:
		return fmt.Errorf("group %d: %w", f.i, err)
	case to != f.to:
		return fmt.Errorf("group %d: the Sentinels promoted %s, not %s", f.i, to.Addr, f.to.Addr)
	}
	f.switched = time.Now()
	e.Logf("group %d: a majority of its Sentinels names %s (was %s) %v after the fault, every one %v after it",
		f.i, f.to.Addr, f.from.Addr, f.named.Sub(f.at).Round(time.Millisecond), f.switched.Sub(f.at).Round(time.Millisecond))
	if healCut {
		if err := healReplication(f.to); err != nil {
			return err
		}
	}
	if f.kill {
		if err := f.from.Restart(); err != nil {
			return fmt.Errorf("group %d: restarting %s: %w", f.i, f.from.Addr, err)
		}
		if err := f.from.Follow(f.to.Addr); err != nil {
			return fmt.Errorf("group %d: %s following %s: %w", f.i, f.from.Addr, f.to.Addr, err)
		}
		e.Logf("group %d: %s started again (empty) and follows the new master", f.i, f.from.Addr)
	}
	return nil
}

// completing completes the faults (see groupFault.complete), each on a
// goroutine of its own; the function it returns waits for them.
func completing(ctx context.Context, e *Env, faults []*groupFault, healCut bool) (wait func() error) {
	errs := make([]error, len(faults))
	var wg sync.WaitGroup
	for j, f := range faults {
		wg.Add(1)
		go func() { // waited for by wait
			defer wg.Done()
			errs[j] = f.complete(ctx, e, healCut)
		}()
	}
	return func() error {
		wg.Wait()
		return errors.Join(errs...)
	}
}

// waitCounted waits until every running proxy counts the groups in ms
// again (a wait that the run's end interrupts is no error).
func (e *Env) waitCounted(ctx context.Context, ms []int) error {
	for _, i := range ms {
		if !e.C.waitGroupCounting(ctx, i, e.C.Hold()+10*time.Second) && ctx.Err() == nil {
			return fmt.Errorf("group %d never counted again after its failover", i)
		}
	}
	return nil
}

// scheduleGroups fails Sentinel-managed groups over, one after another
// and sometimes two at once, until the faults' deadline. The first cycle,
// and one in six after it, is a probe round (see groupsRound): two groups
// fail over at once to replicas that lack a held lock, and a second
// client tries the lock. One in six kills two groups' masters at once
// (groupsKilled). The others fail one group over (groupSingle), by a kill
// -9 the Sentinels answer (the second cycle, and half of the others) or
// SENTINEL FAILOVER, after cutting its replication half of the time;
// while it is out, the other groups must keep granting. Each cycle waits until the groups it failed over
// count again; the next fails over groups that are ready (a failed-over
// group's old master, once a replica, is promoted back in its turn).
func scheduleGroups(ctx context.Context, e *Env) {
	p := newGroupProbes(e)
	defer p.close()
	for cycle := 0; sleepCtx(ctx, e.Between(200*time.Millisecond, 500*time.Millisecond)); cycle++ {
		// A kill -9 is failed over in about 2.5s; its group counts again
		// the hold after that.
		if e.Left() < e.C.Hold()+3*time.Second {
			return
		}
		// Groups not ready yet are waited for while the run leaves time
		// for a failover and its quarantine.
		wait := max(e.Left()-e.C.Hold()-3*time.Second, 0)
		var err error
		switch kind := e.Intn(6); {
		case cycle == 0 || kind == 0:
			_, err = groupsRound(ctx, e, p, cycle+1, wait)
		case kind == 1:
			err = groupsKilled(ctx, e, wait)
		default:
			// The second cycle kills a master: a short run sees an
			// automatic failover too.
			err = groupSingle(ctx, e, cycle == 1 || kind < 4, wait)
		}
		if err != nil {
			e.Problemf("%v", err)
			return
		}
	}
}

// groupSingle fails one ready group over (a kill -9 of its master with
// kill, else SENTINEL FAILOVER), after cutting its replication half of the
// time, and checks that locks are granted while it is out (its own vote
// only is lost).
func groupSingle(ctx context.Context, e *Env, kill bool, wait time.Duration) error {
	ms := e.readyGroups(ctx, 1, wait)
	if len(ms) == 0 {
		return nil
	}
	i := ms[0]
	cut := e.Intn(2) == 0
	if cut {
		if err := e.cutReplication(ctx, i); err != nil {
			return err
		}
		e.hold(ctx, e.Between(100*time.Millisecond, 400*time.Millisecond))
	}
	before := e.H.LiveHolds.Load()
	f, err := e.beginFailover(ctx, i, kill)
	if err != nil {
		if cut {
			err = errors.Join(err, healReplication(e.C.Replica(i)))
		}
		return err
	}
	if err := f.complete(ctx, e, cut); err != nil {
		return err
	}
	if err := e.waitCounted(ctx, ms); err != nil {
		return err
	}
	granted := e.H.LiveHolds.Load() - before
	e.Logf("group %d counts again %v after the fault; %d locks granted meanwhile by the other groups", i, time.Since(f.at).Round(time.Millisecond), granted)
	if granted == 0 && ctx.Err() == nil {
		e.Problemf("no lock granted while only group %d was out (%s to %s): a failover must cost its own group's vote only", i, e.H.rel(f.at), e.H.rel(time.Now()))
	}
	return nil
}

// groupsKilled kills the masters of two ready groups (a majority of
// three) at once, after cutting their replication half of the time; the
// Sentinels fail both over. No majority counts from the second kill until
// the hold after the first has passed (a promoted master counts the hold
// after its promotion); once both count again, locks are granted again.
func groupsKilled(ctx context.Context, e *Env, wait time.Duration) error {
	k := e.C.Majority()
	ms := e.readyGroups(ctx, k, wait)
	if len(ms) < k {
		return nil
	}
	cut := e.Intn(2) == 0
	if cut {
		for _, i := range ms {
			if err := e.cutReplication(ctx, i); err != nil {
				return err
			}
		}
		e.hold(ctx, e.Between(100*time.Millisecond, 400*time.Millisecond))
	}
	var faults []*groupFault
	for _, i := range ms {
		f, err := e.beginFailover(ctx, i, true)
		if err != nil {
			return err
		}
		faults = append(faults, f)
		e.hold(ctx, e.Between(0, 500*time.Millisecond))
	}
	if err := completing(ctx, e, faults, cut)(); err != nil {
		return err
	}
	noMajority(e, ms, faults, "masters killed (-9)")
	if err := e.waitCounted(ctx, ms); err != nil {
		return err
	}
	before := e.H.LiveHolds.Load()
	e.hold(ctx, time.Second)
	if e.H.LiveHolds.Load() == before && ctx.Err() == nil {
		e.Problemf("no lock granted in the second after groups %v counted again", ms)
	}
	return nil
}

// noMajority records when the groups in ms, failed over by faults, were
// all out at once (see groupFault.out): no majority of three counts then.
func noMajority(e *Env, ms []int, faults []*groupFault, how string) {
	if !e.quarantines() {
		return
	}
	from, to := faults[0].out(e.C.Hold())
	for _, f := range faults[1:] {
		f0, t0 := f.out(e.C.Hold())
		from, to = later(from, f0), earlier(to, t0)
	}
	if from.Before(to) {
		e.NoMajority(from, to, fmt.Sprintf("groups %v failed over (%s) to replicas that may lack the last locks: out for max_ttl + drift + the Sentinels' lease", ms, how))
	}
}

// groupProbes are a probe round's clients: A holds the lock through proxy
// 0, C tries it through the last proxy.
type groupProbes struct{ a, c *Client }

func newGroupProbes(e *Env) *groupProbes {
	return &groupProbes{a: NewClient(5300, 0, e.C, e.H, 16), c: NewClient(5301, e.C.NumProxies()-1, e.C, e.H, 17)}
}

func (p *groupProbes) close() {
	p.a.Close()
	p.c.Close()
}

// groupsRound is a probe round: the replication of two ready groups (a
// majority of three) is cut; client A takes the lock, which their
// replicas so never see; both groups fail over at once (SENTINEL
// FAILOVER) to those replicas; once every proxy follows them, client C
// tries the lock through another proxy while A's validity lasts. The
// promoted masters do not count for max_ttl + drift + the lease: C must be
// refused. It reports whether the round ran as planned (the new masters
// lack A's lock and every proxy followed them before A's validity ended).
func groupsRound(ctx context.Context, e *Env, p *groupProbes, round int, wait time.Duration) (bool, error) {
	const key = "ctl:groups"
	k := e.C.Majority()
	ms := e.readyGroups(ctx, k, wait)
	if len(ms) < k {
		return false, nil
	}
	for _, i := range ms {
		if err := e.cutReplication(ctx, i); err != nil {
			return false, err
		}
	}
	ttl := e.C.Config.MaxTTL
	la, ok := acquireWithin(ctx, p.a, key, ttl, time.Second)
	if !ok {
		for _, i := range ms {
			if err := healReplication(e.C.Replica(i)); err != nil {
				return false, err
			}
		}
		e.Logf("round %d: client A could not take %s", round, key)
		return false, nil
	}
	va, _ := p.a.Read(la) // no fenced register in this scenario
	e.Logf("round %d: client A (proxy 0) holds %s as %s until %s; the replicas of groups %v never saw it", round, key, la.Token, e.H.rel(la.ValidUntil), ms)
	var faults []*groupFault
	for _, i := range ms {
		f, err := e.beginFailover(ctx, i, false)
		if err != nil {
			return false, fmt.Errorf("round %d: %w", round, err)
		}
		faults = append(faults, f)
	}
	return e.probeAfterFailovers(ctx, p, ms, faults, true, key, la, va, round, "new masters", "SENTINEL FAILOVER, their replication cut")
}

// probeAfterFailovers ends a probe round once the groups in ms are failing
// over (faults, completed with healCut): C tries as soon as every proxy
// follows the new masters (a majority of each group's Sentinels names
// them), before every Sentinel does; A finishes; the failovers complete
// and the groups count again. It reports whether the round ran as
// planned: C tried inside A's validity, or every proxy followed the new
// masters, which lack A's lock, before it ended.
func (e *Env) probeAfterFailovers(ctx context.Context, p *groupProbes, ms []int, faults []*groupFault, healCut bool, key string, la Lease, va int64, round int, which, how string) (bool, error) {
	completed := completing(ctx, e, faults, healCut)
	followed := e.C.waitFollowing(ctx, ms, time.Until(la.ValidUntil.Add(-300*time.Millisecond)))
	lost := len(e.holders(ctx, ms, key, la.Token)) == 0
	e.Logf("round %d: every proxy follows the %s of groups %v: %v; A's lock missing on them: %v", round, which, ms, followed, lost)
	inside := tryInside(ctx, e, p.c, key, la, round)
	holderFinishes(ctx, e, p.a, la, va, inside)
	if err := completed(); err != nil {
		return false, fmt.Errorf("round %d: %w", round, err)
	}
	noMajority(e, ms, faults, how)
	if err := e.waitCounted(ctx, ms); err != nil {
		return false, fmt.Errorf("round %d: %w", round, err)
	}
	planned := inside || (lost && followed)
	if !planned {
		e.Logf("round %d proves nothing: it did not run as planned on this (slow?) machine", round)
	}
	return planned, nil
}

// driveGroups returns a Drive of probe rounds (see groupsRound), repeated
// until the run's deadline, at least one as planned.
func driveGroups(ctx context.Context, e *Env) error {
	if len(e.C.Groups) == 0 {
		return errors.New("the probe rounds need Sentinel groups as backends")
	}
	p := newGroupProbes(e)
	defer p.close()
	need := e.C.Hold() + 4*time.Second
	return repeatRounds(ctx, e, need, func(round int) (bool, error) {
		return groupsRound(ctx, e, p, round, 30*time.Second)
	})
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
