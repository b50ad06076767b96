package safety

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// maxExamples bounds the examples each checker keeps.
const maxExamples = 5

// hold is a granted lock as its holder saw it.
type hold struct {
	acq        Op
	start, end time.Time // the validity window; empty when end <= start
}

// holds derives every holder's windows from the history: from the instant
// an acquire's (or an extend's) OK arrived to the earliest of its
// ValidUntil, the call of the token's release (a holder stops using the
// lock when it starts to release it), and the ValidUntil of any later
// extend of the token that may have run (granted, or unknown): an extend
// sets the TTL it asks for, which may be shorter than what was left, and
// the holder then relies on it. A granted extend opens a window of its own
// for the same token; windows of one token never conflict.
func holds(ops []Op) []hold {
	releaseCall := make(map[string]time.Time)
	extends := make(map[string][]Op) // per token: extends that may have run
	for _, op := range ops {
		switch {
		case op.Kind == Release:
			if t, ok := releaseCall[op.Token]; !ok || op.Call.Before(t) {
				releaseCall[op.Token] = op.Call
			}
		case op.Kind == Extend && op.Outcome != Refused:
			extends[op.Token] = append(extends[op.Token], op)
		}
	}
	var out []hold
	for _, op := range ops {
		if op.Kind == Release || op.Outcome != OK {
			continue
		}
		h := hold{acq: op, start: op.Return, end: op.ValidUntil}
		if rc, ok := releaseCall[op.Token]; ok && rc.Before(h.end) {
			h.end = rc
		}
		for _, x := range extends[op.Token] {
			if x.Call.After(op.Call) && x.ValidUntil.Before(h.end) {
				h.end = x.ValidUntil
			}
		}
		out = append(out, h)
	}
	return out
}

// CheckWindows is the windows checker: per key, no two holders' validity windows
// overlap. It returns the number of holds whose window began inside an
// earlier holder's, with examples.
func CheckWindows(h *History) (violations int, examples []string) {
	byKey := make(map[string][]hold)
	for _, x := range holds(h.Ops()) {
		if x.end.After(x.start) {
			byKey[x.acq.Key] = append(byKey[x.acq.Key], x)
		}
	}
	for _, key := range sortedKeys(byKey) {
		hs := byKey[key]
		sort.Slice(hs, func(i, j int) bool { return hs[i].start.Before(hs[j].start) })
		cur := hs[0] // the window reaching furthest so far
		for _, x := range hs[1:] {
			if x.start.Before(cur.end) && x.acq.Token != cur.acq.Token {
				violations++
				if len(examples) < maxExamples {
					examples = append(examples, fmt.Sprintf(
						"windows: key %s: %s (client %d, proxy %d) got OK at %s while %s (client %d, proxy %d) held it from %s until %s (overlap %v)",
						key, x.acq.Token, x.acq.Client, x.acq.Proxy, h.rel(x.start),
						cur.acq.Token, cur.acq.Client, cur.acq.Proxy, h.rel(cur.start), h.rel(cur.end),
						cur.end.Sub(x.start).Round(time.Microsecond)))
				}
			}
			if x.end.After(cur.end) {
				cur = x
			}
		}
	}
	return violations, examples
}

// CheckRegisters is the register checker: per key, the register's final value equals
// the increments holders counted. It returns the number of lost updates
// (summed over keys), with examples of writers that read the same value.
// paused is the part of lost on keys where some write ended after its
// writer's validity: a holder paused between its check and its write (as
// the pause control does on purpose, and as an overloaded machine may do
// to any client), which no lock can prevent. The rest can only come from
// two holders inside their validity at once.
func CheckRegisters(h *History) (lost, paused int64, examples []string) {
	regs := h.Registers()
	writes := make(map[string][]Write)
	for _, w := range h.Writes() {
		writes[w.Key] = append(writes[w.Key], w)
	}
	for _, key := range sortedKeys(regs) {
		r := regs[key]
		d := r.Increments - r.Value
		if d == 0 {
			continue
		}
		if d < 0 {
			d = -d
		}
		lost += d
		late := 0
		for _, w := range writes[key] {
			if w.Late {
				late++
			}
		}
		why := "two holders inside their validity at once"
		if late > 0 {
			paused += d
			why = fmt.Sprintf("%d writes ended after their writer's validity (paused holders)", late)
		}
		if len(examples) >= maxExamples {
			continue
		}
		examples = append(examples, fmt.Sprintf("register: key %s: %d increments counted, final value %d: %s", key, r.Increments, r.Value, why))
		byRead := make(map[int64][]Write)
		for _, w := range writes[key] {
			byRead[w.Read] = append(byRead[w.Read], w)
		}
		for _, v := range sortedKeys(byRead) {
			ws := byRead[v]
			if len(ws) < 2 || len(examples) >= maxExamples {
				continue
			}
			var who []string
			for _, w := range ws {
				late := ""
				if w.Late {
					late = ", after its validity ended"
				}
				who = append(who, fmt.Sprintf("%s (client %d) at %s%s", w.Token, w.Client, h.rel(w.At), late))
			}
			examples = append(examples, fmt.Sprintf("register: key %s: lost update: %s all read %d and wrote %d", key, strings.Join(who, " and "), v, v+1))
		}
	}
	return lost, paused, examples
}

// CheckLateGrants counts grants that arrived after their own validity had
// ended (OK received at or after t0 + ttl - drift, t0 taken before the
// command was sent): a client that trusts the OK holds a lock that the
// masters may already have let go, and others may have taken. A grant that
// arrived late by no more than a hiccup of the whole harness process during
// its wait (the machine did not run the process, the clients and the
// proxies in it for that long) is counted apart, as stalled: the delay may
// be the client's own. So is one late by less than PathAllowance: the proxy
// judges validity when the reply leaves it, keeping drift_floor in hand for
// the way to the client, and counts it from when the command reached it.
//
// A grant of the old Redis to a client locking there directly is not the
// proxy's answer (a plain Redis grants whenever it gets to the command)
// and is not counted.
func CheckLateGrants(h *History, hiccups []Interval) (late, stalled int, examples []string) {
	ops := h.Ops()
	for _, op := range ops {
		if op.Kind == Release || op.Outcome != OK || op.Direct || op.Return.Before(op.ValidUntil) {
			continue
		}
		if op.Return.Sub(op.ValidUntil) < PathAllowance {
			stalled++
			continue
		}
		if coveredByHiccup(op.Call, op.Return, op.Return.Sub(op.ValidUntil), hiccups) {
			stalled++
			continue
		}
		late++
		if len(examples) >= maxExamples {
			continue
		}
		var others []string
		for _, x := range ops {
			if x.Key == op.Key && x.Token != op.Token && x.Kind != Release && x.Outcome == OK &&
				x.Return.After(op.ValidUntil) && x.Return.Before(op.Return) {
				others = append(others, fmt.Sprintf("%s at %s", x.Token, h.rel(x.Return)))
			}
		}
		with := ""
		if op.With != "" {
			with = ", pipelined " + op.With
		}
		ex := fmt.Sprintf("late grant: key %s: %s %s (client %d, proxy %d, ttl %v%s) sent at %s, valid until %s, OK arrived at %s (%v late)",
			op.Key, op.Kind, op.Token, op.Client, op.Proxy, op.TTL, with, h.rel(op.Call), h.rel(op.ValidUntil), h.rel(op.Return),
			op.Return.Sub(op.ValidUntil).Round(time.Microsecond))
		if len(others) > 0 {
			ex += "; between the two, granted to " + strings.Join(others[:min(len(others), 3)], ", ")
		}
		examples = append(examples, ex)
	}
	return late, stalled, examples
}

// PathAllowance is the proxies' drift_floor: the validity a grant keeps in
// hand when its reply leaves the proxy, for the way between client and
// proxy.
const PathAllowance = 2 * time.Millisecond

// coveredByHiccup reports whether a hiccup overlapping [from, to] lasted
// at least d.
func coveredByHiccup(from, to time.Time, d time.Duration, hiccups []Interval) bool {
	for _, iv := range hiccups {
		if iv.From.Before(to) && iv.To.After(from) && iv.To.Sub(iv.From) >= d {
			return true
		}
	}
	return false
}

func overlapsAny(from, to time.Time, ivs []Interval) bool {
	for _, iv := range ivs {
		if iv.From.Before(to) && iv.To.After(from) {
			return true
		}
	}
	return false
}

// CheckGhostLocks counts ghost locks: tokens of acquires the proxy answered
// with nil that a majority of masters still held, in a snapshot taken more
// than undoWithin after that answer. A refused attempt must be undone
// (compare-and-delete on every master that may have set it); one left on a
// majority refuses every other client until its TTL ends, and a client
// acting on a nil reply believes nobody holds it. Each token counts once.
func CheckGhostLocks(h *History, majority int, undoWithin time.Duration) (n int, examples []string) {
	for _, g := range ghostLocks(h, majority, undoWithin) {
		n++
		if len(examples) < maxExamples {
			examples = append(examples, g.String(h, ""))
		}
	}
	return n, examples
}

// GhostLock is a token of an acquire answered nil that a majority of
// masters, or the old Redis named as upgrade_from, held in a snapshot
// taken more than the undo time after the answer (the first such
// snapshot).
type GhostLock struct {
	Op       Op // the acquire
	Snapshot Snapshot
	Held     int  // masters that held the token
	OnOld    bool // the old Redis held it (where no majority did)
}

// String describes the ghost lock, with a note.
func (g GhostLock) String(h *History, note string) string {
	if g.OnOld {
		return fmt.Sprintf("ghost lock: key %s: %s (client %d, proxy %d, ttl %v) was answered nil at %s, yet the old Redis (upgrade_from) held it at %s (%s): its direct clients are refused it%s",
			g.Op.Key, g.Op.Token, g.Op.Client, g.Op.Proxy, g.Op.TTL, h.rel(g.Op.Return), h.rel(g.Snapshot.At), g.Snapshot.Why, note)
	}
	return fmt.Sprintf("ghost lock: key %s: %s (client %d, proxy %d, ttl %v) was answered nil at %s, yet %d of %d masters held it at %s (%s)%s",
		g.Op.Key, g.Op.Token, g.Op.Client, g.Op.Proxy, g.Op.TTL, h.rel(g.Op.Return), g.Held, len(g.Snapshot.Values[g.Op.Key]), h.rel(g.Snapshot.At), g.Snapshot.Why, note)
}

// ghostLocks finds the ghost locks (see CheckGhostLocks), each token once.
func ghostLocks(h *History, majority int, undoWithin time.Duration) []GhostLock {
	refused := make(map[string]Op)
	for _, op := range h.Ops() {
		if op.Kind == Acquire && op.Outcome == Refused {
			refused[op.Token] = op
		}
	}
	var out []GhostLock
	seen := make(map[string]bool)
	for _, s := range h.Snapshots() {
		for _, key := range sortedKeys(s.Values) {
			count := make(map[string]int)
			for _, v := range s.Values[key] {
				if v != "" {
					count[v]++
				}
			}
			for _, tok := range sortedKeys(count) {
				op, ok := refused[tok]
				if !ok || count[tok] < majority || seen[tok] || s.At.Sub(op.Return) <= undoWithin {
					continue
				}
				seen[tok] = true
				out = append(out, GhostLock{Op: op, Snapshot: s, Held: count[tok]})
			}
		}
		// An acquire a proxy refused is undone on the old Redis too: a
		// token left there refuses its direct clients (and, through the
		// veto, everyone) until its TTL ends.
		for _, key := range sortedKeys(s.Old) {
			tok := s.Old[key]
			op, ok := refused[tok]
			if !ok || op.Direct || seen[tok] || s.At.Sub(op.Return) <= undoWithin {
				continue
			}
			seen[tok] = true
			out = append(out, GhostLock{Op: op, Snapshot: s, OnOld: true})
		}
	}
	return out
}

// CheckFreeRefusals counts acquires of keys no other client uses that
// were not granted (refused, or an error), outside stalls of the whole
// harness process: with a majority of masters healthy, nothing but the
// proxy can refuse them.
func CheckFreeRefusals(h *History, stalls []Interval) (n int, examples []string) {
	for _, op := range h.Ops() {
		if !op.Free || op.Outcome == OK || overlapsAny(op.Call, op.Return, stalls) {
			continue
		}
		n++
		if len(examples) < maxExamples {
			examples = append(examples, fmt.Sprintf("free key refused: %s %s (client %d, proxy %d) sent at %s answered %v after %v %s",
				op.Key, op.Token, op.Client, op.Proxy, h.rel(op.Call), op.Outcome, op.Return.Sub(op.Call).Round(time.Microsecond), op.Err))
		}
	}
	return n, examples
}

// CheckNoMajorityGrants counts grants through a proxy that began and ended
// inside an interval when no majority of masters could count, or the old
// Redis named as upgrade_from could not answer (see Env.NoMajority): such
// a grant cannot come from a majority vote with the veto's consent. The
// old Redis's grants to its direct clients need neither.
func CheckNoMajorityGrants(h *History, ivs []Interval) (n int, examples []string) {
	for _, op := range h.Ops() {
		if op.Kind == Release || op.Outcome != OK || op.Direct {
			continue
		}
		for _, iv := range ivs {
			if !op.Call.Before(iv.From) && !op.Return.After(iv.To) {
				n++
				if len(examples) < maxExamples {
					examples = append(examples, fmt.Sprintf("no-majority: key %s: %s %s (client %d, proxy %d) got OK at %s (called %s) while %s (%s to %s)",
						op.Key, op.Kind, op.Token, op.Client, op.Proxy, h.rel(op.Return), h.rel(op.Call), iv.Why, h.rel(iv.From), h.rel(iv.To)))
				}
				break
			}
		}
	}
	return n, examples
}

// Interval is a span of a run, with why it matters.
type Interval struct {
	From, To time.Time
	Why      string
}

// lockInput is an operation as the porcupine model sees it.
type lockInput struct {
	Kind       Kind
	Token      string
	Return     int64 // the operation's return time (ns from the origin)
	ValidUntil int64 // acquires and extends: the holder's validity end (ns from the origin)
}

// lockState is the model's state: who holds the lock and until when. The
// zero value is a free lock.
type lockState struct {
	Holder     string
	ValidUntil int64
}

// LockModel is the sequential specification of a lock with expiry that
// the linearizability checker holds the proxy to. It is nondeterministic because a release
// that did not report success (not held, or an error) may or may not have
// deleted the holder's key.
var LockModel = porcupine.NondeterministicModel{
	Init: func() []any { return []any{lockState{}} },
	Step: func(state, input, output any) []any {
		s, in, out := state.(lockState), input.(lockInput), output.(Outcome)
		free := s.Holder == "" || s.ValidUntil <= in.Return
		switch in.Kind {
		case Acquire:
			if out != OK {
				return []any{s} // refused or unknown: legal, and the client does not use it
			}
			if free {
				return []any{lockState{Holder: in.Token, ValidUntil: in.ValidUntil}}
			}
			return nil // granted while another holder's validity ran
		case Extend:
			// Extend-or-acquire: granted to the holder (its lease now ends
			// with the extend's validity: an extend sets the TTL it asks
			// for, shorter or longer than what was left) or on a free lock
			// (a new holder). A refused extend changes nothing: the holder
			// keeps its lease. An unknown one may have done either.
			var next lockState
			switch {
			case s.Holder == in.Token:
				next = lockState{Holder: in.Token, ValidUntil: in.ValidUntil}
			case free:
				next = lockState{Holder: in.Token, ValidUntil: in.ValidUntil}
			default:
				if out == OK {
					return nil // extended or taken while another holder's validity ran
				}
				return []any{s}
			}
			switch out {
			case OK:
				return []any{next}
			case Refused:
				return []any{s}
			}
			return []any{s, next}
		}
		switch {
		case out == OK && s.Holder == in.Token:
			return []any{lockState{}}
		case out == OK:
			return nil // released a lock it did not hold
		case s.Holder == in.Token:
			return []any{s, lockState{}} // may or may not have released
		}
		return []any{s}
	},
	DescribeOperation: func(input, output any) string {
		in, out := input.(lockInput), output.(Outcome)
		return fmt.Sprintf("%s(%s) -> %v", in.Kind, in.Token, out)
	},
	DescribeState: func(state any) string {
		s := state.(lockState)
		if s.Holder == "" {
			return "free"
		}
		return fmt.Sprintf("%s until +%.3fs", s.Holder, float64(s.ValidUntil)/1e9)
	},
}

// linOps converts a key's operations for porcupine. Acquires that were
// refused or unknown, and refused extends, are left out: the model accepts
// them in every state and they change nothing, so they cannot make a
// history illegal; leaving them out only spares the search.
func linOps(h *History, ops []Op) []porcupine.Operation {
	ns := func(t time.Time) int64 { return t.Sub(h.Start).Nanoseconds() }
	var out []porcupine.Operation
	for _, op := range ops {
		if (op.Kind == Acquire && op.Outcome != OK) || (op.Kind == Extend && op.Outcome == Refused) {
			continue
		}
		in := lockInput{Kind: op.Kind, Token: op.Token, Return: ns(op.Return)}
		if op.Kind != Release {
			in.ValidUntil = ns(op.ValidUntil)
		}
		out = append(out, porcupine.Operation{
			ClientId: op.Client, Input: in, Output: op.Outcome,
			Call: ns(op.Call), Return: ns(op.Return),
		})
	}
	return out
}

// LinResult is what the linearizability checker found.
type LinResult struct {
	Illegal      int // keys whose history is not linearizable
	Inconclusive int // keys the search did not finish in time
	Examples     []string
	Visualized   []string // HTML files written
}

// CheckLinearizable is the linearizability checker: per key, porcupine checks the lock
// history against LockModel. timeout bounds each key's search (0: none);
// when vizDir is set, an HTML visualization of every illegal key is
// written there.
func CheckLinearizable(h *History, timeout time.Duration, vizDir string) (LinResult, error) {
	var res LinResult
	model := LockModel.ToModel()
	byKey := make(map[string][]Op)
	for _, op := range h.Ops() {
		byKey[op.Key] = append(byKey[op.Key], op)
	}
	for _, key := range sortedKeys(byKey) {
		ops := linOps(h, byKey[key])
		switch porcupine.CheckOperationsTimeout(model, ops, timeout) {
		case porcupine.Ok:
			continue
		case porcupine.Unknown:
			res.Inconclusive++
			if len(res.Examples) < maxExamples {
				res.Examples = append(res.Examples, fmt.Sprintf("linearizability: key %s: search did not finish in %v (%d operations)", key, timeout, len(ops)))
			}
			continue
		}
		res.Illegal++
		// Search again, verbosely, to explain (only for illegal keys).
		_, info := porcupine.CheckOperationsVerbose(model, ops, timeout)
		if len(res.Examples) < maxExamples {
			res.Examples = append(res.Examples, explainIllegal(h, key, ops, info))
		}
		if vizDir != "" {
			if err := os.MkdirAll(vizDir, 0o755); err != nil {
				return res, fmt.Errorf("visualization: %w", err)
			}
			path := filepath.Join(vizDir, fileSafe(key)+".html")
			if err := porcupine.VisualizePath(model, info, path); err != nil {
				return res, fmt.Errorf("visualization of %s: %w", key, err)
			}
			res.Visualized = append(res.Visualized, path)
		}
	}
	return res, nil
}

// explainIllegal names the longest linearizable prefix the search found and
// the operation it could not place after it.
func explainIllegal(h *History, key string, ops []porcupine.Operation, info porcupine.LinearizationInfo) string {
	var longest []porcupine.Operation
	for _, part := range info.PartialLinearizationsOperations() {
		for _, lin := range part {
			if len(lin) > len(longest) {
				longest = lin
			}
		}
	}
	placed := make(map[lockInput]bool)
	for _, op := range longest {
		placed[op.Input.(lockInput)] = true
	}
	var stuck *porcupine.Operation
	for i := range ops {
		if !placed[ops[i].Input.(lockInput)] && (stuck == nil || ops[i].Call < stuck.Call) {
			stuck = &ops[i]
		}
	}
	desc := func(op porcupine.Operation) string {
		return fmt.Sprintf("%s by client %d [+%.3fs, +%.3fs]", LockModel.DescribeOperation(op.Input, op.Output),
			op.ClientId, float64(op.Call)/1e9, float64(op.Return)/1e9)
	}
	msg := fmt.Sprintf("linearizability: key %s: not linearizable: %d of %d operations placed", key, len(longest), len(ops))
	if len(longest) > 0 {
		msg += "; last placed " + desc(longest[len(longest)-1])
	}
	if stuck != nil {
		msg += "; cannot place " + desc(*stuck)
	}
	return msg
}

func fileSafe(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

func sortedKeys[K interface{ ~string | ~int64 }, V any](m map[K]V) []K {
	out := make([]K, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}
