package script

import (
	"fmt"
	"strings"
)

// Refusal says why a script is not run as a lock operation.
type Refusal struct {
	Sha    string
	Reason string
	// NoTTL is set when the script writes a key without an expiry (the
	// vote policy refuses those too).
	NoTTL bool
}

func (r *Refusal) Error() string {
	return "script " + r.Sha + ": refused: " + r.Reason
}

func withProbe(r *refusal, probe string) *refusal {
	if r.kind == refuseOther || r.kind == refuseNoTTL {
		return &refusal{kind: r.kind, reason: probe + " it " + r.reason}
	}
	return r
}

// wrongType reports whether a run stopped on Redis's WRONGTYPE error.
func wrongType(r *refusal) bool { return strings.HasPrefix(r.redisErr, "WRONGTYPE") }

// refusal stops a run: the script did something the classifier does not
// accept. It is never seen by the script (pcall cannot catch it).
type refusal struct {
	kind   refusalKind
	reason string
	// redisErr is the error Redis answers, when the refusal is a command
	// that fails on Redis.
	redisErr string
}

type refusalKind uint8

const (
	refuseOther   refusalKind = iota + 1
	refuseNoTTL               // a write that leaves a key without expiry
	refuseCommand             // a command outside the allow-list
	refuseBudget              // too many instructions or too much memory
)

func refuse(kind refusalKind, format string, args ...any) *refusal {
	return &refusal{kind: kind, reason: fmt.Sprintf(format, args...)}
}
