package quorum

import (
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestSlotsDecidesOnOneSlot(t *testing.T) {
	yes := []bool{true, true, true, true, true}
	for _, tc := range []struct {
		held    []int
		counts  []bool
		pending int
		want    Outcome
		slot    int
	}{
		{[]int{0, 0, NoSlot}, yes[:3], 0, Won, 0},
		{[]int{0, 1, NoSlot}, yes[:3], 0, Lost, NoSlot},
		{[]int{0, 1, 1}, yes[:3], 0, Won, 1},
		{[]int{0, NoSlot, NoSlot}, yes[:3], 1, Undecided, NoSlot},
		{[]int{0, 1, NoSlot}, yes[:3], 1, Undecided, NoSlot},
		{[]int{0, 0, NoSlot}, []bool{true, false, true}, 0, Lost, NoSlot}, // a quarantined grant does not count
		{[]int{2, 2, 1, 1, NoSlot}, yes, 0, Lost, NoSlot},
		{[]int{2, 2, 1, 2, NoSlot}, yes, 0, Won, 2},
		{[]int{2, 1, NoSlot, NoSlot, NoSlot}, yes, 1, Lost, NoSlot},
		{[]int{2, 1, NoSlot, NoSlot, NoSlot}, yes, 3, Undecided, NoSlot},
	} {
		got, slot := Slots(len(tc.held), tc.held, tc.counts, tc.pending)
		if got != tc.want || slot != tc.slot {
			t.Errorf("Slots(%v, %v, pending %d) = %v, %d; want %v, %d", tc.held, tc.counts, tc.pending, got, slot, tc.want, tc.slot)
		}
	}
}

// The walk below is a model of a semaphore through the proxy: masters that
// run the slot rule (the reference scripts' rule, one atomic step per
// command), clients whose commands reach each master in any order, late
// (after the decision) or never, that decide by Slots from the replies
// they saw, undo a failed attempt, retry with the same token, and whose
// permits vanish (released, expired) at any moment once they no longer
// count on them. Every reachable state is visited, and in each the number
// of callers that a majority of masters hold one slot for must not exceed
// the limit, and every caller that counts on a permit must hold it so.
// A reply that is lost is a decision taken before it came (a timeout),
// which the walk covers: the decision may come at any moment.
// The control runs the same walk with the plain rule (each master admits
// while it has fewer than limit holders, a majority of admissions wins)
// and must find the extra holder.

// A state is a byte string: per client a header (phase, attempts
// started, preferred slot, then the current attempt's replies seen per
// slot), then per master a block of, per client, its entry there (one
// byte: present, fresh, attempt, slot) and one byte per attempt (delivered
// there, an undo on its way there).
type semWalk struct {
	n, limit, clients, attempts int
	// limits, when set, is each master's own limit (a limit stored by a
	// set-up that not every master took; limit is then their largest):
	// at most bound() hold.
	limits    []int
	plain     bool      // the control: a plain majority of admissions
	looseUndo bool      // the control: an undo removes the token's slot whoever set it
	collect   *[][]byte // a random walk's successors, instead of visiting them
	firstOnly bool      // a control: stop at the first state that breaks the bound
	visited   map[string]struct{}
	stack     []string
	worst     int    // the most holders seen at once
	example   string // a state with more than limit holders
}

// Client phases.
const (
	phIdle = iota
	phTrying
	phHolding
	phFailed
	phReleased
)

// An entry byte.
const (
	enPresent = 0x80
	enFresh   = 0x40 // taken by that attempt (its undo removes it), not re-armed
)

func entry(slot, attempt int, fresh bool) byte {
	b := byte(enPresent | attempt<<4 | slot)
	if fresh {
		b |= enFresh
	}
	return b
}

func entrySlot(b byte) int    { return int(b & 0x0f) }
func entryAttempt(b byte) int { return int(b>>4) & 0x03 }

// A message byte.
const (
	msgSent = 1
	msgUndo = 2
)

func (w *semWalk) header() int    { return 3 + w.limit }
func (w *semWalk) perClient() int { return 1 + w.attempts }
func (w *semWalk) block() int     { return w.clients * w.perClient() }

func (w *semWalk) cl(c int) int { return c * w.header() } // the client's header
func (w *semWalk) ent(m, c int) int { // its entry on master m
	return w.clients*w.header() + m*w.block() + c*w.perClient()
}
func (w *semWalk) msg(m, c, a int) int { return w.ent(m, c) + 1 + a }

// canon names the state up to the order of the masters and of the
// clients (the rule and the decision treat them alike): the clients are
// ordered by what they are and hold everywhere, then the masters by what
// they hold. States that are the same up to that order share a name (ties
// between clients may still give one state two names, which only costs a
// second visit).
func (w *semWalk) canon(s []byte) string {
	type col struct {
		c   int
		sig string
	}
	cols := make([]col, w.clients)
	sub := make([]string, w.n)
	for c := range cols {
		for m := 0; m < w.n; m++ {
			sub[m] = string(s[w.ent(m, c) : w.ent(m, c)+w.perClient()])
		}
		slices.Sort(sub)
		cols[c] = col{c, string(s[w.cl(c):w.cl(c)+w.header()]) + strings.Join(sub, "")}
	}
	slices.SortStableFunc(cols, func(a, b col) int { return strings.Compare(a.sig, b.sig) })
	blocks := make([]string, w.n)
	b := make([]byte, 0, len(s))
	for m := 0; m < w.n; m++ {
		b = b[:0]
		for _, x := range cols {
			b = append(b, s[w.ent(m, x.c):w.ent(m, x.c)+w.perClient()]...)
		}
		blocks[m] = string(b)
	}
	slices.Sort(blocks)
	b = b[:0]
	for _, x := range cols {
		b = append(b, s[w.cl(x.c):w.cl(x.c)+w.header()]...)
	}
	for _, bl := range blocks {
		b = append(b, bl...)
	}
	return string(b)
}

// acquire is master m's atomic step for attempt a of client c; it returns
// the slot the master then holds for c (NoSlot: refused).
func (w *semWalk) acquire(s []byte, m, c, a int) int {
	lim := w.limit
	if w.limits != nil {
		lim = w.limits[m]
	}
	count := 0
	used := make([]bool, w.limit)
	for o := 0; o < w.clients; o++ {
		e := s[w.ent(m, o)]
		if e&enPresent == 0 || entrySlot(e) >= lim {
			continue
		}
		count++
		if o != c {
			used[entrySlot(e)] = true
		}
	}
	own := s[w.ent(m, c)]
	if w.plain {
		// Each master admits while it has fewer than limit holders, as one
		// Redis does; every admission is "slot 0".
		if count < lim {
			s[w.ent(m, c)] = entry(0, a, own&enPresent == 0)
			return 0
		}
		return NoSlot
	}
	if own&enPresent != 0 {
		if count < lim {
			// Re-armed: no undo removes it, and it lives at least as long
			// as before (a late re-arm by an earlier attempt never takes
			// it from the attempt that counts on it).
			s[w.ent(m, c)] = entry(entrySlot(own), max(a, entryAttempt(own)), false)
			return entrySlot(own)
		}
		return NoSlot
	}
	pref := int(s[w.cl(c)+2])
	for i := 0; i < lim; i++ {
		sl := (pref + i) % lim
		if !used[sl] {
			s[w.ent(m, c)] = entry(sl, a, true)
			return sl
		}
	}
	return NoSlot
}

// holds reports whether a majority of masters hold one slot for c.
func (w *semWalk) holds(s []byte, c int) bool {
	for sl := 0; sl < w.limit; sl++ {
		k := 0
		for m := 0; m < w.n; m++ {
			if e := s[w.ent(m, c)]; e&enPresent != 0 && entrySlot(e) == sl {
				k++
			}
		}
		if k >= Majority(w.n) {
			return true
		}
	}
	return false
}

// bound is the most holders there may be: the limit, or with a limit per
// master the largest that a majority of masters have at least (a slot at
// or above it is below the limit of a minority only).
func (w *semWalk) bound() int {
	if w.limits == nil {
		return w.limit
	}
	l := slices.Clone(w.limits)
	slices.Sort(l)
	return l[len(l)-Majority(w.n)]
}

// visit queues a state not seen before.
func (w *semWalk) visit(s []byte) {
	k := w.canon(s)
	if _, ok := w.visited[k]; ok {
		return
	}
	w.visited[k] = struct{}{}
	w.stack = append(w.stack, string(s))
}

// check checks one state and queues its successors.
func (w *semWalk) check(s []byte) {
	h := 0
	for c := 0; c < w.clients; c++ {
		holds := w.holds(s, c)
		if holds {
			h++
		}
		if s[w.cl(c)] == phHolding && !holds && w.example == "" {
			w.example = fmt.Sprintf("client %d counts on a permit no majority holds: %s", c, w.describe(s))
			w.worst = w.bound() + 1
		}
	}
	if h > w.worst {
		w.worst = h
		if h > w.bound() && w.example == "" {
			w.example = w.describe(s)
		}
	}
	if w.collect == nil {
		for c := 0; c < w.clients; c++ {
			w.moves(s, c)
		}
	}
}

func (w *semWalk) moves(s []byte, c int) {
	h := w.cl(c)
	phase, attempts := s[h], int(s[h+1])
	cur := attempts - 1
	next := func(change func(d []byte)) {
		d := slices.Clone(s)
		change(d)
		if w.collect != nil {
			*w.collect = append(*w.collect, d)
			return
		}
		w.visit(d)
	}
	switch phase {
	case phIdle, phFailed:
		if attempts < w.attempts {
			prefs := w.limit
			if phase == phFailed {
				prefs = 1 // a retry keeps its preference (the same token)
			}
			for p := 0; p < prefs; p++ {
				next(func(d []byte) {
					if phase == phIdle {
						d[h+2] = byte(p)
					}
					d[h], d[h+1] = phTrying, byte(attempts+1)
					clear(d[h+3 : h+3+w.limit])
				})
			}
		}
	case phTrying:
		// The decision, at any moment (a timeout), from the replies seen.
		next(func(d []byte) {
			d[h] = phFailed
			for _, k := range d[h+3 : h+3+w.limit] {
				if int(k) >= Majority(w.n) {
					d[h] = phHolding
				}
			}
			if d[h] == phFailed && w.attempts > 1 {
				for m := 0; m < w.n; m++ {
					if d[w.msg(m, c, cur)]&msgSent != 0 {
						d[w.msg(m, c, cur)] |= msgUndo // undone wherever it arrived
					}
				}
			}
			clear(d[h+3 : h+3+w.limit])
		})
	case phHolding:
		// A release, or its validity ran out: from then on its permits may
		// vanish from any master at any moment (below).
		next(func(d []byte) { d[h] = phReleased })
	}
	for a := 0; a < attempts; a++ {
		for m := 0; m < w.n; m++ {
			mb := s[w.msg(m, c, a)]
			if mb&msgSent == 0 {
				// Delivered now (or never: then this move is not taken).
				next(func(d []byte) {
					got := w.acquire(d, m, c, a)
					d[w.msg(m, c, a)] |= msgSent
					switch {
					case phase == phTrying && a == cur:
						if got != NoSlot {
							d[h+3+got]++
						}
					case w.attempts > 1 && (a < cur || phase == phFailed):
						d[w.msg(m, c, a)] |= msgUndo // a late grant of a failed attempt is undone
					}
				})
			}
			// While the client has failed its permits may vanish anyway
			// (below); an undo matters once it tries again: it must spare
			// what the later attempt took or re-armed.
			if mb&msgUndo != 0 && phase != phFailed {
				next(func(d []byte) {
					d[w.msg(m, c, a)] &^= msgUndo
					if e := d[w.ent(m, c)]; e&enPresent != 0 && (w.looseUndo || e&enFresh != 0 && entryAttempt(e) == a) {
						d[w.ent(m, c)] = 0
					}
				})
			}
		}
	}
	for m := 0; m < w.n; m++ {
		// A permit vanishes from a master (a release, its TTL) once its
		// holder no longer counts on it: its validity ends before the TTL
		// on every master. A holder, or a client trying again, counts only
		// on what its current attempt took or re-armed.
		e := s[w.ent(m, c)]
		if e&enPresent != 0 && (phase == phReleased || phase == phFailed || entryAttempt(e) != cur) {
			next(func(d []byte) { d[w.ent(m, c)] = 0 })
		}
	}
}

func (w *semWalk) describe(s []byte) string {
	out := ""
	for m := 0; m < w.n; m++ {
		out += fmt.Sprintf("master %d:", m)
		for c := 0; c < w.clients; c++ {
			if e := s[w.ent(m, c)]; e&enPresent != 0 {
				out += fmt.Sprintf(" c%d@%d", c, entrySlot(e))
			}
		}
		out += "; "
	}
	return out
}

func (w *semWalk) run() {
	w.visited = map[string]struct{}{}
	w.visit(make([]byte, w.clients*w.header()+w.n*w.block()))
	for len(w.stack) > 0 && !(w.firstOnly && w.example != "") {
		s := w.stack[len(w.stack)-1]
		w.stack = w.stack[:len(w.stack)-1]
		w.check([]byte(s))
	}
}

// TestStoredLimitsNeverExceedTheMajorityLimit walks every interleaving when
// the masters' stored limits differ (a set-up that some masters missed, or
// two set-ups racing with different limits): at most the limit a majority
// of masters have at least hold, and a full semaphore is reached.
func TestStoredLimitsNeverExceedTheMajorityLimit(t *testing.T) {
	for _, tc := range []struct {
		limits  []int
		clients int
	}{
		{[]int{2, 2, 0}, 3},
		{[]int{2, 1, 0}, 2},
		{[]int{3, 2, 1}, 3},
		{[]int{1, 2, 3}, 3},
	} {
		t.Run(fmt.Sprint(tc.limits), func(t *testing.T) {
			w := &semWalk{n: len(tc.limits), limit: slices.Max(tc.limits), limits: tc.limits, clients: tc.clients, attempts: 1}
			w.run()
			t.Logf("%d states, at most %d holders (bound %d)", len(w.visited), w.worst, w.bound())
			if w.worst > w.bound() {
				t.Fatalf("%d holders where a majority of masters allow %d: %s", w.worst, w.bound(), w.example)
			}
			if w.worst < w.bound() {
				t.Fatalf("never more than %d holders where %d may hold: the walk does not reach a full semaphore", w.worst, w.bound())
			}
		})
	}
}

// TestSlotsNeverExceedTheLimit walks every interleaving of small cases:
// for n masters and limit L, L+1 clients (one more than may hold), with
// up to two attempts each (a retry with the same token, whose earlier
// attempt's undo must spare it). REDLOCK_PROXY_LONG_WALK=1 adds larger
// cases (a minute or more each).
func TestSlotsNeverExceedTheLimit(t *testing.T) {
	type walkCase struct{ n, limit, clients, attempts int }
	cases := []walkCase{
		{1, 1, 2, 2}, {1, 2, 3, 1},
		{2, 1, 2, 2}, {2, 2, 3, 1},
		{3, 2, 3, 1},
		{5, 1, 2, 1},
	}
	if os.Getenv("REDLOCK_PROXY_LONG_WALK") != "" {
		cases = append(cases, walkCase{3, 1, 2, 2}, walkCase{4, 2, 3, 1})
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("n%d-limit%d-clients%d-attempts%d", tc.n, tc.limit, tc.clients, tc.attempts), func(t *testing.T) {
			w := &semWalk{n: tc.n, limit: tc.limit, clients: tc.clients, attempts: tc.attempts}
			w.run()
			t.Logf("%d states, at most %d holders", len(w.visited), w.worst)
			if w.worst > tc.limit {
				t.Fatalf("%d holders of a limit-%d semaphore: %s", w.worst, tc.limit, w.example)
			}
			if w.worst < tc.limit {
				t.Fatalf("never more than %d holders of a limit-%d semaphore: the walk does not reach a full semaphore", w.worst, tc.limit)
			}
		})
	}
}

// TestPlainMajorityExceedsTheLimit is the walk's control: with the plain
// rule the same walk finds more holders than the limit (three callers of a
// limit-2 semaphore over three masters, each refused by one master).
func TestPlainMajorityExceedsTheLimit(t *testing.T) {
	w := &semWalk{n: 3, limit: 2, clients: 3, attempts: 1, plain: true, firstOnly: true}
	w.run()
	t.Logf("%d states, at most %d holders; e.g. %s", len(w.visited), w.worst, w.example)
	if w.worst <= 2 {
		t.Fatalf("the plain majority never gave more than %d holders of a limit-2 semaphore: the walk cannot fail", w.worst)
	}
	// With a limit of 1 a plain majority is a mutex, and safe.
	w = &semWalk{n: 3, limit: 1, clients: 2, attempts: 1, plain: true}
	w.run()
	if w.worst > 1 {
		t.Fatalf("a plain majority of a limit-1 semaphore gave %d holders: %s", w.worst, w.example)
	}
}

// TestUndoWithoutItsNonceLosesAPermit is the other control: an undo that
// removes the token's slot whoever set it (not only where its own attempt
// took it) removes the slot a retry with the same token re-armed, and the
// walk finds a client counting on a permit no majority holds.
func TestUndoWithoutItsNonceLosesAPermit(t *testing.T) {
	w := &semWalk{n: 2, limit: 1, clients: 2, attempts: 2, looseUndo: true, firstOnly: true}
	w.run()
	t.Logf("%d states: %s", len(w.visited), w.example)
	if w.worst <= 1 {
		t.Fatal("the walk found nothing wrong with an undo that ignores its nonce: it cannot fail")
	}
}

// TestSlotsRandomWalks runs long random walks of cases too large to walk
// in full (five masters, up to limit + 2 clients with retries), checking
// the bound at every step; the plain rule's walks must find the extra
// holder.
func TestSlotsRandomWalks(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	walk := func(w *semWalk, runs int) {
		for r := 0; r < runs && w.worst <= w.limit; r++ {
			s := make([]byte, w.clients*w.header()+w.n*w.block())
			for step := 0; step < 200; step++ {
				var succ [][]byte
				w.collect = &succ
				w.check(s)
				for c := 0; c < w.clients; c++ {
					w.moves(s, c)
				}
				if len(succ) == 0 {
					break
				}
				s = succ[rng.IntN(len(succ))]
			}
			w.collect = nil
			w.check(s)
		}
	}
	for _, tc := range []struct{ limit, clients, attempts int }{{2, 4, 2}, {3, 5, 1}} {
		w := &semWalk{n: 5, limit: tc.limit, clients: tc.clients, attempts: tc.attempts}
		walk(w, 3000)
		t.Logf("n5 limit %d, %d clients: at most %d holders", tc.limit, tc.clients, w.worst)
		if w.worst > tc.limit {
			t.Fatalf("%d holders of a limit-%d semaphore: %s", w.worst, tc.limit, w.example)
		}
	}
	w := &semWalk{n: 5, limit: 2, clients: 3, attempts: 1, plain: true}
	walk(w, 20000)
	t.Logf("plain rule over five masters: at most %d holders; e.g. %s", w.worst, w.example)
	if w.worst <= 2 {
		t.Fatal("the random walks never found the plain rule's extra holder: they cannot fail")
	}
}
