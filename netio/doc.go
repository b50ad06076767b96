// Package netio owns the proxy's connections to its Redis backends.
//
// Each backend has one Link: one TCP (or TLS) connection shared by every
// client's commands, written in batches by one writer goroutine and read by
// one reader goroutine that matches replies to commands in order. Sending
// never blocks and starts no goroutine and no timer per command: results
// arrive through a resp.Receiver.
//
// It promises:
//   - every command sent gets exactly one Result: its reply, or an error when
//     the backend is down, the per-command deadline passed (exactly then, from
//     one timer per link), or the connection was lost;
//   - commands sent on one Link reach the backend in the order they were sent,
//     so a compare-and-delete sent after a SET always runs after it;
//   - a reply counts toward a quorum only once the connection it came on has
//     told the backend's identity (INFO server, the first command on every
//     connection) and the backend is not quarantined after a restart;
//   - a script sent by sha is loaded first on a connection that has not seen
//     it, so EVALSHA never fails with NOSCRIPT after a backend restart;
//   - a backend that stops answering is disconnected after DeadAfter and
//     redialled with backoff; every goroutine a Link starts is stopped and
//     waited for by Close.
package netio
