package netio

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The measurement behind netio's design: fanning one lock command out to
// five backends and waiting for a majority, from many goroutines at once
// (as the proxy does for its clients), with this package's pipelined links
// and with rueidis (auto-pipelined, one Do per backend per command, which
// needs a goroutine per backend per command and a context deadline per
// command, since rueidis has no callback API).
//
//	go test -run NONE -bench Fanout -benchtime 3s ./netio
//
// ns/op is wall time per lock command across all goroutines; CPU per
// command is what decides the proxy's throughput on a loaded machine, so
// the benchmark also reports cpu-ns/op (process CPU time per command).

const fanoutN = 5

func startBackends(b *testing.B) []string {
	b.Helper()
	servers, err := redisproc.StartN(b.TempDir(), fanoutN)
	if err != nil {
		b.Fatalf("redis-server: %v (run ./test.sh, which installs it)", err)
	}
	b.Cleanup(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	var addrs []string
	for _, s := range servers {
		addrs = append(addrs, s.Addr)
	}
	return addrs
}

// majorityWaiter counts replies and wakes its owner at a majority.
type majorityWaiter struct {
	n    atomic.Int32
	done chan struct{}
}

func (m *majorityWaiter) Receive(tag int, r Result) {
	if m.n.Add(1) == fanoutN/2+1 {
		m.done <- struct{}{}
	}
}

func BenchmarkFanoutPipelinedLink(b *testing.B) {
	addrs := startBackends(b)
	var opts []Options
	for _, a := range addrs {
		opts = append(opts, Options{Addr: a, Logger: quiet()})
	}
	p := NewPool(opts)
	p.Start()
	defer p.Close()
	if err := p.WaitUp(context.Background(), fanoutN); err != nil {
		b.Fatal(err)
	}
	var seq atomic.Int64
	runFanout(b, func() {
		k := seq.Add(1)
		cmd := resp.AppendCommand(nil, "SET", "bench:"+strconv.FormatInt(k, 36), "t", "NX", "PX", "30000")
		w := &majorityWaiter{done: make(chan struct{}, 1)}
		deadline := time.Now().Add(time.Second)
		for i := 0; i < fanoutN; i++ {
			p.Send(i, cmd, nil, w, i, deadline)
		}
		<-w.done
	})
}

// rueidisClients opens one rueidis client per backend, closed at cleanup.
func rueidisClients(b *testing.B, addrs []string) []rueidis.Client {
	var clients []rueidis.Client
	for _, a := range addrs {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{a}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Close)
		clients = append(clients, c)
	}
	return clients
}

func BenchmarkFanoutRueidis(b *testing.B) {
	clients := rueidisClients(b, startBackends(b))
	var seq atomic.Int64
	runFanout(b, func() {
		k := seq.Add(1)
		key := "bench:" + strconv.FormatInt(k, 36)
		var n atomic.Int32
		done := make(chan struct{}, 1)
		for i := 0; i < fanoutN; i++ {
			c := clients[i]
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				c.Do(ctx, c.B().Set().Key(key).Value("t").Nx().Px(30*time.Second).Build())
				cancel()
				if n.Add(1) == fanoutN/2+1 {
					done <- struct{}{}
				}
			}()
		}
		<-done
	})
}

// BenchmarkFanoutRueidisDoMulti batches explicitly: a collector goroutine
// per backend drains what is queued and sends it with one DoMulti (the
// best rueidis allows without a callback API).
func BenchmarkFanoutRueidisDoMulti(b *testing.B) {
	addrs := startBackends(b)
	type req struct {
		key  string
		done func()
	}
	var queues []chan req
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for _, c := range rueidisClients(b, addrs) {
		q := make(chan req, 4096)
		queues = append(queues, q)
		wg.Add(1)
		go func() { // owned by the benchmark: stops at stop
			defer wg.Done()
			var batch []req
			for {
				select {
				case r := <-q:
					batch = append(batch[:0], r)
				case <-stop:
					return
				}
			drain:
				for len(batch) < 64 {
					select {
					case r := <-q:
						batch = append(batch, r)
					default:
						break drain
					}
				}
				cmds := make(rueidis.Commands, len(batch))
				for i, r := range batch {
					cmds[i] = c.B().Set().Key(r.key).Value("t").Nx().Px(30 * time.Second).Build()
				}
				ctx, cancel := context.WithTimeout(context.Background(), time.Second)
				c.DoMulti(ctx, cmds...)
				cancel()
				for _, r := range batch {
					r.done()
				}
			}
		}()
	}
	defer func() { close(stop); wg.Wait() }()
	var seq atomic.Int64
	runFanout(b, func() {
		k := seq.Add(1)
		key := "bench:" + strconv.FormatInt(k, 36)
		var n atomic.Int32
		done := make(chan struct{}, 1)
		for i := 0; i < fanoutN; i++ {
			queues[i] <- req{key: key, done: func() {
				if n.Add(1) == fanoutN/2+1 {
					done <- struct{}{}
				}
			}}
		}
		<-done
	})
}

// runFanout runs op from 50 goroutines, b.N times in all, and reports the
// process CPU time per op.
func runFanout(b *testing.B, op func()) {
	const workers = 50
	for i := 0; i < 200; i++ { // warm connections
		op()
	}
	b.ReportAllocs()
	cpu0 := processCPU()
	b.ResetTimer()
	var wg sync.WaitGroup
	var left atomic.Int64
	left.Store(int64(b.N))
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				op()
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
}
