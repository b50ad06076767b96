// Package safety is redlock-proxy's fault-injection safety harness. It runs
// real redis-server masters (optionally each with a replica, optionally
// watched by real redis-sentinel processes), each reached through a
// faultnet relay, proxies over them in slots (in this process, sharing
// nothing; a slot's proxy can be restarted with no memory of the masters,
// proxies can join empty slots, and one slot may reach the masters through
// relays of its own, further away), and many clients contending on a few
// hot keys with short TTLs. The backends may instead be Sentinel-managed
// groups (a master, a replica and three redis-sentinel processes each,
// named to the proxies as sentinel://...), which the proxies follow past no
// relay; and an old single Redis may stand beside the masters, with clients
// still locking on it directly (SET NX PX and the release script) on the
// proxy clients' keys, named to the proxies as upgrade_from or not.
// Meanwhile a fault schedule kills (-9), restarts, stops (SIGSTOP),
// black-holes, delays and cuts the masters' links, restarts and adds
// proxies, fails masters over to lagging replicas, has Sentinel fail
// masters over and back, restarts durable masters from a stale append-only
// file, switches an evicting memory policy on and off, flushes the masters'
// script caches, stops a proxy while masters hang, runs a greedy client,
// fails Sentinel groups over (SENTINEL FAILOVER, or a kill -9 the Sentinels
// answer by themselves; one after another or two at once, often to a
// replica whose replication was cut), or hangs, kills and cuts off the old
// Redis of an upgrade. Besides the contenders a scenario may run holders
// that extend with redsync's extend-or-acquire script (through one proxy,
// or through two at unequal distances from the masters), auto-pipelining
// clients that write a lock acquire and a slow command in one write, and
// clients that lock keys nobody else uses. Every lock operation is recorded
// with its call and return times and outcome; right after every grant the
// client asks FENCE key token for the grant's fencing number and records it
// with the grant (a client on the old Redis asks for none). The checkers
// judge the history, the old Redis's grants to its direct clients and the
// proxies' grants together:
//
//  1. windows: per key, no two holders' validity windows overlap. A
//     holder's window runs from the instant its OK arrived to the earliest
//     of t0 + ttl - drift (t0 taken just before sending the command;
//     drift = ttl*0.01 + 2ms, the client's own conservative view), the
//     instant it began to release, and the validity of any later extend of
//     the token that may have run (an extend sets the TTL it asks for, which
//     may be shorter than what was left); a granted extend opens a window
//     of its own for the same token, a refused one leaves the holder's as
//     it was;
//  2. register: per key, an in-memory register that holders increment
//     (read, think, write, with no other protection than the lock) ends
//     equal to the number of increments counted: a lost update is a
//     violation. A scenario may fence the registers: each read and write
//     then carries the holder's fencing number, and the register refuses
//     one lower than the highest it has seen;
//  3. linearizability: per key, the history of acquires, extends and
//     releases is checked with porcupine against a lock with expiry (an
//     acquire may succeed only when the lock is free or the previous
//     holder's validity ended before the acquire returned; an extend only
//     for the holder (its validity is then the extend's) or on a free lock;
//     a release succeeds only for the
//     holder; refusals and unknown outcomes are always legal, a refused
//     extend changes nothing, and a release or extend that did not report
//     success may or may not have acted);
//  4. late grants: an OK that arrived at or after its own validity end is a
//     violation (unless the whole harness process was not run for at least
//     that long meanwhile); the old Redis's grants to its direct clients
//     are not the proxy's answers and are not judged;
//  5. ghost locks: a token of an acquire answered nil that a majority of
//     masters, or the old Redis named as upgrade_from (read directly, past
//     relays and proxies, at the end of faults and of the run), still holds
//     beyond the undo time is a violation, unless a proxy stopped while masters hung reported that
//     key, at its shutdown, as an undo left pending (its Run returned
//     ErrUndosPending and its WARN named the key): that one is expected,
//     and every key so reported must be found;
//  6. no-majority: a grant through a proxy that began and ended while no
//     majority of masters could vote (down, hung, replicas, or within
//     max_ttl + drift of a restart, a fresh start, a promotion, a failback
//     or an eviction; for a Sentinel group, + the Sentinels' lease), or
//     while the old Redis named as upgrade_from could not answer (hung,
//     down, cut off), is a violation;
//  7. fencing: per key, the numbers keep FENCE's contract: every number
//     given for one grant (an acquire and the extends that kept it, through
//     any proxy) is the same; a grant made after another's validity ended
//     (or after its release began) has a larger number; no two grants share
//     a number; numbers are positive.
//
// A lost update on a key where some holder's write ended after its own
// validity is charged to that holder's pause (the machine stopped it
// between its check and its write, which no lock can prevent), not to the
// lock; it is still reported. Likewise, seconds without a grant and
// refusals of free keys in which the harness process itself was not
// scheduled are reported but not held against the proxy.
//
// It promises: a Run reports the counts of holds (grants), refusals,
// unknowns, extends, releases and each checker's violations, with
// examples; every process, relay, proxy and goroutine it starts is stopped
// and waited for before Run returns, whatever happens. The control
// scenarios are built to break the assumptions the proxy rests on (restart
// quarantine off, which also turns off the replication marker and the
// continuity check, while a majority of masters restart at once, restart
// from a stale append-only file, evict, fail back under Sentinel, or when
// two Sentinel groups fail over to replicas that lack a held lock; the
// run-id rule, which trusts a master it sees for the first time, on a
// proxy that joins after masters restarted; a client pausing past its
// validity; fencing numbers taken from a counter in each proxy, with no
// majority read; the old Redis of an upgrade not named to the proxies) or
// to emulate, on the harness's side, a fault the proxy
// once had (the unconditional late second step of an extend through a
// slower proxy; an undo that gives up at NOSCRIPT; a shutdown that names
// no key it left) and are expected to report violations: they prove the
// checkers can see. A Scenario says what it expects (zero violations,
// liveness while a majority is up, or violations detected);
// Report.Problems lists every expectation that was not met.
//
// The harness cannot see clock jumps or partitions between clients and
// proxies; it checks the proxy against what a client can observe, and the
// masters' contents only at the instants it reads them.
package safety
