// Package safety is redlock-proxy's fault-injection safety harness. It runs
// real redis-server masters, each reached through a faultnet relay, one or
// more proxies over them (in this process, sharing nothing), and many
// clients contending on a few hot keys with short TTLs, while a fault
// schedule kills (-9), restarts, stops (SIGSTOP) and black-holes or delays
// the masters' links. Every lock operation is recorded with its call and
// return times and outcome, and three checkers judge the history:
//
//  1. windows: per key, no two holders' validity windows overlap. A
//     holder's window runs from the instant its OK arrived to the earlier
//     of t0 + ttl - drift (t0 taken just before sending the SET; drift =
//     ttl*0.01 + 2ms, the client's own conservative view) and the instant
//     it began to release;
//  2. register: per key, an in-memory register that holders increment
//     (read, think, write, with no other protection than the lock) ends
//     equal to the number of increments counted: a lost update is a
//     violation;
//  3. linearizability: per key, the history of acquires and releases is
//     checked with porcupine against a lock with expiry (an acquire may
//     succeed only when the lock is free or the previous holder's validity
//     ended before the acquire returned; a release succeeds only for the
//     holder; refusals and unknown outcomes are always legal, and a release
//     that did not report success may or may not have released).
//
// A fourth check counts grants that began and ended while no majority of
// masters could vote (down, or quarantined after a restart). A lost update
// on a key where some holder's write ended after its own validity is
// charged to that holder's pause (the machine stopped it between its check
// and its write, which no lock can prevent), not to the lock; it is still
// reported. Likewise, seconds without a grant in which the harness process
// itself was not scheduled are reported but not held against liveness.
//
// It promises: a Run reports the counts of holds (grants), refusals,
// unknowns, releases and each checker's violations, with examples; every
// process, relay, proxy and goroutine it starts is stopped and waited for
// before Run returns, whatever happens. The control scenarios are built to
// break the assumptions the proxy rests on (restart quarantine off while a
// majority of masters restart at once; a client pausing past its validity)
// and are expected to report violations: they prove the checkers can see.
// A Scenario says what it expects (zero violations, liveness while a
// majority is up, or violations detected); Report.Problems lists every
// expectation that was not met.
//
// The harness cannot see clock jumps or partitions between clients and
// proxies; it checks the proxy against what a client can observe.
package safety
