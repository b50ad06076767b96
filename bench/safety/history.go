package safety

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Kind is what an operation did.
type Kind uint8

// Operation kinds.
const (
	Acquire Kind = iota // SET key token NX PX ttl
	Release             // compare-and-delete script
	Extend              // extend-or-acquire script: re-arm the TTL if ours, take the lock if free
)

func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Extend:
		return "extend"
	}
	return "release"
}

// Outcome is what a client learned from an operation.
type Outcome uint8

// Outcomes. For an acquire: OK, Refused (nil reply) or Unknown (an error:
// the lock may or may not have been set). For a release: OK (1: the token
// was deleted on a majority), Refused (0: not held, or the proxy was unsure)
// or Unknown (an error). For an extend: OK (the lock is ours for a new TTL),
// Refused (0: not extended; a lock already held stays held until its
// validity ends) or Unknown (an error).
const (
	OK Outcome = iota
	Refused
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case OK:
		return "ok"
	case Refused:
		return "refused"
	}
	return "unknown"
}

// Op is one recorded lock operation.
type Op struct {
	Client  int // the harness client that ran it
	Proxy   int // the proxy it went through
	Key     string
	Token   string
	Kind    Kind
	Outcome Outcome
	TTL     time.Duration // acquires and extends
	// Free marks an acquire of a key no other client uses: nothing but a
	// failure of the proxy can refuse it.
	Free bool
	// Direct marks an operation sent to the old Redis directly, not
	// through a proxy (Proxy is then -1): an upgrade's client not yet
	// moved. Its grants need no majority of the masters.
	Direct bool
	// With names the commands written in the same write, for a pipelined
	// acquire ("SET, PTTL" or "PTTL, SET").
	With string
	// Call is taken just before the command is sent, Return just after its
	// reply (or error) arrived. Both carry monotonic readings.
	Call, Return time.Time
	// ValidUntil is Call + TTL - Drift(TTL): the end of the holder's
	// validity as the client conservatively sees it (acquires and extends).
	ValidUntil time.Time
	Err        string // Unknown outcomes: the error
	// Fence is the fencing number asked for right after a grant (acquires
	// and extends answered OK).
	Fence FenceAnswer
}

// FenceAnswer is what a client learned when it asked for a grant's
// fencing number (FENCE key token, or the control's local counter).
type FenceAnswer struct {
	Asked bool
	// Outcome: OK (N is the number), Refused (nil: the proxy did not find
	// the token holding the key on a majority with validity left) or
	// Unknown (an error).
	Outcome      Outcome
	N            int64
	Proxy        int // the proxy slot asked
	Call, Return time.Time
	Err          string
}

// Numbered reports whether the answer is a number.
func (f FenceAnswer) Numbered() bool { return f.Asked && f.Outcome == OK }

// Write is one update of a key's register by a holder.
type Write struct {
	Client int
	Key    string
	Token  string
	Read   int64     // the value read; the holder wrote Read+1
	At     time.Time // just after the write
	Late   bool      // the write ended after the holder's validity: the holder was paused
	// Fence is the number the write carried (fenced registers; 0: none),
	// and Refused whether the register refused it (its number was lower
	// than the highest the register had seen, or missing).
	Fence   int64
	Refused bool
}

// Drift is the client's allowance for clock drift: ttl*0.01 + 2ms, the
// Redlock page's values (and the proxy's defaults).
func Drift(ttl time.Duration) time.Duration {
	return time.Duration(float64(ttl)*0.01) + 2*time.Millisecond
}

// Register is the state a lock guards: a counter that holders read and
// then write, with nothing but the lock keeping them apart. Its loads and
// stores are atomic only so that the race detector stays quiet: the
// read-then-write as a whole is not, which is the point.
//
// A fenced register also checks fencing numbers, as a protected resource
// does: every read and write carries the holder's number, and the register
// refuses one whose number is lower than the highest it has seen (or that
// carries none). Its check and its store are one step, as an SQL
// `UPDATE ... WHERE fence <= $n` is; the holder's read-then-write still is
// not.
type Register struct {
	v    atomic.Int64
	incs atomic.Int64 // increments holders performed

	fenced  bool
	mu      sync.Mutex // fenced: guards highest, and makes check and store one step
	highest int64      // the highest number seen
	refused int64      // reads and writes refused for a lower (or no) number
}

// read returns the value; a fenced register first checks and records the
// number, and refuses a stale one.
func (r *Register) read(fence int64) (int64, bool) {
	if !r.fenced {
		return r.v.Load(), true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.admitLocked(fence) {
		return 0, false
	}
	return r.v.Load(), true
}

// write stores v and counts an increment; a fenced register first checks
// and records the number, and refuses a stale one.
func (r *Register) write(fence, v int64) bool {
	if !r.fenced {
		r.v.Store(v)
		r.incs.Add(1)
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.admitLocked(fence) {
		return false
	}
	r.v.Store(v)
	r.incs.Add(1)
	return true
}

// admitLocked accepts a number at least the highest seen, and records it.
func (r *Register) admitLocked(fence int64) bool {
	if fence <= 0 || fence < r.highest {
		r.refused++
		return false
	}
	r.highest = fence
	return true
}

// History is everything a run recorded. It is safe for concurrent use.
type History struct {
	Start time.Time // the run's origin; times are reported relative to it
	// FencedRegisters makes every register fenced (see Register). Set it
	// before the first operation.
	FencedRegisters bool

	// Live counts, for progress while the run goes on.
	LiveHolds, LiveRefusals, LiveUnknowns atomic.Int64

	mu        sync.Mutex
	ops       []Op
	writes    []Write
	regs      map[string]*Register
	notes     []Note
	snapshots []Snapshot
}

// Snapshot is what the masters held at one instant, read from each
// redis-server directly (past relays and proxies).
type Snapshot struct {
	At  time.Time
	Why string
	// Values maps each key to its value on every master ("" where the key
	// is missing or the master could not be read).
	Values map[string][]string
	// Unread lists the masters that could not be read.
	Unread []int
	// Old is what the old Redis of an upgrade held (nil: none, or it could
	// not be read).
	Old map[string]string
}

// AddSnapshot records a snapshot of the masters.
func (h *History) AddSnapshot(s Snapshot) {
	h.mu.Lock()
	h.snapshots = append(h.snapshots, s)
	h.mu.Unlock()
}

// Snapshots returns a copy of the snapshots recorded so far.
func (h *History) Snapshots() []Snapshot {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Snapshot(nil), h.snapshots...)
}

// Note is something that happened during a run (a fault, a phase), kept
// for the report and for the checkers that need it.
type Note struct {
	At   time.Time
	Text string
}

// NewHistory starts an empty history whose origin is now.
func NewHistory() *History {
	return &History{Start: time.Now(), regs: make(map[string]*Register)}
}

// Reg returns key's register, creating it.
func (h *History) Reg(key string) *Register {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.regs[key]
	if r == nil {
		r = &Register{fenced: h.FencedRegisters}
		h.regs[key] = r
	}
	return r
}

// AddOps appends operations (a client's, usually at its end).
func (h *History) AddOps(ops ...Op) {
	h.mu.Lock()
	h.ops = append(h.ops, ops...)
	h.mu.Unlock()
}

// AddWrites appends register writes.
func (h *History) AddWrites(ws ...Write) {
	h.mu.Lock()
	h.writes = append(h.writes, ws...)
	h.mu.Unlock()
}

// Notef records a note at now and returns its text.
func (h *History) Notef(format string, a ...any) string {
	n := Note{At: time.Now(), Text: fmt.Sprintf(format, a...)}
	h.mu.Lock()
	h.notes = append(h.notes, n)
	h.mu.Unlock()
	return n.Text
}

// Ops returns a copy of the operations recorded so far.
func (h *History) Ops() []Op {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Op(nil), h.ops...)
}

// Writes returns a copy of the register writes recorded so far.
func (h *History) Writes() []Write {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Write(nil), h.writes...)
}

// Notes returns a copy of the notes recorded so far.
func (h *History) Notes() []Note {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]Note(nil), h.notes...)
}

// RegisterState is a register's final value and the increments counted;
// for a fenced register, also the reads and writes it refused.
type RegisterState struct {
	Value, Increments int64
	Fenced            bool
	Refused           int64
}

// Registers returns every register's state.
func (h *History) Registers() map[string]RegisterState {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]RegisterState, len(h.regs))
	for k, r := range h.regs {
		r.mu.Lock()
		refused := r.refused
		r.mu.Unlock()
		out[k] = RegisterState{Value: r.v.Load(), Increments: r.incs.Load(), Fenced: r.fenced, Refused: refused}
	}
	return out
}

// rel formats t relative to the history's origin, e.g. "+1.234s".
func (h *History) rel(t time.Time) string {
	return fmt.Sprintf("+%.3fs", t.Sub(h.Start).Seconds())
}
