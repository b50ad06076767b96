package netio

import (
	"context"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Pool is the set of N independent backends the proxy votes over.
type Pool struct {
	links []*Link
}

// NewPool prepares one link per option; Start connects them.
func NewPool(opts []Options) *Pool {
	p := &Pool{}
	for i, o := range opts {
		o.Index = i
		p.links = append(p.links, NewLink(o))
	}
	return p
}

// Start connects every backend in the background.
func (p *Pool) Start() {
	for _, l := range p.links {
		l.Start()
	}
}

// N is the number of backends.
func (p *Pool) N() int { return len(p.links) }

// Send queues cmd for backend node; see Link.Send.
func (p *Pool) Send(node int, cmd []byte, script *resp.Script, rcv resp.Receiver, tag int, deadline time.Time) {
	p.links[node].Send(cmd, script, rcv, tag, deadline)
}

// SendWith queues cmd with flags for backend node; see Link.SendWith.
func (p *Pool) SendWith(node int, cmd []byte, script *resp.Script, rcv resp.Receiver, tag int, deadline time.Time, flags SendFlags) {
	p.links[node].SendWith(cmd, script, rcv, tag, deadline, flags)
}

// Undo queues an undo for backend node, kept across lost connections until
// it is answered; see Link.Undo.
func (p *Pool) Undo(node int, u UndoCmd, rcv resp.Receiver, tag int) {
	p.links[node].Undo(u, rcv, tag)
}

// LeftUndos lists, per backend ("backend 1 (addr): key"), the undos that
// had not run when the pool closed: those locks stay on their backends until
// their TTL.
func (p *Pool) LeftUndos() []string {
	var out []string
	for i, l := range p.links {
		for _, k := range l.LeftUndos() {
			out = append(out, "backend "+itoa(i)+" ("+l.Addr()+"): "+k)
		}
	}
	return out
}

// Health returns a snapshot of every backend.
func (p *Pool) Health() []Health {
	hs := make([]Health, len(p.links))
	for i, l := range p.links {
		hs[i] = l.Health()
	}
	return hs
}

// WaitUp waits until at least want backends are up, or ctx ends.
func (p *Pool) WaitUp(ctx context.Context, want int) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		up := 0
		for _, l := range p.links {
			if l.Health().Up {
				up++
			}
		}
		if up >= want {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Drain waits until no command is waiting for a reply (undo included), or
// ctx ends.
func (p *Pool) Drain(ctx context.Context) error {
	t := time.NewTicker(2 * time.Millisecond)
	defer t.Stop()
	for {
		busy := 0
		for _, l := range p.links {
			busy += l.Pending()
		}
		if busy == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Close disconnects every backend and stops all link goroutines.
func (p *Pool) Close() error {
	for _, l := range p.links {
		l.Close()
	}
	return nil
}
