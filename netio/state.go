package netio

import (
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// State says whether a backend's votes count, and if not, what keeps them
// out. A backend is in the first state that applies, in the order below:
// down, quarantined, unconfirmed, unsure, counting. INFO, /readyz, the
// metrics and the quorum log all read it, so they agree.
type State uint8

// The states.
const (
	// StateDown: not connected, or connected and its identity not (or no
	// longer) verified. Health.LastError says why.
	StateDown State = iota
	// StateQuarantined: it may have lost writes less than the hold ago.
	// Its votes count from Health.QuarantinedUntil if nothing else keeps
	// them out; the reason says what it lost.
	StateQuarantined
	// StateUnconfirmed: a Sentinel-managed master that no majority of its
	// Sentinels has named lately.
	StateUnconfirmed
	// StateUnsure: a continuity check failed (grants since the last one
	// that passed do not count), or its tables are not checked yet. It is
	// not a quarantine: the marker check that follows at once either
	// records a loss (quarantined) or finds none (counting).
	StateUnsure
	// StateCounting: its votes count.
	StateCounting
)

// String is the state's word in INFO (state=...): counting is "up".
func (s State) String() string {
	switch s {
	case StateDown:
		return "down"
	case StateQuarantined:
		return "quarantined"
	case StateUnconfirmed:
		return "unconfirmed"
	case StateUnsure:
		return "unsure"
	case StateCounting:
		return "up"
	}
	return "unknown"
}

// State says whether the backend's votes count at now and, when it is
// quarantined, what for (quorum.ReasonNone otherwise).
func (h Health) State(now time.Time) (State, quorum.Reason) {
	switch {
	case !h.Up:
		return StateDown, quorum.ReasonNone
	case now.Before(h.QuarantinedUntil):
		return StateQuarantined, h.QuarantineCause
	case h.Sentinel != nil && !now.Before(h.Sentinel.Confirmed):
		return StateUnconfirmed, quorum.ReasonNone
	case h.Unsure:
		return StateUnsure, quorum.ReasonNone
	}
	return StateCounting, quorum.ReasonNone
}

// Counts reports whether the backend's votes count at now.
func (h Health) Counts(now time.Time) bool {
	s, _ := h.State(now)
	return s == StateCounting
}
