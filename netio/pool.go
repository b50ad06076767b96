package netio

import (
	"context"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Pool is the set of N independent backends the proxy votes over, and an
// optional veto (the Redis clients used before the proxy, see
// quorum.WithVeto): node N when there is one. A backend is one master (a
// Link) or a Redis Cluster (a Cluster, a link per shard).
type Pool struct {
	links    []*Link    // by node; nil for a cluster
	clusters []*Cluster // by node; nil for one master
	members  []member   // by node: the one or the other
	veto     *Link

	mu   sync.Mutex
	runs map[int]string // the run_id each plain backend's connection verified (claim)
}

// member is what the pool does with every backend, whatever its kind.
type member interface {
	Start()
	Close() error
	Pending() int
	LeftUndos() []string
	Addr() string
	Health() Health
}

// Both kinds of backend are members, checked at compile time.
var (
	_ member = (*Link)(nil)
	_ member = (*Cluster)(nil)
)

// NewPool prepares one backend per option (a Cluster where o.Cluster is
// set, else a Link); Start connects them. No two plain backends may count
// one server's votes (the run_id each reports): the second to reach a
// server already reached is refused.
func NewPool(opts []Options) *Pool {
	p := &Pool{runs: map[int]string{}}
	b := newBook(len(opts))
	for i, o := range opts {
		o.Index = i
		if !o.InProcess && o.Restart.Hold > 0 {
			o.book = b
		}
		if o.Cluster != nil {
			c := NewCluster(o)
			p.links, p.clusters, p.members = append(p.links, nil), append(p.clusters, c), append(p.members, c)
			continue
		}
		o.Claim = p.claim
		l := NewLink(o)
		p.links, p.clusters, p.members = append(p.links, l), append(p.clusters, nil), append(p.members, l)
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

// all is every backend, the veto last.
func (p *Pool) all() []member {
	if p.veto == nil {
		return p.members
	}
	return append(p.members[:len(p.members):len(p.members)], p.veto)
}

// Clustered reports whether some backend is a Redis Cluster.
func (p *Pool) Clustered() bool {
	for _, c := range p.clusters {
		if c != nil {
			return true
		}
	}
	return false
}

// link is node's link: a backend, or the veto as node N; nil for a
// cluster.
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
func (p *Pool) Send(node int, cmd []byte, script *resp.Script, rcv Receiver, tag int, deadline time.Time) {
	p.SendWith(node, cmd, script, rcv, tag, deadline, 0)
}

// SendWith queues cmd with flags for backend node; see Link.SendWith.
func (p *Pool) SendWith(node int, cmd []byte, script *resp.Script, rcv Receiver, tag int, deadline time.Time, flags SendFlags) {
	if l := p.link(node); l != nil {
		l.SendWith(cmd, script, rcv, tag, deadline, flags)
		return
	}
	p.clusters[node].SendWith(cmd, script, rcv, tag, deadline, flags)
}

// Undo queues an undo for backend node, kept across lost connections until
// it is answered; see Link.Undo.
func (p *Pool) Undo(node int, u UndoCmd, rcv Receiver, tag int) {
	if l := p.link(node); l != nil {
		l.Undo(u, rcv, tag)
		return
	}
	p.clusters[node].Undo(u, rcv, tag)
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
	hs := make([]Health, len(p.members))
	for i, m := range p.members {
		hs[i] = m.Health()
	}
	return hs
}

// WaitUp waits until at least want backends are up and checked (their
// marker read and vetted: see Health.Unsure), or ctx ends.
func (p *Pool) WaitUp(ctx context.Context, want int) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for {
		up := 0
		for _, m := range p.members {
			if h := m.Health(); h.Up && !h.Unsure {
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
