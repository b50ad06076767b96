// Package netio owns the proxy's connections to its Redis backends.
//
// Each backend has one Link: one TCP (or TLS) connection shared by every
// client's commands, and one reader goroutine that matches replies to
// commands in order. A command is written by the goroutine that sends it
// when the connection is idle; while a written batch awaits its replies,
// commands queue and go out together in one write when it is answered.
// Sending starts no goroutine and no timer per command: results arrive
// through a Receiver. On Linux, plain TCP connections (the backends',
// and the front end's clients') are read and written through RawConn:
// direct non-blocking socket calls, without the runtime's blocking-syscall
// bookkeeping; other platforms use net.Conn as it is.
//
// It promises:
//   - every command sent gets exactly one Result: its reply, or an error when
//     the backend is down, the per-command deadline passed (exactly then, from
//     one timer per link), or the connection was lost;
//   - commands sent on one Link reach the backend in the order they were sent,
//     so a compare-and-delete sent after a SET always runs after it;
//   - a reply counts toward a quorum only once the connection it came on has
//     told the backend's identity (INFO or the marker script, first on every
//     connection), the backend is not quarantined (its data may have gone
//     back in time: a restart, a promotion, a resync, a flush, an eviction,
//     another server at its address; identity.go), it is no other
//     backend's server, and, for a grant, once the continuity check that
//     follows it showed the master's data went on unbroken (continuity.go);
//   - a script sent by sha is loaded first on a connection that has not seen
//     it (again after any NOSCRIPT), so EVALSHA fails with NOSCRIPT only
//     when a cache is emptied under a live connection; a continuity check
//     that meets NOSCRIPT is sent again, its script loaded first, and the
//     replies it holds wait for it; an undo carries its script's text and
//     is retried after a curable error until it runs or its lock has
//     expired (undo.go);
//   - under Options.Tracked commands, the backend's invalidations of the
//     keys they read reach Options.Invalidated, and every key is reported
//     when one may have been missed (tracking.go);
//   - a backend that stops answering is disconnected after DeadAfter and
//     redialled with backoff; every goroutine a Link starts is stopped and
//     waited for by Close;
//   - a Sentinel-managed backend (Options.Sentinel, sentinel.go) is dialled
//     at the master a majority of its configured Sentinels name, and its
//     replies count only while a round of questions that named that
//     master started less than the lease ago; the link, with its kept
//     undos and its quarantine, follows the master across failovers.
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
