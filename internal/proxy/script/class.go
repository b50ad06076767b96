package script

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Role is what a lock script does, as the proxy votes on it.
type Role uint8

// The roles. Each has a reference script of the proxy's own (see
// reference.go) that the backends run in place of the client's text.
const (
	RoleUnknown         Role = iota
	RoleAcquire              // take every key if all are free (SET NX semantics)
	RoleRelease              // delete each key that holds the caller's token
	RoleExtend               // re-arm, or lengthen, the TTL of keys that all hold the caller's token
	RoleExtendOrAcquire      // extend the key if it holds the token, take it if free
	RoleTTL                  // report the remaining TTL of the caller's lock (read only)
	RoleOwner                // report whether the caller holds the lock (read only)
	RoleValue                // report the value held (read only)
	RoleInspect              // report the value held and its TTL (read only)
	RoleShare                // take a shared (read) lock: join the other readers, unless someone holds it exclusively
	RoleDelete               // delete the keys whatever holds them (DEL in a script)
	numRoles
)

var roleNames = [numRoles]string{"unknown", "acquire", "release", "extend", "extend-or-acquire", "ttl", "owner", "value", "inspect", "share", "delete"}

func (r Role) String() string {
	if r < numRoles {
		return roleNames[r]
	}
	return "unknown"
}

// Query reports whether the role only reads.
func (r Role) Query() bool { return r >= RoleTTL && r <= RoleInspect }

// Roles lists every role but RoleUnknown.
func Roles() []Role {
	out := make([]Role, 0, numRoles-1)
	for r := RoleAcquire; r < numRoles; r++ {
		out = append(out, r)
	}
	return out
}

// ParseRole reads a role name as written in the configuration, which
// declares locks kept in strings: share, whose lock has several owners,
// is the classifier's only.
func ParseRole(s string) (Role, error) {
	r, err := parseRole(s)
	if err == nil && r == RoleShare {
		return RoleUnknown, fmt.Errorf("script: role share is a lock of several owners, which the classifier reads from the script itself; a configuration declares locks kept in strings")
	}
	return r, err
}

func parseRole(s string) (Role, error) {
	for r := RoleAcquire; r < numRoles; r++ {
		if roleNames[r] == s {
			return r, nil
		}
	}
	return RoleUnknown, fmt.Errorf("script: unknown role %q (%s)", s, strings.Join(roleNames[1:], ", "))
}

// Case is the state a script's keys are in, as far as a role's outcome and
// reply depend on it. With several keys it is the state of the key that
// decided the outcome (the focus key, see Situation).
type Case uint8

// The cases.
const (
	CaseMissing     Case = iota // the key does not exist (or has expired)
	CaseOwn                     // it holds the caller's token, with a TTL (at least the minimum, if the script has one)
	CaseOwnNoTTL                // it holds the caller's token and has no TTL
	CaseOwnLowTTL               // it holds the caller's token with less TTL than the script's minimum
	CaseOther                   // it holds another value, with a TTL
	CaseOtherNoTTL              // it holds another value and has no TTL
	CaseOtherLowTTL             // it holds another value with less TTL than the script's minimum
	CasePartial                 // (several keys, release) some keys hold the token, not all
	// The cases of a lock with several owners (ShapeOwners), where a lock
	// is shared (read) or exclusive (write): CaseOwn and CaseOther are
	// then the exclusive ones.
	CaseOwnShared       // the caller holds it shared, alone
	CaseOwnSharedOthers // the caller holds it shared, with other owners
	CaseOtherShared     // other owners hold it shared, not the caller
	numCases
)

var caseNames = [numCases]string{"missing", "own", "own-no-ttl", "own-low-ttl", "other", "other-no-ttl", "other-low-ttl", "partial",
	"own-shared", "own-shared-others", "other-shared"}

var caseText = [numCases]string{
	"missing (not held)", "held by the caller", "held by the caller without a TTL",
	"held by the caller with too little time left", "held by another owner", "held by another owner without a TTL",
	"held by another owner with little time left", "held by the caller on some keys only",
	"held shared by the caller alone", "held shared by the caller and others", "held shared by others",
}

// Valid reports whether c is a case a backend's answer may name.
func (c Case) Valid() bool { return c < numCases && c != CasePartial }

// Shape is how a lock is kept in its key.
type Shape uint8

// The shapes.
const (
	// ShapeString: the key holds its owner's token.
	ShapeString Shape = iota
	// ShapeOwners: the key is a sorted set whose members are its owners,
	// each scored with its deadline (ms since the Unix epoch); the key
	// expires with the last of them. A lock is exclusive when the marker
	// member (Layout.Marker, scored like its owner) is in the set, or,
	// without a marker, when it has one owner; otherwise it is shared.
	ShapeOwners
	// ShapeHash: the key is a hash whose one field is its owner's token
	// (with a value of the script's, Layout.FieldArg or FieldValue); any
	// other hash, or value, is another holder's. Its cases and roles are a
	// string lock's.
	ShapeHash
)

func (c Case) String() string {
	if c < numCases {
		return caseNames[c]
	}
	return "case?"
}

// ParseCase reads a case name (see Case.String).
func ParseCase(s string) (Case, error) {
	for c := Case(0); c < numCases; c++ {
		if caseNames[c] == s {
			return c, nil
		}
	}
	return 0, fmt.Errorf("script: unknown case %q (%s)", s, strings.Join(caseNames[:], ", "))
}

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
	// Promotes: an exclusive acquire also takes a lock the caller holds
	// shared alone. Demotes: a shared acquire also takes (as shared) a lock
	// the caller holds exclusively.
	Promotes, Demotes bool

	// Controls are the arguments that are neither token nor TTL and that
	// change what the script does (a database number, a replace flag, a
	// token length): the classification holds for these values only.
	Controls []Control
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
	// Source names where the classification came from: "classified",
	// a library fact ("redis-py 4.3.4 Lock.release"), or "configured".
	Source string

	// as, when set, is the role whose cases and key combination a query
	// class follows (Lapsed: an acquire run as a read).
	as Role

	// Set by Finish.
	lapsed    *Class
	finished  bool
	detail    bool
	needsArgs bool
	timed     [numCases]bool
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
	case CaseOwnShared, CaseOwnSharedOthers, CaseOtherShared:
		return false
	case CaseOwn, CaseOwnNoTTL:
		return c.Tokens != nil
	case CaseOwnLowTTL:
		return c.Tokens != nil && c.MinArg >= 0
	case CaseOtherLowTTL:
		return c.MinArg >= 0
	case CasePartial:
		return role == RoleRelease && c.Keys != 1
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
	if c.lapsed != nil {
		return c.lapsed
	}
	if c.Role != RoleAcquire || !c.Deadline {
		return c
	}
	return c.lapsedCopy()
}

func (c *Class) lapsedCopy() *Class {
	d := *c
	d.Role, d.as, d.lapsed, d.finished = RoleInspect, RoleAcquire, nil, false
	d.Source = c.Source + " (deadline passed)"
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
		return cs == CaseOwn || cs == CaseOwnNoTTL || shared
	case RoleExtend:
		return cs == CaseOwn || (cs == CaseOwnNoTTL && c.NoTTLActs) || shared
	case RoleExtendOrAcquire:
		return cs == CaseMissing || cs == CaseOwn || (cs == CaseOwnNoTTL && c.NoTTLActs) || cs == CaseOwnShared && c.Promotes
	case RoleShare:
		return cs == CaseMissing || shared || cs == CaseOtherShared || cs == CaseOwn && c.Demotes
	case RoleDelete:
		return cs != CaseMissing
	}
	return false
}

// Takes reports whether the role takes free keys (a grant: its votes count
// only after the backend's continuity check, and a failed attempt is
// undone where it took them).
func (r Role) Takes() bool {
	return r == RoleAcquire || r == RoleExtendOrAcquire || r == RoleShare
}

// Extends reports whether the role re-arms a lock its caller holds.
func (r Role) Extends() bool { return r == RoleExtend || r == RoleExtendOrAcquire }

// Writes reports whether the role sets a TTL: it takes or extends, so its
// success needs validity left (and an upgrade's veto's grant).
func (r Role) Writes() bool { return r.Takes() || r.Extends() }

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
	n, ok := parseInt(string(argv[c.TTLArg]))
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
	n, ok := parseInt(string(argv[c.MinArg]))
	if !ok || n < 0 || n > int64(1<<62)/int64(c.MinUnit/time.Millisecond) {
		return 0, false
	}
	return n*int64(c.MinUnit/time.Millisecond) + c.MinOffset, true
}

// Matches reports whether a call with these KEYS and ARGV is covered by
// the classification: same number of keys and arguments, same control
// values. It does not allocate.
func (c *Class) Matches(keys, argv [][]byte) bool {
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

func (c *Class) names() namer { return namer{lock: c.Keys, extra: c.KeyArgs} }

// Explain renders the classification for SCRIPT EXPLAIN and logs.
func (c *Class) Explain() []string {
	lines := []string{"role: " + c.roleText()}
	if c.Source != "" {
		lines = append(lines, "source: "+c.Source)
	}
	holds := fmt.Sprintf("holds for: %d key(s), %d argument(s)", c.Keys, c.Args)
	if c.KeyArgs > 0 {
		holds = fmt.Sprintf("holds for: %d key(s), then %d argument(s) in KEYS and %d in ARGV", c.Keys, c.KeyArgs, c.Args-c.KeyArgs)
	}
	lines = append(lines, holds+c.controlsText())
	lines = append(lines, "layout: "+c.layoutText())
	for _, cs := range c.Cases() {
		t := c.Replies[cs]
		if t == nil {
			continue
		}
		effect := "refused"
		switch {
		case c.Role.Query():
			effect = "answered"
		case c.Acts(cs):
			effect = "granted"
		}
		lines = append(lines, fmt.Sprintf("when %s: %s, replies %s", caseText[cs], effect, t))
	}
	return lines
}

func (c *Class) roleText() string {
	s := c.Role.String()
	switch c.Role {
	case RoleAcquire:
		if c.Keys > 1 {
			s += " (all keys or none)"
		}
	case RoleRelease:
		s += " (compare-and-delete)"
	case RoleShare:
		s += " (a shared lock, beside other readers)"
	case RoleDelete:
		s += " (whatever holds the keys)"
	case RoleExtend:
		if c.Additive {
			s += " (compare-and-extend, adding to the TTL left)"
		} else {
			s += " (compare-and-extend, replacing the TTL)"
		}
	}
	return s
}

func (c *Class) controlsText() string {
	if len(c.Controls) == 0 {
		return ""
	}
	var parts []string
	for _, ct := range c.Controls {
		parts = append(parts, fmt.Sprintf("%s = %s", c.names().arg(ct.Arg), strconv.Quote(ct.Value)))
	}
	return " with " + strings.Join(parts, ", ")
}

func (c *Class) layoutText() string {
	var parts []string
	switch {
	case c.Tokens == nil:
		parts = append(parts, "no token")
	case c.uniformToken():
		parts = append(parts, "token "+c.names().arg(c.Tokens[0]))
	default:
		var ts []string
		for k, t := range c.Tokens {
			ts = append(ts, fmt.Sprintf("KEYS[%d]:%s", k+1, c.names().arg(t)))
		}
		parts = append(parts, "tokens "+strings.Join(ts, " "))
	}
	if c.Prefix > 0 {
		parts = append(parts, fmt.Sprintf("owner when the first %d bytes match", c.Prefix))
	}
	if c.Shape == ShapeHash {
		v := strconv.Quote(c.FieldValue)
		if c.FieldArg >= 0 {
			v = c.names().arg(c.FieldArg)
		}
		parts = append(parts, "a hash whose one field is the owner's token, holding "+v)
	}
	if c.Shape == ShapeOwners {
		t := "a sorted set of owners scored with their deadlines"
		if c.Marker != "" {
			t += fmt.Sprintf(", exclusive when it holds %s", strconv.Quote(c.Marker))
		}
		if c.Promotes {
			t += ", promoting the caller's lone shared lock"
		}
		if c.Demotes {
			t += ", turning the caller's exclusive lock shared"
		}
		parts = append(parts, t)
	}
	if c.writes() {
		switch {
		case c.TTLArg >= 0 && c.Deadline:
			parts = append(parts, fmt.Sprintf("TTL until the deadline %s (Unix time in %s)", c.names().arg(c.TTLArg), unitName(c.TTLUnit)))
		case c.TTLArg >= 0:
			parts = append(parts, fmt.Sprintf("TTL %s in %s", c.names().arg(c.TTLArg), unitName(c.TTLUnit)))
		default:
			parts = append(parts, fmt.Sprintf("constant TTL %d ms", c.TTLConst.Milliseconds()))
		}
	}
	if c.MinArg >= 0 {
		op := "<"
		if c.MinOffset == 1 {
			op = "<="
		}
		parts = append(parts, fmt.Sprintf("too late when PTTL %s %s (%s)", op, c.names().arg(c.MinArg), unitName(c.MinUnit)))
	}
	if c.Role.Extends() {
		if c.NoTTLActs {
			parts = append(parts, "acts on a key without TTL")
		} else {
			parts = append(parts, "leaves a key without TTL alone")
		}
	}
	return strings.Join(parts, ", ")
}

func (c *Class) uniformToken() bool {
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
func (c *Class) fieldValue(argv [][]byte) []byte {
	if c.FieldArg >= 0 && c.FieldArg < len(argv) {
		return argv[c.FieldArg]
	}
	return []byte(c.FieldValue)
}

// Writes reports whether the role sets a TTL (and its success needs
// validity left).
func (c *Class) Writes() bool { return c.writes() }

func unitName(d time.Duration) string {
	if d == time.Second {
		return "seconds"
	}
	return "ms"
}

// Equal reports whether two classifications say the same (their Source
// aside).
func (c *Class) Equal(d *Class) bool {
	if c.Shape != d.Shape || c.Marker != d.Marker || c.Promotes != d.Promotes || c.Demotes != d.Demotes ||
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

// Spec renders the classification in its one-line form, which ParseSpec
// reads back (library facts are written in it):
//
//	release keys=1 args=1 token=1; missing: 0; own: 1; other: 0
//
// Words after the role: keys=N|any, args=N|any, token=I or tokens=I,J,...
// (1-based ARGV positions, one per key), prefix=P, ttl=I(ms|s) or
// ttl=const:MS, deadline (the TTL argument is a Unix time), additive, min=I(ms|s) (min=I(ms|s)+1 when PTTL equal to
// the minimum is still too little), nottl-acts, control=I:"value". Then
// each case with its reply template.
func (c *Class) Spec() string {
	var b strings.Builder
	b.WriteString(c.Role.String())
	count := func(n int) string {
		if n < 0 || (n == 0 && c.Keys == 0) {
			return "any"
		}
		return strconv.Itoa(n)
	}
	fmt.Fprintf(&b, " keys=%s args=%s", count(c.Keys), count(c.Args))
	if c.KeyArgs > 0 {
		fmt.Fprintf(&b, " keyargs=%d", c.KeyArgs)
	}
	if c.uniformToken() {
		fmt.Fprintf(&b, " token=%d", c.Tokens[0]+1)
	} else if c.Tokens != nil {
		var ts []string
		for _, t := range c.Tokens {
			ts = append(ts, strconv.Itoa(t+1))
		}
		b.WriteString(" tokens=" + strings.Join(ts, ","))
	}
	if c.Prefix > 0 {
		fmt.Fprintf(&b, " prefix=%d", c.Prefix)
	}
	if c.writes() {
		if c.TTLArg >= 0 {
			fmt.Fprintf(&b, " ttl=%d%s", c.TTLArg+1, unitWord(c.TTLUnit))
		} else {
			fmt.Fprintf(&b, " ttl=const:%d", c.TTLConst.Milliseconds())
		}
	}
	if c.Deadline && c.TTLArg >= 0 {
		b.WriteString(" deadline")
	}
	if c.Additive {
		b.WriteString(" additive")
	}
	if c.MinArg >= 0 {
		fmt.Fprintf(&b, " min=%d%s", c.MinArg+1, unitWord(c.MinUnit))
		if c.MinOffset != 0 {
			fmt.Fprintf(&b, "+%d", c.MinOffset)
		}
	}
	if c.NoTTLActs && c.Role.Extends() {
		b.WriteString(" nottl-acts")
	}
	if c.Shape == ShapeHash {
		if c.FieldArg >= 0 {
			fmt.Fprintf(&b, " hash=%d", c.FieldArg+1)
		} else {
			b.WriteString(" hash=" + strconv.Quote(c.FieldValue))
		}
	}
	if c.Shape == ShapeOwners {
		b.WriteString(" owners")
		if c.Marker != "" {
			b.WriteString(" marker=" + strconv.Quote(c.Marker))
		}
		if c.Promotes {
			b.WriteString(" promotes")
		}
		if c.Demotes {
			b.WriteString(" demotes")
		}
	}
	for _, ct := range c.Controls {
		fmt.Fprintf(&b, " control=%d:%s", ct.Arg+1, strconv.Quote(ct.Value))
	}
	for _, cs := range c.Cases() {
		if t := c.Replies[cs]; t != nil {
			fmt.Fprintf(&b, "; %s: %s", cs, t)
		}
	}
	return b.String()
}

func unitWord(d time.Duration) string {
	if d == time.Second {
		return "s"
	}
	return "ms"
}

// ParseSpec reads a classification written by Spec.
func ParseSpec(s string) (*Class, error) {
	parts := splitOutsideQuotes(s, ';')
	words := strings.Fields(parts[0])
	if len(words) == 0 {
		return nil, fmt.Errorf("script: empty spec")
	}
	role, err := parseRole(words[0])
	if err != nil {
		return nil, err
	}
	c := &Class{Role: role, Layout: Layout{Keys: 1, Args: -1, TTLArg: -1, MinArg: -1, FieldArg: -1, TTLUnit: time.Millisecond, MinUnit: time.Millisecond}}
	argUnit := func(v string) (int, time.Duration, int64, error) {
		off := int64(0)
		if i := strings.IndexByte(v, '+'); i >= 0 {
			o, err := strconv.ParseInt(v[i+1:], 10, 64)
			if err != nil {
				return 0, 0, 0, err
			}
			v, off = v[:i], o
		}
		unit := time.Millisecond
		switch {
		case strings.HasSuffix(v, "ms"):
			v = v[:len(v)-2]
		case strings.HasSuffix(v, "s"):
			v, unit = v[:len(v)-1], time.Second
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, 0, 0, fmt.Errorf("bad position %q", v)
		}
		return n - 1, unit, off, nil
	}
	for _, w := range words[1:] {
		k, v, _ := strings.Cut(w, "=")
		var err error
		switch k {
		case "keys", "args":
			n := -1
			if v != "any" {
				n, err = strconv.Atoi(v)
			}
			if k == "keys" {
				c.Keys = max(n, 0)
			} else {
				c.Args = n
			}
		case "token", "tokens":
			c.Tokens = []int{}
			for _, t := range strings.Split(v, ",") {
				var n int
				n, err = strconv.Atoi(t)
				if err == nil && n < 1 {
					err = fmt.Errorf("bad position %d", n)
				}
				c.Tokens = append(c.Tokens, n-1)
			}
		case "prefix":
			c.Prefix, err = strconv.Atoi(v)
		case "keyargs":
			c.KeyArgs, err = strconv.Atoi(v)
		case "ttl":
			if ms, ok := strings.CutPrefix(v, "const:"); ok {
				var n int64
				n, err = strconv.ParseInt(ms, 10, 64)
				c.TTLConst = time.Duration(n) * time.Millisecond
			} else {
				c.TTLArg, c.TTLUnit, _, err = argUnit(v)
			}
		case "additive":
			c.Additive = true
		case "deadline":
			c.Deadline = true
		case "min":
			c.MinArg, c.MinUnit, c.MinOffset, err = argUnit(v)
		case "nottl-acts":
			c.NoTTLActs = true
		case "owners":
			c.Shape = ShapeOwners
		case "hash":
			c.Shape = ShapeHash
			if strings.HasPrefix(v, `"`) {
				c.FieldValue, err = strconv.Unquote(v)
			} else {
				var n int
				n, err = strconv.Atoi(v)
				c.FieldArg = n - 1
				if err == nil && n < 1 {
					err = fmt.Errorf("bad position %d", n)
				}
			}
		case "marker":
			c.Marker, err = strconv.Unquote(v)
		case "promotes":
			c.Promotes = true
		case "demotes":
			c.Demotes = true
		case "control":
			i, q, _ := strings.Cut(v, ":")
			var n int
			n, err = strconv.Atoi(i)
			var val string
			if err == nil {
				val, err = strconv.Unquote(q)
			}
			c.Controls = append(c.Controls, Control{Arg: n - 1, Value: val})
		default:
			err = fmt.Errorf("unknown word")
		}
		if err != nil {
			return nil, fmt.Errorf("script: spec %q: %s: %v", s, w, err)
		}
	}
	if c.Tokens != nil && len(c.Tokens) == 1 && c.Keys > 1 {
		c.Tokens = uniformInts(c.Keys, c.Tokens[0])
	}
	for _, p := range parts[1:] {
		name, tmpl, ok := strings.Cut(p, ":")
		if !ok {
			return nil, fmt.Errorf("script: spec %q: want case: template, got %q", s, p)
		}
		cs, err := ParseCase(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		t, err := ParseTemplate(strings.TrimSpace(tmpl))
		if err != nil {
			return nil, err
		}
		c.Replies[cs] = t
	}
	for _, cs := range c.Cases() {
		if c.Replies[cs] == nil {
			return nil, fmt.Errorf("script: spec %q: no reply for case %s", s, cs)
		}
	}
	return c.Finish(), nil
}

// splitOutsideQuotes splits s at sep where sep is not inside a quoted
// string.
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case quoted && s[i] == '\\':
			i++
		case s[i] == '"':
			quoted = !quoted
		case !quoted && s[i] == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}
