package sandbox

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

func WithProbe(r *Stop, probe string) *Stop {
	if r.Kind == RefuseOther || r.Kind == RefuseNoTTL {
		return &Stop{Kind: r.Kind, Reason: probe + " it " + r.Reason}
	}
	return r
}

// wrongType reports whether a run stopped on Redis's WRONGTYPE error.
func WrongType(r *Stop) bool { return strings.HasPrefix(r.redisErr, "WRONGTYPE") }

// refusal stops a run: the script did something the classifier does not
// accept. It is never seen by the script (pcall cannot catch it).
type Stop struct {
	Kind   StopKind
	Reason string
	// redisErr is the error Redis answers, when the refusal is a command
	// that fails on Redis.
	redisErr string
}

type StopKind uint8

const (
	RefuseOther   StopKind = iota + 1
	RefuseNoTTL            // a write that leaves a key without expiry
	RefuseCommand          // a command outside the allow-list
	RefuseBudget           // too many instructions or too much memory
)

func Refuse(kind StopKind, format string, args ...any) *Stop {
	return &Stop{Kind: kind, Reason: fmt.Sprintf(format, args...)}
}
