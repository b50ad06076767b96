// Package netio owns the proxy's connections to its Redis backends.
//
// Each backend has one Link: one TCP (or TLS) connection shared by every
// client's commands, and one reader goroutine that matches replies to
// commands in order. A command is written by the goroutine that sends it
// when the connection is idle; while a written batch awaits its replies,
// commands queue and go out together in one write when it is answered.
// Sending starts no goroutine and no timer per command: results arrive
// through a resp.Receiver. Plain TCP connections (the backends', and the
// front end's clients') are read and written through RawConn: direct
// non-blocking socket calls, without the runtime's blocking-syscall
// bookkeeping.
//
// It promises:
//   - every command sent gets exactly one Result: its reply, or an error when
//     the backend is down, the per-command deadline passed (exactly then, from
//     one timer per link), or the connection was lost;
//   - commands sent on one Link reach the backend in the order they were sent,
//     so a compare-and-delete sent after a SET always runs after it;
//   - a reply counts toward a quorum only once the connection it came on has
//     told the backend's identity (INFO or the marker script, first on every
//     connection) and the backend is not quarantined after a restart;
//   - a script sent by sha is loaded first on a connection that has not seen
//     it, so EVALSHA never fails with NOSCRIPT after a backend restart;
//   - a backend that stops answering is disconnected after DeadAfter and
//     redialled with backoff; every goroutine a Link starts is stopped and
//     waited for by Close.
//
// A backend may also be a Redis Cluster (Cluster, cluster.go): one vote, a
// Link per shard master, each with its own identity check, marker (in a
// slot the shard owns), quarantine and continuity check. A command goes to
// the master of its first key's slot and follows MOVED and ASK; it gets
// exactly one result, which names the link it ran on, and its undo goes
// there, after it, following the key if its slot moved. The refresh of the
// slot map is one goroutine per cluster, stopped and waited for by Close,
// with every shard's link.
package netio
