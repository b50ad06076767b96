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
// A Link is made of three parts under its one lock, each a struct in its
// own file with its invariants and two hooks, onConnect (what a new
// connection resets) and onLost (what a lost one keeps, and what it
// fails), which Link.connectedLocked and Link.lostLocked (dial.go) run in
// one fixed order:
//   - the verifier (verifier.go): whether the master's replies count. The
//     identity check that opens each connection (handshake.go, identity.go),
//     the replication marker (marker.go, marker.lua), the continuity check
//     (continuity.go, continuity.lua), the clock check (clock.go), and what
//     the other masters' records tell (records.go, book.go);
//   - the pipeline (pipeline.go): the connection, the queue of commands
//     awaiting replies, the write buffers and batches, and the deadlines
//     (deadlines.go);
//   - the undo keeper (undokeeper.go): the undos kept across connections
//     and retries, and the earlier connections to kill before them; the
//     undo's forms and its API are in undo.go.
//
// The reader (Link.readLoop, link.go) takes each reply through them in
// turn: pop (the pipeline), verify (the verifier), undo (the undo keeper),
// deliver. Besides the parts, a Link follows a Sentinel group
// (sentinel.go), receives invalidations (tracking.go) and watches direct
// clients (direct.go).
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
//     another server at its address; marker.go), it is no other
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
// A backend may also be a Redis Cluster (Cluster, cluster*.go): one vote, a
// Link per shard master, each with its own identity check, marker (in a
// slot the shard owns), quarantine and continuity check. A command goes to
// the master of its first key's slot and follows MOVED and ASK; it gets
// exactly one result, which names the link it ran on, and its undo goes
// there, after it, following the key if its slot moved. The refresh of the
// slot map is one goroutine per cluster, stopped and waited for by Close,
// with every shard's link. The cluster uses only Link's exported methods.
package netio
