package netio

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Client-side caching at the backends. The proxy's clients may track the
// keys they read (CLIENT TRACKING); a key they track can change behind the
// proxy: through another proxy, or by expiry. So a command sent with
// Tracked asks the backend to track the keys it reads for the link's
// connection (CLIENT TRACKING ON REDIRECT id OPTIN NOLOOP, then CLIENT
// CACHING YES before the command), and a second connection per backend,
// subscribed to __redis__:invalidate, receives the backend's invalidations
// and hands them to Options.Invalidated. The link's own writes are not
// reported (NOLOOP): the proxy knows them.
//
// The invalidation connection runs from Start, whether or not a client
// tracks, so that it is up before the first tracked read. An in-process
// demo backend tracks nothing: only the proxy's own writes invalidate.
//
// Whatever could lose an invalidation (the main connection or the
// invalidation connection lost, the backend's tracking refused) is reported
// as an invalidation of every key (a nil key), so a client never keeps a
// stale key for want of a message.
//
// What it cannot see: a command a Redis Cluster node serves under ASK (its
// slot is being migrated to that node) is sent untracked, for ASKING and
// CLIENT CACHING YES each hold only for the command right after them. A
// key read that way is invalidated when this proxy writes it, not when it
// expires or another proxy writes it, until the client reads it again
// after the migration.

// invalidateChannel is where a backend sends the invalidations of a
// redirected connection.
const invalidateChannel = "__redis__:invalidate"

// ReleaseChannel is where proxies publish the release notices of lock
// scripts (see the proxy's pub/sub). The invalidation connection, which
// every link keeps, subscribes to it too when Options.Released is set.
const ReleaseChannel = "redlock-proxy:released"

// trackState is a link's part in client-side caching. The link's mu
// protects it.
type trackState struct {
	redir int64 // the invalidation connection's CLIENT ID; 0 while it is down
	conn  net.Conn
	addr  string // where conn goes (a Sentinel-managed backend's master of the moment)
	// on is the redirect the current main connection tracks with (0: it
	// does not track).
	on int64
}

// trackLocked prepares a tracked command: on a connection that does not
// track yet (or tracks with an old redirect), turns tracking on, then asks
// the backend to track the next command's keys.
func (l *Link) trackLocked() {
	if l.track.redir == 0 {
		return // not connected yet: its coming up invalidates everything
	}
	if l.track.on != l.track.redir {
		l.wbuf = resp.AppendCommand(l.wbuf, "CLIENT", "TRACKING", "ON", "REDIRECT", strconv.FormatInt(l.track.redir, 10), "OPTIN", "NOLOOP")
		l.pushLocked(entry{rcv: trackReceiver{l}, deadline: time.Now().Add(l.opt.Timeout)})
		l.track.on = l.track.redir
	}
	l.wbuf = resp.AppendCommand(l.wbuf, "CLIENT", "CACHING", "YES")
	l.pushLocked(entry{rcv: discard{}, deadline: time.Now().Add(l.opt.Timeout)})
}

// trackReceiver handles the reply to CLIENT TRACKING ON: a refusal means
// nothing is tracked, which clients must learn.
type trackReceiver struct{ l *Link }

func (r trackReceiver) Receive(_ int, res Result) {
	if res.Err == nil && res.V.Kind == resp.KindError {
		r.l.log.Warn("the backend refused CLIENT TRACKING: clients' cached keys are invalidated on the proxy's own writes only", "reply", string(res.V.Str))
		r.l.invalidated(nil)
	}
}

// invalidated reports a key that changed on the backend (nil: any key).
func (l *Link) invalidated(key []byte) {
	if l.opt.Invalidated != nil {
		l.opt.Invalidated(l.opt.Index, key)
	}
}

// connectionLostTracking is called when the main connection is lost: what
// the backend tracked for it is gone.
func (l *Link) connectionLostTracking() {
	l.mu.Lock()
	was := l.track.on != 0
	l.track.on = 0
	l.mu.Unlock()
	if was {
		l.invalidated(nil)
	}
}

// invalidations runs the invalidation connection until the link closes,
// redialling it with a backoff when it fails.
func (l *Link) invalidations() {
	defer l.wg.Done()
	backoff := 10 * time.Millisecond
	for l.ctx.Err() == nil {
		start := time.Now()
		err := l.serveInvalidations()
		l.mu.Lock()
		l.track.redir, l.track.conn = 0, nil
		l.mu.Unlock()
		// Invalidations may have been missed while it was down.
		l.invalidated(nil)
		if l.ctx.Err() != nil {
			return
		}
		if time.Since(start) > 5*time.Second {
			backoff = 10 * time.Millisecond
		}
		l.log.Debug("invalidation connection lost", "err", err)
		select {
		case <-l.ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}

// serveInvalidations dials, subscribes and reads invalidations until the
// connection fails.
func (l *Link) serveInvalidations() error {
	addr, err := l.target(false)
	if err != nil {
		return err
	}
	c, err := l.dialAddr(addr)
	if err != nil {
		return err
	}
	l.mu.Lock()
	if l.ctx.Err() != nil {
		l.mu.Unlock()
		c.Close()
		return l.ctx.Err()
	}
	l.track.conn, l.track.addr = c, addr
	l.mu.Unlock()
	defer c.Close()
	var b []byte
	if l.opt.Password != "" {
		if l.opt.Username != "" {
			b = resp.AppendCommand(b, "AUTH", l.opt.Username, l.opt.Password)
		} else {
			b = resp.AppendCommand(b, "AUTH", l.opt.Password)
		}
	}
	b = resp.AppendCommand(b, "CLIENT", "SETNAME", "redlock-proxy-invalidations")
	b = resp.AppendCommand(b, "CLIENT", "ID")
	b = resp.AppendCommand(b, "SUBSCRIBE", invalidateChannel)
	if l.opt.Released != nil {
		b = resp.AppendCommand(b, "SUBSCRIBE", ReleaseChannel)
	}
	c.SetDeadline(time.Now().Add(l.opt.DialTimeout))
	if _, err := c.Write(b); err != nil {
		return err
	}
	rd := resp.NewReader(bufio.NewReaderSize(c, 16<<10), resp.ReaderLimits{MaxBulk: l.opt.MaxReply})
	replies := 3
	if l.opt.Password != "" {
		replies++
	}
	if l.opt.Released != nil {
		replies++
	}
	var id int64
	for i := 0; i < replies; i++ {
		v, err := rd.Read()
		if err != nil {
			return err
		}
		switch {
		case v.Kind == resp.KindError:
			return fmt.Errorf("invalidation connection: %s", v.Str)
		case v.Kind == resp.KindInt:
			id = v.Int
		}
	}
	c.SetDeadline(time.Time{})
	l.mu.Lock()
	l.track.redir = id
	l.mu.Unlock()
	// Keys tracked before this connection came up were never redirected
	// here.
	l.invalidated(nil)
	for {
		v, err := rd.Read()
		if err != nil {
			return err
		}
		if v.Kind != resp.KindArray || len(v.Elems) != 3 || !bytes.Equal(v.Elems[0].Str, []byte("message")) {
			continue
		}
		if string(v.Elems[1].Str) == ReleaseChannel {
			if l.opt.Released != nil {
				l.opt.Released(l.opt.Index, v.Elems[2].Str)
			}
			continue
		}
		switch keys := v.Elems[2]; keys.Kind {
		case resp.KindArray:
			for _, k := range keys.Elems {
				l.invalidated(k.Str)
			}
		default: // a flush: every key
			l.invalidated(nil)
		}
	}
}
