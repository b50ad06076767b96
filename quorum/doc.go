// Package quorum is the Redlock algorithm without any I/O: votes, the
// majority rule, validity under clock drift, the undo set of a failed
// attempt, the majority state of reads, and the restart quarantine.
//
// It promises, for every n from 1 up:
//   - two disjoint sets of voters never both reach a majority;
//   - a round is decided as soon as its outcome can no longer change, and
//     never before;
//   - validity never exceeds the TTL and shrinks as elapsed time grows;
//   - a failed attempt is undone on every node where it may have taken
//     effect (granted, failed with an error, or lost with its connection),
//     each once, as soon as that is known, and never on a node that refused
//     it, so no partial acquisition is left behind and no other holder of
//     the same token loses its lock;
//   - a quarantined node's vote is recorded (so it is undone) but never
//     counted toward a majority;
//   - a semaphore round (Slots) is won only on a slot that a majority of
//     counted nodes hold for the caller, so with each node holding a slot
//     for one caller at a time, at most limit callers hold permits;
//   - under the strict restart rule, proxies that see the same reports from
//     a master reach the same decision about it, whatever else they saw.
//
// It imports only the standard library; time is passed in, never read.
package quorum
