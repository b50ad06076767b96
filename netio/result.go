package netio

import "github.com/redlock-proxy/redlock-proxy/internal/base/resp"

// Result is one backend's answer to one command: a reply, or an error when no
// reply came (timeout, connection lost, link down). Counts is false when the
// backend's vote must not count toward a quorum (its identity is unverified or
// it is quarantined after a restart).
type Result struct {
	V      resp.Value
	Err    error
	Counts bool
	// Unsent is set with Err when the command never left the proxy (the
	// backend was down or overloaded): it cannot have run.
	Unsent bool
	// Later is set with Err on a timeout: the command may still run. Its
	// fate follows through Late when the receiver is a LateReceiver.
	Later bool
	// Via is where a backend made of several servers (a Redis Cluster) ran
	// the command; the receiver hands it back with the command's undo, so
	// that the undo reaches the same server (nil for one server).
	Via any
}

// Receiver gets the result of a command sent to a backend. Receive is called
// exactly once per command, from a backend goroutine or from the sender's own
// goroutine; it must not block.
type Receiver interface {
	Receive(tag int, r Result)
}

// LateReceiver is a Receiver that also wants to know what became of a
// command after its timeout: Late is called at most once, with the late
// reply, or with an error when the connection it was sent on was lost
// before any reply. It must not block.
type LateReceiver interface {
	Receiver
	Late(tag int, r Result)
}

// Discard is the receiver of answers nobody waits for.
var Discard Receiver = discard{}

type discard struct{}

func (discard) Receive(int, Result) {}
