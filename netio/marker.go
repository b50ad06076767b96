package netio

import (
	"bytes"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The replication marker: the script every proxy runs on every master, on
// every new connection and then periodically (check), and what the link
// does with what it finds.

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
// epochs (pairs), the count of steps back of its clock and the latest
// one's size in ms, the latest reading of it found behind (see clock.go)}.
//
//go:embed marker.lua
var markerBody []byte

// markerLua is the script's text: the clock's step rule, then the check.
var markerLua = withClockStep(markerBody)

var markerScript = resp.NewScript(markerLua)

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
	if f := l.follower; f != nil {
		sepoch = strconv.FormatInt(f.connEpoch, 10)
		if f.connSwitches != f.recorded {
			// A switch not yet recorded on this master: a loss, unless the
			// marker records one since the switch was seen (then every
			// round that named the master before it started before that
			// loss, which the hold covers).
			sepoch += " switched " + strconv.FormatInt(time.Since(f.connSwitchAt).Milliseconds()+1, 10)
		}
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

// markerReply is what a marker check returned.
type markerReply struct {
	id    quorum.Identity
	role  string
	cont  contState // what the continuity checks that follow compare
	clock int64     // the master's clock (ms) as the script ran
	back  backCount // the marker's count of steps back of that clock
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
	case r.V.Kind != resp.KindArray || len(r.V.Elems) != 24:
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
	mr.back = backCount{n: e[21].Int, ms: e[22].Int, behind: e[23].Int, ok: true}
	mr.left, mr.whole, mr.settle = ms(e[17]), e[18].Int == 1, ms(e[19])
	for _, v := range e[20].Elems {
		mr.table = append(mr.table, string(v.Str))
	}
	return mr, ""
}

// check runs the periodic marker check on a live, verified connection.
func (l *Link) check() { l.checkThen(nil) }

// checkThen runs a marker check and closes applied (when set) once the
// link has applied its reply, or at once when there is no connection to
// check on.
func (l *Link) checkThen(applied chan struct{}) {
	l.mu.Lock()
	gen, ok := l.gen, l.conn != nil && l.ready
	var b []byte
	var h *handshake
	if ok {
		// What the link's own continuity checks saw goes to the others
		// with this check's pairs.
		l.opt.book.seen(l.cont.epoch, l.proxyID, l.cont.seq, time.Now())
		b = l.appendMarker(nil, "EVALSHA", markerScript.Sha)
		h = &handshake{l: l, gen: gen, key: l.mkey, loss: l.lossWhy, sent: time.Now(), applied: applied}
	}
	l.mu.Unlock()
	if !ok {
		if applied != nil {
			close(applied)
		}
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
	ahead, jumped := l.clockReadLocked(mr.id.RunID, mr.clock, mr.back, h.sent, now)
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

// NoteLoss makes the master record a loss the proxy saw itself, with why,
// at its next marker check (sent now): until that check has run, its
// replies do not count.
func (l *Link) NoteLoss(why quorum.Reason) {
	l.mu.Lock()
	l.seeLossLocked(why)
	l.cont.broken = true
	l.mu.Unlock()
	l.check()
}
