package netio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// collector is a Receiver that hands results to the test.
type collector struct {
	ch chan tagged
}

type tagged struct {
	tag int
	r   Result
}

func newCollector() *collector { return &collector{ch: make(chan tagged, 1<<16)} }

func (c *collector) Receive(tag int, r Result) { c.ch <- tagged{tag, r} }

func (c *collector) next(t *testing.T) tagged {
	t.Helper()
	select {
	case x := <-c.ch:
		return x
	case <-time.After(10 * time.Second):
		t.Fatal("no result within 10s")
		return tagged{}
	}
}

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func startRedis(t *testing.T) *redisproc.Server {
	t.Helper()
	s, err := redisproc.Start(t.TempDir())
	if err != nil {
		t.Fatalf("redis-server: %v (run ./test.sh, which installs it)", err)
	}
	t.Cleanup(s.Stop)
	return s
}

func startLink(t *testing.T, o Options) *Link {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet()
	}
	l := NewLink(o)
	l.Start()
	t.Cleanup(func() { l.Close() })
	waitUp(t, l)
	return l
}

func waitUp(t *testing.T, l *Link) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !l.Health().Up {
		if time.Now().After(deadline) {
			t.Fatalf("link to %s not up: %+v", l.Addr(), l.Health())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func cmd(args ...string) []byte { return resp.AppendCommand(nil, args...) }

func soon() time.Time { return time.Now().Add(5 * time.Second) }

func TestSendInOrderAndCounts(t *testing.T) {
	s := startRedis(t)
	l := startLink(t, Options{Addr: s.Addr})
	c := newCollector()
	const n = 2000
	var wg sync.WaitGroup
	// Many goroutines share the one connection; each key's commands stay
	// in the order they were sent.
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < n/4; i++ {
				l.Send(cmd("INCR", fmt.Sprintf("ctr%d", g)), nil, c, g*1000000+i, soon())
			}
		}(g)
	}
	wg.Wait()
	last := map[int]int64{}
	for i := 0; i < n; i++ {
		x := c.next(t)
		if x.r.Err != nil || x.r.V.Kind != resp.KindInt {
			t.Fatalf("result %d: %+v", i, x.r)
		}
		if !x.r.Counts {
			t.Fatalf("a verified, never-restarted backend's reply does not count")
		}
		g := x.tag / 1000000
		if x.r.V.Int != last[g]+1 {
			t.Fatalf("goroutine %d: INCR replied %d after %d: out of order", g, x.r.V.Int, last[g])
		}
		last[g] = x.r.V.Int
	}
	h := l.Health()
	if h.Writes == 0 || h.Sent < n || h.Writes >= h.Sent {
		t.Errorf("no batching: %d commands in %d writes", h.Sent, h.Writes)
	}
}

func TestDownBackendAnswersAtOnce(t *testing.T) {
	port, _ := redisproc.FreePort()
	l := NewLink(Options{Addr: fmt.Sprintf("127.0.0.1:%d", port), Logger: quiet()})
	l.Start()
	defer l.Close()
	c := newCollector()
	l.Send(cmd("PING"), nil, c, 7, soon())
	x := c.next(t)
	var be *BackendError
	if x.tag != 7 || !errors.Is(x.r.Err, ErrDown) || !errors.As(x.r.Err, &be) || be.Addr != l.Addr() {
		t.Fatalf("send to a closed port: %+v; want ErrDown naming the backend", x)
	}
}

// A hung backend (SIGSTOP) costs each command its deadline, exactly, and
// is disconnected after DeadAfter; it comes back after SIGCONT.
func TestHungBackendTimesOutAndRecovers(t *testing.T) {
	s := startRedis(t)
	l := startLink(t, Options{Addr: s.Addr, Timeout: 50 * time.Millisecond, DeadAfter: 300 * time.Millisecond, DialTimeout: 200 * time.Millisecond})
	c := newCollector()
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			s.Resume()
		}
	}()
	start := time.Now()
	deadline := start.Add(100 * time.Millisecond)
	for i := 0; i < 20; i++ {
		l.Send(cmd("PING"), nil, c, i, deadline)
	}
	for i := 0; i < 20; i++ {
		x := c.next(t)
		if !errors.Is(x.r.Err, ErrTimeout) {
			t.Fatalf("command to a stopped backend: %+v; want ErrTimeout", x.r)
		}
	}
	if early := time.Until(deadline); early > 0 {
		t.Fatalf("timed out %v before its deadline", early)
	}
	// Disconnected after DeadAfter; while it stays stopped, no connection
	// verifies, so the link is not up.
	waitFor(t, "the link to notice the hung backend", func() bool { return !l.Health().Up })
	s.Resume()
	resumed = true
	waitUp(t, l)
	l.Send(cmd("PING"), nil, c, 99, soon())
	if x := c.next(t); x.r.Err != nil || string(x.r.V.Str) != "PONG" {
		t.Fatalf("after SIGCONT: %+v", x.r)
	}
	if h := l.Health(); h.Timeouts < 20 || h.Connects < 2 || h.Restarts != 0 {
		t.Errorf("health after the hang = %+v; want timeouts counted, a reconnect, no restart", h)
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Under the run-id rule, a backend that restarts (new run_id) is
// quarantined for the hold from the first reply on the new connection; a
// reconnect to the same run is not.
func TestRunIDRuleRestartQuarantine(t *testing.T) {
	s := startRedis(t)
	// The hold runs from when the backend came back (its uptime), not from
	// when the link reconnected: it must outlast the restart and redial.
	hold := 3 * time.Second
	l := startLink(t, Options{Addr: s.Addr, Restart: quorum.RestartRule{Hold: hold, Mode: quorum.RuleRunID}})
	c := newCollector()
	first := l.Health().RunID
	if first == "" {
		t.Fatalf("no run_id from INFO server")
	}

	// A dropped connection to the same process: no quarantine.
	l.dropConn()
	waitFor(t, "a reconnect", func() bool { h := l.Health(); return h.Up && h.Connects >= 2 })
	l.Send(cmd("PING"), nil, c, 0, soon())
	if x := c.next(t); !x.r.Counts {
		t.Fatalf("a reconnect to the same run was quarantined")
	}

	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	restartedAt := time.Now()
	waitFor(t, "the restarted backend", func() bool { h := l.Health(); return h.Up && h.RunID != first })
	// Every reply counts false until the hold has passed: from the very
	// first command on the new connection.
	l.Send(cmd("PING"), nil, c, 1, soon())
	x := c.next(t)
	if x.r.Err != nil || x.r.Counts {
		t.Fatalf("first reply after a restart: %+v; want an uncounted PONG (health %+v)", x.r, l.Health())
	}
	h := l.Health()
	if h.Restarts != 1 || h.QuarantinedUntil.Before(restartedAt.Add(hold/2)) {
		t.Fatalf("health after restart = %+v", h)
	}
	// Each periodic check converts the master's instants again, with that
	// reply's latency, so the end can move later by a round trip (never
	// earlier): the votes must count again soon after the hold, not at an
	// exact instant.
	waitFor(t, "the quarantine to end", func() bool { return time.Now().After(h.QuarantinedUntil) })
	for i := 2; ; i++ {
		l.Send(cmd("PING"), nil, c, i, soon())
		if x := c.next(t); x.r.Counts {
			break
		}
		if late := time.Since(h.QuarantinedUntil); late > 2*time.Second {
			t.Fatalf("still quarantined %v after QuarantinedUntil (health %+v)", late, l.Health())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if h2 := l.Health(); h2.QuarantinedUntil.Before(h.QuarantinedUntil) {
		t.Fatalf("the quarantine's end moved earlier: %v, was %v", h2.QuarantinedUntil, h.QuarantinedUntil)
	}
}

// EVALSHA of a script works on a connection that has not seen it, and
// again after the backend's script cache was flushed behind our back.
func TestScriptPreload(t *testing.T) {
	s := startRedis(t)
	l := startLink(t, Options{Addr: s.Addr})
	c := newCollector()
	sc := resp.NewScript([]byte("return ARGV[1]"))
	evalsha := resp.AppendCommand(nil, "EVALSHA", sc.Sha, "0", "hello")
	l.Send(evalsha, sc, c, 0, soon())
	if x := c.next(t); x.r.Err != nil || string(x.r.V.Str) != "hello" {
		t.Fatalf("first EVALSHA: %+v", x.r)
	}
	if _, err := s.Do("SCRIPT", "FLUSH"); err != nil {
		t.Fatal(err)
	}
	l.Send(evalsha, sc, c, 1, soon()) // NOSCRIPT: the link learns it is gone
	if x := c.next(t); x.r.V.Kind != resp.KindError {
		t.Fatalf("EVALSHA after SCRIPT FLUSH: %+v; want NOSCRIPT once", x.r)
	}
	l.Send(evalsha, sc, c, 2, soon())
	if x := c.next(t); x.r.Err != nil || string(x.r.V.Str) != "hello" {
		t.Fatalf("EVALSHA after the reload: %+v", x.r)
	}
}

// Close stops every goroutine the link started, and pending commands get
// an answer.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	s := startRedis(t)
	before := runtime.NumGoroutine()
	for i := 0; i < 5; i++ {
		l := NewLink(Options{Addr: s.Addr, Logger: quiet()})
		l.Start()
		waitUp(t, l)
		c := newCollector()
		s.Pause()
		l.Send(cmd("PING"), nil, c, 0, time.Now().Add(time.Hour))
		l.Close()
		s.Resume()
		if x := c.next(t); x.r.Err == nil {
			t.Fatalf("a command pending at Close got %+v; want an error", x.r)
		}
	}
	waitFor(t, "link goroutines to end", func() bool { return runtime.NumGoroutine() <= before+1 })
}

// A pool answers through one Receiver for all backends.
func TestPool(t *testing.T) {
	var opts []Options
	for i := 0; i < 3; i++ {
		opts = append(opts, Options{Addr: startRedis(t).Addr, Logger: quiet()})
	}
	p := NewPool(opts)
	p.Start()
	defer p.Close()
	waitFor(t, "the pool", func() bool {
		up := 0
		for _, h := range p.Health() {
			if h.Up {
				up++
			}
		}
		return up == 3
	})
	c := newCollector()
	for i := 0; i < p.N(); i++ {
		p.Send(i, cmd("SET", "k", fmt.Sprint(i), "NX", "PX", "10000"), nil, c, i, soon())
	}
	seen := map[int]bool{}
	for i := 0; i < 3; i++ {
		x := c.next(t)
		if !x.r.V.IsOK() {
			t.Fatalf("backend %d: %+v", x.tag, x.r)
		}
		seen[x.tag] = true
	}
	if len(seen) != 3 {
		t.Fatalf("results for %v", seen)
	}
	if err := p.Drain(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("drain: %v", err)
	}
}

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// Something that accepts connections and closes them at once (a load
// balancer in front of a dead Redis) is redialled with backoff, not in a
// tight loop.
func TestAcceptAndCloseBacksOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	l := NewLink(Options{Addr: ln.Addr().String(), Logger: quiet()})
	l.Start()
	time.Sleep(time.Second)
	l.Close()
	if n := accepted.Load(); n > 20 {
		t.Fatalf("%d connections in one second: no backoff", n)
	}
}

// A script's error is worded without the line Redis names, so that one
// refusal met at two lines is logged as one; a refusal of writes says so,
// whichever check met it, and other errors are not taken for one.
func TestRefusedWritesAreWordedAlikeFromAnyCheck(t *testing.T) {
	a := scriptReply("OOM command not allowed when used memory > 'maxmemory'. script: c8a019a5c667cfd60a5a119a621d5505eb119f08, on @user_script:149.")
	b := scriptReply("OOM command not allowed when used memory > 'maxmemory'. script: c8a019a5c667cfd60a5a119a621d5505eb119f08, on @user_script:153.")
	if a != b || strings.Contains(a, "user_script") {
		t.Errorf("script errors %q and %q; want the same words, without the line", a, b)
	}
	// Redis 6 words it the other way round.
	if c := scriptReply("ERR Error running script (call to f_c8a019a5c667cfd60a5a119a621d5505eb119f08): @user_script:123: @user_script: 123: -OOM command not allowed when used memory > 'maxmemory'."); c != a {
		t.Errorf("Redis 6's script error worded %q; want %q", c, a)
	}
	l := NewLink(Options{Addr: "127.0.0.1:1"})
	defer l.Close()
	for _, reply := range []string{a, "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk.", "NOREPLICAS Not enough good replicas to write."} {
		if why := l.checkFailed("marker script", reply); !strings.HasPrefix(why, "the master refuses writes: ") || why != writeRefusal(reply) {
			t.Errorf("%q worded %q", reply, why)
		}
	}
	for _, reply := range []string{"ERR unknown command", "NOSCRIPT No matching script.", "BUSY Redis is busy running a script."} {
		if writeRefusal(reply) != "" {
			t.Errorf("%q taken for a refusal of writes", reply)
		}
	}
	if got := scriptReply("ERR no script here"); got != "ERR no script here" {
		t.Errorf("a plain error became %q", got)
	}
}
