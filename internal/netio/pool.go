package netio

import (
	"context"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Pool is the set of N independent backends the proxy votes over, and an
// optional veto (the Redis clients used before the proxy, see
// quorum.WithVeto): node N when there is one.
type Pool struct {
	links []*Link
	veto  *Link

	mu   sync.Mutex
	runs map[int]string // the run_id each backend's connection verified (claim)
}

// NewPool prepares one link per option; Start connects them. No two of
// them may count one server's votes (the run_id each reports): the second
// to reach a server already reached is refused.
func NewPool(opts []Options) *Pool {
	p := &Pool{runs: map[int]string{}}
	for i, o := range opts {
		o.Index = i
		o.Claim = p.claim
		p.links = append(p.links, NewLink(o))
	}
	return p
}

// claim records that node reaches the server of runID, unless another node
// does: it returns that node. A node's earlier claim is replaced; an empty
// runID drops it (its connection is gone).
func (p *Pool) claim(node int, runID string) (int, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if runID == "" {
		delete(p.runs, node)
		return node, true
	}
	for other, r := range p.runs {
		if other != node && r == runID {
			return other, false
		}
	}
	p.runs[node] = runID
	return node, true
}

// SetVeto adds the veto, reached as node N(). Call it before Start.
func (p *Pool) SetVeto(o Options) {
	o.Index = len(p.links)
	p.veto = NewLink(o)
}

// all is every link, the veto last.
func (p *Pool) all() []*Link {
	if p.veto == nil {
		return p.links
	}
	return append(p.links[:len(p.links):len(p.links)], p.veto)
}

// link is node's link: a backend, or the veto as node N.
func (p *Pool) link(node int) *Link {
	if node == len(p.links) && p.veto != nil {
		return p.veto
	}
	return p.links[node]
}

// Start connects every backend in the background.
func (p *Pool) Start() {
	for _, l := range p.all() {
		l.Start()
	}
}

// N is the number of backends that vote (the veto is not one of them).
func (p *Pool) N() int { return len(p.links) }

// Veto reports whether there is a veto, node N().
func (p *Pool) Veto() bool { return p.veto != nil }

// VetoHealth is the veto's state, when there is one.
func (p *Pool) VetoHealth() (Health, bool) {
	if p.veto == nil {
		return Health{}, false
	}
	return p.veto.Health(), true
}

// Send queues cmd for backend node; see Link.Send.
func (p *Pool) Send(node int, cmd []byte, script *resp.Script, rcv resp.Receiver, tag int, deadline time.Time) {
	p.link(node).Send(cmd, script, rcv, tag, deadline)
}

// SendWith queues cmd with flags for backend node; see Link.SendWith.
func (p *Pool) SendWith(node int, cmd []byte, script *resp.Script, rcv resp.Receiver, tag int, deadline time.Time, flags SendFlags) {
	p.link(node).SendWith(cmd, script, rcv, tag, deadline, flags)
}

// Undo queues an undo for backend node, kept across lost connections until
// it is answered; see Link.Undo.
func (p *Pool) Undo(node int, u UndoCmd, rcv resp.Receiver, tag int) {
	p.link(node).Undo(u, rcv, tag)
}

// LeftUndos lists, per backend ("backend 1 (addr): key"), the undos that
// had not run when the pool closed: those locks stay on their backends until
// their TTL.
func (p *Pool) LeftUndos() []string {
	var out []string
	for i, l := range p.all() {
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
		for _, l := range p.all() {
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
	for _, l := range p.all() {
		l.Close()
	}
	return nil
}
