package spec

import (
	"fmt"
	"strings"
)

// Case is the state a script's keys are in, as far as a role's outcome and
// reply depend on it. With several keys it is the state of the key that
// decided the outcome (the focus key, see Situation).
//
// The values are the wire codes: the reference scripts (reference.go)
// answer with them, and so does any code that reads those answers. Two
// rules bind the numbering, and the Lua and the proxy's majority reading
// rely on both: a holder's case (CaseOwn, CaseOther) is followed by its
// no-TTL case (+1) and its low-TTL case (+2); and the codes fit the
// compact answer, acted + 2*case, below 128. Changing a value changes the
// reference scripts' answers: the checks below the constants fail to
// compile when a rule breaks.
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
	// CaseOwnAgain: (a reentrant lock, Layout.Counted) the caller holds it
	// more than once, with a TTL; CaseOwn is then its first hold.
	CaseOwnAgain
	numCases
)

// The numbering rules of Case, checked at compile time (an array length
// that is not exactly what it must be does not compile). The reference
// scripts write these codes as literals: missing 0, own 1, other 4, a
// holder's no-TTL and low-TTL cases as +1 and +2, the shared cases 8, 9
// and 10.
var (
	_ [1]struct{}  = [CaseOwnNoTTL - CaseOwn]struct{}{}
	_ [2]struct{}  = [CaseOwnLowTTL - CaseOwn]struct{}{}
	_ [1]struct{}  = [CaseOtherNoTTL - CaseOther]struct{}{}
	_ [2]struct{}  = [CaseOtherLowTTL - CaseOther]struct{}{}
	_ [0]struct{}  = [CaseMissing]struct{}{}
	_ [1]struct{}  = [CaseOwn]struct{}{}
	_ [4]struct{}  = [CaseOther]struct{}{}
	_ [8]struct{}  = [CaseOwnShared]struct{}{}
	_ [9]struct{}  = [CaseOwnSharedOthers]struct{}{}
	_ [10]struct{} = [CaseOtherShared]struct{}{}
	_ [11]struct{} = [CaseOwnAgain]struct{}{}
	_ [0]struct{}  = [(2*numCases + 1) / 128]struct{}{} // the compact answer stays below 128
)

var caseNames = [numCases]string{"missing", "own", "own-no-ttl", "own-low-ttl", "other", "other-no-ttl", "other-low-ttl", "partial",
	"own-shared", "own-shared-others", "other-shared", "own-again"}

var CaseText = [numCases]string{
	"missing (not held)", "held by the caller", "held by the caller without a TTL",
	"held by the caller with too little time left", "held by another owner", "held by another owner without a TTL",
	"held by another owner with little time left", "held by the caller on some keys only",
	"held shared by the caller alone", "held shared by the caller and others", "held shared by others",
	"held by the caller more than once",
}

// Valid reports whether c is a case a backend's answer may name.
func (c Case) Valid() bool { return c < numCases && c != CasePartial }

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
