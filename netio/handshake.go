package netio

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The identity check: what opens every connection, how its replies are
// read, and the verdict (identify, or fail) that lets the connection's
// replies count or closes it.

// patientHandshake is how long a connection that carries undos waits for
// a silent (hung) master before it is redialled.
const patientHandshake = 30 * time.Second

// Tags of the identity check's commands.
const (
	hsAuth = iota
	hsName
	hsID
	hsKill
	hsMarker
	hsInfo
	hsPing  // the identity check of an in-process backend
	hsCheck // the periodic marker check on a live connection
	hsTime  // the master's clock, for undos kept across connections
	hsDB    // SELECT of Options.DB
)

// handshake receives the replies to one connection's identity check.
type handshake struct {
	l    *Link
	gen  uint64
	kill int64 // for hsKill: the connection it kills
	// For a marker check: the key it read, the loss it recorded that the
	// link saw itself ("" when none: see appendMarker), and when it was
	// queued (for the clock check).
	key  string
	loss quorum.Reason
	sent time.Time
	// applied, when set, is closed once a marker check's reply is applied.
	applied chan struct{}
}

// handshakeLocked queues what opens every connection: AUTH, CLIENT ID (so a
// later connection can kill this one), CLIENT KILL of earlier connections
// that may still run commands, the undos that wait for a connection, and
// the identity check: the marker script when a restart rule applies; INFO
// otherwise (its default sections include server and replication, for the
// role). No client command is sent until the identity check passes.
// patient (undos or suspects wait: undoKeeper.onConnect) gives the check
// the time of a hung master's resumption.
func (l *Link) handshakeLocked(gen uint64, patient bool) (expired []entry) {
	deadline := time.Now().Add(l.opt.DialTimeout)
	if patient {
		// Undos wait on this connection. A master that accepted it but says
		// nothing is likely hung: keep the connection, so that the undos run
		// as soon as it resumes, together with any late command it still
		// holds from the connection they undo.
		deadline = time.Now().Add(max(l.opt.DialTimeout, patientHandshake))
	}
	h := &handshake{l: l, gen: gen, key: l.mkey, loss: l.lossWhy, sent: time.Now()}
	if l.opt.Password != "" {
		if l.opt.Username != "" {
			l.wbuf = resp.AppendCommand(l.wbuf, "AUTH", l.opt.Username, l.opt.Password)
		} else {
			l.wbuf = resp.AppendCommand(l.wbuf, "AUTH", l.opt.Password)
		}
		l.pushLocked(entry{rcv: h, tag: hsAuth, deadline: deadline})
	}
	if l.opt.DB != 0 {
		// Before anything that reads or writes keys: the undos kept for
		// this connection, the marker.
		l.wbuf = resp.AppendCommand(l.wbuf, "SELECT", strconv.Itoa(l.opt.DB))
		l.pushLocked(entry{rcv: h, tag: hsDB, deadline: deadline})
	}
	l.wbuf = resp.AppendCommand(l.wbuf, "TIME")
	l.pushLocked(entry{rcv: h, tag: hsTime, deadline: deadline})
	l.wbuf = resp.AppendCommand(l.wbuf, "CLIENT", "SETNAME", "redlock-proxy")
	l.pushLocked(entry{rcv: h, tag: hsName, deadline: deadline})
	l.wbuf = resp.AppendCommand(l.wbuf, "CLIENT", "INFO")
	l.pushLocked(entry{rcv: h, tag: hsID, deadline: deadline})
	for _, s := range l.suspects { // this server's only (undoKeeper.onConnect)
		// ID and ADDR together: after a restart ids start again at 1, and
		// only the address tells this proxy's old connection from another
		// client's.
		args := []string{"CLIENT", "KILL", "ID", strconv.FormatInt(s.id, 10)}
		if s.addr != "" {
			args = append(args, "ADDR", s.addr)
		}
		l.wbuf = resp.AppendCommand(l.wbuf, args...)
		l.pushLocked(entry{rcv: &handshake{l: l, gen: gen, kill: s.id}, tag: hsKill, deadline: deadline})
	}
	expired = l.sendRetainedLocked()
	switch {
	case l.opt.InProcess:
		// An embedded demo backend: it cannot restart on its own and does
		// not implement INFO sections; a PING shows it answers.
		l.wbuf = resp.AppendCommand(l.wbuf, "PING")
		l.pushLocked(entry{rcv: h, tag: hsPing, deadline: deadline})
	case l.markerRule():
		// EVAL, which also loads it for the periodic EVALSHA checks.
		l.wbuf = l.appendMarker(l.wbuf, "EVAL", string(markerScript.Body))
		l.loaded[markerScript.Sha] = true
		l.pushLocked(entry{rcv: h, tag: hsMarker, deadline: deadline})
	default:
		l.wbuf = resp.AppendCommand(l.wbuf, "INFO")
		l.pushLocked(entry{rcv: h, tag: hsInfo, deadline: deadline})
	}
	l.armLocked(deadline)
	return expired
}

// Receive handles the replies to the identity check and the periodic
// marker check.
func (h *handshake) Receive(tag int, r Result) {
	l := h.l
	if tag == hsCheck {
		l.checked(h, r)
		if h.applied != nil {
			close(h.applied)
		}
		return
	}
	l.mu.Lock()
	current := h.gen == l.gen && l.conn != nil && l.failed != h.gen
	l.mu.Unlock()
	if !current {
		return
	}
	refused := r.Err == nil && r.V.Kind == resp.KindError
	switch tag {
	case hsAuth:
		if refused {
			l.fail(h.gen, "the backend refused the proxy's credentials: "+string(r.V.Str))
		}
	case hsTime:
		if refused && authRefusal(string(r.V.Str)) {
			// Said here, in the backend's words: the longer commands that
			// follow get only a protocol error while unauthenticated.
			l.fail(h.gen, l.checkFailed("TIME", string(r.V.Str)))
			return
		}
		if r.Err == nil && r.V.Kind == resp.KindArray && len(r.V.Elems) == 2 {
			sec, _ := strconv.ParseInt(string(r.V.Elems[0].Str), 10, 64)
			usec, _ := strconv.ParseInt(string(r.V.Elems[1].Str), 10, 64)
			if sec > 0 {
				// The master read its clock somewhere between the send and
				// now: taking now never overstates the offset, so a kept
				// undo never dates the reply instant later than it was (a
				// TIME answered late by a master hung while the connection
				// opened would put the midpoint seconds off).
				master := time.Unix(sec, usec*1000)
				l.mu.Lock()
				l.clockOffset, l.clockKnown = time.Until(master), true
				l.mu.Unlock()
			}
		}
	case hsDB:
		if refused {
			l.fail(h.gen, fmt.Sprintf("the backend refused SELECT %d: %s", l.opt.DB, r.V.Str))
		}
	case hsName:
	case hsID:
		if r.Err == nil && r.V.Kind == resp.KindBulk {
			id, addr := parseClientInfo(r.V.Str)
			l.mu.Lock()
			l.clientID, l.clientAddr = id, addr
			l.mu.Unlock()
		}
	case hsKill:
		l.killed(h.kill, r)
	case hsMarker:
		l.markerRedirected(h.key, r)
		mr, why := l.parseMarker(r)
		if why == "" && h.key != l.MarkerKeyNow() {
			why = "the replication marker moved to another key during the identity check"
		}
		if why != "" {
			l.fail(h.gen, why)
			return
		}
		l.identify(h.gen, mr.id, mr.role, &mr, h)
	case hsPing:
		switch {
		case r.Err != nil:
			l.fail(h.gen, "no answer to the identity check: "+r.Err.Error())
		case refused:
			l.fail(h.gen, "the identity check (PING) failed: "+string(r.V.Str))
		default:
			l.identify(h.gen, quorum.Identity{Uptime: -1}, "master", nil, nil)
		}
	case hsInfo:
		switch {
		case r.Err != nil:
			l.fail(h.gen, "no answer to the identity check: "+r.Err.Error())
		case refused:
			l.fail(h.gen, "the identity check (INFO) failed: "+string(r.V.Str))
		case r.V.Kind != resp.KindBulk:
			l.fail(h.gen, "the identity check (INFO) got "+r.V.String())
		default:
			id, role, evicts := parseIdentity(r.V.Str)
			if evicts != "" && !l.opt.Veto {
				l.fail(h.gen, evictionWhy(evicts))
				return
			}
			l.identify(h.gen, id, role, nil, nil)
		}
	}
}

// checkFailed words an error reply to one of the link's checks, pointing
// at the setting that fixes it where there is one.
func (l *Link) checkFailed(what, reply string) string {
	reply = scriptReply(reply)
	if why := writeRefusal(reply); why != "" {
		return why
	}
	why := "the identity check (" + what + ") failed: " + reply
	if strings.Contains(reply, "redlock-proxy:") {
		return "it is a redlock-proxy, not a Redis master (" + why + "); point backends at the Redis masters themselves"
	}
	if authRefusal(reply) {
		if l.opt.Password == "" {
			why += " (the backend requires a password: set backend_password, and backend_username for an ACL user)"
		} else {
			why += " (check backend_username and backend_password, and that the user may run EVAL, EVALSHA, SCRIPT, INFO, TIME and CLIENT)"
		}
	}
	return why
}

// scriptReply is an error a script's call of Redis gave, without where
// Redis says it came from: Redis 7 appends the script's SHA and line
// (", script: SHA, on @user_script:N."), Redis 6 puts them first ("ERR
// Error running script (call to f_SHA): @user_script:N: @user_script: N:
// -OOM ..."). The line differs between calls that failed alike, and a
// repeated failure is logged once (noteFailure) only when its words are
// the same.
func scriptReply(reply string) string {
	if strings.HasPrefix(reply, "ERR Error running script (call to f_") {
		const at = "@user_script: "
		if i := strings.LastIndex(reply, at); i >= 0 {
			if _, msg, ok := strings.Cut(reply[i+len(at):], ": "); ok {
				return strings.TrimPrefix(msg, "-")
			}
		}
		return reply
	}
	if i := strings.LastIndex(reply, " script: "); i >= 0 && strings.Contains(reply[i:], ", on @user_script:") {
		return strings.TrimRight(reply[:i], " ")
	}
	return reply
}

// writeRefusal words an error by which a master refuses writes, the same
// whichever of the link's checks met it (so that a refusal that lasts is
// logged once, see noteFailure), or returns "" for any other error. The
// marker and the continuity check write to the master, so its votes
// cannot count until it accepts writes again; nothing is recorded as lost
// meanwhile.
func writeRefusal(reply string) string {
	var why string
	switch {
	case strings.HasPrefix(reply, "OOM"):
		why = "its memory is over maxmemory and its policy evicts nothing it may (noeviction, or volatile-* with no key left that has a TTL)"
	case strings.HasPrefix(reply, "MISCONF"):
		why = "its last background save failed and stop-writes-on-bgsave-error is set"
	case strings.HasPrefix(reply, "NOREPLICAS"):
		why = "fewer replicas than min-replicas-to-write are in reach"
	default:
		return ""
	}
	return "the master refuses writes: " + why + "; its votes do not count until it accepts them again (" + strings.TrimSpace(reply) + ")"
}

// authRefusal reports whether a reply refuses the proxy's credentials or
// rights.
func authRefusal(reply string) bool {
	return strings.HasPrefix(reply, "NOAUTH") || strings.HasPrefix(reply, "WRONGPASS") || strings.HasPrefix(reply, "NOPERM")
}

// identify completes a connection's identity check: a master's votes may
// now be counted (after any quarantine); anything else is dropped.
func (l *Link) identify(gen uint64, id quorum.Identity, role string, mr *markerReply, h *handshake) {
	if role != "master" {
		l.fail(gen, fmt.Sprintf("not a master (role:%s): only masters vote; it is checked again on every reconnect", role))
		return
	}
	if l.opt.Claim != nil && id.RunID != "" {
		// Two backends that reach one server (two names for one address, a
		// load balancer, a moved address) would give it two votes.
		if other, ok := l.opt.Claim(l.opt.Index, id.RunID); !ok {
			l.fail(gen, fmt.Sprintf("the same Redis server (run_id %s) as backend %d: one server votes once; every backend must be an independent master", id.RunID, other))
			return
		}
	}
	now := time.Now()
	l.mu.Lock()
	if gen != l.gen || l.conn == nil || l.failed == gen {
		l.mu.Unlock()
		return
	}
	restarted := l.watch.Observe(id, now)
	until, why := l.watch.QuarantinedUntil(), l.watch.Reason()
	var ahead time.Duration
	var jumped, rolled bool
	if mr != nil {
		rolled = l.markerReadLocked(h, mr, now)
		ahead, jumped = l.clockReadLocked(id.RunID, mr.clock, mr.back, h.sent, now)
		until = l.watch.QuarantinedUntil()
	}
	// Undos that came while the identity check ran go out before any
	// client command.
	expired := l.sendRetainedLocked()
	l.ready = true
	l.health.LastError = ""
	l.health.Since = now
	if restarted {
		l.health.Restarts++
	}
	l.counting = l.vetted && l.watch.Counts(now) && l.confirmedLocked(now)
	addr := l.connAddr
	from := l.switchedLocked(addr)
	wc, buf := l.takeWriteLocked()
	l.mu.Unlock()
	l.write(wc, buf)
	l.expire(expired)
	switch {
	case jumped:
		l.clockJumped(ahead)
	case rolled:
		l.rolledBack()
	}
	if id.RunID == "" && !l.opt.InProcess {
		l.log.Warn("backend does not report run_id; a restart cannot be told from a reconnect")
	}
	if restarted && l.opt.Events != nil {
		l.opt.Events.Restarted(l.opt.Index, until)
	}
	switch {
	case from != "":
		// A failover, logged once, with what it costs.
		left := time.Duration(0)
		if now.Before(until) {
			left = until.Sub(now)
		}
		l.log.Warn(l.switchLine(from, addr)+"; "+countsIn(left), "reason", why.Explain(), "run_id", id.RunID,
			"counts_at", until.Format(time.RFC3339Nano))
	case now.Before(until):
		l.log.Warn("backend up, but its votes do not count yet: "+why.Explain(),
			"run_id", id.RunID, "counts_in", until.Sub(now).Round(time.Millisecond), "counts_at", until.Format(time.RFC3339Nano))
	default:
		l.log.Info("backend up", "run_id", id.RunID)
	}
	if l.opt.Events != nil {
		l.opt.Events.StateChange(l.opt.Index, true)
	}
}

// fail ends a connection whose identity check failed, saying why in the
// backend's own words where it gave any.
func (l *Link) fail(gen uint64, why string) {
	l.mu.Lock()
	if gen != l.gen || l.conn == nil || l.failed == gen {
		// An older connection's, or this one already failed: the first
		// reason is the one that says why (the replies after it follow
		// from it).
		l.mu.Unlock()
		return
	}
	c := l.conn
	l.ready, l.failed = false, gen
	l.health.LastError = why
	l.mu.Unlock()
	l.noteFailure(why)
	c.Close()
}
