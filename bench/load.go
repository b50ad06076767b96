package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// releaseScript is the compare-and-delete every single-instance lock uses.
var releaseScript = redis.NewScript(`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`)

// result is one measurement. A lock cycle is one acquire and one release:
// for the Redis series two commands (SET NX PX, then the compare-and-delete
// script); CPU is given per cycle and per command (half a cycle).
type result struct {
	Series  string        `json:"series"`                // lone, proxy, redsync, etcd
	N       int           `json:"n"`                     // backends (etcd: cluster members)
	Clients int           `json:"clients"`               // concurrent clients
	Cycles  int64         `json:"cycles"`                // completed lock cycles
	Errors  int64         `json:"errors"`                // failed cycles
	Error   string        `json:"first_error,omitempty"` // the first failed cycle's error
	Elapsed time.Duration `json:"elapsed"`               // measured time
	PerSec  float64       `json:"per_sec"`               // lock cycles per second
	P50     time.Duration `json:"p50"`                   // cycle latency percentiles
	P90     time.Duration `json:"p90"`                   //
	P99     time.Duration `json:"p99"`                   //
	P999    time.Duration `json:"p999"`                  //
	Hist    histogram     `json:"histogram,omitempty"`   // cycles per latency bucket (report's histogram_lower_bounds_us)

	ProxyCPUCycle   time.Duration `json:"proxy_cpu_per_cycle"`     // the proxy process's CPU per lock cycle
	ProxyCPUCmd     time.Duration `json:"proxy_cpu_per_command"`   // the same per command (half a cycle)
	BackendCPUCycle time.Duration `json:"backend_cpu_per_cycle"`   // all backends' CPU (Redis servers or etcd members) per cycle
	BackendCPUCmd   time.Duration `json:"backend_cpu_per_command"` // the same per command (half a cycle)
}

// cycleFunc runs one lock cycle (acquire, release) for worker w.
type cycleFunc func(ctx context.Context, w int, key, token string) error

// errNotAcquired marks a lock that was unexpectedly not granted (keys are
// unique, so it only happens when the system under test fails).
var errNotAcquired = errors.New("lock not acquired")

// singleInstanceCycle is the same client code for the proxy and a lone
// Redis: go-redis SetNX, then the compare-and-delete by EVALSHA.
func singleInstanceCycle(cl *redis.Client) cycleFunc {
	return func(ctx context.Context, w int, key, token string) error {
		ok, err := cl.SetNX(ctx, key, token, 30*time.Second).Result()
		if err != nil {
			return err
		}
		if !ok {
			return errNotAcquired
		}
		n, err := releaseScript.Run(ctx, cl, []string{key}, token).Int()
		if err != nil {
			return err
		}
		if n != 1 {
			return fmt.Errorf("release answered %d", n)
		}
		return nil
	}
}

// redsyncCycle is client-side Redlock over the same backends.
func redsyncCycle(rs *redsync.Redsync) cycleFunc {
	return func(ctx context.Context, w int, key, token string) error {
		m := rs.NewMutex(key, redsync.WithExpiry(30*time.Second), redsync.WithTries(1),
			redsync.WithGenValueFunc(func() (string, error) { return token, nil }))
		if err := m.LockContext(ctx); err != nil {
			return err
		}
		if ok, err := m.UnlockContext(ctx); err != nil || !ok {
			return fmt.Errorf("unlock: %v, %v", ok, err)
		}
		return nil
	}
}

func newRedsync(addrs []string, poolSize int) (*redsync.Redsync, func()) {
	var pools []redsyncredis.Pool
	var clients []*redis.Client
	for _, a := range addrs {
		cl := redis.NewClient(&redis.Options{Addr: a, PoolSize: poolSize, MaxRetries: -1})
		clients = append(clients, cl)
		pools = append(pools, goredis.NewPool(cl))
	}
	return redsync.New(pools...), func() {
		for _, c := range clients {
			c.Close()
		}
	}
}

// run drives clients workers doing lock cycles for d, after a warm-up.
func run(clients int, d time.Duration, cycle cycleFunc, cpu func() (proxy, redis time.Duration)) result {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var measuring atomic.Bool
	var cycles, errs atomic.Int64
	var firstErr atomic.Pointer[string]
	lat := make([][]time.Duration, clients)
	var wg sync.WaitGroup
	var seq atomic.Int64
	base := time.Now().UnixNano()
	for w := 0; w < clients; w++ {
		wg.Add(1)
		go func(w int) { // owned by run: stops when ctx is cancelled
			defer wg.Done()
			for ctx.Err() == nil {
				n := seq.Add(1)
				key := "bench:" + strconv.FormatInt(base, 36) + ":" + strconv.FormatInt(n, 36)
				token := "t" + strconv.FormatInt(n, 36)
				start := time.Now()
				err := cycle(ctx, w, key, token)
				if !measuring.Load() || ctx.Err() != nil {
					continue
				}
				if err != nil {
					errs.Add(1)
					msg := err.Error()
					firstErr.CompareAndSwap(nil, &msg)
					continue
				}
				cycles.Add(1)
				lat[w] = append(lat[w], time.Since(start))
			}
		}(w)
	}
	time.Sleep(min(d/4, time.Second)) // warm-up: connections, script caches
	p0, r0 := cpu()
	measuring.Store(true)
	start := time.Now()
	time.Sleep(d)
	measuring.Store(false)
	elapsed := time.Since(start)
	p1, r1 := cpu()
	n, e := cycles.Load(), errs.Load()
	cancel()
	wg.Wait()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	slices.Sort(all)
	pct := func(p float64) time.Duration {
		if len(all) == 0 {
			return 0
		}
		return all[min(len(all)-1, int(p*float64(len(all))))]
	}
	r := result{Clients: clients, Cycles: n, Errors: e, Elapsed: elapsed,
		PerSec: float64(n) / elapsed.Seconds(), P50: pct(0.50), P90: pct(0.90), P99: pct(0.99), P999: pct(0.999),
		Hist: newHistogram(all)}
	if e := firstErr.Load(); e != nil {
		r.Error = *e
	}
	r.setCPU(p1-p0, r1-r0)
	return r
}

// setCPU spreads the CPU time that the proxy and the backends used while
// r was measured over its cycles, and over its commands (two a cycle).
func (r *result) setCPU(proxy, backends time.Duration) {
	if r.Cycles <= 0 {
		return
	}
	r.ProxyCPUCycle = proxy / time.Duration(r.Cycles)
	r.ProxyCPUCmd = proxy / time.Duration(2*r.Cycles)
	r.BackendCPUCycle = backends / time.Duration(r.Cycles)
	r.BackendCPUCmd = backends / time.Duration(2*r.Cycles)
}

// pipelined runs redis-benchmark with -P 16 against addr and returns SETs
// per second.
func pipelined(addr string, clients, depth int, requests int) (float64, error) {
	h, p := hostPort(addr)
	out, err := exec.Command("redis-benchmark", "-h", h, "-p", p, "-c", strconv.Itoa(clients), "-P", strconv.Itoa(depth),
		"-n", strconv.Itoa(requests), "-r", "100000000", "--csv",
		"SET", "bench:p:__rand_int__", "v", "NX", "PX", "30000").CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("redis-benchmark: %w\n%s", err, out)
	}
	return benchmarkRPS(string(out))
}
