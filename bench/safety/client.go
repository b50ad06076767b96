package safety

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
	"github.com/redis/go-redis/v9/maintnotifications"
)

// ReleaseScript is the compare-and-delete the clients release with.
const ReleaseScript = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

// opTimeout bounds one command as the client sees it: far above what the
// proxy takes (backend_timeout plus an undo), so that a late reply is rare
// and shows as an unknown outcome.
const opTimeout = 3 * time.Second

// Client is one contender: a go-redis client on one proxy slot, recording
// every operation it makes into a local log that Close hands to the
// History.
type Client struct {
	ID    int
	Proxy int // the proxy slot it talks to

	rdb *redis.Client
	rs  *redsync.Redsync // extends go through redsync, over rdb
	// alt, when set, is a connection to another proxy slot (altSlot) that
	// extends ask for their fencing number through: the same grant must get
	// the same number through any proxy.
	alt     *redis.Client
	altSlot int
	// second, when set, is a connection to another proxy slot (secondSlot)
	// that ExtendVia extends through, with its own redsync.
	second     *redis.Client
	secondRS   *redsync.Redsync
	secondSlot int
	cluster    *Cluster
	// direct: the client locks on the old Redis directly, not through a
	// proxy (see NewOldClient).
	direct bool
	// connected is when rdb last opened a connection: a command that
	// waited for it was sent no earlier. It keeps its monotonic reading, as
	// every instant of the history does (the wall clock may run at another
	// rate).
	connected atomic.Pointer[time.Time]
	h         *History
	rng       *rand.Rand
	seq       int
	ops       []Op
	writes    []Write
}

// NewClient connects client id to whatever proxy runs in slot proxy of c
// (a proxy that restarts or joins later is found at its new address).
func NewClient(id, proxy int, c *Cluster, h *History, seed uint64) *Client {
	cl := &Client{ID: id, Proxy: proxy, h: h, cluster: c, rng: rand.New(rand.NewPCG(seed, uint64(id)+1))}
	cl.rdb = proxyClient(c, proxy, cl.onConnect)
	cl.rs = redsync.New(goredis.NewPool(cl.rdb))
	return cl
}

// proxyClient is a go-redis client of whatever proxy runs in slot p. Its
// address is only a name (the dialer finds the proxy); maintenance
// notifications (a RESP3 feature) are off, so that go-redis does not
// resolve that name to detect an endpoint type, which can block the
// client's construction for seconds.
func proxyClient(c *Cluster, p int, onConnect func(context.Context, *redis.Conn) error) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: fmt.Sprintf("proxy-slot-%d", p), Dialer: c.dialer(p),
		Protocol: 2, DisableIdentity: true,
		MaintNotificationsConfig: &maintnotifications.Config{Mode: maintnotifications.ModeDisabled},
		MaxRetries:               -1, PoolSize: 2,
		DialTimeout: time.Second, ReadTimeout: opTimeout, WriteTimeout: opTimeout,
		OnConnect: onConnect,
	})
}

// FenceExtendsVia makes the client ask for the fencing numbers of its
// extends through the proxy in slot p (the numbers of its acquires it asks
// its own proxy for).
func (c *Client) FenceExtendsVia(p int) {
	c.alt, c.altSlot = proxyClient(c.cluster, p, nil), p
}

// sentAfter is t0, or the instant the client's last connection opened when
// that is later: a command that waited for its connection (a proxy that
// was restarting, or not yet joined) was sent no earlier, and its validity
// counts from then.
func (c *Client) sentAfter(t0 time.Time) time.Time {
	if t := c.connected.Load(); t != nil && t.After(t0) {
		return *t
	}
	return t0
}

// onConnect notes when rdb opened a connection (see sentAfter).
func (c *Client) onConnect(context.Context, *redis.Conn) error {
	now := time.Now()
	c.connected.Store(&now)
	return nil
}

// Close hands the client's operations to the History and disconnects.
func (c *Client) Close() error {
	c.h.AddOps(c.ops...)
	c.h.AddWrites(c.writes...)
	c.ops, c.writes = nil, nil
	if c.alt != nil {
		c.alt.Close()
		c.alt = nil
	}
	if c.second != nil {
		c.second.Close()
		c.second = nil
	}
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
	Fence      int64     // the grant's fencing number (0: none was given)
}

// Valid reports whether the holder may still act at now, keeping margin
// in hand.
func (l Lease) Valid(now time.Time, margin time.Duration) bool {
	return now.Add(margin).Before(l.ValidUntil)
}

// Acquire sends SET key token NX PX ttl with a fresh token and records it;
// when granted, it asks for the grant's fencing number at once (see fence)
// and records it with the grant (the lease carries it).
func (c *Client) Acquire(key string, ttl time.Duration) (Lease, Outcome) {
	return c.acquire(key, ttl, false)
}

// acquire is Acquire; free marks a key no other client uses.
func (c *Client) acquire(key string, ttl time.Duration, free bool) (Lease, Outcome) {
	c.seq++
	l := Lease{Key: key, Token: fmt.Sprintf("c%d-%d", c.ID, c.seq), TTL: ttl}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	l.T0 = time.Now()
	v, err := c.rdb.Do(ctx, "SET", key, l.Token, "NX", "PX", ttl.Milliseconds()).Result()
	l.Granted = time.Now()
	l.T0 = c.sentAfter(l.T0)
	l.ValidUntil = l.T0.Add(ttl - Drift(ttl))
	op := Op{Client: c.ID, Proxy: c.Proxy, Key: key, Token: l.Token, Kind: Acquire, TTL: ttl, Free: free, Direct: c.direct,
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
	if op.Outcome == OK && !c.direct {
		op.Fence = c.fence(key, l.Token, c.rdb, c.Proxy)
		if op.Fence.Numbered() {
			l.Fence = op.Fence.N
		}
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

// Extend re-arms the lease for ttl with redsync's extend-or-acquire script
// (a Mutex with WithSetNXOnExtend, over this client's go-redis connection
// to the proxy: EVALSHA, then EVAL when the script is not cached yet), and
// records it. On OK it asks for the fencing number again (through the
// other proxy set by FenceExtendsVia, if any; the same grant must get the
// same number) and returns the lease with its new validity; otherwise the
// lease as it was: a refused extend leaves a held lock held until its
// validity ends.
func (c *Client) Extend(l Lease, ttl time.Duration) (Lease, Outcome) {
	return c.extendOn(l, ttl, c.rs, c.rdb, c.Proxy)
}

// ExtendsVia gives the client a second proxy, in slot p, for ExtendVia.
func (c *Client) ExtendsVia(p int) {
	c.second = proxyClient(c.cluster, p, nil)
	c.secondRS, c.secondSlot = redsync.New(goredis.NewPool(c.second)), p
}

// ExtendVia is Extend through the second proxy (see ExtendsVia); the
// fencing number is asked through it too.
func (c *Client) ExtendVia(l Lease, ttl time.Duration) (Lease, Outcome) {
	return c.extendOn(l, ttl, c.secondRS, c.second, c.secondSlot)
}

// extendOn is Extend through rs, a redsync over rdb, a connection to proxy
// slot slot.
func (c *Client) extendOn(l Lease, ttl time.Duration, rs *redsync.Redsync, rdb *redis.Client, slot int) (Lease, Outcome) {
	m := rs.NewMutex(l.Key, redsync.WithValue(l.Token), redsync.WithExpiry(ttl),
		redsync.WithSetNXOnExtend(), redsync.WithTries(1))
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	t0 := time.Now()
	ok, err := m.ExtendContext(ctx)
	ret := time.Now()
	t0 = c.sentAfter(t0)
	op := Op{Client: c.ID, Proxy: slot, Key: l.Key, Token: l.Token, Kind: Extend, TTL: ttl,
		Call: t0, Return: ret, ValidUntil: t0.Add(ttl - Drift(ttl))}
	var taken *redsync.ErrTaken
	switch {
	case ok:
		op.Outcome = OK
	case errors.As(err, &taken) || errors.Is(err, redsync.ErrExtendFailed) || err == nil:
		op.Outcome = Refused // the script answered 0, or too little validity was left
	default:
		op.Outcome, op.Err = Unknown, err.Error()
	}
	if op.Outcome == OK {
		via, fslot := rdb, slot
		if c.alt != nil {
			via, fslot = c.alt, c.altSlot
		}
		op.Fence = c.fence(l.Key, l.Token, via, fslot)
	}
	c.ops = append(c.ops, op)
	if op.Outcome != OK {
		return l, op.Outcome
	}
	next := Lease{Key: l.Key, Token: l.Token, TTL: ttl, T0: t0, Granted: ret, ValidUntil: op.ValidUntil, Fence: l.Fence}
	if op.Fence.Numbered() {
		next.Fence = op.Fence.N
	}
	return next, OK
}

// fence asks for the fencing number of the grant key/token right after it
// was granted: FENCE key token over via, a connection to proxy slot slot;
// or, on a cluster whose proxies stand in for FENCE with local counters
// (the control), that proxy's counter.
func (c *Client) fence(key, token string, via *redis.Client, slot int) FenceAnswer {
	f := FenceAnswer{Asked: true, Proxy: slot, Call: time.Now()}
	var n int64
	var err error
	if c.cluster != nil && c.cluster.Config.LocalFences {
		n, err = c.cluster.localFence(slot, key, token)
	} else {
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		n, err = via.Do(ctx, "FENCE", key, token).Int64()
		cancel()
	}
	f.Return = time.Now()
	switch {
	case err == nil:
		f.Outcome, f.N = OK, n
	case errors.Is(err, redis.Nil):
		f.Outcome = Refused
	default:
		f.Outcome, f.Err = Unknown, err.Error()
	}
	return f
}

// Release runs the compare-and-delete script for the lease and records it.
func (c *Client) Release(l Lease) Outcome {
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	call := time.Now()
	v, err := c.rdb.Do(ctx, "EVAL", ReleaseScript, 1, l.Key, l.Token).Result()
	op := Op{Client: c.ID, Proxy: c.Proxy, Key: l.Key, Token: l.Token, Kind: Release, Direct: c.direct, Call: c.sentAfter(call), Return: time.Now()}
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

// Read reads the lease's key's register, as a holder does before updating
// it. A fenced register may refuse the read (the lease's number is lower
// than the highest it has seen, or the lease has none): ok is then false.
func (c *Client) Read(l Lease) (v int64, ok bool) { return c.h.Reg(l.Key).read(l.Fence) }

// Write stores read+1 in the lease's key's register and counts the
// increment, unless the register is fenced and refuses the lease's number;
// it reports whether the register took it. It does not look at the lease's
// validity: the caller decides (a well-behaved holder checks first; a
// paused one does not).
func (c *Client) Write(l Lease, read int64) bool {
	r := c.h.Reg(l.Key)
	ok := r.write(l.Fence, read+1)
	now := time.Now() // after the store: a write that ends inside the validity happened inside it
	w := Write{Client: c.ID, Key: l.Key, Token: l.Token, Read: read, At: now, Late: !now.Before(l.ValidUntil), Refused: !ok}
	if r.fenced {
		w.Fence = l.Fence
	}
	c.writes = append(c.writes, w)
	return ok
}

// Work is a well-behaved holder's guarded update: read the register, think
// for up to think, then write read+1 only if at least margin of the lease's
// validity is left. The margin absorbs the scheduler's delays between that
// check and the write, which the lock cannot cover. It reports whether it
// wrote (a fenced register may refuse the read or the write).
func (c *Client) Work(l Lease, think, margin time.Duration) bool {
	if !l.Valid(time.Now(), margin) {
		return false
	}
	v, ok := c.Read(l)
	if !ok {
		return false
	}
	if think > 0 {
		time.Sleep(time.Duration(c.rng.Int64N(int64(think))))
	}
	if !l.Valid(time.Now(), margin) {
		return false
	}
	return c.Write(l, v)
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
		l, out := c.Acquire(key, w.ttl(c.rng))
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

// ExtendLoop is a holder that keeps its lock with extends: acquire; then
// a few times, work a little and extend with the extend-or-acquire script;
// then do the guarded update and release. When an extend is refused it
// keeps the lock it has until that lease's validity is nearly over (a
// refused extend takes nothing away from a holder), then releases.
func (c *Client) ExtendLoop(ctx context.Context, w WorkloadConfig) {
	for ctx.Err() == nil {
		key := w.Keys[c.rng.IntN(len(w.Keys))]
		ttl := w.ttl(c.rng)
		l, out := c.Acquire(key, ttl)
		if out != OK {
			sleepCtx(ctx, time.Duration(c.rng.Int64N(int64(w.RetryMax)+1)))
			continue
		}
		for n := 1 + c.rng.IntN(4); n > 0 && ctx.Err() == nil; n-- {
			sleepCtx(ctx, time.Duration(c.rng.Int64N(int64(ttl/4)))+10*time.Millisecond)
			if !l.Valid(time.Now(), w.Margin) {
				break
			}
			var ext Outcome
			l, ext = c.Extend(l, ttl)
			if ext != OK {
				sleepCtx(ctx, time.Until(l.ValidUntil)-w.Margin)
				break
			}
		}
		c.Work(l, w.Think, w.Margin)
		c.Release(l)
	}
}

// FreeLoop locks keys that no other client uses, one after the other: with
// a majority of masters healthy, every attempt must be granted.
func (c *Client) FreeLoop(ctx context.Context, w WorkloadConfig) {
	for ctx.Err() == nil {
		ttl := w.ttl(c.rng)
		l, out := c.acquire(fmt.Sprintf("free:%d:%d", c.ID, c.seq+1), ttl, true)
		if out == OK {
			c.Release(l)
		}
		sleepCtx(ctx, time.Duration(c.rng.Int64N(int64(w.RetryMax)+1)))
	}
}

// ttl draws a TTL in [TTLMin, TTLMax], whole milliseconds.
func (w WorkloadConfig) ttl(rng *rand.Rand) time.Duration {
	ttl := w.TTLMin
	if w.TTLMax > w.TTLMin {
		ttl += time.Duration(rng.Int64N(int64(w.TTLMax - w.TTLMin)))
	}
	return ttl.Round(time.Millisecond)
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
