package proxy

import (
	"sync/atomic"
	"time"
)

// Observer receives what the proxy decides, for metrics. Methods are called
// on hot paths and must not block. Nil means none.
type Observer interface {
	// Command is called when a command's reply is known.
	Command(name string, result string, elapsed time.Duration)
	// Margin is the validity left at a successful acquire or extend.
	Margin(ttl, validity time.Duration)
	// Undo is called for each compare-and-delete that undoes a partial
	// acquisition, with whether the backend answered it.
	Undo(ok bool)
	// Clients is called with the number of connected clients when it changes.
	Clients(n int)
}

// Results of a command, as counted. One rule holds for every command,
// reads included, and says what its reply is worth:
const (
	// ResultGranted: a lock command (acquire, release, extend, DEL) that a
	// majority of counted backends did, with validity left where it needs it.
	ResultGranted = "granted"
	// ResultRefused: a lock command that a majority of counted backends
	// definitively refused (held by another, not ours, absent).
	ResultRefused = "refused"
	// ResultNoQuorum: neither: fewer than a majority of counted backends
	// answered (down, quarantined, timed out) or they disagreed, or a lock's
	// validity ran out. A read (GET, PTTL, TTL, a TTL script) that fewer
	// than a majority answered is no_quorum too, though it replies nil or
	// -2 as if the key were absent.
	ResultNoQuorum = "no_quorum"
	// ResultError: the client got an error reply (syntax, limits, an
	// unknown command or script, ...).
	ResultError = "error"
	// ResultOK: any other answer: a read that a majority of counted
	// backends answered, a voted script, a command the proxy answers itself.
	ResultOK = "ok"
)

// stats counts what INFO shows and forwards to the Observer.
type stats struct {
	obs Observer

	commands   atomic.Uint64
	granted    atomic.Uint64
	refused    atomic.Uint64
	noQuorum   atomic.Uint64
	undos      atomic.Uint64
	undoFailed atomic.Uint64
	late       atomic.Uint64 // grants revoked: their reply would have left after their validity
	rejected   atomic.Uint64
	connsTotal atomic.Uint64
	clients    atomic.Int64
}

func (s *stats) margin(ttl, validity time.Duration) {
	if s.obs != nil && validity > 0 {
		s.obs.Margin(ttl, validity)
	}
}

// decided counts a decided op (INFO counts lock decisions and answers
// without a quorum; reads answered and errors are counted by the Observer).
func (s *stats) decided(name, result string, elapsed time.Duration) {
	switch result {
	case ResultGranted:
		s.granted.Add(1)
	case ResultRefused:
		s.refused.Add(1)
	case ResultNoQuorum:
		s.noQuorum.Add(1)
	}
	if s.obs != nil {
		s.obs.Command(name, result, elapsed)
	}
}

func (s *stats) undone(ok bool) {
	s.undos.Add(1)
	if !ok {
		s.undoFailed.Add(1)
	}
	if s.obs != nil {
		s.obs.Undo(ok)
	}
}
