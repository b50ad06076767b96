package proxy

import (
	"hash/fnv"
	"slices"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Counting semaphores (redis-semaphore's Semaphore, and any script that
// behaves alike, classify.SemaphoreScript): at most limit holders at any
// moment, under any partial failure. A plain majority is not enough (three
// callers of a limit-2 semaphore over three masters, each refused by one
// master, would each hold two), so a permit is one of limit slots, each an
// ordinary majority mutex: every master holds a slot for one token at a
// time (luascripts_sem.go), and a caller holds a permit only while a
// majority of counted masters hold the same slot for it (quorum.Slots).
// An acquire asks every master for a slot at once, each taking the first
// free one from a preferred slot; the preference comes from the slots the
// masters last reported held (semHints), so that masters whose states
// differ after a partial failure still pick alike, and from the caller's
// token, so that callers racing for a semaphore prefer different slots.
// A failed acquire is undone where it took a slot; a refresh re-arms the
// caller's slot (never shortening it) and succeeds when a majority re-armed
// the same slot; a release (ZREM, or a release script) removes the
// caller's permit everywhere. While upgrade_from is set, semaphores are
// refused: the old Redis keeps its holders in a sorted set the slots do
// not see.

// semPrefix names the hash of a semaphore's permits on each master;
// semLimitPrefix the limit stored by a set-up (a semaphore kept as a count
// and a set of deadlines, classify's permits.go: Redisson's
// RPermitExpirableSemaphore).
const (
	semPrefix      = "redlock-proxy:sem:"
	semLimitPrefix = "redlock-proxy:semlimit:"
)

// semCommands serve a semaphore's release as redis-semaphore sends it.
var semCommands = []*commandDef{
	{name: "zrem", arity: -3, flags: []string{"write", "fast"}, first: 1, last: 1, step: 1, lock: kindRelease, fn: handleZrem},
}

// semCall is what a semaphore op needs besides the op.
type semCall struct {
	role             classify.SemRole
	limit            int  // 0 when stored: each master reads its own
	stored           bool // the limit is the one stored on each master
	success, failure resp.Value
	zrem             bool   // reply as ZREM: the number of tokens removed
	members          int    // tokens released
	key, token       []byte // copies, for the hints (acquire)
	limitKey         []byte // the stored limit's key (set-up), for its repair
	hints            *semHints
}

var ruleSem rules = semRules{}

type semRules struct{}

func (semRules) effects(o *op) effect {
	switch o.sem.role {
	case classify.SemAcquire:
		return effTakes | effValidity | effWrites
	case classify.SemRefresh:
		return effValidity | effWrites
	case classify.SemAvailable:
		return 0
	}
	return effWrites
}

func (semRules) vote(o *op, v resp.Value) quorum.Vote {
	if o.sem.role == classify.SemSetLimit {
		if _, ok := semStoredLimit(v); !ok {
			return quorum.Unknown
		}
		if v.Elems[0].Int == 1 {
			return quorum.Granted
		}
		return quorum.Refused
	}
	if v.Kind != resp.KindArray || len(v.Elems) == 0 {
		return quorum.Unknown
	}
	if o.sem.role == classify.SemAvailable {
		if v.Elems[0].Kind != resp.KindInt || len(v.Elems)%2 != 1 {
			return quorum.Unknown
		}
		return quorum.Granted // an answer; the permits decide
	}
	if o.sem.role == classify.SemRelease {
		if len(v.Elems) != o.sem.members {
			return quorum.Unknown
		}
		if o.sem.members > 1 || v.Elems[0].Int == 1 {
			return quorum.Granted // several tokens: an answer, counted per token at the end
		}
		return quorum.Refused
	}
	if _, ok := semSlot(v); !ok {
		return quorum.Unknown
	}
	if v.Elems[0].Int == 1 {
		return quorum.Granted
	}
	return quorum.Refused
}

// semStoredLimit reads a set-up's answer: the limit the master stores
// after it.
func semStoredLimit(v resp.Value) (string, bool) {
	if v.Kind != resp.KindArray || len(v.Elems) != 2 || v.Elems[0].Kind != resp.KindInt || v.Elems[1].Kind != resp.KindBulk {
		return "", false
	}
	return string(v.Elems[1].Str), true
}

// semSlot reads an acquire's or a refresh's answer: the slot the master
// holds for the caller after it, if it acted.
func semSlot(v resp.Value) (int, bool) {
	if v.Kind != resp.KindArray || len(v.Elems) != 4 || v.Elems[0].Kind != resp.KindInt || v.Elems[1].Kind != resp.KindInt || v.Elems[2].Kind != resp.KindInt {
		return quorum.NoSlot, false
	}
	if v.Elems[0].Int != 1 {
		return quorum.NoSlot, true
	}
	return int(v.Elems[1].Int), true
}

// outcome decides an acquire or a refresh by slots: a majority of counted
// masters must hold the same slot for the caller.
func (semRules) outcome(o *op) quorum.Outcome {
	if o.sem.role == classify.SemRelease || o.sem.role == classify.SemSetLimit {
		return o.tally.Outcome()
	}
	n := o.e.n
	held := make([]int, n)
	counts := make([]bool, n)
	for i := 0; i < n; i++ {
		held[i] = quorum.NoSlot
		v, c := o.tally.Vote(i)
		if v == quorum.Granted {
			held[i], _ = semSlot(o.replies[i])
		}
		counts[i] = c
	}
	out, _ := quorum.Slots(n, held, counts, o.tally.Pending())
	return out
}

func (r semRules) decide(o *op) bool {
	if o.sem.role == classify.SemAvailable {
		if !o.tally.Done() {
			return false
		}
		o.result = semAvailable(o)
		return o.answered(true)
	}
	if o.sem.role == classify.SemRelease && o.sem.members > 1 {
		// Several tokens: each counts as removed where a majority removed
		// it, known once every master answered.
		if !o.tally.Done() {
			return false
		}
		removed := 0
		for k := 0; k < o.sem.members; k++ {
			got := 0
			for i := 0; i < o.e.n; i++ {
				v, counts := o.tally.Vote(i)
				if v == quorum.Granted && counts && o.replies[i].Elems[k].Int == 1 {
					got++
				}
			}
			if got >= quorum.Majority(o.e.n) {
				removed++
			}
		}
		o.result = resp.IntValue(int64(removed))
		return o.answered(true)
	}
	done := o.decideByMajority()
	if done && o.sem.role == classify.SemAcquire {
		o.sem.hints.note(o)
	}
	return done
}

func (semRules) reply(o *op, success bool) resp.Value {
	switch {
	case o.sem.zrem && success:
		return resp.IntValue(1)
	case o.sem.zrem:
		return resp.IntValue(0)
	case success:
		return o.sem.success
	}
	return o.sem.failure
}

func (semRules) refill(o *op, _ time.Time) resp.Value { return o.result }

// undoFate: a failed acquire is undone where it took a slot, or may have
// (an error, a lost connection); never where it re-armed the caller's own
// permit, which stands.
func (semRules) undoFate(o *op, v quorum.Vote, r netio.Result) quorum.Fate {
	if o.sem.role == classify.SemAcquire && v == quorum.Granted && r.Err == nil && r.V.Elems[2].Int != 1 {
		return quorum.FateClear
	}
	return fate(v, r)
}

// semAvailable answers a count of free permits from every master's
// answer: the limit a majority of masters hold at least (a slot at or
// above it cannot reach a majority), less the permits a majority hold
// with the same slot below it. An error when fewer than a majority
// answered.
func semAvailable(o *op) resp.Value {
	m := quorum.Majority(o.e.n)
	var limits []int
	slots := map[string]map[int64]int{}
	for i := 0; i < o.e.n; i++ {
		if v, counts := o.tally.Vote(i); v != quorum.Granted || !counts {
			continue
		}
		els := o.replies[i].Elems
		limits = append(limits, int(els[0].Int))
		for k := 1; k+1 < len(els); k += 2 {
			tok := string(els[k].Str)
			if slots[tok] == nil {
				slots[tok] = map[int64]int{}
			}
			slots[tok][els[k+1].Int]++
		}
	}
	if len(limits) < m {
		return resp.ErrorValue(msgSemNoMajority)
	}
	slices.Sort(limits)
	limit := limits[len(limits)-m] // the m-th largest
	held := 0
	for _, bySlot := range slots {
		for s, n := range bySlot {
			if n >= m && s < int64(limit) {
				held++
			}
		}
	}
	free := int64(max(limit-held, 0))
	if o.sem.success.Kind == resp.KindBulk {
		return resp.BulkValue([]byte(itoa(free))) // as the script answers its count
	}
	return resp.IntValue(free)
}

// startSem runs a semaphore operation on key for token.
func startSem(c *client, name string, sc *semCall, key, token []byte, ttl time.Duration, members [][]byte) {
	if c.s.eng.veto {
		c.replyErr(msgSemUpgrade)
		return
	}
	h := keyslot.Companion(nil, semPrefix, key)
	var cmd []byte
	var ref *resp.Script
	c.reserve(1)
	o := c.s.eng.newOp(name, ruleSem, c.done)
	o.sem = sc
	o.ttl = ttl
	switch sc.role {
	case classify.SemAcquire:
		sc.key, sc.token, sc.hints = append([]byte(nil), key...), append([]byte(nil), token...), &c.s.semHints
		nonce := newNonce()
		pref := sc.hints.prefer(key, token, sc.limit, c.s.eng.n)
		ref = semAcquireScript
		if sc.stored {
			ref = semAcquireStoredScript
		}
		cmd = appendEvalShaKeys(c.cmd[:0], ref, semKeys(h, key, sc.stored), token, itoa(ttl.Milliseconds()), itoa(int64(sc.limit)), itoa(int64(pref)), nonce)
		o.undoCmd = appendEvalShaArgs(o.undoBuf[:0], semUndoScript, h, token, nonce, undoAtZero)
		o.undoSc, o.laterSc = semUndoScript, semUndoScript
	case classify.SemRefresh:
		cmd = appendEvalShaArgs(c.cmd[:0], semRefreshScript, h, token, itoa(ttl.Milliseconds()))
		ref = semRefreshScript
	case classify.SemSetLimit:
		sc.limitKey = keyslot.Companion(nil, semLimitPrefix, key)
		cmd = appendEvalShaArgs(c.cmd[:0], semSetLimitScript, sc.limitKey, itoa(int64(sc.limit)))
		ref = semSetLimitScript
		// The repair (semLimitRepairLocked) needs every master's answer.
		o.awaitAll = true
	case classify.SemAvailable:
		cmd = appendEvalShaKeys(c.cmd[:0], semCountScript, semKeys(h, key, true))
		ref = semCountScript
	default:
		sc.members = len(members)
		args := make([]any, len(members))
		for i, m := range members {
			args[i] = m
		}
		cmd = appendEvalShaArgs(c.cmd[:0], semReleaseScript, h, args...)
		ref = semReleaseScript
	}
	c.cmd = cmd
	c.startOp(o, cmd, ref)
}

// semKeys are the keys of an acquire: the permits' hash h, and the
// stored limit of the semaphore at key when it has one.
func semKeys(h, key []byte, stored bool) [][]byte {
	if !stored {
		return [][]byte{h}
	}
	return [][]byte{h, keyslot.Companion(nil, semLimitPrefix, key)}
}

// appendEvalShaArgs encodes EVALSHA of sc with one key and the arguments.
func appendEvalShaArgs(b []byte, sc *resp.Script, key []byte, args ...any) []byte {
	return appendEvalShaKeys(b, sc, [][]byte{key}, args...)
}

// appendEvalShaKeys encodes EVALSHA of sc with the keys and the arguments.
func appendEvalShaKeys(b []byte, sc *resp.Script, keys [][]byte, args ...any) []byte {
	b = resp.AppendArrayHeader(b, 3+len(keys)+len(args))
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, sc.Sha)
	b = resp.AppendBulkString(b, itoa(int64(len(keys))))
	for _, k := range keys {
		b = resp.AppendBulk(b, k)
	}
	for _, a := range args {
		switch a := a.(type) {
		case []byte:
			b = resp.AppendBulk(b, a)
		case string:
			b = resp.AppendBulkString(b, a)
		}
	}
	return b
}

// startSemScript runs a call of a script classified as a semaphore
// operation.
func startSemScript(c *client, s *classify.Semaphore, keys, argv [][]byte) {
	sc := &semCall{role: s.Role, stored: s.Stored, success: s.Success, failure: s.Failure}
	key := keys[s.Key]
	switch s.Role {
	case classify.SemSetLimit:
		limit, ok := resp.ParseInt(argv[s.Limit])
		if !ok || limit < 1 || limit > classify.MaxSemLimit {
			c.replyErr(msgSemLimit(string(argv[s.Limit])))
			return
		}
		sc.limit = int(limit)
		startSem(c, "semaphore-setup", sc, key, nil, 0, nil)
		return
	case classify.SemAvailable:
		startSem(c, "semaphore-available", sc, key, nil, 0, nil)
		return
	}
	token := argv[s.Token]
	if len(token) > c.s.cfg.Limits.MaxToken {
		c.replyErr(msgTokenTooLong(len(token), c.s.cfg.Limits.MaxToken))
		return
	}
	var ttl time.Duration
	if s.Role != classify.SemRelease {
		var ok bool
		ttl, ok = s.TTLOf(argv)
		switch {
		case !ok:
			c.replyErr(msgNotInteger)
			return
		case ttl <= 0:
			c.replyErr(msgSemNoExpiry)
			return
		case ttl > c.s.cfg.MaxTTL:
			c.replyErr(msgTTLTooLong(ttl.Milliseconds(), c.s.cfg.MaxTTL.Milliseconds()))
			return
		}
	}
	if s.Role == classify.SemAcquire && !s.Stored {
		limit, ok := s.LimitOf(argv)
		if !ok || limit < 1 || limit > classify.MaxSemLimit {
			c.replyErr(msgSemLimit(string(argv[s.Limit])))
			return
		}
		sc.limit = limit
	}
	startSem(c, semOpNames[s.Role], sc, key, token, ttl, [][]byte{token})
}

// semOpNames are the names a semaphore script's operations are counted
// under, as the lock roles they are: an acquire, an extend, a release.
var semOpNames = map[classify.SemRole]string{
	classify.SemAcquire: spec.RoleAcquire.String(),
	classify.SemRefresh: spec.RoleExtend.String(),
	classify.SemRelease: spec.RoleRelease.String(),
}

// handleZrem is ZREM key member...: the release of a semaphore's permits, as
// redis-semaphore sends it. Each member counts as removed where a majority
// removed its permit.
func handleZrem(c *client, args [][]byte) {
	if reservedKey(args, 1, 1, 1) {
		c.replyErr(msgReservedKey)
		return
	}
	sc := &semCall{role: classify.SemRelease, zrem: true}
	startSem(c, "zrem", sc, args[1], nil, 0, args[2:])
}

// semHints remembers, per semaphore, which slots each master last
// reported held, so that the next acquire through this proxy prefers a
// slot free on the most masters. A hint only orders the slots an acquire
// tries: whatever it says, a slot is granted by the masters' own rule.
type semHints struct {
	mu sync.Mutex
	m  map[string]*semHint
}

type semHint struct {
	at    time.Time
	limit int
	held  []string // per master, the slots held ('1') as it last said, or "" when unknown
}

// semHintAge and semHintKeys bound what the hints keep.
const (
	semHintAge  = 10 * time.Second
	semHintKeys = 4096
)

// prefer is the slot an acquire of key by token tries first: among the
// slots free on the most masters as last reported, the one the token's
// hash picks.
func (h *semHints) prefer(key, token []byte, limit, n int) int {
	f := fnv.New32a()
	f.Write(token)
	sum := int(f.Sum32() & 0x7fffffff)
	h.mu.Lock()
	hint := h.m[string(key)]
	h.mu.Unlock()
	if limit == 0 && hint != nil {
		limit = hint.limit // stored on the masters: as they last said
	}
	if limit == 0 {
		return sum // each master takes it modulo its limit
	}
	if hint == nil || hint.limit != limit || time.Since(hint.at) > semHintAge {
		return sum % limit
	}
	free := make([]int, limit)
	best := 0
	for s := range free {
		for _, bits := range hint.held {
			if bits == "" || bits[s] == '0' {
				free[s]++
			}
		}
		best = max(best, free[s])
	}
	var cands []int
	for s, k := range free {
		if k == best {
			cands = append(cands, s)
		}
	}
	return cands[sum%len(cands)]
}

// note keeps what an acquire's answers said of the slots held. Called with
// the op's lock held.
func (h *semHints) note(o *op) {
	hint := &semHint{at: time.Now(), limit: o.sem.limit, held: make([]string, o.e.n)}
	for i := range hint.held {
		if v, _ := o.tally.Vote(i); v == quorum.Granted || v == quorum.Refused {
			bits := o.replies[i].Elems[3]
			if hint.limit == 0 {
				hint.limit = len(bits.Str) // a stored limit, as this master has it
			}
			if hint.limit > 0 && len(bits.Str) == hint.limit {
				hint.held[i] = string(bits.Str)
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil || len(h.m) >= semHintKeys {
		h.m = map[string]*semHint{}
	}
	h.m[string(o.sem.key)] = hint
}

// A semaphore's stored limit has no expiry, and a master that restarts
// empty forgets it: unrepaired, the copies of a limit set up on three
// masters are gone after two of them restarted, one after the other, and
// a set-up of another limit that reached them (refused, as the limit was
// set) would leave its own there, then stored by a majority: more holders
// than the one set-up that succeeded allowed. So each set-up, once every
// master answered, leaves its masters as the majority has it: where a
// majority of counted masters store one limit, a master that stores
// another, or just took the set-up's own, is set to it; where none does,
// a refused set-up takes its limit back where it wrote it. Neither can let
// more holders in: holders are at most the limit a majority store at least
// (a slot is granted by a majority, each master below its own limit), and
// with a majority storing L that is L before and after the repair. Each
// change is a compare-and-set of the value the answer showed, so a write
// since (a set-up on a master that lost its limit again) is left alone.

// semLimitRepairLocked returns, for a set-up whose masters all answered or
// timed out, the repair of each master whose stored limit is not the one
// to keep. Called with the op's lock held.
func (o *op) semLimitRepairLocked() (cmds [][]byte, nodes []int) {
	if o.sem == nil || o.sem.role != classify.SemSetLimit || !o.tally.Done() {
		return nil, nil
	}
	m := quorum.Majority(o.e.n)
	stored := make([]string, o.e.n)
	answered := make([]bool, o.e.n)
	counted := map[string]int{}
	for i := 0; i < o.e.n; i++ {
		v, counts := o.tally.Vote(i)
		if v != quorum.Granted && v != quorum.Refused {
			continue
		}
		stored[i], answered[i] = semStoredLimit(o.replies[i])
		if answered[i] && counts {
			counted[stored[i]]++
		}
	}
	keep, found := "", false
	for l, k := range counted {
		if k >= m {
			keep, found = l, true
		}
	}
	mine := itoa(int64(o.sem.limit))
	for i := 0; i < o.e.n; i++ {
		if !answered[i] {
			continue
		}
		switch {
		case found && stored[i] != keep:
		case !found && o.outcome != ResultGranted && stored[i] == mine:
			// The limit there is this refused set-up's own only if it
			// wrote it: another's equal limit stays.
			if v, _ := o.tally.Vote(i); v != quorum.Granted {
				continue
			}
		default:
			continue
		}
		to := keep
		if !found {
			to = ""
		}
		cmds = append(cmds, appendEvalShaArgs(nil, semLimitRepairScript, o.sem.limitKey, stored[i], to))
		nodes = append(nodes, i)
	}
	return cmds, nodes
}

// sendLimitRepair sends each repair to its master. Its answer is not
// needed: a master that misses it keeps what it had, as before the set-up.
func (o *op) sendLimitRepair(cmds [][]byte, nodes []int, now time.Time) {
	for k, n := range nodes {
		o.e.be.Send(n, cmds[k], semLimitRepairScript, netio.Discard, n, now.Add(o.e.timeout), 0)
	}
}
