package safety

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// The back-in-time nemeses: a majority of masters loses a held lock while
// staying up, or comes back from a restart without it, in a way the
// masters' own reports make easy to miss:
//   - Sentinel fails a master over to its replica and back (the master
//     resynchronises from a replica that never saw the lock);
//   - a durable master (appendonly yes, appendfsync always) restarts from
//     an append-only file that lacks the lock: appendonly was switched off
//     at runtime, or the file was replaced by an older copy;
//   - an evicting memory policy is switched on (the lock is evicted) and
//     off again, sometimes faster than the proxies' periodic check.
// In each, client A holds a lock on every master, the loss takes it from a
// majority, and client C tries the same lock through another proxy while
// A's validity lasts: C must be refused. The rounds repeat until the
// faults' deadline (at least one round runs as planned).

// repeatRounds runs round until the faults' deadline leaves less than need
// for another, and at least once. A round that did not run as planned
// (round reports false: the machine was too slow for its timing) proves
// nothing and is repeated; three such rounds in a row end the run, with
// an error if no round ran as planned.
func repeatRounds(ctx context.Context, e *Env, need time.Duration, round func(n int) (planned bool, err error)) error {
	done, misses := 0, 0
	for n := 1; ctx.Err() == nil; n++ {
		if done > 0 && e.Left() < need {
			return nil
		}
		planned, err := round(n)
		if err != nil {
			return fmt.Errorf("round %d: %w", n, err)
		}
		if planned {
			done, misses = done+1, 0
			continue
		}
		misses++
		e.Logf("round %d proves nothing: it did not run as planned on this (slow?) machine; again", n)
		if misses == 3 {
			if done > 0 {
				return nil
			}
			return errors.New("three rounds in a row did not run as planned")
		}
	}
	return ctx.Err()
}

// holders lists the masters among ms whose key holds token, read directly.
func (e *Env) holders(ctx context.Context, ms []int, key, token string) []int {
	var out []int
	for _, i := range ms {
		rdb := direct(e.C.Server(i).Addr)
		v, err := rdb.Get(ctx, key).Result()
		rdb.Close()
		if err == nil && v == token {
			out = append(out, i)
		}
	}
	return out
}

// quarantines reports whether the proxies quarantine a master whose data
// went back in time.
func (e *Env) quarantines() bool { return e.C.Config.EffectiveQuarantine() != "off" }

// driveSentinelFailback returns a Drive for a real Sentinel failover and
// failback on a majority of the masters, each with a replica that no proxy
// uses:
//  1. Sentinel promotes the replicas (SENTINEL FAILOVER). The old masters
//     go on answering as masters until Sentinel turns them into replicas
//     (it waits about ten seconds for that), and the proxies keep using
//     them;
//  2. client A takes the lock meanwhile, on every master, and keeps it with
//     extends (redsync's extend-or-acquire) while it can;
//  3. Sentinel turns the old masters into replicas of the promoted ones:
//     they resynchronise and lose A's lock; A's extends fail (no majority
//     counts), its last validity runs on;
//  4. Sentinel fails back (SENTINEL FAILOVER again): the old masters are
//     masters again, without A's lock, at the addresses the proxies use;
//  5. client C tries the lock through another proxy while A's validity
//     lasts. A master that may have lost writes does not count for
//     max_ttl + drift: C must be refused.
func driveSentinelFailback(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		if len(e.C.Sentinels) == 0 {
			return errors.New("sentinel-failback needs a cluster with Sentinels")
		}
		n, k := e.C.NumBackends(), e.C.Majority()
		ttl := e.C.Config.MaxTTL
		a, c, closeClients := e.holderAndRival(5000, 10)
		defer closeClients()
		// A round: a failover, Sentinel's wait, a failback, C's tries.
		need := 15*time.Second + ttl
		return repeatRounds(ctx, e, need, func(round int) (bool, error) {
			if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
				return false, errors.New("the masters never all counted again")
			}
			settle, cancel := context.WithTimeout(ctx, 40*time.Second)
			defer cancel()
			for i := 0; i < n; i++ {
				if err := e.C.WaitReplicaSynced(settle, i, 30*time.Second); err != nil {
					return false, err
				}
				if err := e.C.WaitSentinelsSettled(settle, i); err != nil {
					return false, err
				}
			}
			ms := e.pick(k)
			for _, i := range ms {
				if err := e.C.SentinelFailover(ctx, i, 5*time.Second); err != nil {
					return false, err
				}
				e.Logf("round %d: SENTINEL FAILOVER %s: Sentinel promotes master %d's replica; master %d answers as a master until Sentinel turns it into a replica", round, group(i), i, i)
			}
			for _, i := range ms {
				if err := waitRole(ctx, e.C.Replica(i).Addr, "master", 5*time.Second); err != nil {
					return false, err
				}
			}
			la, ok := acquireWithin(ctx, a, key, ttl, time.Second)
			if !ok {
				return false, nil
			}
			va, _ := a.Read(la) // no fenced register in this scenario
			e.Logf("round %d: client A (proxy 0) holds %s as %s until %s; the replicas of masters %v were promoted before", round, key, la.Token, e.H.rel(la.ValidUntil), ms)
			// A keeps its lock with extends until Sentinel has turned every
			// old master into a replica and it has resynchronised.
			demoted := func() bool {
				for _, i := range ms {
					if waitRole(ctx, e.C.Server(i).Addr, "slave", 0) != nil {
						return false
					}
				}
				return true
			}
			wait := time.Now().Add(30 * time.Second)
			for !demoted() {
				if time.Now().After(wait) {
					return false, fmt.Errorf("masters %v not made replicas by Sentinel in 30s", ms)
				}
				sleepCtx(ctx, min(ttl/6, 500*time.Millisecond))
				if la.Valid(time.Now(), e.Workload.Margin) {
					la, _ = a.Extend(la, ttl)
				}
			}
			if la.Valid(time.Now(), e.Workload.Margin) {
				la, _ = a.Extend(la, ttl) // refused, most likely: no majority counts
			}
			down := time.Now()
			e.Logf("round %d: Sentinel turned masters %v into replicas of the promoted ones: they resynchronised without A's lock; A's validity ends %s", round, ms, e.H.rel(la.ValidUntil))
			before := e.C.connects(ms)
			back := time.Now()
			for _, i := range ms {
				if err := e.C.SentinelFailover(ctx, i, 5*time.Second); err != nil {
					return false, err
				}
				e.Logf("round %d: SENTINEL FAILOVER %s again: the failback promotes master %d", round, group(i), i)
			}
			for _, i := range ms {
				if err := waitRole(ctx, e.C.Server(i).Addr, "master", 5*time.Second); err != nil {
					return false, err
				}
			}
			if e.quarantines() {
				e.NoMajority(down, back.Add(e.C.Hold()), fmt.Sprintf("masters %v replicas, then failed back with another history: out for max_ttl + drift", ms))
			} else {
				e.NoMajority(down, back, fmt.Sprintf("masters %v replicas", ms))
			}
			planned := e.C.waitReconnected(ctx, ms, before, time.Until(la.ValidUntil.Add(-300*time.Millisecond)))
			lost := len(e.holders(ctx, ms, key, la.Token)) == 0
			e.Logf("round %d: the proxies reconnected to the failed-back masters: %v; A's lock gone from them: %v", round, planned, lost)
			inside := tryInside(ctx, e, c, key, la, round)
			holderFinishes(ctx, e, a, la, va, inside)
			return inside || (planned && lost), nil
		})
	}
}

// driveStaleAOF returns a Drive for durable masters (appendonly yes,
// appendfsync always) that restart from an append-only file without the
// lock: on a majority, either appendonly is switched off at runtime
// (CONFIG SET appendonly no) or the file is copied; client A takes the
// lock; those masters are killed (-9), the copy (if any) put back in
// place of the file, and started again with their durable configuration.
// Client C tries the lock through another proxy while A's validity lasts:
// a restart never proves the new run holds the last writes of the run
// before, so the restarted masters do not count for max_ttl + drift and C
// must be refused.
func driveStaleAOF(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		if !e.C.Config.Durable {
			return errors.New("stale-aof needs durable masters")
		}
		ttl := e.C.Config.MaxTTL
		a, c, closeClients := e.holderAndRival(5100, 12)
		defer closeClients()
		k := e.C.Majority()
		need := ttl + e.C.Hold() + reconnectAllowance + time.Second
		return repeatRounds(ctx, e, need, func(round int) (bool, error) {
			if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
				return false, errors.New("the masters never all counted again")
			}
			ms := e.pick(k)
			older := e.Intn(2) == 0
			copies := make(map[int]string)
			for _, i := range ms {
				if older {
					dst := filepath.Join(e.C.Config.Dir, fmt.Sprintf("aof-copy-%d-%d", i, round))
					if err := copyDir(aofDir(e, i), dst); err != nil {
						return false, err
					}
					copies[i] = dst
					e.Logf("round %d: master %d's append-only file copied", round, i)
				} else {
					if r, err := e.C.Server(i).Do("CONFIG", "SET", "appendonly", "no"); err != nil || r != "OK" {
						return false, fmt.Errorf("CONFIG SET appendonly no on master %d: %q, %v", i, r, err)
					}
					e.Logf("round %d: CONFIG SET appendonly no on master %d", round, i)
				}
			}
			la, ok := acquireWithin(ctx, a, key, ttl, time.Second)
			if !ok {
				for _, i := range ms {
					e.C.Server(i).Do("CONFIG", "SET", "appendonly", "yes")
				}
				return false, nil
			}
			va, _ := a.Read(la) // no fenced register in this scenario
			e.Logf("round %d: client A (proxy 0) holds %s as %s until %s", round, key, la.Token, e.H.rel(la.ValidUntil))
			before := make([][]uint64, e.C.NumProxies())
			for p := range before {
				for _, i := range ms {
					r, _, _ := e.C.restartsSeen(p, i)
					before[p] = append(before[p], r)
				}
			}
			var started time.Time
			for _, i := range ms {
				e.Kill9(i)
			}
			killed := time.Now() // every one of them is down from here
			for _, i := range ms {
				how := "appendonly had been switched off"
				if dst, ok := copies[i]; ok {
					how = "its append-only file replaced by the copy taken before A's lock"
					if err := os.RemoveAll(aofDir(e, i)); err != nil {
						return false, err
					}
					if err := copyDir(dst, aofDir(e, i)); err != nil {
						return false, err
					}
				}
				if started.IsZero() {
					started = time.Now()
				}
				e.Start(i)
				e.Logf("round %d: master %d started with appendonly yes, appendfsync always (%s)", round, i, how)
			}
			if e.quarantines() {
				e.NoMajority(killed, started.Add(e.C.Hold()), fmt.Sprintf("masters %v killed and restarted from a stale append-only file: out for max_ttl + drift after they started", ms))
			} else {
				e.NoMajority(killed, started, fmt.Sprintf("masters %v down", ms))
			}
			seen := waitRestartsSeen(ctx, e, ms, before, la.ValidUntil.Add(-300*time.Millisecond))
			lost := len(e.holders(ctx, ms, key, la.Token)) == 0
			e.Logf("round %d: the restarts seen by every proxy: %v; A's lock gone from the restarted masters: %v", round, seen, lost)
			inside := tryInside(ctx, e, c, key, la, round)
			holderFinishes(ctx, e, a, la, va, inside)
			return inside || (seen && lost), nil
		})
	}
}

// aofDir is master i's append-only file directory (Redis 7's
// appenddirname).
func aofDir(e *Env, i int) string { return filepath.Join(e.C.Server(i).Dir(), "appendonlydir") }

// copyDir copies the files of directory src into dst (created).
func copyDir(src, dst string) error {
	ents, err := os.ReadDir(src)
	if err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	if err := os.MkdirAll(dst, 0o755); err != nil {
		return fmt.Errorf("copying %s: %w", src, err)
	}
	for _, ent := range ents {
		if ent.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, ent.Name()))
		if err != nil {
			return fmt.Errorf("copying %s: %w", src, err)
		}
		if err := os.WriteFile(filepath.Join(dst, ent.Name()), b, 0o644); err != nil {
			return fmt.Errorf("copying %s: %w", src, err)
		}
	}
	return nil
}

// driveEviction returns a Drive for an evicting memory policy switched on
// and off: client A takes the lock; on a majority, CONFIG SET
// maxmemory-policy volatile-ttl and maxmemory 1, and a write, evict every
// key with a TTL (A's lock among them); the policy is reverted at once
// (faster than the proxies' periodic check) or after 1.2-1.5s (the check
// sees it). Client C tries the lock through another proxy while A's
// validity lasts: a master that may have evicted does not count for
// max_ttl + drift from the last moment it could, and C must be refused.
func driveEviction(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		ttl := e.C.Config.MaxTTL
		a, c, closeClients := e.holderAndRival(5200, 14)
		defer closeClients()
		k := e.C.Majority()
		need := ttl + e.C.Hold() + reconnectAllowance + time.Second
		return repeatRounds(ctx, e, need, func(round int) (bool, error) {
			if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
				return false, errors.New("the masters never all counted again")
			}
			ms := e.pick(k)
			la, ok := acquireWithin(ctx, a, key, ttl, time.Second)
			if !ok {
				return false, nil
			}
			va, _ := a.Read(la) // no fenced register in this scenario
			e.Logf("round %d: client A (proxy 0) holds %s as %s until %s", round, key, la.Token, e.H.rel(la.ValidUntil))
			fast := e.Intn(2) == 0
			first := time.Now()
			for _, i := range ms {
				s := e.C.Server(i)
				for _, args := range [][]string{
					{"CONFIG", "SET", "maxmemory-policy", "volatile-ttl"},
					{"CONFIG", "SET", "maxmemory", "1"},
					{"SET", "filler", "x"}, // a write: evicts (and is refused, out of memory)
				} {
					if r, err := s.Do(args...); err != nil || (r != "OK" && !strings.HasPrefix(r, "OOM")) {
						return false, fmt.Errorf("%s on master %d: %q, %v", strings.Join(args, " "), i, r, err)
					}
				}
			}
			evicted := time.Now()
			how := "reverted at once, faster than the proxies' periodic check"
			if !fast {
				how = "reverted after the proxies' periodic check could see it"
				e.hold(ctx, e.Between(1200*time.Millisecond, 1500*time.Millisecond))
			}
			for _, i := range ms {
				s := e.C.Server(i)
				for _, args := range [][]string{{"CONFIG", "SET", "maxmemory", "0"}, {"CONFIG", "SET", "maxmemory-policy", "noeviction"}} {
					if r, err := s.Do(args...); err != nil || r != "OK" {
						return false, fmt.Errorf("%s on master %d: %q, %v", strings.Join(args, " "), i, r, err)
					}
				}
			}
			e.Logf("round %d: maxmemory-policy volatile-ttl and maxmemory 1 on masters %v, a write (keys with a TTL evicted), then the policy %s", round, ms, how)
			if e.quarantines() {
				e.NoMajority(evicted, first.Add(e.C.Hold()), fmt.Sprintf("masters %v evicted keys: out for max_ttl + drift", ms))
			}
			return e.rivalTries(ctx, round, ms, "evicted", a, c, la, va), nil
		})
	}
}

// driveClockStep returns a Drive for masters whose wall clocks step (the
// masters run with a clock the harness moves, Clocks): client A takes the
// lock; on a majority, the clock steps ahead by A's TTL and a second (A's
// lock expires there at once, by their clocks), or, in half the rounds,
// the clock was set back as far before A's grant and is set right again
// now (A's lock, written while it was behind, expires as early). Client C
// tries the lock through another proxy while A's validity lasts: a master
// whose clock jumped ahead does not count for max_ttl + drift, and C must
// be refused. Each round leaves the clocks where they were before it (a
// step back, which is safe, ends an ahead round).
func driveClockStep(key string) func(ctx context.Context, e *Env) error {
	return func(ctx context.Context, e *Env) error {
		ttl := e.C.Config.MaxTTL
		a, c, closeClients := e.holderAndRival(5500, 22)
		defer closeClients()
		k := e.C.Majority()
		step := ttl + time.Second
		need := ttl + e.C.Hold() + reconnectAllowance + time.Second
		shift := func(ms []int, d time.Duration) error {
			for _, i := range ms {
				if err := e.C.Clock(i).Shift(d); err != nil {
					return err
				}
			}
			return nil
		}
		return repeatRounds(ctx, e, need, func(round int) (bool, error) {
			if !e.C.waitCounting(ctx, 2*e.C.Hold()+5*time.Second) {
				return false, errors.New("the masters never all counted again")
			}
			ms := e.pick(k)
			back := e.Intn(2) == 0
			if back {
				if err := shift(ms, -step); err != nil {
					return false, err
				}
				e.Logf("round %d: the clocks of masters %v set back %v", round, ms, step)
				e.hold(ctx, e.Between(50*time.Millisecond, 1200*time.Millisecond)) // checks read them behind
			}
			la, ok := acquireWithin(ctx, a, key, ttl, time.Second)
			if !ok {
				if back {
					return false, shift(ms, step)
				}
				return false, nil
			}
			va, _ := a.Read(la) // no fenced register in this scenario
			e.Logf("round %d: client A (proxy 0) holds %s as %s until %s", round, key, la.Token, e.H.rel(la.ValidUntil))
			first := time.Now()
			if err := shift(ms, step); err != nil {
				return false, err
			}
			stepped := time.Now()
			how := fmt.Sprintf("step %v ahead", step)
			if back {
				how = "set right again"
			}
			e.Logf("round %d: the clocks of masters %v %s", round, ms, how)
			if e.quarantines() {
				e.NoMajority(stepped, first.Add(e.C.Hold()), fmt.Sprintf("masters %v's clocks jumped ahead: out for max_ttl + drift", ms))
			}
			showed := e.rivalTries(ctx, round, ms, "expired early", a, c, la, va)
			if !back {
				if err := shift(ms, -step); err != nil {
					return false, err
				}
			}
			return showed, nil
		})
	}
}

// rivalTries ends an orchestrated round: it reads whether the fault took
// holder A's lease la from masters ms (what it did, for the log), lets the
// rival try A's key while A's validity lasts, and lets A finish its work
// (va is what A read). It reports whether the round showed anything: the
// rival got the key inside A's validity, or the lock was gone there.
func (e *Env) rivalTries(ctx context.Context, round int, ms []int, what string, a, rival *Client, la Lease, va int64) bool {
	lost := len(e.holders(ctx, ms, la.Key, la.Token)) == 0
	e.Logf("round %d: A's lock %s on masters %v: %v", round, what, ms, lost)
	inside := tryInside(ctx, e, rival, la.Key, la, round)
	holderFinishes(ctx, e, a, la, va, inside)
	return inside || lost
}
