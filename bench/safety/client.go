package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/redis/go-redis/v9"
)

// ReleaseScript is the compare-and-delete the clients release with.
const ReleaseScript = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

// opTimeout bounds one command as the client sees it: far above what the
// proxy takes (backend_timeout plus an undo), so that a late reply is rare
// and shows as an unknown outcome.
const opTimeout = 3 * time.Second

// Client is one contender: a go-redis client on one proxy, recording every
// operation it makes into a local log that Close hands to the History.
type Client struct {
	ID    int
	Proxy int

	rdb    *redis.Client
	h      *History
	rng    *rand.Rand
	seq    int
	ops    []Op
	writes []Write
}

// NewClient connects client id to the proxy at addr (the proxy's index is
// for the report).
func NewClient(id, proxy int, addr string, h *History, seed uint64) *Client {
	return &Client{
		ID: id, Proxy: proxy, h: h,
		rng: rand.New(rand.NewPCG(seed, uint64(id)+1)),
		rdb: redis.NewClient(&redis.Options{
			Addr: addr, Protocol: 2, DisableIdentity: true,
			MaxRetries: -1, PoolSize: 2,
			DialTimeout: time.Second, ReadTimeout: opTimeout, WriteTimeout: opTimeout,
		}),
	}
}

// Close hands the client's operations to the History and disconnects.
func (c *Client) Close() error {
	c.h.AddOps(c.ops...)
	c.h.AddWrites(c.writes...)
	c.ops, c.writes = nil, nil
	if c.rdb == nil {
		return nil
	}
	return c.rdb.Close()
}

// Lease is a lock a client asked for.
type Lease struct {
	Key, Token string
	TTL        time.Duration
	T0         time.Time // just before the SET was sent
	Granted    time.Time // when the OK arrived
	ValidUntil time.Time // T0 + TTL - Drift(TTL)
}

// Valid reports whether the holder may still act at now, keeping margin
// in hand.
func (l Lease) Valid(now time.Time, margin time.Duration) bool {
	return now.Add(margin).Before(l.ValidUntil)
}

// Acquire sends SET key token NX PX ttl with a fresh token and records it.
func (c *Client) Acquire(key string, ttl time.Duration) (Lease, Outcome) {
	c.seq++
	l := Lease{Key: key, Token: fmt.Sprintf("c%d-%d", c.ID, c.seq), TTL: ttl}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	l.T0 = time.Now()
	l.ValidUntil = l.T0.Add(ttl - Drift(ttl))
	v, err := c.rdb.Do(ctx, "SET", key, l.Token, "NX", "PX", ttl.Milliseconds()).Result()
	l.Granted = time.Now()
	op := Op{Client: c.ID, Proxy: c.Proxy, Key: key, Token: l.Token, Kind: Acquire, TTL: ttl,
		Call: l.T0, Return: l.Granted, ValidUntil: l.ValidUntil}
	switch {
	case err == nil && v == "OK":
		op.Outcome = OK
	case errors.Is(err, redis.Nil):
		op.Outcome = Refused
	case err == nil:
		op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected reply %v", v)
	default:
		op.Outcome, op.Err = Unknown, err.Error()
	}
	c.ops = append(c.ops, op)
	switch op.Outcome {
	case OK:
		c.h.LiveHolds.Add(1)
	case Refused:
		c.h.LiveRefusals.Add(1)
	default:
		c.h.LiveUnknowns.Add(1)
	}
	return l, op.Outcome
}

// Release runs the compare-and-delete script for the lease and records it.
func (c *Client) Release(l Lease) Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	call := time.Now()
	v, err := c.rdb.Do(ctx, "EVAL", ReleaseScript, 1, l.Key, l.Token).Result()
	op := Op{Client: c.ID, Proxy: c.Proxy, Key: l.Key, Token: l.Token, Kind: Release, Call: call, Return: time.Now()}
	switch {
	case err == nil && v == int64(1):
		op.Outcome = OK
	case err == nil && v == int64(0):
		op.Outcome = Refused
	case err == nil:
		op.Outcome, op.Err = Unknown, fmt.Sprintf("unexpected reply %v", v)
	default:
		op.Outcome, op.Err = Unknown, err.Error()
	}
	c.ops = append(c.ops, op)
	return op.Outcome
}

// Read reads the key's register, as a holder does before updating it.
func (c *Client) Read(key string) int64 { return c.h.Reg(key).v.Load() }

// Write stores read+1 in the key's register and counts the increment. It
// does not look at the lease's validity: the caller decides (a well-behaved
// holder checks first; a paused one does not).
func (c *Client) Write(l Lease, read int64) {
	r := c.h.Reg(l.Key)
	r.v.Store(read + 1)
	r.incs.Add(1)
	now := time.Now() // after the store: a write that ends inside the validity happened inside it
	c.writes = append(c.writes, Write{Client: c.ID, Key: l.Key, Token: l.Token, Read: read, At: now, Late: !now.Before(l.ValidUntil)})
}

// Work is a well-behaved holder's guarded update: read the register, think
// for up to think, then write read+1 only if at least margin of the lease's
// validity is left. The margin absorbs the scheduler's delays between that
// check and the write, which the lock cannot cover. It reports whether it
// wrote.
func (c *Client) Work(l Lease, think, margin time.Duration) bool {
	if !l.Valid(time.Now(), margin) {
		return false
	}
	v := c.Read(l.Key)
	if think > 0 {
		time.Sleep(time.Duration(c.rng.Int64N(int64(think))))
	}
	if !l.Valid(time.Now(), margin) {
		return false
	}
	c.Write(l, v)
	return true
}

// WorkloadConfig shapes the contention.
type WorkloadConfig struct {
	Keys           []string
	TTLMin, TTLMax time.Duration // each acquire's TTL, uniform in [TTLMin, TTLMax]
	Think          time.Duration // the holder's work takes up to this long
	Margin         time.Duration // validity a holder keeps in hand before writing
	RetryMax       time.Duration // a refused client waits up to this before trying again
}

// Loop runs lock cycles on random keys until ctx is done: acquire; on OK
// do the guarded work and release; on a refusal wait a little; on an
// unknown outcome let the lock (if any) expire by itself.
func (c *Client) Loop(ctx context.Context, w WorkloadConfig) {
	for ctx.Err() == nil {
		key := w.Keys[c.rng.IntN(len(w.Keys))]
		ttl := w.TTLMin
		if w.TTLMax > w.TTLMin {
			ttl += time.Duration(c.rng.Int64N(int64(w.TTLMax - w.TTLMin)))
		}
		ttl = ttl.Round(time.Millisecond)
		l, out := c.Acquire(key, ttl)
		switch out {
		case OK:
			c.Work(l, w.Think, w.Margin)
			c.Release(l)
		case Refused, Unknown:
			if w.RetryMax > 0 {
				sleepCtx(ctx, time.Duration(c.rng.Int64N(int64(w.RetryMax))))
			}
		}
	}
}

// sleepCtx sleeps for d or until ctx is done; it reports whether the full
// time passed.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
