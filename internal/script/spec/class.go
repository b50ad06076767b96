package spec

import (
	"fmt"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

// Layout says where a script finds what a role needs.
type Layout struct {
	Keys int // number of lock keys the classification holds for
	Args int // number of arguments it holds for (KeyArgs and ARGV)
	// KeyArgs is how many entries of KEYS after the lock keys are
	// arguments, not keys (a library that passes its TTL and token in
	// KEYS). Argument positions count them first, then ARGV.
	KeyArgs int

	// Tokens is the 0-based ARGV index of each key's token (one entry per
	// key), or nil for a script that compares with no token.
	Tokens []int
	// Prefix is how ownership is judged: 0 means the key holds exactly
	// the token; P > 0 means its first P bytes equal the token's (a
	// library that appends metadata to the token).
	Prefix int

	TTLArg  int           // 0-based ARGV index of the TTL, -1 for none
	TTLUnit time.Duration // its unit, ms or s
	// Deadline: the TTL argument is the time the lock ends, in TTLUnit
	// since the Unix epoch (PXAT, EXAT, PEXPIREAT, EXPIREAT), not a
	// duration. Its TTL is what is left of it when the proxy reads the
	// call.
	Deadline bool
	TTLConst time.Duration // the TTL when the script writes a constant one (TTLArg -1)
	Additive bool          // extend: the TTL is added to what is left, not set

	MinArg    int           // 0-based ARGV index of a least TTL left to extend, -1 for none
	MinUnit   time.Duration // its unit
	MinOffset int64         // the key has too little time when PTTL < min*unit + offset (ms)

	NoTTLActs bool // extend, extend-or-acquire: a key held without TTL is acted on too

	// Shape is how the lock is kept; Marker, for ShapeOwners, the member
	// that makes a lock exclusive ("" for none).
	Shape  Shape
	Marker string
	// FieldArg is the 0-based index of the argument a ShapeHash lock's
	// field holds, -1 when it holds the constant FieldValue.
	FieldArg   int
	FieldValue string
	// Notice, for a release, is what it publishes when it frees its lock
	// (nil: nothing).
	Notice *Notice
	// Latch, when set, is a key where the script records its result for
	// a retry of the same call (Redisson's unlock latch): see Latch.
	Latch *Latch
	// Counter, when set, is a key the script counts its grants in, whose
	// count its reply shows (Redisson's RFencedLock token): see Counter.
	Counter *Counter
	// Each: the script acts on each of its keys on its own, each with its
	// token (Tokens), and replies an array of one element per key, each as
	// Replies say for that key's case (each.go). The proxy runs each key
	// as its own operation (EachKey).
	Each bool

	// Counted: a ShapeHash lock's field counts its owner's holds (a
	// reentrant lock): taking it again adds one, a release takes one off
	// and deletes the lock at zero (re-arming it while holds are left).
	Counted bool
	// Promotes: an exclusive acquire also takes a lock the caller holds
	// shared alone. Demotes: a shared acquire also takes (as shared) a lock
	// the caller holds exclusively.
	Promotes, Demotes bool

	// Controls are the arguments that are neither token nor TTL and that
	// change what the script does (a database number, a replace flag, a
	// token length): the classification holds for these values only.
	Controls []Control
}

// Latch is a key, named by an argument, where a script records the
// result of a call that acted, for the TTL another argument gives, so that
// a retry of the same call (the same latch key) answers that result and
// does nothing again: Redisson 3.2x's unlock writes 0 ("still held") or 1
// ("released") under its unlock latch and answers a retry from it. The
// masters never run the script's text: the reference keeps the latch
// itself, recording its own answer there, and a retry that finds it is
// answered, on that master, as the first call was (see reference.go). So
// each master acts at most once per latch key, whatever the retries.
type Latch struct {
	Arg     int           // 0-based argument naming the latch key (KEYS after the lock keys)
	TTLArg  int           // 0-based argument holding its TTL
	TTLUnit time.Duration // ms or s
}

// Counter is a key, named by an argument, that a script increments each
// time it acts and whose new count its reply shows: a number for the
// grant (Redisson's RFencedLock takes its token so). A count moved on the
// masters that saw each call has no majority meaning, and a maximum over
// a majority is not monotonic (a later grant may read a majority that
// missed the earlier one's increments); the proxy never runs the increment
// and answers the grant's fencing number (FENCE) in its place, which
// strictly increases across grants through any proxy. Template holes of
// the source SrcFence show it.
type Counter struct {
	Arg int // 0-based argument naming the counter key (KEYS after the lock keys)
}

// Control is an argument value a classification depends on.
type Control struct {
	Arg   int // 0-based ARGV index
	Value string
}

// Class is what the classifier (or a library fact, or the configuration)
// says a script is: its role, where its arguments are, and the reply it
// gives on one Redis in each case.
type Class struct {
	Role Role
	Layout
	// Replies holds the reply template for each case the role can meet;
	// nil for cases that cannot arise.
	Replies [numCases]*Template
	// Origin names where the classification came from: "classified",
	// a library fact ("redis-py 4.3.4 Lock.release"), or "configured"
	// (SCRIPT EXPLAIN shows it as "source:").
	Origin string

	// as, when set, is the role whose cases and key combination a query
	// class follows (Lapsed: an acquire run as a read).
	as Role
	// rel, for a classification, are the relations of the call it was
	// verified on: it holds only for calls in the same (relations.go).
	Rel *relations
	// Seen, for a classification, is what its probes ran (seen.go): it
	// holds only for calls within.
	Seen *Seen

	// Set by Finish.
	eachKeys    []*Class // Each: the class of each key
	LapsedClass *Class
	Finished    bool
	detail      bool
	needsArgs   bool
	timed       [numCases]bool
}

// Cases lists the cases a role meets with a layout.
func (c *Class) Cases() []Case {
	var out []Case
	for cs := Case(0); cs < numCases; cs++ {
		if c.possible(cs) {
			out = append(out, cs)
		}
	}
	return out
}

func (c *Class) possible(cs Case) bool {
	role := c.Role
	if c.as != 0 {
		role = c.as
	}
	if c.Shape == ShapeOwners {
		switch cs {
		case CaseMissing, CaseOther, CaseOtherShared:
			return true
		case CaseOwn, CaseOwnSharedOthers:
			return c.Tokens != nil
		case CaseOwnShared: // without a marker, a lone owner holds it exclusively
			return c.Tokens != nil && c.Marker != ""
		}
		return false
	}
	switch cs {
	case CaseOwnAgain:
		return c.Counted && c.Tokens != nil
	case CaseOwnShared, CaseOwnSharedOthers, CaseOtherShared:
		return false
	case CaseOwn, CaseOwnNoTTL:
		return c.Tokens != nil
	case CaseOwnLowTTL:
		return c.Tokens != nil && c.MinArg >= 0
	case CaseOtherLowTTL:
		return c.MinArg >= 0
	case CasePartial:
		return role == RoleRelease && c.Keys != 1 && !c.Each
	}
	return true
}

// Lapsed returns, for an acquire whose TTL argument is a deadline, the
// class of a call whose deadline has already passed: a read of the keys
// (nothing is written), answered with the acquire's reply in the keys'
// case, as one Redis answers SET NX PXAT of a past time (the success
// reply when the keys are free, nil or the like when they are held). For
// any other class it returns the class itself.
func (c *Class) Lapsed() *Class {
	if c.LapsedClass != nil {
		return c.LapsedClass
	}
	if c.Role != RoleAcquire || !c.Deadline {
		return c
	}
	return c.lapsedCopy()
}

func (c *Class) lapsedCopy() *Class {
	d := *c
	d.Role, d.as, d.LapsedClass, d.Finished = RoleInspect, RoleAcquire, nil, false
	d.Origin = c.Origin + " (deadline passed)"
	return d.Finish()
}

// Acts reports whether the role, with this layout, changes the keys (and
// so wins the backend's vote) in case cs. Read-only roles never act.
func (c *Class) Acts(cs Case) bool {
	shared := cs == CaseOwnShared || cs == CaseOwnSharedOthers
	switch c.Role {
	case RoleAcquire:
		return cs == CaseMissing || cs == CaseOwnShared && c.Promotes
	case RoleRelease:
		return cs == CaseOwn || cs == CaseOwnNoTTL || cs == CaseOwnAgain || shared
	case RoleExtend:
		return cs == CaseOwn || cs == CaseOwnAgain || (cs == CaseOwnNoTTL && c.NoTTLActs) || shared
	case RoleExtendOrAcquire:
		return cs == CaseMissing || cs == CaseOwn || cs == CaseOwnAgain || (cs == CaseOwnNoTTL && c.NoTTLActs) || cs == CaseOwnShared && c.Promotes
	case RoleShare:
		return cs == CaseMissing || shared || cs == CaseOtherShared || cs == CaseOwn && c.Demotes
	case RoleDelete:
		return cs != CaseMissing
	}
	return false
}

// TTL returns the TTL a call asks for, from its arguments, now: ok is
// false when the argument is not a positive integer. A deadline's TTL is
// what is left of it, zero or less once it has passed.
func (c *Class) TTL(argv [][]byte) (time.Duration, bool) {
	return c.TTLAt(argv, time.Now().UnixMilli())
}

// TTLAt is TTL at now (ms since the Unix epoch).
func (c *Class) TTLAt(argv [][]byte, now int64) (time.Duration, bool) {
	if c.TTLArg < 0 {
		return c.TTLConst, true
	}
	if c.TTLArg >= len(argv) {
		return 0, false
	}
	n, ok := sandbox.ParseInt(string(argv[c.TTLArg]))
	if !ok || n <= 0 || n > int64(1<<62)/int64(c.TTLUnit) {
		return 0, false
	}
	d := time.Duration(n) * c.TTLUnit
	if c.Deadline {
		d -= time.Duration(now) * time.Millisecond
	}
	return d, true
}

// Threshold returns the least PTTL (ms) a key needs not to be "low", or
// 0 when the script has no minimum; ok is false for a malformed argument.
func (c *Class) Threshold(argv [][]byte) (int64, bool) {
	if c.MinArg < 0 {
		return 0, true
	}
	if c.MinArg >= len(argv) {
		return 0, false
	}
	n, ok := sandbox.ParseInt(string(argv[c.MinArg]))
	if !ok || n < 0 || n > int64(1<<62)/int64(c.MinUnit/time.Millisecond) {
		return 0, false
	}
	return n*int64(c.MinUnit/time.Millisecond) + c.MinOffset, true
}

// Matches reports whether a call with these KEYS and ARGV is covered by
// the classification: same number of keys and arguments, same control
// values and, for a classification, arguments in the same relations as
// the call it was verified on. It does not allocate for calls of up to
// 64 keys and arguments.
func (c *Class) Matches(keys, argv [][]byte) bool {
	return c.MatchesShape(keys, argv) && (c.Rel == nil || c.Rel.holds(keys, argv))
}

// matchesShape is Matches without the relations.
func (c *Class) MatchesShape(keys, argv [][]byte) bool {
	lock := len(keys) - c.KeyArgs
	if (c.Keys != 0 && c.Keys != lock) || lock < 1 || (c.Args >= 0 && c.Args != len(argv)+c.KeyArgs) {
		return false
	}
	for _, ct := range c.Controls {
		a := ct.Arg - c.KeyArgs
		v := []byte(nil)
		if a < 0 {
			v = keys[lock+ct.Arg]
		} else if a < len(argv) {
			v = argv[a]
		}
		if string(v) != ct.Value {
			return false
		}
	}
	return true
}

// Split returns a call's lock keys and its arguments (KeyArgs entries of
// KEYS, then ARGV), allocating only when the class takes arguments in KEYS.
func (c *Class) Split(keys, argv [][]byte) (lock, args [][]byte) {
	if c.KeyArgs == 0 {
		return keys, argv
	}
	n := len(keys) - c.KeyArgs
	args = make([][]byte, 0, c.KeyArgs+len(argv))
	return keys[:n], append(append(args, keys[n:]...), argv...)
}

func (c *Class) UniformToken() bool {
	for _, t := range c.Tokens {
		if t != c.Tokens[0] {
			return false
		}
	}
	return len(c.Tokens) > 0
}

func (c *Class) writes() bool {
	return c.Role.Writes()
}

// fieldValue is what a ShapeHash lock's field holds for a call.
func (c *Class) FieldValueOf(argv [][]byte) []byte {
	if c.FieldArg >= 0 && c.FieldArg < len(argv) {
		return argv[c.FieldArg]
	}
	return []byte(c.FieldValue)
}

// Writes reports whether the role sets a TTL (and its success needs
// validity left).
func (c *Class) Writes() bool { return c.writes() }

// Rearms reports whether the class is a reentrant lock's release that
// re-arms the lock while holds are left: to its TTL argument, or to the
// constant TTL its script writes.
func (c *Class) Rearms() bool {
	return c.Counted && c.Role == RoleRelease && (c.TTLArg >= 0 || c.TTLConst > 0)
}

// Equal reports whether two classifications say the same (their Origin
// aside).
func (c *Class) Equal(d *Class) bool {
	if c.Shape != d.Shape || c.Marker != d.Marker || c.Promotes != d.Promotes || c.Demotes != d.Demotes || c.Counted != d.Counted || c.Each != d.Each ||
		c.Shape == ShapeHash && (c.FieldArg != d.FieldArg || c.FieldArg < 0 && c.FieldValue != d.FieldValue) {
		return false
	}
	if c.Role != d.Role || c.Keys != d.Keys || c.Args != d.Args || c.KeyArgs != d.KeyArgs || c.Prefix != d.Prefix ||
		c.TTLArg != d.TTLArg || c.Deadline != d.Deadline || c.Additive != d.Additive || c.MinArg != d.MinArg || c.MinOffset != d.MinOffset ||
		(c.Tokens == nil) != (d.Tokens == nil) || len(c.Tokens) != len(d.Tokens) || len(c.Controls) != len(d.Controls) {
		return false
	}
	if c.TTLArg >= 0 && c.TTLUnit != d.TTLUnit || c.TTLArg < 0 && c.TTLConst != d.TTLConst ||
		c.MinArg >= 0 && c.MinUnit != d.MinUnit {
		return false
	}
	if c.Role.Extends() && c.NoTTLActs != d.NoTTLActs {
		return false
	}
	if (c.Notice == nil) != (d.Notice == nil) || c.Notice != nil && *c.Notice != *d.Notice {
		return false
	}
	if (c.Latch == nil) != (d.Latch == nil) || c.Latch != nil && *c.Latch != *d.Latch ||
		(c.Counter == nil) != (d.Counter == nil) || c.Counter != nil && *c.Counter != *d.Counter {
		return false
	}
	for i := range c.Tokens {
		if c.Tokens[i] != d.Tokens[i] {
			return false
		}
	}
	for i := range c.Controls {
		if c.Controls[i] != d.Controls[i] {
			return false
		}
	}
	for cs := range c.Replies {
		if (c.Replies[cs] == nil) != (d.Replies[cs] == nil) || c.Replies[cs] != nil && c.Replies[cs].String() != d.Replies[cs].String() {
			return false
		}
	}
	return true
}

// Diff describes how d differs from c, for test failures.
func (c *Class) Diff(d *Class) string {
	a, b := c.Explain(), d.Explain()
	var out []string
	for i := 0; i < max(len(a), len(b)); i++ {
		var x, y string
		if i < len(a) {
			x = a[i]
		}
		if i < len(b) {
			y = b[i]
		}
		if x != y && !strings.HasPrefix(x, "source:") {
			out = append(out, fmt.Sprintf("  %q\n  %q", x, y))
		}
	}
	return strings.Join(out, "\n")
}

// LatchTTL returns the TTL a call gives its latch: ok is false when the
// argument is not a positive integer.
func (c *Class) LatchTTL(argv [][]byte) (time.Duration, bool) {
	if c.Latch == nil || c.Latch.TTLArg >= len(argv) {
		return 0, false
	}
	n, ok := sandbox.ParseInt(string(argv[c.Latch.TTLArg]))
	if !ok || n <= 0 || n > int64(1<<62)/int64(c.Latch.TTLUnit) {
		return 0, false
	}
	return time.Duration(n) * c.Latch.TTLUnit, true
}

// Fenced reports whether a reply of the class shows the grant's number
// (SrcFence).
func (c *Class) Fenced() bool {
	for _, t := range c.Replies {
		if t.Fenced() {
			return true
		}
	}
	return false
}

// NoExpiry reports whether a call's TTL argument (its arguments as Split
// gives them) is 0 or less for a role that writes a TTL that is not a
// deadline, and the argument's name.
func (c *Class) NoExpiry(args [][]byte) (string, bool) {
	if !c.Writes() || c.TTLArg < 0 || c.Deadline || c.TTLArg >= len(args) {
		return "", false
	}
	if n, ok := sandbox.ParseInt(string(args[c.TTLArg])); !ok || n > 0 {
		return "", false
	}
	return c.Names().Arg(c.TTLArg), true
}
