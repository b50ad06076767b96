package classify

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Counting semaphores kept as a sorted set of holders (redis-semaphore's
// Semaphore, and any script that behaves alike): one key whose members are
// the holders' tokens, a caller joining while fewer than a limit hold it.
// A script is read as one of three operations by what it does to such a
// set in the sandbox, as the lock roles are (classify.go):
//
//   - acquire: adds the caller when fewer than limit live holders are
//     there (the caller counting itself when it is one already), else
//     changes nothing; the key then expires after the TTL;
//   - refresh: re-arms the caller's permit when it holds one, else
//     changes nothing;
//   - release: removes the caller.
//
// Other holders are never removed or re-scored (expired ones may be
// purged), and the reply is one value on success and one on failure. The
// proxy then runs its own scripts for the operation (slots, see
// quorum.Slots), never the client's text. A holder is live by its score,
// which a script may read as when it joined (redis-semaphore) or as its
// deadline: the probes' live holders are scored a little ahead of now and
// their expired ones days ago, which both readings agree on.

// SemRole is what a semaphore script does.
type SemRole uint8

// The semaphore operations.
const (
	SemUnknown SemRole = iota
	SemAcquire
	SemRefresh
	SemRelease
	// SemSetLimit and SemAvailable are operations of a semaphore whose
	// limit is stored (Stored): its set-up, and the count of free permits.
	SemSetLimit
	SemAvailable
)

func (r SemRole) String() string {
	switch r {
	case SemAcquire:
		return "semaphore-acquire"
	case SemRefresh:
		return "semaphore-refresh"
	case SemRelease:
		return "semaphore-release"
	case SemSetLimit:
		return "semaphore-setup"
	case SemAvailable:
		return "semaphore-available"
	}
	return "unknown"
}

// MaxSemLimit is the largest limit a semaphore may have through the proxy:
// each acquire reads every slot on every master.
const MaxSemLimit = 1024

// Semaphore is a script classified as a semaphore operation: where its
// token, limit and TTL are, and its replies.
type Semaphore struct {
	Role  SemRole
	NKeys int // KEYS entries: 0 for the one semaphore key
	Key   int // 0-based KEYS index of the semaphore's name
	NArgs int // ARGV entries
	// Stored: the limit is the one the set-up stored on each master (a
	// semaphore kept as a count and a set of deadlines, permits.go), not
	// an argument of each acquire.
	Stored bool
	// Deadline is the 0-based ARGV index of an acquire's deadline in ms
	// on the caller's clock (Clocks[0]), the TTL being the difference; -1
	// when the TTL is an argument of its own.
	Deadline int
	Token    int   // 0-based ARGV index of the caller's token
	Limit    int   // 0-based ARGV index of the limit (acquire), else -1
	TTL      int   // 0-based ARGV index of the TTL, -1 for TTLConst (acquire, refresh)
	TTLConst int64 // ms, when TTL is -1
	TTLSec   bool  // the TTL argument is in seconds
	Clocks   []int // arguments that are the caller's clock: not used
	// Controls are arguments that change what the script does: the
	// classification holds for these values only.
	Controls         []spec.Control
	Success, Failure resp.Value
	// Refused says why a script recognized as a semaphore is refused
	// (Role is then SemUnknown).
	Refused string
	// limits are the limits an acquire was read with (Semaphores, under
	// its lock): a call with another is read again before it is served.
	limits map[int]bool
}

// Matches reports whether a call is covered by the classification.
func (s *Semaphore) Matches(keys, argv [][]byte) bool {
	if len(keys) != max(s.NKeys, 1) || len(argv) != s.NArgs {
		return false
	}
	for _, c := range s.Controls {
		if string(argv[c.Arg]) != c.Value {
			return false
		}
	}
	return true
}

// LimitOf is the call's limit.
func (s *Semaphore) LimitOf(argv [][]byte) (int, bool) {
	n, ok := resp.ParseInt(argv[s.Limit])
	return int(n), ok
}

// TTLOf is the call's TTL (acquire, refresh).
func (s *Semaphore) TTLOf(argv [][]byte) (time.Duration, bool) {
	if s.Deadline >= 0 {
		dl, ok1 := resp.ParseInt(argv[s.Deadline])
		now, ok2 := resp.ParseInt(argv[s.Clocks[0]])
		if !ok1 || !ok2 || dl-now <= 0 || dl-now > int64(365*24*time.Hour/time.Millisecond) {
			return 0, ok1 && ok2 // none, or far beyond any lease: no expiry
		}
		return time.Duration(dl-now) * time.Millisecond, true
	}
	if s.TTL < 0 {
		return time.Duration(s.TTLConst) * time.Millisecond, true
	}
	n, ok := resp.ParseInt(argv[s.TTL])
	if !ok || n <= 0 || n > int64(365*24*time.Hour/time.Millisecond) {
		return 0, ok
	}
	if s.TTLSec {
		return time.Duration(n) * time.Second, true
	}
	return time.Duration(n) * time.Millisecond, true
}

// String describes the classification for SCRIPT EXPLAIN.
func (s *Semaphore) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s keys=%d", s.Role, max(s.NKeys, 1))
	if s.Stored {
		fmt.Fprintf(&b, " name=%d", s.Key+1)
	}
	fmt.Fprintf(&b, " args=%d", s.NArgs)
	if s.Token >= 0 {
		fmt.Fprintf(&b, " token=%d", s.Token+1)
	}
	if s.Limit >= 0 {
		fmt.Fprintf(&b, " limit=%d", s.Limit+1)
	}
	switch {
	case s.Role == SemRelease || s.Role == SemSetLimit || s.Role == SemAvailable:
	case s.Deadline >= 0:
		fmt.Fprintf(&b, " deadline=%d", s.Deadline+1)
	case s.TTL < 0:
		fmt.Fprintf(&b, " ttl=%dms", s.TTLConst)
	case s.TTLSec:
		fmt.Fprintf(&b, " ttl=%ds", s.TTL+1)
	default:
		fmt.Fprintf(&b, " ttl=%dms", s.TTL+1)
	}
	for _, c := range s.Clocks {
		fmt.Fprintf(&b, " clock=%d", c+1)
	}
	for _, c := range s.Controls {
		fmt.Fprintf(&b, " ARGV[%d]=%q", c.Arg+1, c.Value)
	}
	if s.Role != SemAvailable {
		fmt.Fprintf(&b, "; success: %s; failure: %s", s.Success, s.Failure)
	}
	return b.String()
}

// Semaphores caches semaphore classifications by SHA1, beside the
// Registry's lock classifications. It is safe for concurrent use.
type Semaphores struct {
	mu      sync.Mutex
	got     map[string][]*Semaphore
	not     map[string]string // sha and call shape -> why not a semaphore
	refused map[string]string // sha and call shape -> why a semaphore is refused
}

// maxSemEntries bounds what Semaphores remembers.
const maxSemEntries = 4096

// NewSemaphores returns an empty cache.
func NewSemaphores() *Semaphores {
	return &Semaphores{got: map[string][]*Semaphore{}, not: map[string]string{}, refused: map[string]string{}}
}

// Lookup returns the classification covering a call, without classifying:
// none for an acquire whose limit it was not read with (Classify reads
// the call again).
func (c *Semaphores) Lookup(sha string, keys, argv [][]byte) *Semaphore {
	c.mu.Lock()
	defer c.mu.Unlock()
	s, limit := c.matchLocked(sha, keys, argv)
	if s == nil || limit > 0 {
		return nil
	}
	return s
}

// matchLocked returns the classification matching a call and, for an
// acquire not yet read with the call's limit, that limit (else 0). The
// sandbox probes an acquire around one limit only, and a script's text may
// treat others otherwise (cap them, say): read with a limit of 2, an
// acquire whose text never admits more than three would let five callers
// in that pass 5, where one Redis admits three.
func (c *Semaphores) matchLocked(sha string, keys, argv [][]byte) (*Semaphore, int) {
	for _, s := range c.got[sha] {
		if s.Role == SemUnknown || !s.Matches(keys, argv) {
			continue
		}
		if s.Role != SemAcquire || s.Limit < 0 {
			return s, 0
		}
		l, ok := s.LimitOf(argv)
		if !ok || l < 1 || s.limits[l] {
			return s, 0 // not a limit: the proxy answers with why
		}
		return s, l
	}
	return nil, 0
}

// Known lists the classifications of a script, for SCRIPT EXPLAIN.
func (c *Semaphores) Known(sha string) []*Semaphore {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.got[sha])
}

// Classify classifies a call of e as a semaphore operation, once per shape
// of call (number of arguments); it returns nil and why when the script is
// not one, and a Semaphore whose Role is SemUnknown, with why, when the
// script is a semaphore the proxy refuses (then why is the reason to give
// the client, rather than a lock classifier's).
func (c *Semaphores) Classify(e *Entry, keys, argv [][]byte) (*Semaphore, string) {
	if s := c.Lookup(e.Sha, keys, argv); s != nil {
		return s, ""
	}
	shape := e.Sha + ":" + strconv.Itoa(len(keys)) + ":" + strconv.Itoa(len(argv))
	c.mu.Lock()
	read, limit := c.matchLocked(e.Sha, keys, argv)
	if limit > 0 {
		// An acquire read with other limits: this call's is read now.
		shape += ":limit=" + strconv.Itoa(limit)
	}
	why, known := c.not[shape]
	refused, isRefused := c.refused[shape]
	c.mu.Unlock()
	switch {
	case isRefused:
		return &Semaphore{Refused: refused}, refused
	case known:
		return nil, why
	}
	if e.Body == nil {
		return nil, "its text is unknown here"
	}
	p, ref := e.program()
	if ref != nil {
		return nil, ref.Reason
	}
	s, why := SemaphoreScript(p, sandbox.Strs(keys), sandbox.Strs(argv))
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.got)+len(c.not)+len(c.refused) >= maxSemEntries {
		// Refusals are cheap to find again; classifications stay.
		clear(c.not)
		clear(c.refused)
	}
	if limit > 0 {
		if s != nil && s.Role != SemUnknown && s.String() == read.String() {
			if read.limits == nil {
				read.limits = map[int]bool{}
			}
			read.limits[limit] = true
			return read, ""
		}
		if s != nil && s.Role != SemUnknown {
			why = "it acts as " + s.String()
		}
		why = fmt.Sprintf("it was read as %s with another limit, but with ARGV[%d] = %d %s", read, read.Limit+1, limit, why)
		c.refused[shape] = why
		return &Semaphore{Refused: why}, why
	}
	if s == nil {
		c.not[shape] = why
		return nil, why
	}
	if s.Role == SemAcquire && s.Limit >= 0 {
		if l, ok := s.LimitOf(argv); ok {
			s.limits = map[int]bool{l: true}
		}
	}
	if s.Role == SemUnknown {
		// Recognized as a semaphore and refused.
		c.refused[shape] = s.Refused
		return s, s.Refused
	}
	if len(c.got[e.Sha]) < maxClassesPerScript {
		c.got[e.Sha] = append(c.got[e.Sha], s)
	}
	return s, ""
}

// Probe states: live holders are scored semLiveAhead ms ahead of now,
// expired ones semExpiredAgo ms ago; the set itself lives for an hour.
const (
	semLiveAhead  = 1000
	semExpiredAgo = 10 * 24 * 3600 * 1000
	semKeyTTL     = 3600 * 1000
	semClockSpan  = 24 * 3600 * 1000 // an argument this near now is a clock
)

// Caller states in a probe.
const (
	ownNone = iota
	ownLive
	ownExpired
)

var ownNames = [...]string{"without the caller", "with the caller holding", "with the caller's expired permit"}

type semProber struct {
	p    *sandbox.Program
	key  string
	argv []string
	now  int64
}

// state is the key with others live holders, expired expired ones, and
// the caller (token) as own says.
func (sp *semProber) state(others, expired, own int, token string) *sandbox.State {
	st := &sandbox.State{Now: sp.now, Keys: map[string]sandbox.Item{}}
	z := map[string]float64{}
	for i := 0; i < others; i++ {
		z[sp.holder("holder", i, token)] = float64(sp.now + semLiveAhead)
	}
	for i := 0; i < expired; i++ {
		z[sp.holder("gone", i, token)] = float64(sp.now - semExpiredAgo)
	}
	switch own {
	case ownLive:
		z[token] = float64(sp.now + semLiveAhead)
	case ownExpired:
		z[token] = float64(sp.now - semExpiredAgo)
	}
	if len(z) > 0 {
		st.Keys[sp.key] = sandbox.Item{Type: sandbox.TypeZset, Zset: z, At: sp.now + semKeyTTL}
	}
	return st
}

// holder names another holder, never one of the arguments.
func (sp *semProber) holder(kind string, i int, token string) string {
	name := "redlock-proxy-probe-" + kind + "-" + strconv.Itoa(i)
	for slices.Contains(sp.argv, name) || name == token {
		name += "x"
	}
	return name
}

// semRun is one probe's outcome.
type semRun struct {
	key      string
	st       *sandbox.State // before
	after    *sandbox.State
	reply    resp.Value
	ref      *sandbox.Stop
	what     string
	token    string
	own      int
	others   int
	expired  int
	argv     []string
	pttl     int64
	added    []string // members that were not there before
	removed  []string // live members gone
	rescored []string // live members whose score changed
}

func (sp *semProber) run(argv []string, others, expired, own int, token string) semRun {
	st := sp.state(others, expired, own, token)
	res := sp.p.Run([]string{sp.key}, argv, st, sandbox.MaxSteps)
	r := semRun{key: sp.key, st: st, after: res.State, reply: res.Reply, ref: res.Ref, token: token, own: own, others: others, expired: expired, argv: argv}
	r.what = fmt.Sprintf("with KEYS[1] a sorted set of %d live holders and %d expired ones, %s,", others, expired, ownNames[own])
	if others+expired == 0 && own == ownNone {
		r.what = "with KEYS[1] missing,"
	}
	if res.Ref != nil {
		return r
	}
	r.pttl = res.State.PTTL(sp.key)
	before := map[string]float64{}
	if it, ok := st.Lookup(sp.key); ok {
		before = it.Zset
	}
	after := map[string]float64{}
	if it, ok := res.State.Lookup(sp.key); ok {
		if it.Type != sandbox.TypeZset {
			r.ref = sandbox.Refuse(sandbox.RefuseOther, "%s it left KEYS[1] %s", r.what, it)
			return r
		}
		after = it.Zset
	}
	for m := range after {
		if _, ok := before[m]; !ok {
			r.added = append(r.added, m)
		}
	}
	for m, s := range before {
		if s < float64(sp.now) {
			continue // expired: it may go
		}
		if a, ok := after[m]; !ok {
			r.removed = append(r.removed, m)
		} else if a != s {
			r.rescored = append(r.rescored, m)
		}
	}
	slices.Sort(r.added)
	slices.Sort(r.removed)
	slices.Sort(r.rescored)
	return r
}

// armed reports whether the run left the caller in the set with a score
// other than it had (admitted, or re-armed).
func (r *semRun) armed() bool {
	it, ok := r.after.Lookup(r.key)
	if !ok {
		return false
	}
	a, ok := it.Zset[r.token]
	if !ok {
		return false
	}
	if b, ok := r.st.Lookup(r.key); ok {
		if old, was := b.Zset[r.token]; was {
			return old != a
		}
	}
	return true
}

// with returns the argv with argument i set to v.
func with(argv []string, i int, v string) []string {
	out := slices.Clone(argv)
	out[i] = v
	return out
}

// ClassifySemaphore reads a call of a one-key script as a semaphore
// operation, or says why it is not one.
func SemaphoreScript(p *sandbox.Program, keys, argv []string) (*Semaphore, string) {
	return classifySemaphoreAt(p, keys, argv, time.Now().UnixMilli())
}

func classifySemaphoreAt(p *sandbox.Program, keys, argv []string, now int64) (*Semaphore, string) {
	if s := classifyPermitsAt(p, keys, argv, now); s != nil {
		return s, s.Refused
	}
	if counts(p, keys, argv, now) {
		return &Semaphore{Refused: CounterRefusal}, CounterRefusal
	}
	if len(keys) != 1 {
		return nil, "a semaphore is one key"
	}
	sp := &semProber{p: p, key: keys[0], argv: argv, now: now}
	s := &Semaphore{NArgs: len(argv), Limit: -1, TTL: -1, Deadline: -1}
	for i, a := range argv {
		if n, err := strconv.ParseInt(a, 10, 64); err == nil && (abs(n-now) <= semClockSpan || abs(n*1000-now) <= semClockSpan) {
			s.Clocks = append(s.Clocks, i)
		}
	}
	// An acquire adds one of its arguments to a missing key.
	r0 := sp.run(argv, 0, 0, ownNone, "")
	if r0.ref != nil {
		return nil, r0.ref.Reason
	}
	if len(r0.added) == 1 {
		s.Role, s.Token = SemAcquire, slices.Index(argv, r0.added[0])
		if s.Token < 0 || slices.Contains(s.Clocks, s.Token) {
			return nil, fmt.Sprintf("%s it added %q, which is not one of its arguments", r0.what, sandbox.Short(r0.added[0]))
		}
		return recognized(sp.acquire(s))
	}
	if len(r0.added) > 1 {
		return nil, fmt.Sprintf("%s it added %d members", r0.what, len(r0.added))
	}
	// A refresh or a release acts on the caller's own member.
	for i, a := range argv {
		if slices.Contains(s.Clocks, i) || a == "" {
			continue
		}
		r := sp.run(argv, 0, 0, ownLive, a)
		if r.ref != nil || len(r.added) != 0 {
			continue
		}
		switch {
		case len(r.removed) == 1:
			s.Role, s.Token = SemRelease, i
			return recognized(sp.release(s))
		case len(r.removed) == 0 && !r.reply.Equal(r0.reply) && r.pttl > 0:
			s.Role, s.Token = SemRefresh, i
			return recognized(sp.refresh(s))
		}
	}
	return nil, "it neither adds an argument to a missing key nor acts on a member that is one"
}

// recognized marks a refusal of a script that acts as a semaphore
// operation on its probes: its reason is the one to give.
func recognized(s *Semaphore, why string) (*Semaphore, string) {
	if s == nil {
		return &Semaphore{Refused: why}, why
	}
	return s, why
}

func abs(n int64) int64 {
	if n < 0 {
		return -n
	}
	return n
}

// acquire finds the limit and the TTL of an acquire, and checks it on
// every probe.
func (sp *semProber) acquire(s *Semaphore) (*Semaphore, string) {
	tok := sp.argv[s.Token]
	admits := func(argv []string, others int) (bool, *semRun) {
		r := sp.run(argv, others, 0, ownNone, tok)
		return r.ref == nil && len(r.added) == 1 && r.added[0] == tok, &r
	}
	for i, a := range sp.argv {
		v, err := strconv.Atoi(a)
		if err != nil || v < 1 || i == s.Token || slices.Contains(s.Clocks, i) {
			continue
		}
		if v > MaxSemLimit {
			// Refused below if it is the limit.
			if v <= 1<<16 {
				if ok, _ := admits(sp.argv, v-1); ok {
					if ok, _ := admits(sp.argv, v); !ok {
						return nil, fmt.Sprintf("its limit ARGV[%d] is %d; through the proxy a semaphore's limit is at most %d", i+1, v, MaxSemLimit)
					}
				}
			}
			continue
		}
		if ok, _ := admits(sp.argv, v-1); !ok {
			continue
		}
		if ok, _ := admits(sp.argv, v); ok {
			continue
		}
		// The admission must follow the argument, not a constant.
		up := with(sp.argv, i, strconv.Itoa(v+1))
		if ok, _ := admits(up, v); !ok {
			continue
		}
		if ok, _ := admits(up, v+1); ok {
			continue
		}
		s.Limit = i
		break
	}
	if s.Limit < 0 {
		return nil, "it adds its token to a sorted set, but whether it does follows no limit argument (a holder is admitted while fewer than ARGV[i] hold it)"
	}
	_, r := admits(sp.argv, 0)
	if why := sp.findTTL(s, r.pttl, func(argv []string) int64 {
		_, r := admits(argv, 0)
		return r.pttl
	}); why != "" {
		return nil, why
	}
	s.Success = r.reply
	limit, _ := strconv.Atoi(sp.argv[s.Limit])
	ttl := sp.ttlMs(s, sp.argv)
	check := func(argv []string, limit int, ttl int64) string {
		for _, own := range []int{ownNone, ownLive, ownExpired} {
			for _, others := range uniq(0, 1, limit-1, limit, limit+1) {
				for expired := 0; expired <= 1; expired++ {
					r := sp.run(argv, others, expired, own, tok)
					if r.ref != nil {
						return sandbox.WithProbe(r.ref, r.what).Reason
					}
					holders := others
					if own == ownLive {
						holders++
					}
					why := sp.unchanged(&r)
					switch {
					case why != "":
					case len(r.added) > 1 || (len(r.added) == 1 && r.added[0] != tok):
						why = fmt.Sprintf("it added %q", sandbox.Short(r.added[0]))
					case holders < limit:
						if own != ownLive && !r.armed() {
							why = fmt.Sprintf("it did not add ARGV[%d]; an acquire of limit %d adds it while fewer hold it", s.Token+1, limit)
						} else if r.pttl != ttl {
							why = fmt.Sprintf("it left KEYS[1] with PTTL %d ms; after an acquire it lives for the TTL, %d ms", r.pttl, ttl)
						} else if !r.reply.Equal(s.Success) {
							why = fmt.Sprintf("it replied %s where it replied %s on success before", r.reply, s.Success)
						}
					default:
						if own != ownLive && r.armed() {
							why = fmt.Sprintf("it admitted ARGV[%d] with %d holders; an acquire of limit %d admits no one then", s.Token+1, holders, limit)
						} else if s.Failure.Kind == resp.KindInvalid {
							s.Failure = r.reply
						} else if !r.reply.Equal(s.Failure) {
							why = fmt.Sprintf("it replied %s where it replied %s on failure before", r.reply, s.Failure)
						}
					}
					if why != "" {
						return r.what + " " + why
					}
				}
			}
		}
		return ""
	}
	if why := check(sp.argv, limit, ttl); why != "" {
		return nil, why
	}
	if s.Success.Equal(s.Failure) {
		return nil, fmt.Sprintf("it replies %s whether it admits the caller or not", s.Success)
	}
	return sp.controls(s, func(argv []string) string {
		l, _ := strconv.Atoi(argv[s.Limit])
		return check(argv, l, sp.ttlMs(s, argv))
	})
}

// refresh checks a refresh on every probe.
func (sp *semProber) refresh(s *Semaphore) (*Semaphore, string) {
	tok := sp.argv[s.Token]
	live := sp.run(sp.argv, 0, 0, ownLive, tok)
	if why := sp.findTTL(s, live.pttl, func(argv []string) int64 {
		return sp.run(argv, 0, 0, ownLive, tok).pttl
	}); why != "" {
		return nil, why
	}
	s.Success = live.reply
	check := func(argv []string, ttl int64) string {
		for _, own := range []int{ownNone, ownLive, ownExpired} {
			for _, others := range []int{0, 1, 3} {
				for expired := 0; expired <= 1; expired++ {
					r := sp.run(argv, others, expired, own, tok)
					if r.ref != nil {
						return sandbox.WithProbe(r.ref, r.what).Reason
					}
					why := sp.unchanged(&r)
					switch {
					case why != "":
					case len(r.added) != 0 || (own != ownLive && r.armed()):
						why = "it admitted a holder; a refresh only re-arms the caller's own permit"
					case own == ownLive && r.pttl != ttl:
						why = fmt.Sprintf("it left KEYS[1] with PTTL %d ms; a refresh re-arms it for the TTL, %d ms", r.pttl, ttl)
					case own == ownLive && !r.reply.Equal(s.Success):
						why = fmt.Sprintf("it replied %s where it replied %s on success before", r.reply, s.Success)
					case own != ownLive && s.Failure.Kind == resp.KindInvalid:
						s.Failure = r.reply
					case own != ownLive && !r.reply.Equal(s.Failure):
						why = fmt.Sprintf("it replied %s where it replied %s on failure before", r.reply, s.Failure)
					}
					if why != "" {
						return r.what + " " + why
					}
				}
			}
		}
		return ""
	}
	if why := check(sp.argv, sp.ttlMs(s, sp.argv)); why != "" {
		return nil, why
	}
	if s.Success.Equal(s.Failure) {
		return nil, fmt.Sprintf("it replies %s whether the caller holds a permit or not", s.Success)
	}
	return sp.controls(s, func(argv []string) string { return check(argv, sp.ttlMs(s, argv)) })
}

// release checks a release on every probe.
func (sp *semProber) release(s *Semaphore) (*Semaphore, string) {
	tok := sp.argv[s.Token]
	check := func(argv []string) string {
		for _, own := range []int{ownNone, ownLive} {
			for _, others := range []int{0, 1, 3} {
				for expired := 0; expired <= 1; expired++ {
					r := sp.run(argv, others, expired, own, tok)
					if r.ref != nil {
						return sandbox.WithProbe(r.ref, r.what).Reason
					}
					var why string
					gone := slices.Equal(r.removed, []string{tok})
					switch {
					case len(r.added) != 0:
						why = fmt.Sprintf("it added %q; a release adds no one", sandbox.Short(r.added[0]))
					case len(r.rescored) != 0 || (len(r.removed) != 0 && !gone):
						why = "it changed another holder"
					case own == ownLive && !gone:
						why = fmt.Sprintf("it left ARGV[%d] in the set", s.Token+1)
					case own == ownLive && s.Success.Kind == resp.KindInvalid:
						s.Success = r.reply
					case own == ownLive && !r.reply.Equal(s.Success):
						why = fmt.Sprintf("it replied %s where it replied %s on success before", r.reply, s.Success)
					case own == ownNone && s.Failure.Kind == resp.KindInvalid:
						s.Failure = r.reply
					case own == ownNone && !r.reply.Equal(s.Failure):
						why = fmt.Sprintf("it replied %s where it replied %s on failure before", r.reply, s.Failure)
					}
					if why != "" {
						return r.what + " " + why
					}
				}
			}
		}
		return ""
	}
	if why := check(sp.argv); why != "" {
		return nil, why
	}
	return sp.controls(s, check)
}

// unchanged checks that a run left the other live holders alone.
func (sp *semProber) unchanged(r *semRun) string {
	for _, m := range append(slices.Clone(r.removed), r.rescored...) {
		if m != r.token {
			return fmt.Sprintf("it removed or re-scored another live holder, %q", sandbox.Short(m))
		}
	}
	if r.own == ownLive && slices.Contains(r.removed, r.token) {
		return "it removed the caller's own permit"
	}
	return ""
}

// findTTL finds the argument the TTL (pttl, after a write) comes from, in
// ms or s, or a constant; pttlOf reruns the write with other arguments.
func (sp *semProber) findTTL(s *Semaphore, pttl int64, pttlOf func([]string) int64) string {
	if pttl <= 0 {
		return fmt.Sprintf("it leaves KEYS[1] with PTTL %d after admitting or re-arming the caller; a permit must expire", pttl)
	}
	for i, a := range sp.argv {
		n, err := strconv.ParseInt(a, 10, 64)
		if err != nil || i == s.Token || i == s.Limit || slices.Contains(s.Clocks, i) {
			continue
		}
		for _, sec := range []bool{false, true} {
			unit, probe := int64(1), int64(4321)
			if sec {
				unit, probe = 1000, 7
			}
			if n*unit != pttl || pttlOf(with(sp.argv, i, strconv.FormatInt(probe, 10))) != probe*unit {
				continue
			}
			s.TTL, s.TTLSec = i, sec
			return ""
		}
	}
	// A constant: no other argument moves it.
	for i := range sp.argv {
		if i == s.Token || slices.Contains(s.Clocks, i) {
			continue
		}
		if pttlOf(with(sp.argv, i, "99")) != pttl {
			return fmt.Sprintf("its TTL depends on ARGV[%d] in a way the proxy does not follow (neither ms nor seconds)", i+1)
		}
	}
	s.TTLConst = pttl
	return ""
}

// ttlMs is the TTL of a call, in ms.
func (sp *semProber) ttlMs(s *Semaphore, argv []string) int64 {
	if s.TTL < 0 {
		return s.TTLConst
	}
	n, _ := strconv.ParseInt(argv[s.TTL], 10, 64)
	if s.TTLSec {
		return n * 1000
	}
	return n
}

// controls varies every argument that is neither the token, the limit,
// the TTL nor a clock: one that changes what the script does on a probe is
// a control, and the classification holds for its value only.
func (sp *semProber) controls(s *Semaphore, check func(argv []string) string) (*Semaphore, string) {
	for i, a := range sp.argv {
		if i == s.Token || i == s.Limit || i == s.TTL || slices.Contains(s.Clocks, i) {
			continue
		}
		for _, v := range []string{"0", "1", "99999", "redlock-proxy-probe"} {
			if v == a {
				continue
			}
			if check(with(sp.argv, i, v)) != "" {
				s.Controls = append(s.Controls, spec.Control{Arg: i, Value: a})
				break
			}
		}
	}
	return s, ""
}

func uniq(xs ...int) []int {
	set := map[int]bool{}
	for _, x := range xs {
		if x >= 0 {
			set[x] = true
		}
	}
	return slices.Sorted(maps.Keys(set))
}

// CounterRefusal is why a semaphore kept as a bare count of free permits
// (Redisson's RSemaphore) is refused.
const CounterRefusal = "a counting semaphore kept as a count of free permits (INCRBY and DECRBY of a key without expiry, as Redisson's " +
	"RSemaphore keeps its permits) has no majority meaning: its permits have no holder and no expiry, so a permit whose holder dies " +
	"is never returned, and any client may give back a permit it never took; the proxy serves semaphores whose permits have a holder " +
	"and a lease (redis-semaphore's Semaphore, Redisson's RPermitExpirableSemaphore with a lease time), as slots of majority locks"

// counts reports whether a script keeps a count in its first key, left
// without an expiry: holding 5, it moves it by 1 or by one of its
// arguments (INCRBY, DECRBY); or, holding nothing, it sets one of its
// arguments there and leaves 5 alone (a count set up once). It may then
// fail at a command the sandbox refuses, such as PUBLISH: what it wrote
// before is what counts.
func counts(p *sandbox.Program, keys, argv []string, now int64) bool {
	if len(keys) == 0 {
		return false
	}
	after := func(before string) (int64, bool) {
		st := &sandbox.State{Now: now, Keys: map[string]sandbox.Item{}}
		if before != "" {
			st.Keys[keys[0]] = sandbox.Item{Value: before}
		}
		res := p.Run(keys, argv, st, sandbox.MaxSteps)
		if res.Ref != nil && res.Ref.Kind == sandbox.RefuseBudget {
			return 0, false
		}
		it, ok := res.State.Lookup(keys[0])
		if !ok || it.Type != sandbox.TypeString || it.At != 0 {
			return 0, false
		}
		n, err := strconv.ParseInt(it.Value, 10, 64)
		return n, err == nil
	}
	isArg := func(n int64) bool {
		return slices.Contains(argv, strconv.FormatInt(n, 10))
	}
	moved, ok := after("5")
	if ok && moved != 5 && (abs(moved-5) == 1 || isArg(abs(moved-5))) {
		return true
	}
	set, ok2 := after("")
	return ok2 && isArg(set) && ok && moved == 5
}
