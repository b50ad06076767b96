package safety

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// rawConn is a connection to a proxy that writes whole pipelines in one
// write and reads each reply on its own, so that every reply's arrival is
// timed (go-redis hands a pipeline's replies back all at once).
type rawConn struct {
	c    *Cluster
	slot int
	rd   *resp.Reader

	mu sync.Mutex // guards nc for wake
	nc net.Conn
}

// wake makes a blocked read or write return at once.
func (r *rawConn) wake() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nc != nil {
		r.nc.SetDeadline(time.Now())
	}
}

// conn returns the open connection, dialling the slot's proxy when needed.
func (r *rawConn) conn(ctx context.Context) (net.Conn, error) {
	if r.nc != nil {
		return r.nc, nil
	}
	nc, err := r.c.dialer(r.slot)(ctx, "tcp", "")
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.nc = nc
	r.mu.Unlock()
	r.rd = resp.NewReader(bufio.NewReaderSize(nc, 64<<10), resp.ReaderLimits{})
	return nc, nil
}

func (r *rawConn) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nc != nil {
		r.nc.Close()
		r.nc, r.rd = nil, nil
	}
}

// send writes the encoded commands in one write, within d.
func (r *rawConn) send(ctx context.Context, cmds []byte, d time.Duration) error {
	nc, err := r.conn(ctx)
	if err != nil {
		return err
	}
	nc.SetDeadline(time.Now().Add(d))
	if _, err := nc.Write(cmds); err != nil {
		r.close()
		return fmt.Errorf("write: %w", err)
	}
	return nil
}

// read reads the next reply and the instant it was decoded.
func (r *rawConn) read() (resp.Value, time.Time, error) {
	v, err := r.rd.Read()
	at := time.Now()
	if err != nil {
		r.close()
		return v, at, fmt.Errorf("read: %w", err)
	}
	return v, at, nil
}

// PipelineConfig shapes the auto-pipelining clients.
type PipelineConfig struct {
	Keys           []string      // lock keys, shared by the pipelining clients
	Slow           string        // the key the slow command reads
	TTLMin, TTLMax time.Duration // lock TTLs (short: a slow neighbour outlasts them)
	RetryMax       time.Duration
}

// PipelineLoop is an auto-pipelining client (as ioredis, rueidis or a
// Lettuce client batch whatever is queued): each round it writes a lock
// acquire and a PTTL of another key in one write, in a random order. The
// PTTL waits for every master's answer, so behind a hung master it is the
// slow command of its pipeline. Each reply is timed as it arrives; a grant
// is used only while its validity (from t0, taken before the write) lasts,
// then released.
func (c *Client) PipelineLoop(ctx context.Context, cl *Cluster, w PipelineConfig) {
	rc := &rawConn{c: cl, slot: c.Proxy}
	defer rc.close()
	for ctx.Err() == nil {
		key := w.Keys[c.rng.IntN(len(w.Keys))]
		ttl := WorkloadConfig{TTLMin: w.TTLMin, TTLMax: w.TTLMax}.ttl(c.rng)
		c.seq++
		token := fmt.Sprintf("c%d-%d", c.ID, c.seq)
		set := resp.AppendCommand(nil, "SET", key, token, "NX", "PX", fmt.Sprint(ttl.Milliseconds()))
		pttl := resp.AppendCommand(nil, "PTTL", w.Slow)
		setFirst := c.rng.IntN(2) == 0
		var cmds []byte
		if setFirst {
			cmds = append(set, pttl...)
		} else {
			cmds = append(pttl, set...)
		}
		_, err := rc.conn(ctx) // t0 is taken on an open connection, just before the write
		t0 := time.Now()
		op := Op{Client: c.ID, Proxy: c.Proxy, Key: key, Token: token, Kind: Acquire, TTL: ttl,
			Call: t0, ValidUntil: t0.Add(ttl - Drift(ttl)), With: "PTTL, SET"}
		if setFirst {
			op.With = "SET, PTTL"
		}
		if err == nil {
			err = rc.send(ctx, cmds, opTimeout)
		}
		var v resp.Value
		if err == nil {
			for i := 0; i < 2 && err == nil; i++ {
				var r resp.Value
				var at time.Time
				r, at, err = rc.read()
				if (i == 0) == setFirst {
					v, op.Return = r, at
				}
			}
		}
		if op.Return.IsZero() {
			op.Return = time.Now()
		}
		switch {
		case err != nil:
			op.Outcome, op.Err = Unknown, err.Error()
		case v.IsOK():
			op.Outcome = OK
		case v.Kind == resp.KindNil:
			op.Outcome = Refused
		default:
			op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected reply %q", v.Str)
		}
		c.ops = append(c.ops, op)
		switch op.Outcome {
		case OK:
			c.h.LiveHolds.Add(1)
			l := Lease{Key: key, Token: token, TTL: ttl, T0: t0, Granted: op.Return, ValidUntil: op.ValidUntil}
			c.rawRelease(ctx, rc, l)
		case Refused:
			c.h.LiveRefusals.Add(1)
			sleepCtx(ctx, time.Duration(c.rng.Int64N(int64(w.RetryMax)+1)))
		default:
			c.h.LiveUnknowns.Add(1)
			sleepCtx(ctx, time.Duration(c.rng.Int64N(int64(w.RetryMax)+1)))
		}
	}
}

// rawRelease releases a lease on the raw connection, once its holder is
// done (at once when the grant came too late to use).
func (c *Client) rawRelease(ctx context.Context, rc *rawConn, l Lease) {
	_, err := rc.conn(ctx)
	op := Op{Client: c.ID, Proxy: c.Proxy, Key: l.Key, Token: l.Token, Kind: Release, Call: time.Now()}
	if err == nil {
		err = rc.send(ctx, resp.AppendCommand(nil, "EVAL", ReleaseScript, "1", l.Key, l.Token), opTimeout)
	}
	var v resp.Value
	if err == nil {
		v, op.Return, err = rc.read()
	} else {
		op.Return = time.Now()
	}
	switch {
	case err != nil:
		op.Outcome, op.Err = Unknown, err.Error()
	case v.Kind == resp.KindInt && v.Int == 1:
		op.Outcome = OK
	case v.Kind == resp.KindInt && v.Int == 0:
		op.Outcome = Refused
	default:
		op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected reply %q", v.Str)
	}
	c.ops = append(c.ops, op)
}

// GreedyConfig shapes the greedy client.
type GreedyConfig struct {
	Conns    int // connections (default 4)
	Pipeline int // GETs written at once on each (default 256)
	Keys     int // large values planted (default 4)
	Size     int // bytes per value (default 64 KiB)
}

// greedyPrefix starts the keys of the greedy client's large values.
const greedyPrefix = "big:"

func (g *GreedyConfig) defaults() {
	if g.Conns <= 0 {
		g.Conns = 4
	}
	if g.Pipeline <= 0 {
		g.Pipeline = 256
	}
	if g.Keys <= 0 {
		g.Keys = 4
	}
	if g.Size <= 0 {
		g.Size = 64 << 10
	}
}

// PlantLargeValues writes the greedy client's values on every master
// directly (a proxy may refuse tokens that large; the masters do not).
func PlantLargeValues(ctx context.Context, c *Cluster, g GreedyConfig) error {
	g.defaults()
	val := strings.Repeat("x", g.Size)
	for i := 0; i < c.NumBackends(); i++ {
		rdb := direct(c.Server(i).Addr)
		for k := 0; k < g.Keys; k++ {
			if err := rdb.Set(ctx, fmt.Sprintf("%s%d", greedyPrefix, k), val, 0).Err(); err != nil {
				rdb.Close()
				return fmt.Errorf("safety: planting large values on master %d: %w", i, err)
			}
		}
		rdb.Close()
	}
	return nil
}

// Greedy runs the greedy client until ctx is done: Conns connections to
// the proxies (spread over the running slots), each writing Pipeline GETs
// of the large values at once and reading every reply before the next
// round. It reports how many GETs were answered.
func Greedy(ctx context.Context, c *Cluster, g GreedyConfig, seed uint64) int64 {
	g.defaults()
	rng := rand.New(rand.NewPCG(seed, 0x9eed))
	var batch []byte
	for i := 0; i < g.Pipeline; i++ {
		batch = resp.AppendCommand(batch, "GET", fmt.Sprintf("%s%d", greedyPrefix, rng.IntN(g.Keys)))
	}
	running := c.Running()
	done := make(chan int64, g.Conns)
	for k := 0; k < g.Conns; k++ {
		slot := running[k%len(running)]
		go func() { // ends when ctx is done; Greedy waits for it
			rc := &rawConn{c: c, slot: slot}
			var answered int64
			defer func() {
				rc.close()
				done <- answered
			}()
			stop := context.AfterFunc(ctx, rc.wake)
			defer stop()
			for ctx.Err() == nil {
				if err := rc.send(ctx, batch, 10*time.Second); err != nil {
					sleepCtx(ctx, 50*time.Millisecond)
					continue
				}
				if ctx.Err() != nil {
					break
				}
				for i := 0; i < g.Pipeline; i++ {
					if _, _, err := rc.read(); err != nil {
						break
					}
					answered++
				}
			}
		}()
	}
	var total int64
	for k := 0; k < g.Conns; k++ {
		total += <-done
	}
	return total
}
