package proxy

import (
	"sync/atomic"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Observer receives what the proxy decides, for metrics. Methods are called
// on hot paths and must not block. Nil means none.
type Observer interface {
	// Command is called when a command's reply is known.
	Command(name string, result string, elapsed time.Duration)
	// Margin is the validity left at a successful acquire or extend.
	Margin(ttl, validity time.Duration)
	// Undo is called for each compare-and-delete that undoes a partial
	// acquisition, with what became of it: UndoOK, UndoExpired or
	// UndoFailed.
	Undo(result string)
	// Clients is called with the number of connected clients when it changes.
	Clients(n int)
	// ForcedUnlock is called for each DEL that a majority carried out: a
	// held lock forced open (the log says whose).
	ForcedUnlock()
}

// What became of an undo.
const (
	UndoOK      = "ok"      // it ran on the backend
	UndoExpired = "expired" // its lock expired by itself before it could run: nothing is left behind
	UndoFailed  = "failed"  // it could not run before its lock's TTL: the partial acquisition stayed until then
)

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

	commands atomic.Uint64
	// Lock decisions by what the command does: acquire (SET, acquire and
	// extend-or-acquire scripts), extend, release (release scripts, DEL,
	// DELIFEQ, DELEX IFEQ).
	granted, refused         atomic.Uint64
	extended, extendRefused  atomic.Uint64
	released, releaseRefused atomic.Uint64
	noQuorum                 atomic.Uint64
	undos                    atomic.Uint64
	undoFailed               atomic.Uint64
	undoExpired              atomic.Uint64
	late                     atomic.Uint64 // grants revoked: their reply would have left after their validity
	rejected                 atomic.Uint64
	forced                   atomic.Uint64 // DELs a majority carried out
	connsTotal               atomic.Uint64
	clients                  atomic.Int64
}

func (s *stats) margin(ttl, validity time.Duration) {
	if s.obs != nil && validity > 0 {
		s.obs.Margin(ttl, validity)
	}
}

// lockKind is what a lock command does, for INFO's counts.
type lockKind uint8

const (
	kindOther lockKind = iota // reads, FENCE, voted scripts
	kindAcquire
	kindExtend
	kindRelease
)

// lockKinds is what each op name counts as: a command's lock kind in the
// command table, and a lock script role's (roleKind). Filled at start-up.
var lockKinds = map[string]lockKind{}

// roleKind is what a lock script of role r counts as.
func roleKind(r spec.Role) lockKind {
	switch r {
	case spec.RoleAcquire, spec.RoleExtendOrAcquire:
		return kindAcquire
	case spec.RoleExtend:
		return kindExtend
	case spec.RoleRelease:
		return kindRelease
	}
	return kindOther // reads, shared locks, forced deletes
}

// kindOf is what the op named name (a command, or a lock script's role)
// counts as. SET counts as an acquire, SET ... IFEQ (an extend) included:
// both are named set.
func kindOf(name string) lockKind { return lockKinds[name] }

// decided counts a decided op (INFO counts lock decisions by kind and
// answers without a quorum; reads answered and errors are counted by the
// Observer).
func (s *stats) decided(name, result string, elapsed time.Duration) {
	var granted, refused *atomic.Uint64
	switch kindOf(name) {
	case kindAcquire:
		granted, refused = &s.granted, &s.refused
	case kindExtend:
		granted, refused = &s.extended, &s.extendRefused
	case kindRelease:
		granted, refused = &s.released, &s.releaseRefused
	}
	switch {
	case result == ResultNoQuorum:
		s.noQuorum.Add(1)
	case granted == nil:
	case result == ResultGranted:
		granted.Add(1)
	case result == ResultRefused:
		refused.Add(1)
	}
	if s.obs != nil {
		s.obs.Command(name, result, elapsed)
	}
}

func (s *stats) undone(result string) {
	s.undos.Add(1)
	switch result {
	case UndoFailed:
		s.undoFailed.Add(1)
	case UndoExpired:
		s.undoExpired.Add(1)
	}
	if s.obs != nil {
		s.obs.Undo(result)
	}
}

func (s *stats) forcedUnlock() {
	s.forced.Add(1)
	if s.obs != nil {
		s.obs.ForcedUnlock()
	}
}

// Results lists the results a command, as CommandNames names it, can be
// counted with, so that the metrics export only label pairs that can occur.
// A command decided by the backends can always be no_quorum; one the proxy
// answers itself never is.
func Results(name string) []string {
	all := []string{ResultGranted, ResultRefused, ResultNoQuorum, ResultError, ResultOK}
	switch name {
	case "unknown", "publish":
		return all[3:4] // refused by the proxy, always
	case "quit":
		return all[4:] // answered, always
	case "set":
		// An acquire, an extend (IFEQ), or, with a deadline already
		// passed, a read of the key's state.
		return all
	case "del", "delifeq", "delex", "zrem":
		return all[:4]
	case "fence":
		return []string{ResultOK, ResultRefused, ResultNoQuorum, ResultError}
	case "get", "pttl", "ttl", "exists", "type", "vote":
		return []string{ResultOK, ResultNoQuorum, ResultError}
	}
	if r, ok := roleNamed(name); ok {
		if r.Query() {
			return []string{ResultOK, ResultNoQuorum, ResultError}
		}
		return all[:3] // decided by a majority; refusals are counted as eval or evalsha
	}
	return []string{ResultOK, ResultError}
}

// roleNamed is the lock script role a metric name stands for.
func roleNamed(name string) (spec.Role, bool) {
	for _, r := range spec.Roles() {
		if r.String() == name {
			return r, true
		}
	}
	return spec.RoleUnknown, false
}

// LossOther is the cause of a loss that another proxy recorded, or that
// the backend's state does not name.
const LossOther = "other"

// LossCause names the cause of a loss of a backend's data (the
// backend_losses_total metric's cause label) from what the backend's
// quarantine is for (netio.Health.QuarantineCause).
func LossCause(reason quorum.Reason) string {
	switch reason {
	case quorum.ReasonStarted, quorum.ReasonRestarted:
		return "restart"
	case quorum.ReasonNew:
		return "flush" // no marker: flushed, restarted without its data, or never used by a proxy
	case quorum.ReasonPromoted, quorum.ReasonTakeover:
		return "promotion" // takeover: a Redis Cluster replica confirmed as its shard's master
	case quorum.ReasonResynced, quorum.ReasonSwitched:
		return "failback" // switched: a Sentinel group's master switched back to one never demoted
	case quorum.ReasonEvicting, quorum.ReasonEvicted, quorum.ReasonReset:
		return "eviction"
	case quorum.ReasonClock, quorum.ReasonReplaced:
		return string(reason)
	case quorum.ReasonRolledBack:
		return "rollback" // an older copy of its data than a proxy saw
	case quorum.ReasonForeign, quorum.ReasonMoved:
		return "moved" // Redis Cluster: the marker's slot moved
	}
	return LossOther
}
