// Package proxy is the RESP front end of redlock-proxy: it accepts Redis
// clients, reads their commands within strict input limits, and runs each
// lock command on every backend at once, answering as one Redis holding the
// majority state would.
//
// It promises:
//   - SET key token NX PX|EX|PXAT|EXAT replies OK only when a majority of
//     backends (not counting quarantined ones) set the key and the lock's
//     validity (TTL minus elapsed minus drift) is still positive; otherwise
//     it replies nil and compare-and-deletes the token on every backend that
//     did not refuse, after the SET on that backend's connection;
//   - a lock script is classified by what it does (package script) and
//     runs as its role: the proxy's own script for the role on every
//     backend, never the client's text; it succeeds only when a majority
//     did it (with validity left, for acquire and extend); a failed
//     acquire is undone, a failed extend-or-acquire only where it took a
//     free key, a failed extend never; the client sees the reply
//     its script gives on one Redis in the majority's state;
//   - a counting semaphore's acquire (a script classified as one) admits
//     the caller only when a majority of counted backends hold the same
//     one of limit slots for it, with validity left, so at most limit
//     callers hold permits; ZREM releases them (kind_sem.go);
//   - GET, PTTL, TTL and DEL answer from the majority state;
//   - malformed input gets Redis's own error wording and closes only that
//     connection; replies to pipelined commands come back in order;
//   - every client goroutine is owned by the Server and waited for by
//     Shutdown.
package proxy
