// Package integration runs the proxy against real redis-server processes
// and real client libraries. A missing redis-server fails these tests: run
// the README's test command (./test.sh), which installs it.
package integration

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// cluster is N real Redis masters with a proxy in front.
type cluster struct {
	t       testing.TB
	servers []*redisproc.Server
	app     *app.App
	direct  []*redis.Client // straight to each backend, to check what it holds
	stopApp func()
}

// testLogger sends the proxy's warnings and errors to the test log.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tlogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tlogWriter struct{ t testing.TB }

func (w tlogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// startRedis starts n redis-server processes, stopped at cleanup.
func startRedis(t testing.TB, n int, extra ...string) []*redisproc.Server {
	t.Helper()
	servers, err := redisproc.StartN(t.TempDir(), n, extra...)
	if err != nil {
		t.Fatalf("starting %d redis-server processes: %v", n, err)
	}
	t.Cleanup(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	return servers
}

// addrsOf is the servers' addresses, in order.
func addrsOf(servers []*redisproc.Server) []string {
	addrs := make([]string, len(servers))
	for i, s := range servers {
		addrs[i] = s.Addr
	}
	return addrs
}

// newCluster starts n backends and a proxy over them. mutate may adjust the
// configuration before it is validated.
func newCluster(t testing.TB, n int, mutate ...func(*config.Config)) *cluster {
	t.Helper()
	return clusterOver(t, startRedis(t, n), mutate...)
}

// clusterOver puts a proxy in front of servers already started.
func clusterOver(t testing.TB, servers []*redisproc.Server, mutate ...func(*config.Config)) *cluster {
	t.Helper()
	c := &cluster{t: t, servers: servers}
	var addrs []string
	for _, s := range c.servers {
		addrs = append(addrs, s.Addr)
		d := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
		c.direct = append(c.direct, d)
		t.Cleanup(func() { d.Close() })
	}
	c.app, c.stopApp = startApp(t, addrs, mutate...)
	return c
}

// startApp runs a proxy over addrs (the embedded default when empty) and
// waits until every backend is up.
func startApp(t testing.TB, addrs []string, mutate ...func(*config.Config)) (*app.App, func()) {
	t.Helper()
	return startAppOver(t, addrs, len(addrs), mutate...)
}

// startAppOver is startApp that waits until want backends are up (want 0:
// the embedded default's).
func startAppOver(t testing.TB, addrs []string, want int, mutate ...func(*config.Config)) (*app.App, func()) {
	t.Helper()
	cfg := config.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.Admin = "127.0.0.1:0"
	cfg.Backends = addrs
	// The machine running the tests is shared and noisy: a 50ms timeout
	// would turn its hiccups into failed votes. Tests about timeouts set
	// their own.
	cfg.BackendTimeout = time.Second
	// The masters start with the test: under the default strict rule they
	// would refuse every lock for max_ttl + drift. Tests of the restart
	// rules choose theirs.
	cfg.RestartQuarantine = "run-id"
	for _, m := range mutate {
		m(&cfg)
	}
	if _, err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	a, err := app.New(cfg, testLogger(t))
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	appsMu.Lock()
	apps[a] = struct{}{}
	appsMu.Unlock()
	t.Cleanup(func() {
		appsMu.Lock()
		delete(apps, a)
		appsMu.Unlock()
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("app.Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if want == 0 {
		want = cfg.EmbeddedBackends
	}
	if err := a.Pool().WaitUp(wctx, want); err != nil {
		t.Fatalf("backends not up: %v", err)
	}
	for cfg.UpgradeFrom != "" && wctx.Err() == nil {
		// The upgrade's old Redis too, once its marker was read (a test of
		// its hold waits for that itself).
		if h, _ := a.Pool().VetoHealth(); h.Up && !h.Unsure {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return a, stop
}

// apps are the proxies the running tests started.
var (
	appsMu sync.Mutex
	apps   = map[*app.App]struct{}{}
)

// client returns a go-redis client to the proxy (RESP2 unless proto 3).
func (c *cluster) client(proto int) *redis.Client {
	return proxyClient(c.t, c.app.Addr(), proto)
}

func proxyClient(t testing.TB, addr string, proto int) *redis.Client {
	cl := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, MaxRetries: -1, ReadTimeout: 5 * time.Second})
	t.Cleanup(func() { cl.Close() })
	return cl
}

// holders returns the indexes of the running backends that hold value
// under key.
func (c *cluster) holders(key, value string) []int {
	var out []int
	for i, d := range c.direct {
		if !c.servers[i].Running() {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := d.Get(ctx, key).Result()
		cancel()
		if err == nil && v == value {
			out = append(out, i)
		}
	}
	return out
}

// eventuallyHolders waits until exactly want backends hold value under
// key (an undo runs just after the reply that announced it).
func (c *cluster) eventuallyHolders(key, value string, want int) []int {
	c.t.Helper()
	deadline := time.Now().Add(3 * time.Second)
	for {
		h := c.holders(key, value)
		if len(h) == want || time.Now().After(deadline) {
			return h
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// eventuallyPTTL waits until backend i holds key (a command answered once
// a majority did it may still be on its way to the others) and returns its
// PTTL, or the last PTTL seen after a deadline.
func (c *cluster) eventuallyPTTL(i int, key string) time.Duration {
	deadline := time.Now().Add(2 * time.Second)
	for {
		p, err := c.direct[i].PTTL(context.Background(), key).Result()
		if (err == nil && p > 0) || time.Now().After(deadline) {
			return p
		}
		time.Sleep(5 * time.Millisecond)
	}
}

var keySeq struct {
	sync.Mutex
	n int
}

// uniqueKey returns a key no other test uses.
func uniqueKey(prefix string) string {
	keySeq.Lock()
	defer keySeq.Unlock()
	keySeq.n++
	return fmt.Sprintf("%s:%d:%d", prefix, time.Now().UnixNano(), keySeq.n)
}

// rawDo writes payload to addr on a fresh connection and returns the raw
// bytes read until the proxy closes the connection or 300ms pass.
func rawDo(t *testing.T, addr string, payload string) string {
	t.Helper()
	reply, _ := exchange(t, addr, payload, 300*time.Millisecond)
	return reply
}

var built struct {
	once sync.Once
	bin  string
	err  error
}

// buildBinary builds the proxy once per test run.
func buildBinary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		dir, err := os.MkdirTemp("", "redlock-proxy-bin-")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "redlock-proxy")
		out, err := exec.Command("go", "build", "-o", built.bin, "..").CombinedOutput()
		if err != nil {
			built.err = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.bin
}

// waitServing waits until a proxy answers PING at addr.
func waitServing(t testing.TB, addr string) {
	t.Helper()
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	waitFor(t, 15*time.Second, "a proxy serving on "+addr, func() error {
		if err := cl.Ping(context.Background()).Err(); err != nil && !strings.HasPrefix(err.Error(), "NOAUTH") {
			return err
		}
		return nil
	})
}

func sigterm() os.Signal { return syscall.SIGTERM }

// startSecondProxy runs another proxy over the cluster's masters and
// returns its address.
func startSecondProxy(t testing.TB, c *cluster) string {
	t.Helper()
	var addrs []string
	for _, s := range c.servers {
		addrs = append(addrs, s.Addr)
	}
	other, _ := startApp(t, addrs)
	return other.Addr()
}

// errorPrefix is an error reply mustDo expects: one that starts with it.
type errorPrefix string

// mustDo sends one command through cl and fails the test unless the reply
// is want: a string (a bulk or status reply), an int (an integer reply),
// nil (a nil reply) or an errorPrefix. Tests read as the session they check:
//
//	mustDo(t, cl, "PONG", "PING")
//	mustDo(t, cl, errorPrefix("ERR unknown command"), "FLUSHALL")
func mustDo(t testing.TB, cl *redis.Client, want any, args ...any) {
	t.Helper()
	got, err := cl.Do(context.Background(), args...).Result()
	switch w := want.(type) {
	case nil:
		if err != redis.Nil {
			t.Fatalf("%v = %v, %v; want nil", args, got, err)
		}
	case errorPrefix:
		if err == nil || !strings.HasPrefix(err.Error(), string(w)) {
			t.Fatalf("%v = %v, %v; want an error starting %q", args, got, err, string(w))
		}
	case int:
		if n, ok := got.(int64); err != nil || !ok || n != int64(w) {
			t.Fatalf("%v = %v, %v; want %d", args, got, err, w)
		}
	case string:
		if s, ok := got.(string); err != nil || !ok || s != w {
			t.Fatalf("%v = %v, %v; want %q", args, got, err, w)
		}
	default:
		t.Fatalf("mustDo: cannot expect a %T", want)
	}
}

// proxyProcess is the proxy binary running over backends.
type proxyProcess struct {
	cmd    *exec.Cmd
	logs   *syncBuffer
	exited chan error // the process's exit, once
}

// startProxyProcess runs the proxy binary over servers, listening on addr,
// with the extra flags given, and kills it at cleanup if it still runs.
func startProxyProcess(t *testing.T, servers []*redisproc.Server, addr string, extra ...string) *proxyProcess {
	t.Helper()
	addrs := addrsOf(servers)
	args := append([]string{"-listen", addr, "-backends", strings.Join(addrs, ",")}, extra...)
	p := &proxyProcess{cmd: exec.Command(buildBinary(t), args...), logs: &syncBuffer{}, exited: make(chan error, 1)}
	p.cmd.Stderr = p.logs
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }() // ends when the process does: the cleanup kills it
	go func() { p.exited <- <-done }()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		select {
		case err := <-p.exited:
			p.exited <- err
		case <-time.After(10 * time.Second):
		}
	})
	waitServing(t, addr)
	return p
}
