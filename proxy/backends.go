package proxy

import (
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// Backends is what the proxy needs from its backend connections: N
// independent Redis masters, each taking commands without blocking and
// answering each through a netio.Receiver.
type Backends interface {
	N() int
	// Send sends cmd to the node. flags say how (netio.SendFlags): Checked
	// marks a grant, whose reply counts only once the node showed, after
	// it ran, that its data went on unbroken (netio's continuity check).
	Send(node int, cmd []byte, sc *resp.Script, rcv netio.Receiver, tag int, deadline time.Time, flags netio.SendFlags)
	// Undo sends a compare-and-delete that must run after everything sent
	// to the node before it, even if the connection it goes out on is lost:
	// then the backend keeps its later form for the next connection, run
	// after the earlier connections are killed; an error a retry can cure
	// sends it again. rcv gets one result.
	Undo(node int, u netio.UndoCmd, rcv netio.Receiver, tag int)
	// Veto is the upgrade's veto's state, when there is one: node N() of
	// Send and Undo (see veto.go).
	Veto() (netio.Health, bool)
	// Health is each backend's state, for INFO.
	Health() []netio.Health
}
