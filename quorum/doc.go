// Package quorum is the Redlock algorithm without any I/O: votes, the
// majority rule, validity under clock drift, the undo set of a failed
// attempt, the majority state of reads, and the restart quarantine.
//
// It promises, for every n from 1 up:
//   - two disjoint sets of voters never both reach a majority;
//   - a round is decided as soon as its outcome can no longer change, and
//     never before;
//   - validity never exceeds the TTL and shrinks as elapsed time grows;
//   - the undo set of a round holds every node whose vote was not a refusal
//     (granted, unknown, or not yet known), so no partial acquisition is
//     left behind;
//   - a quarantined node's vote is recorded (so it is undone) but never
//     counted toward a majority.
//
// It imports only the standard library; time is passed in, never read.
package quorum
