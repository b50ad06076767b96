package netio

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// run dials, serves and redials until Close. A connection that lived a
// while after its identity was verified is redialled at once; a failed dial,
// and a connection that failed its identity check or died young (something
// that accepts and closes, such as a load balancer in front of a dead
// Redis), waits a backoff that doubles up to a second.
//
// Except when the lost connection leaves fates open: commands it carried
// that a hung master may still run when it resumes (suspects), or undos
// kept for the next connection. Then the next connection is dialled at
// once, whatever the backoff, so that it waits at the master (its
// handshake is patient, see handshakeLocked) and its undos run right after
// any late command of the connection they undo. A backoff's wait there
// would let the late command run alone, and the undo that came later could
// no longer tell it from a retry.
func (l *Link) run() {
	defer l.wg.Done()
	const minBackoff, maxBackoff = 10 * time.Millisecond, time.Second
	backoff := minBackoff
	for l.ctx.Err() == nil {
		c, addr, err := l.dial()
		if err == nil {
			start := time.Now()
			verified := l.serve(c, addr)
			lived := time.Since(start)
			if verified && lived > 5*time.Second {
				backoff = minBackoff
				continue
			}
			if l.fatesOpen() {
				backoff = minBackoff
				if verified || lived >= minBackoff {
					continue
				}
				// Refused at once (a wrong password, say): wait the least
				// backoff, never more, rather than spin.
			}
		} else {
			l.mu.Lock()
			l.health.LastError = err.Error()
			from := l.switchedLocked(addr)
			l.mu.Unlock()
			if from != "" {
				l.log.Warn(l.switchLine(from, addr)+"; it is not reachable yet", "err", err)
			}
			l.noteFailure(err.Error())
		}
		select {
		case <-l.ctx.Done():
			return
		case <-l.redial:
			backoff = minBackoff
			continue
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// dial connects to the backend: its address, or the master its Sentinels
// name now (asked again first). It returns the address dialled.
func (l *Link) dial() (net.Conn, string, error) {
	addr, err := l.target(true)
	if err != nil {
		return nil, "", err
	}
	c, err := l.dialAddr(addr)
	return c, addr, err
}

// dialAddr connects to addr, with TLS when the backend has it.
func (l *Link) dialAddr(addr string) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(l.ctx, l.opt.DialTimeout)
	defer cancel()
	c, err := dialTLS(ctx, addr, l.opt.TLS, handshakeError)
	if err != nil {
		return nil, err
	}
	return Raw(c), nil
}

// dialTLS connects to addr by ctx's deadline, then, when cfg is set, runs
// the TLS handshake: apart from the dial, so that a server that answers
// but not in TLS is not reported unreachable, and verifying the dialled
// host when cfg names none, as tls.Dialer does. Every connection of the
// package (links, Sentinels, Redis Cluster nodes) is made here; hsErr
// words a failed handshake for the settings that apply.
func dialTLS(ctx context.Context, addr string, cfg *tls.Config, hsErr func(error) error) (net.Conn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, dialError(err)
	}
	if cfg == nil {
		return c, nil
	}
	if cfg.ServerName == "" {
		cfg = cfg.Clone()
		cfg.ServerName, _, _ = net.SplitHostPort(addr)
	}
	tc := tls.Client(c, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		c.Close()
		return nil, hsErr(err)
	}
	return tc, nil
}

// handshakeError words a failed TLS handshake with a master that was
// reached: most often one that does not speak TLS on that port (it
// answers a ClientHello with a RESP error, or waits for a command's end).
func handshakeError(err error) error {
	var rec tls.RecordHeaderError
	var op *net.OpError
	var verify *tls.CertificateVerificationError
	switch {
	case errors.As(err, &rec), errors.Is(err, context.DeadlineExceeded), errors.As(err, &op) && op.Timeout(), errors.Is(err, io.EOF):
		return fmt.Errorf("TLS handshake failed: the server does not seem to speak TLS (backend_tls is on: is this a TLS port, tls-port in redis.conf?): %w", err)
	case errors.As(err, &verify):
		return fmt.Errorf("TLS handshake failed: its certificate is not trusted (backend_tls_ca_file, backend_tls_server_name): %w", err)
	}
	return fmt.Errorf("TLS handshake failed: %w", err)
}

// dialError words a failed dial without repeating the address, which every
// log line of the link already carries.
func dialError(err error) error {
	var op *net.OpError
	switch {
	case errors.Is(err, syscall.ECONNREFUSED):
		return fmt.Errorf("unreachable: connection refused (nothing listens there): %w", err)
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &op) && op.Timeout()):
		return fmt.Errorf("unreachable: no answer to the connection attempt in time: %w", err)
	case errors.As(err, &op) && op.Err != nil:
		return fmt.Errorf("unreachable: %w", op.Err)
	}
	return fmt.Errorf("unreachable: %w", err)
}

// noteFailure logs why the backend is unreachable or unusable: the first
// time, and when the reason changes; a reason that keeps coming back is
// summarised once a minute rather than logged at every redial.
func (l *Link) noteFailure(why string) {
	now := time.Now()
	l.mu.Lock()
	same := why == l.lastLogged
	l.repeats++
	log := !same || now.Sub(l.lastLoggedAt) >= time.Minute
	n := l.repeats
	if log {
		l.lastLogged, l.lastLoggedAt, l.repeats = why, now, 0
	}
	l.mu.Unlock()
	switch {
	case !log:
	case same:
		l.log.Warn("backend still unusable", "err", why, "attempts_since_last_log", n)
	default:
		l.log.Warn("backend unusable", "err", why)
	}
}

// recorder remembers the first bytes a connection read, to describe a peer
// that does not speak RESP.
type recorder struct {
	net.Conn
	first []byte
}

func (r *recorder) Read(p []byte) (int, error) {
	n, err := r.Conn.Read(p)
	if len(r.first) < 32 {
		r.first = append(r.first, p[:min(n, 32-len(r.first))]...)
	}
	return n, err
}

// serve runs one connection, dialled to addr, until it fails or the link
// closes, and reports whether the connection's identity was verified.
func (l *Link) serve(nc net.Conn, addr string) (verified bool) {
	c := &linkConn{Conn: nc}
	rec := &recorder{Conn: nc}
	l.mu.Lock()
	if l.ctx.Err() != nil {
		l.mu.Unlock()
		c.Close()
		return false
	}
	patient := l.connectedLocked(c, addr)
	expired := l.handshakeLocked(l.gen, patient)
	wc, buf := l.takeWriteLocked()
	l.mu.Unlock()
	l.write(wc, buf)
	l.expire(expired)
	if l.opt.Events != nil {
		l.opt.Events.Reconnect(l.opt.Index)
	}

	rd := resp.NewReader(bufio.NewReaderSize(rec, 64<<10), resp.ReaderLimits{MaxBulk: l.opt.MaxReply})
	err := l.readLoop(c, rd)
	c.Close()

	l.mu.Lock()
	wasUp, heldBack, lost, late, dropped := l.lostLocked()
	why := err.Error() // readLoop only ends on an error
	switch {
	case !wasUp && len(rec.first) > 0 && isProtocolError(err):
		why = fmt.Sprintf("not a Redis server (it sent %q)", rec.first)
	case !wasUp && errors.Is(err, io.EOF):
		why = msgClosedInHandshake
	case errors.Is(err, net.ErrClosed) && l.health.LastError != "":
		why = l.health.LastError // the proxy closed it, and said why (stopped answering, refused...)
	}
	if l.health.LastError == "" || wasUp {
		l.health.LastError = why
	}
	l.health.Since = time.Now()
	l.mu.Unlock()
	// Replies that waited for a continuity check that never came: known,
	// but not counted.
	l.deliverHeld(heldBack, false)
	for _, e := range lost {
		e.rcv.Receive(e.tag, Result{Err: l.errLost})
	}
	for _, e := range late {
		if lr, ok := e.rcv.(LateReceiver); ok {
			lr.Late(e.tag, Result{Err: l.errLost})
		}
	}
	l.abandon(dropped)
	l.connectionLostTracking()
	if l.opt.Claim != nil {
		l.opt.Claim(l.opt.Index, "") // the next connection claims its server again
	}
	if l.ctx.Err() != nil {
		return wasUp
	}
	l.mu.Lock()
	moved := l.follower != nil && l.follower.master != "" && l.follower.master != l.connAddr
	l.mu.Unlock()
	if wasUp && moved {
		l.log.Info("backend connection closed: a majority of its Sentinels names another master", "from", l.connAddr)
		if l.opt.Events != nil {
			l.opt.Events.StateChange(l.opt.Index, false)
		}
	} else if wasUp {
		l.log.Warn("backend connection lost", "err", why)
		if l.opt.Events != nil {
			l.opt.Events.StateChange(l.opt.Index, false)
		}
	} else if strings.HasPrefix(why, "not a Redis server") || why == msgClosedInHandshake {
		l.noteFailure(why)
	}
	return wasUp
}

// connectedLocked starts a new connection c, dialled to addr, in every
// part, and reports whether its handshake must be patient (undoKeeper). The
// order is fixed: the verifier first (a new generation: replies to an
// older connection's checks change nothing from here on), then the
// pipeline (empty buffers, for the handshake to be queued into), then the
// undo keeper (whose suspects and undos the handshake sends first).
func (l *Link) connectedLocked(c *linkConn, addr string) (patient bool) {
	l.verifier.onConnect(addr)
	l.pipeline.onConnect(c)
	patient = l.undoKeeper.onConnect(addr)
	if l.follower != nil {
		// The epoch confirmed now: a newer one than the round that named
		// addr only makes this connection's marker checks record the
		// switch sooner; one that does not match the next round's ends it.
		l.follower.connAddr, l.follower.connEpoch = addr, l.follower.epoch
		l.follower.connSwitches, l.follower.connSwitchAt = l.follower.switches, l.follower.switchAt
	}
	l.health.Connects++
	return patient
}

// lostLocked ends the connection in every part, and returns what the
// caller must tell, outside the lock: whether it was up, the replies held
// for a continuity check that will not come, the commands lost with it,
// those that had timed out, and the undos beyond the cap. The order is
// fixed: the verifier first (nothing the connection says counts any more),
// then the pipeline (which takes out what was queued), then the undo
// keeper (which keeps the undos the pipeline took out, and the connection
// as a suspect, by the CLIENT ID the verifier still holds).
func (l *Link) lostLocked() (wasUp bool, heldBack []held, lost, late, dropped []entry) {
	wasUp, heldBack = l.verifier.onLost()
	lost, late, kept, unanswered := l.pipeline.onLost()
	dropped = l.undoKeeper.onLost(kept, unanswered, suspect{id: l.clientID, addr: l.clientAddr, server: l.connAddr})
	// What happened at the backend while it could not be seen is unknown:
	// the watch of its direct clients starts again.
	l.direct.looked, l.direct.since = false, time.Time{}
	return wasUp, heldBack, lost, late, dropped
}

// msgClosedInHandshake is why a backend that closed the connection before
// answering the identity check does not count: what twemproxy and other
// proxies do with TIME or CLIENT, which the proxy needs from a master.
const msgClosedInHandshake = "not a Redis master: it closed the connection during the identity check (TIME, CLIENT, INFO, the marker script), " +
	"as a proxy such as twemproxy does on TIME and CLIENT; point backends at the Redis masters themselves"

// isProtocolError reports whether err comes from bytes that are not RESP.
func isProtocolError(err error) bool {
	var ne net.Error
	return !errors.As(err, &ne) && !errors.Is(err, net.ErrClosed) && err.Error() != "EOF" &&
		!errors.Is(err, syscall.ECONNRESET)
}

// pinger runs the health check while connected: the marker check under the
// strict rule (a promotion or a flush under a live connection), a PING
// otherwise (latency, and a hung backend noticed while idle). It also logs
// the end of a quarantine.
func (l *Link) pinger() {
	defer l.wg.Done()
	t := time.NewTicker(l.opt.HealthInterval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case now := <-t.C:
			l.noteCounting(now)
			if l.opt.WatchClients {
				l.watchClients()
			}
			if l.markerRule() {
				l.check()
				continue
			}
			l.mu.Lock()
			up := l.conn != nil && l.ready
			l.mu.Unlock()
			if up {
				l.Send(pingCmd, nil, discard{}, 0, time.Now().Add(l.opt.Timeout))
			}
		}
	}
}

var pingCmd = resp.AppendCommand(nil, "PING")
