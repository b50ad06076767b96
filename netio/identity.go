package netio

import (
	"bytes"
	_ "embed"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// MarkerKey is the key the proxies keep on every master under the strict
// restart rule (see markerScript). Clients may not touch it.
const MarkerKey = "redlock-proxy:marker"

// markerScript keeps the replication marker: a hash on the master that
// records, by the master's own clock, when it may last have lost writes.
// Every proxy runs it on every new connection and then periodically, and
// decides from what it returns, so a proxy that has just started reaches
// the same decision as one that has watched the master for a year.
//
// A master's data may go back in time in many ways; each leaves a trace
// that the script reads from what the master reports, and records as a
// loss now, under one of quorum.Reason's words (the constants say what
// each means; TestMarkerScriptReasonsAreKnown checks the script uses no
// other):
//   - no marker: a fresh master, or one whose data is gone (flushed,
//     restarted empty, swapped out): "new";
//   - a new run (run_id) with no promotion since its start (master_replid2
//     all zeros): it reloaded whatever file it found, which may be older
//     than its last writes, whatever appendfsync says of the new run:
//     "restarted", dated when seen (the data of another run may have come
//     in long after this run started: a standby that takes the address);
//   - a promotion since the marker was written (master_replid2 set), where
//     the marker's replication id is the old one: a replica of the master
//     the marker was written on: "promoted";
//   - a promotion from any other history than the marker's, such as a full
//     resync from another master followed by a promotion (a failback):
//     "resynced";
//   - a new replication id in the same run with no promotion (the first
//     replica attached, or the backlog was freed) changes nothing: the data
//     is as it was;
//   - a memory policy that may evict keys: "evicting", recorded at every
//     check while it lasts;
//   - a different evicted_keys count than the marker's for the same run
//     (keys evicted, or the count reset): "evicted";
//   - fewer commands processed than this connection saw before in the
//     same run (CONFIG RESETSTAT, which hides evictions): "reset";
//   - a different run than this link knew, which the marker does not show
//     as a restart (another server answers at the address): "replaced";
//   - on a Redis Cluster node, a record another node wrote (the marker's
//     slot moved here, or a replica took over): "foreign"; and a key the
//     link no longer trusts (its slot left this node, even if it came
//     back, or the link moved the marker to another slot): "moved";
//   - a clock that jumped ahead, which expires keys early (the link
//     tells, clock.go): "clock";
//   - for the master of a Sentinel-managed group, a marker last checked
//     under an older config epoch of the group than the one its
//     Sentinels confirm now (or under none): a failover since, whatever
//     the master says of itself (a failback to a master never demoted):
//     "switched" (sentinel.go).
//   - an older copy of the data than one a proxy saw (a retired epoch, or
//     a lower sequence than seen for the epoch: the link tells, book.go):
//     "rolledback".
//
// The run's start ("started", the latest its uptime allows) is recorded
// once per run, so that all proxies read the same instants. Each recorded
// loss gets a new epoch (the run and the instant), which the continuity
// check compares, and its reason ("why"), which every proxy then reports
// alike. Every continuity check moves its proxy's count on ("c:PROXY")
// and records the latest deadline of the grants before it ("until"); the
// record is whole ("whole" names the epoch) once the hold passed since the
// loss, or once a proxy restored it from the other masters' records
// (book.go). The marker also keeps what proxies told it of the other
// masters' epochs ("s:EPOCH|PROXY": the highest count seen; "s:EPOCH":
// "R", retired). A new epoch starts the counts again.
//
// It returns {role, change, ms since lost, ms since started, hold ms,
// run_id, uptime s, eviction policy ("" unless it may evict), epoch,
// master_replid, evicted_keys, commands processed, lost (ms of its clock),
// started (ms), why the latest loss was recorded, now (ms of its clock),
// each proxy's count (pairs), ms left of the latest recorded deadline, whole (1 or 0), the
// longest settle time in ms any proxy asked for, the table of other
// epochs (pairs)}.
//
//go:embed marker.lua
var markerLua []byte

var markerScript = resp.NewScript(markerLua)

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

// markerRule reports whether a restart rule, with its marker and the
// continuity check, applies.
func (l *Link) markerRule() bool { return l.opt.Restart.Hold > 0 }

// appendMarker encodes the marker script's call: EVAL with its body, or
// EVALSHA with its SHA1. The link's record of the backend's run and command
// count goes with it (see markerScript).
func (l *Link) appendMarker(dst []byte, verb, script string) []byte {
	cluster := ""
	if l.opt.ClusterNode {
		cluster = "1"
	}
	evictionsNoLoss := ""
	if l.opt.Veto {
		evictionsNoLoss = "1"
	}
	sepoch := ""
	if l.follower != nil {
		sepoch = strconv.FormatInt(l.follower.connEpoch, 10)
	}
	restore := ""
	if r := l.restore; r.epoch != "" && r.epoch == l.cont.epoch {
		restore = r.epoch + " " + strconv.FormatInt(max(0, time.Until(r.end).Milliseconds()+1), 10)
	}
	args := []string{verb, script, "1", l.mkey,
		strconv.FormatInt(l.opt.Restart.Hold.Milliseconds(), 10),
		strconv.FormatInt(l.cont.cmds, 10), l.cont.run, cluster, string(l.lossWhy),
		strconv.FormatInt(l.settle().Milliseconds(), 10), restore, evictionsNoLoss, sepoch}
	return resp.AppendCommand(dst, l.opt.book.tell(args)...)
}

// settle is how long after a loss this proxy's grants counted on the
// master may still be on their way to the others: a vote that answers
// later than the per-command timeout does not count, and a Sentinel
// group's old master counts for a lease after the switch.
func (l *Link) settle() time.Duration {
	d := l.opt.Timeout
	if l.follower != nil {
		d += l.follower.opt.Lease
	}
	return d
}

// SetMarkerKey moves the marker to key (a shard of a Redis Cluster whose
// marker's slot left it): nothing the link sends counts until a marker
// check has run on the new key, and that check records a loss, since what
// happened to the server's data since the last check of the old key
// cannot be told.
func (l *Link) SetMarkerKey(key string) {
	l.mu.Lock()
	if key == l.mkey {
		l.mu.Unlock()
		return
	}
	l.mkey = key
	l.seeLossLocked(quorum.ReasonMoved)
	l.cont.broken = true
	l.mu.Unlock()
	l.log.Warn("backend's replication marker moves to another key: its votes stop counting for the hold", "marker", key)
	l.check()
}

// MarkerKeyNow is the key the marker is kept in.
func (l *Link) MarkerKeyNow() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.mkey
}

// markerRedirected handles a marker or continuity check answered MOVED or
// ASK: the key is no longer this server's, so it is not trusted again,
// even if its slot comes back.
func (l *Link) markerRedirected(key string, r Result) bool {
	if r.Err != nil || r.V.Kind != resp.KindError || !Redirect(r.V.Str) {
		return false
	}
	l.mu.Lock()
	if key == l.mkey {
		l.seeLossLocked(quorum.ReasonMoved)
	}
	l.mu.Unlock()
	if l.opt.MarkerMoved != nil {
		l.opt.MarkerMoved(key)
	}
	return true
}

// seeLossLocked notes a loss the link saw itself: the next marker check
// records it, with why, for every proxy. A loss noted first keeps its
// reason.
func (l *Link) seeLossLocked(why quorum.Reason) {
	if l.lossWhy == quorum.ReasonNone {
		l.lossWhy = why
	}
}

// keepBrokenWhileLossUnrecordedLocked keeps the votes from counting after
// a marker check that did not record the loss the link noted (it was
// already on its way when the loss was seen): only the check that records
// it, queued when it was seen, lets them count again.
func (l *Link) keepBrokenWhileLossUnrecordedLocked() {
	if l.lossWhy != quorum.ReasonNone {
		l.cont.broken = true
	}
}

// markerSeenLocked ends a loss the link saw once a marker check of the same key
// recorded it.
func (l *Link) markerSeenLocked(h *handshake) {
	if h.loss != quorum.ReasonNone && h.loss == l.lossWhy && h.key == l.mkey {
		l.lossWhy = quorum.ReasonNone
	}
}

// Receive handles the replies to the identity check and the periodic
// marker check.
func (h *handshake) Receive(tag int, r Result) {
	l := h.l
	if tag == hsCheck {
		l.checked(h, r)
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

// markerReply is what a marker check returned.
type markerReply struct {
	id    quorum.Identity
	role  string
	cont  contState // what the continuity checks that follow compare
	clock int64     // the master's clock (ms) as the script ran
	// The record of grant deadlines: the time left of its latest, and
	// whether it is whole (see book.go); the longest settle time any proxy
	// asked for; and what the master was told of other epochs.
	left   time.Duration
	whole  bool
	settle time.Duration
	table  []string
	counts map[string]int64 // each proxy's count of its continuity checks in this epoch
}

// parseMarker reads the marker script's reply, or says why it cannot.
func (l *Link) parseMarker(r Result) (mr markerReply, why string) {
	switch {
	case r.Err != nil:
		return mr, "no answer to the identity check: " + r.Err.Error()
	case r.V.Kind == resp.KindError:
		return mr, l.checkFailed("marker script", string(r.V.Str))
	case r.V.Kind != resp.KindArray || len(r.V.Elems) != 21:
		return mr, "the identity check (marker script) got " + r.V.String()
	}
	e := r.V.Elems
	if policy := string(e[7].Str); policy != "" && !l.opt.Veto {
		return mr, evictionWhy(policy)
	}
	ms := func(v resp.Value) time.Duration { return time.Duration(v.Int) * time.Millisecond }
	mr.role = string(e[0].Str)
	mr.id = quorum.Identity{
		RunID:  string(e[5].Str),
		Uptime: time.Duration(e[6].Int) * time.Second,
		Marker: &quorum.Marker{
			Change: quorum.Reason(e[1].Str), LostAgo: ms(e[2]), StartedAgo: ms(e[3]), Hold: ms(e[4]),
			LostAt: e[12].Int, StartedAt: e[13].Int, Why: quorum.Reason(e[14].Str),
		},
	}
	mr.cont = contState{run: mr.id.RunID, replid: string(e[9].Str), epoch: string(e[8].Str), evicted: string(e[10].Str), cmds: e[11].Int}
	mr.counts = map[string]int64{}
	for i := 0; i+1 < len(e[16].Elems); i += 2 {
		n, _ := strconv.ParseInt(string(e[16].Elems[i+1].Str), 10, 64)
		mr.counts[string(e[16].Elems[i].Str)] = n
	}
	mr.cont.seq = mr.counts[l.proxyID]
	mr.clock = e[15].Int
	mr.left, mr.whole, mr.settle = ms(e[17]), e[18].Int == 1, ms(e[19])
	for _, v := range e[20].Elems {
		mr.table = append(mr.table, string(v.Str))
	}
	return mr, ""
}

// checkFailed words an error reply to one of the link's checks, pointing
// at the setting that fixes it where there is one.
func (l *Link) checkFailed(what, reply string) string {
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

// authRefusal reports whether a reply refuses the proxy's credentials or
// rights.
func authRefusal(reply string) bool {
	return strings.HasPrefix(reply, "NOAUTH") || strings.HasPrefix(reply, "WRONGPASS") || strings.HasPrefix(reply, "NOPERM")
}

// parseIdentity reads run_id, uptime_in_seconds and role from INFO.
func parseIdentity(info []byte) (id quorum.Identity, role, evicts string) {
	id = quorum.Identity{Uptime: -1}
	role = "master" // a backend whose INFO does not say is taken at its word as a master
	maxmemory := int64(0)
	policy := ""
	for _, line := range bytes.Split(info, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if v, ok := bytes.CutPrefix(line, []byte("maxmemory:")); ok {
			maxmemory, _ = strconv.ParseInt(string(v), 10, 64)
		} else if v, ok := bytes.CutPrefix(line, []byte("maxmemory_policy:")); ok {
			policy = string(v)
		} else if v, ok := bytes.CutPrefix(line, []byte("run_id:")); ok {
			id.RunID = string(v)
		} else if v, ok := bytes.CutPrefix(line, []byte("uptime_in_seconds:")); ok {
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n >= 0 {
				id.Uptime = time.Duration(n) * time.Second
			}
		} else if v, ok := bytes.CutPrefix(line, []byte("role:")); ok {
			role = string(v)
		}
	}
	if maxmemory > 0 && policy != "" && policy != "noeviction" {
		evicts = policy
	}
	return id, role, evicts
}

// evictionWhy explains why a master that may evict keys does not count.
func evictionWhy(policy string) string {
	return "it may evict keys under memory pressure (maxmemory-policy " + policy +
		"), which forgets locks with no restart to see: set maxmemory-policy noeviction (or maxmemory 0)"
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
		ahead, jumped = l.clockReadLocked(id.RunID, mr.clock, h.sent, now)
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
	from, addr := l.switchedLocked(), l.connAddr
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

// check runs the periodic marker check on a live, verified connection.
func (l *Link) check() {
	l.mu.Lock()
	gen, ok := l.gen, l.conn != nil && l.ready
	var b []byte
	var h *handshake
	if ok {
		// What the link's own continuity checks saw goes to the others
		// with this check's pairs.
		l.opt.book.seen(l.cont.epoch, l.proxyID, l.cont.seq, time.Now())
		b = l.appendMarker(nil, "EVALSHA", markerScript.Sha)
		h = &handshake{l: l, gen: gen, key: l.mkey, loss: l.lossWhy, sent: time.Now()}
	}
	l.mu.Unlock()
	if !ok {
		return
	}
	l.Send(b, markerScript, h, hsCheck, time.Now().Add(l.opt.DialTimeout))
}

// checked applies a periodic marker check: a quarantine can only grow
// (a promotion, a resync, a flush, an eviction under a live connection), a
// master that has become a replica stops counting at once, and the
// continuity checks that follow compare what this one saw.
func (l *Link) checked(h *handshake, r Result) {
	gen := h.gen
	l.markerRedirected(h.key, r)
	mr, why := l.parseMarker(r)
	switch {
	case r.Err != nil:
		return // no reply: the connection's own failure handling covers it
	case r.V.Kind == resp.KindError && bytes.HasPrefix(r.V.Str, []byte("NOSCRIPT")):
		// Its scripts were flushed: the link loads the marker script again
		// with the next check, which runs now.
		l.check()
		return
	case why != "":
		// A master that cannot be checked any more (an ACL change, out of
		// memory, the marker overwritten) is not trusted any more.
		l.fail(gen, why)
		return
	case mr.role != "master":
		l.fail(gen, fmt.Sprintf("not a master any more (role:%s): its votes stop counting", mr.role))
		return
	}
	now := time.Now()
	l.mu.Lock()
	if gen != l.gen || !l.ready || h.key != l.mkey {
		l.mu.Unlock()
		return // an older connection's, or the old key's: the next check reads the new one
	}
	before := l.watch.QuarantinedUntil()
	restarted := l.watch.Observe(mr.id, now)
	reason := l.watch.Reason()
	if restarted {
		l.health.Restarts++
	}
	rolled := l.markerReadLocked(h, &mr, now)
	ahead, jumped := l.clockReadLocked(mr.id.RunID, mr.clock, h.sent, now)
	until := l.watch.QuarantinedUntil()
	l.mu.Unlock()
	switch {
	case jumped:
		l.clockJumped(ahead)
	case rolled:
		l.rolledBack()
	}
	// Each check converts the marker's instants again, so the end of a
	// quarantine moves by the round trip's jitter: only a real change (the
	// master lost writes again) is reported.
	if (restarted || mr.id.Marker.Change != quorum.ReasonNone || until.After(before.Add(time.Second))) && now.Before(until) {
		l.log.Warn("backend's votes stop counting: "+reason.Explain(),
			"counts_in", until.Sub(now).Round(time.Millisecond), "counts_at", until.Format(time.RFC3339Nano))
		if l.opt.Events != nil {
			l.opt.Events.Restarted(l.opt.Index, until)
		}
	}
}

// noteCounting logs the end of a quarantine, once.
func (l *Link) noteCounting(now time.Time) {
	l.mu.Lock()
	counts := l.conn != nil && l.ready && l.vetted && l.watch.Counts(now) && l.confirmedLocked(now)
	ended := counts && !l.counting
	l.counting = counts
	l.mu.Unlock()
	if ended {
		l.log.Info("backend's quarantine ended: its votes count")
	}
}

// parseClientInfo reads id= and addr= from CLIENT INFO.
func parseClientInfo(info []byte) (id int64, addr string) {
	for _, f := range bytes.Fields(info) {
		if v, ok := bytes.CutPrefix(f, []byte("id=")); ok {
			id, _ = strconv.ParseInt(string(v), 10, 64)
		} else if v, ok := bytes.CutPrefix(f, []byte("addr=")); ok {
			addr = string(v)
		}
	}
	return id, addr
}

// countsLocked is the one place that decides whether a reply of this
// master counts toward a quorum at now. All four must hold:
//   - the connection is ready: the master's identity (run_id, replication
//     id, the marker) was read on it (identity.go, the marker script);
//   - the master is out of quarantine: the watch's rule for a master that
//     is new, restarted, promoted or otherwise lost its data
//     (quorum.Watch, quorum/restart.go);
//   - the continuity check on this connection has not found the data
//     broken since (continuity.go), which also holds a grant's reply
//     until the check after it passes;
//   - for a Sentinel-managed group, the Sentinels' majority names this
//     master (sentinel.go).
//
// A reply that does not count is still delivered (for undos and reads)
// with Counts false.
func (l *Link) countsLocked(now time.Time) bool {
	return l.ready && l.vetted && l.watch.Counts(now) && !l.cont.broken && l.confirmedLocked(now)
}

// rolledBack logs an older copy of the master's data than one seen, and
// runs the marker check that records it for every proxy.
func (l *Link) rolledBack() {
	l.log.Warn("backend serves an older copy of its data than a proxy saw: the grants before it do not count, and its votes stop counting for the hold")
	l.check()
}
