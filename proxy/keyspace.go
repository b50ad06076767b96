package proxy

import (
	"errors"
	"math"
	"strconv"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// The key space as an operator sees it through the proxy: SCAN, KEYS,
// DBSIZE and INFO keyspace show the majority view, in which a key is
// present when a majority of the backends that count hold it with the same
// value (the rule GET follows). The proxy's own keys (redlock-proxy:...)
// never show.
//
// SCAN walks every backend in turn (every shard of a Redis Cluster
// backend), and for each key it finds reads that key on every backend: the
// key is returned when a majority holds the same value, by the first
// backend in the walk that holds it, so a key is returned once however
// many hold it. The cursor is the backend's own SCAN cursor times the
// number of places walked, plus the place. These commands answer in the
// client's goroutine: they are the operator's, not the locks' hot path.

// gather collects one result per tag of commands sent to the backends.
type gather struct {
	mu   sync.Mutex
	res  []netio.Result
	left int
	done chan struct{}
}

func newGather(n int) *gather {
	return &gather{res: make([]netio.Result, n), left: n, done: make(chan struct{})}
}

func (g *gather) Receive(tag int, r netio.Result) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.res[tag] = r
	g.left--
	if g.left == 0 {
		close(g.done)
	}
}

// wait returns the results once all came, or what came by limit (the links
// answer every command by its deadline: limit only guards against a link
// closed under it).
func (g *gather) wait(limit time.Duration) []netio.Result {
	t := time.NewTimer(limit)
	defer t.Stop()
	select {
	case <-g.done:
	case <-t.C:
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	out := make([]netio.Result, len(g.res))
	copy(out, g.res)
	for i := range out {
		if out[i].V.Kind == 0 && out[i].Err == nil {
			out[i].Err = errNoAnswer
		}
	}
	return out
}

var errNoAnswer = errors.New("redlock-proxy: no answer")

// call sends one command per backend (cmds[i] to backends[i]) and waits for
// their results.
func (s *Server) call(backends []int, cmds [][]byte, sc *resp.Script) []netio.Result {
	g := newGather(len(cmds))
	deadline := time.Now().Add(s.eng.timeout)
	for i, cmd := range cmds {
		s.be.Send(backends[i], cmd, sc, g, i, deadline, 0)
	}
	return g.wait(s.eng.timeout + time.Second)
}

// scanPlace is one place SCAN walks: a backend, or one shard of a Redis
// Cluster backend, reached by a key of a slot it owns.
type scanPlace struct {
	backend int
	route   string
}

// scanRoute names the key that routes the scan script; it is never read.
const scanRoute = reservedPrefix + "scan"

// scanPlaces lists the places SCAN walks, in order.
func (s *Server) scanPlaces() []scanPlace {
	var out []scanPlace
	for i, h := range s.be.Health() {
		if h.Shards == nil {
			out = append(out, scanPlace{backend: i, route: scanRoute})
			continue
		}
		for _, sh := range h.Shards {
			out = append(out, scanPlace{backend: i, route: keyslot.InSlot(scanRoute+":", uint16(sh.MarkerSlot))})
		}
	}
	return out
}

// scanArgs are SCAN's options, as given.
type scanArgs struct {
	count        int64
	match, typ   []byte
	hasM, hasTyp bool
}

// parseScanArgs reads SCAN's options (after the cursor) with Redis's errors.
func parseScanArgs(args [][]byte) (scanArgs, string) {
	a := scanArgs{count: 10}
	for i := 0; i < len(args); i += 2 {
		if i+1 >= len(args) {
			return a, msgSyntax
		}
		switch {
		case is(args[i], "count"):
			n, ok := resp.ParseInt(args[i+1])
			if !ok {
				return a, msgNotInteger
			}
			if n < 1 {
				return a, msgSyntax
			}
			a.count = n
		case is(args[i], "match"):
			a.match, a.hasM = args[i+1], true
		case is(args[i], "type"):
			a.typ, a.hasTyp = args[i+1], true
		default:
			return a, msgSyntax
		}
	}
	return a, ""
}

// parseCursor reads a SCAN cursor as Redis 7.0 does (an unsigned number; a
// negative one wraps).
func parseCursor(b []byte) (uint64, bool) {
	if u, err := strconv.ParseUint(string(b), 10, 64); err == nil {
		return u, true
	}
	if n, ok := resp.ParseInt(b); ok {
		return uint64(n), true
	}
	return 0, false
}

// scanStep is one SCAN call: the keys of the majority view found at the
// cursor's place, and the next cursor (0 at the end).
func (s *Server) scanStep(cursor uint64, a scanArgs) (next uint64, keys []viewed, msg string) {
	places := s.scanPlaces()
	p := uint64(len(places))
	if p == 0 {
		return 0, nil, ""
	}
	at, inner := cursor%p, cursor/p
	pl := places[at]
	cmd := []string{"EVALSHA", scanScript.Sha, "1", pl.route, strconv.FormatUint(inner, 10), "COUNT", strconv.FormatInt(a.count, 10)}
	if a.hasM {
		cmd = append(cmd, "MATCH", string(a.match))
	}
	if a.hasTyp {
		cmd = append(cmd, "TYPE", string(a.typ))
	}
	r := s.call([]int{pl.backend}, [][]byte{resp.AppendCommand(nil, cmd...)}, scanScript)[0]
	var innerNext uint64
	var found [][]byte
	switch {
	case r.Err != nil:
		// A backend that does not answer is passed over: every key of the
		// majority view is held by a majority, so by backends walked
		// elsewhere.
	case r.V.Kind == resp.KindError:
		return 0, nil, string(r.V.Str)
	case r.V.Kind == resp.KindArray && len(r.V.Elems) == 2:
		innerNext, _ = strconv.ParseUint(string(r.V.Elems[0].Str), 10, 64)
		for _, k := range r.V.Elems[1].Elems {
			if !isReserved(k.Str) {
				found = append(found, k.Str)
			}
		}
	default:
		return 0, nil, msgInvalidReply
	}
	switch {
	case innerNext != 0 && innerNext > (math.MaxUint64-at)/p:
		return 0, nil, msgScanCursorTooLarge
	case innerNext != 0:
		next = innerNext*p + at
	case at+1 < p:
		next = at + 1
	}
	for _, v := range s.majorityView(found) {
		if v.first == pl.backend {
			keys = append(keys, v)
		}
	}
	return next, keys, ""
}

// viewed is a key of the majority view: the first backend that holds its
// majority value, and how long a majority will still hold it.
type viewed struct {
	key       []byte
	first     int
	remaining time.Duration // or quorum.NoExpiry
}

// majorityView reads keys on every backend and returns those a majority
// holds with the same value.
func (s *Server) majorityView(keys [][]byte) []viewed {
	if len(keys) == 0 {
		return nil
	}
	n := s.be.N()
	// One read per backend; per slot on a Redis Cluster backend, whose
	// scripts see only the keys of one slot.
	type read struct {
		backend int
		keys    []int // indexes into keys
	}
	var reads []read
	for i, h := range s.be.Health() {
		if h.Shards == nil {
			all := make([]int, len(keys))
			for j := range all {
				all[j] = j
			}
			reads = append(reads, read{i, all})
			continue
		}
		bySlot := map[uint16]int{}
		for j, k := range keys {
			sl := keyslot.Of(k)
			at, ok := bySlot[sl]
			if !ok {
				at = len(reads)
				bySlot[sl] = at
				reads = append(reads, read{backend: i})
			}
			reads[at].keys = append(reads[at].keys, j)
		}
	}
	backends := make([]int, len(reads))
	cmds := make([][]byte, len(reads))
	for r, rd := range reads {
		backends[r] = rd.backend
		b := resp.AppendArrayHeader(nil, 3+len(rd.keys))
		b = resp.AppendBulkString(b, "EVALSHA")
		b = resp.AppendBulkString(b, digestScript.Sha)
		b = resp.AppendBulkInt(b, int64(len(rd.keys)))
		for _, j := range rd.keys {
			b = resp.AppendBulk(b, keys[j])
		}
		cmds[r] = b
	}
	res := s.call(backends, cmds, digestScript)
	hs := make([][]quorum.Holding, len(keys))
	for j := range hs {
		hs[j] = make([]quorum.Holding, n)
	}
	for r, rd := range reads {
		v := res[r]
		if v.Err != nil || v.V.Kind != resp.KindArray || len(v.V.Elems) != len(rd.keys) {
			continue
		}
		for x, j := range rd.keys {
			h := quorum.Holding{Answered: true, Counts: v.Counts}
			if e := v.V.Elems[x]; e.Kind == resp.KindArray && len(e.Elems) == 2 {
				h.Exists, h.Value = true, e.Elems[0].Str
				h.PTTL = time.Duration(e.Elems[1].Int) * time.Millisecond
				if e.Elems[1].Int == -1 {
					h.PTTL = quorum.NoExpiry
				}
			}
			hs[j][rd.backend] = h
		}
	}
	var out []viewed
	for j, k := range keys {
		v, rem, ok := quorum.MajorityRemaining(n, hs[j])
		if !ok {
			continue
		}
		first := 0
		for i, h := range hs[j] {
			if h.Answered && h.Exists && string(h.Value) == string(v) {
				first = i
				break
			}
		}
		out = append(out, viewed{key: k, first: first, remaining: rem})
	}
	return out
}

// fullScan walks the whole majority view, calling each for every key.
func (s *Server) fullScan(a scanArgs, each func(v viewed)) string {
	var cursor uint64
	for {
		select {
		case <-s.shutdown:
			return msgShutdownWalk
		default:
		}
		next, keys, msg := s.scanStep(cursor, a)
		if msg != "" {
			return msg
		}
		for _, k := range keys {
			each(k)
		}
		if next == 0 {
			return ""
		}
		cursor = next
	}
}

// fullScanCount is the COUNT of the walks of KEYS, DBSIZE and INFO
// keyspace: fewer round trips than SCAN's default of 10.
const fullScanCount = 1000

// keyspaceCommands show the majority view of the key space.
var keyspaceCommands = []*commandDef{
	{name: "scan", arity: -2, flags: []string{"readonly"}, fn: handleScan},
	{name: "keys", arity: 2, flags: []string{"readonly"}, fn: handleKeys},
	{name: "dbsize", arity: 1, flags: []string{"readonly", "fast"}, fn: handleDBSize},
	{name: "exists", arity: -2, flags: []string{"readonly", "fast"}, first: 1, last: -1, step: 1, fn: handleExists},
	{name: "type", arity: 2, flags: []string{"readonly", "fast"}, first: 1, last: 1, step: 1, fn: handleType},
	{name: "lockinfo", arity: 2, flags: []string{"readonly"}, first: 1, last: 1, step: 1, fn: handleLockInfo},
}

func handleScan(c *client, args [][]byte) {
	cursor, ok := parseCursor(args[1])
	if !ok {
		c.replyErr(msgInvalidCursor)
		return
	}
	a, msg := parseScanArgs(args[2:])
	if msg != "" {
		c.replyErr(msg)
		return
	}
	next, keys, msg := c.s.scanStep(cursor, a)
	if msg != "" {
		c.replyErr(msg)
		return
	}
	list := resp.Value{Kind: resp.KindArray, Elems: make([]resp.Value, 0, len(keys))}
	for _, v := range keys {
		list.Elems = append(list.Elems, resp.BulkValue(v.key))
	}
	c.reply(resp.Value{Kind: resp.KindArray, Elems: []resp.Value{
		resp.BulkValue([]byte(strconv.FormatUint(next, 10))), list,
	}})
}

func handleKeys(c *client, args [][]byte) {
	list := resp.Value{Kind: resp.KindArray, Elems: []resp.Value{}}
	a := scanArgs{count: fullScanCount, match: args[1], hasM: true}
	if msg := c.s.fullScan(a, func(v viewed) { list.Elems = append(list.Elems, resp.BulkValue(v.key)) }); msg != "" {
		c.replyErr(msg)
		return
	}
	c.reply(list)
}

func handleDBSize(c *client, _ [][]byte) {
	ks, msg := c.s.keyspace()
	if msg != "" {
		c.replyErr(msg)
		return
	}
	c.reply(resp.IntValue(ks.keys))
}

// keyspaceStats is INFO keyspace's line: the keys of the majority view,
// those with a TTL, and their mean remaining TTL in milliseconds.
type keyspaceStats struct {
	keys, expires, avgTTL int64
}

// keyspace walks the majority view and counts it.
func (s *Server) keyspace() (keyspaceStats, string) {
	var ks keyspaceStats
	var sum time.Duration
	msg := s.fullScan(scanArgs{count: fullScanCount}, func(v viewed) {
		ks.keys++
		if v.remaining != quorum.NoExpiry {
			ks.expires++
			sum += v.remaining
		}
	})
	if ks.expires > 0 {
		ks.avgTTL = (sum / time.Duration(ks.expires)).Milliseconds()
	}
	return ks, msg
}

// keyspaceCache keeps INFO keyspace's count for a second: monitoring that
// polls INFO (redis-cli --stat, every second) does not walk the key space
// more often, and concurrent INFOs share one walk. INFO waits for a walk at
// most keyspaceWait, then answers with the last count (or none): with hung
// backends a walk takes a backend timeout per step, and INFO is what an
// operator runs then.
type keyspaceCache struct {
	mu      sync.Mutex
	at      time.Time
	ks      keyspaceStats
	good    bool
	walking chan struct{} // closed when the walk under way ends; nil when none is
}

// keyspaceWait is how long INFO waits for a walk of the key space.
const keyspaceWait = 500 * time.Millisecond

// keyspaceInfo is INFO's keyspace section: db0's keys, those with a TTL and
// their mean TTL, as of at most a second ago when the walk answers in time;
// nothing when no walk succeeded yet.
func (s *Server) keyspaceInfo() string {
	kc := &s.ksCache
	kc.mu.Lock()
	if time.Since(kc.at) >= time.Second && kc.walking == nil {
		done := make(chan struct{})
		kc.walking = done
		s.wg.Add(1) // INFO runs in a client goroutine: the group is not empty
		go func() { // owned by the server: Shutdown waits for it, and it stops at shutdown
			defer s.wg.Done()
			ks, msg := s.keyspace()
			kc.mu.Lock()
			if msg == "" {
				kc.ks, kc.good = ks, true
			}
			kc.at, kc.walking = time.Now(), nil
			kc.mu.Unlock()
			close(done)
		}()
	}
	wait := kc.walking
	kc.mu.Unlock()
	if wait != nil {
		t := time.NewTimer(keyspaceWait)
		select {
		case <-wait:
		case <-t.C:
		}
		t.Stop()
	}
	kc.mu.Lock()
	defer kc.mu.Unlock()
	if !kc.good || kc.ks.keys == 0 {
		return "" // as Redis, no line for an empty database
	}
	return "db0:keys=" + strconv.FormatInt(kc.ks.keys, 10) + ",expires=" + strconv.FormatInt(kc.ks.expires, 10) +
		",avg_ttl=" + strconv.FormatInt(kc.ks.avgTTL, 10) + "\r\n"
}

// handleExists counts the keys given that the majority view holds, each read
// as PTTL reads it (a key named twice counts twice, as in Redis).
func handleExists(c *client, args [][]byte) {
	keys := args[1:]
	c.reserve(len(keys))
	ops := make([]*op, len(keys))
	for i, k := range keys {
		ops[i] = c.s.eng.newOp("exists", ruleExists, c.done)
		c.cmd = appendBoundedRead(c.cmd[:0], readScript, k, c.s.cfg.Limits.MaxToken)
		if c.cmdKeys != nil {
			c.noteTracking(ops[i], keys[i:i+1]) // a tracking client's keys are tracked by the backends too
		}
		c.s.eng.start(ops[i], c.cmd, readScript)
	}
	c.await(ops...)
}

// handleType is the type of a key the majority view holds ("string" for a
// lock kept as its token, "hash" for a hash lock...), else "none".
func handleType(c *client, args [][]byte) {
	c.reserveRead()
	o := c.s.eng.newOp("type", ruleType, c.done)
	c.cmd = appendBoundedRead(c.cmd[:0], readScript, args[1], c.s.cfg.Limits.MaxToken)
	c.startOp(o, c.cmd, readScript)
}
