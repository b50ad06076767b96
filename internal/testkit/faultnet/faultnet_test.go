package faultnet

import (
	"bufio"
	"errors"
	"io"
	"net"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every line it reads with the same line. It listens on
// addr ("127.0.0.1:0" for any port) and is stopped at cleanup.
type echoServer struct {
	ln   net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	conn []net.Conn
}

func startEcho(t *testing.T, addr string) *echoServer {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("echo listen: %v", err)
	}
	e := &echoServer{ln: ln}
	e.wg.Add(1)
	go func() {
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conn = append(e.conn, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() {
				defer e.wg.Done()
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	t.Cleanup(e.stop)
	return e
}

func (e *echoServer) addr() string { return e.ln.Addr().String() }

// stop closes the listener and every connection, and waits.
func (e *echoServer) stop() {
	e.ln.Close()
	e.mu.Lock()
	for _, c := range e.conn {
		c.Close()
	}
	e.conn = nil
	e.mu.Unlock()
	e.wg.Wait()
}

func newRelay(t *testing.T, target string) *Relay {
	t.Helper()
	r, err := Listen(target)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func dial(t *testing.T, addr string) (net.Conn, *bufio.Reader) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	t.Cleanup(func() { c.Close() })
	return c, bufio.NewReader(c)
}

// roundTrip writes line and reads the echo, returning it and the time taken.
func roundTrip(t *testing.T, c net.Conn, rd *bufio.Reader, line string, limit time.Duration) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	c.SetDeadline(start.Add(limit))
	defer c.SetDeadline(time.Time{})
	if _, err := io.WriteString(c, line+"\n"); err != nil {
		t.Fatalf("write: %v", err)
	}
	got, err := rd.ReadString('\n')
	if err != nil {
		t.Fatalf("read %q: %v", line, err)
	}
	return strings.TrimSuffix(got, "\n"), time.Since(start)
}

func TestForwardsInOrder(t *testing.T) {
	e := startEcho(t, "127.0.0.1:0")
	r := newRelay(t, e.addr())
	if r.Target() != e.addr() {
		t.Fatalf("Target() = %q, want %q", r.Target(), e.addr())
	}
	c, rd := dial(t, r.Addr())
	// Many lines in flight at once: they come back whole and in order.
	var sb strings.Builder
	for i := 0; i < 2000; i++ {
		sb.WriteString(strings.Repeat("x", i%97))
		sb.WriteString("|\n")
	}
	go io.WriteString(c, sb.String())
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := 0; i < 2000; i++ {
		got, err := rd.ReadString('\n')
		if err != nil {
			t.Fatalf("line %d: %v", i, err)
		}
		if want := strings.Repeat("x", i%97) + "|\n"; got != want {
			t.Fatalf("line %d = %q, want %q", i, got, want)
		}
	}
	// The counters move just after each write returns: wait for them.
	waitFor(t, func() bool {
		s := r.Stats()
		return s.Accepted == 1 && s.Open == 1 && s.BytesUp == uint64(sb.Len()) && s.BytesDown == uint64(sb.Len())
	}, "stats of 1 accepted, 1 open, every byte counted each way")
}

func TestBlackHoleHoldsThenDelivers(t *testing.T) {
	e := startEcho(t, "127.0.0.1:0")
	r := newRelay(t, e.addr())
	c, rd := dial(t, r.Addr())
	if got, _ := roundTrip(t, c, rd, "before", 2*time.Second); got != "before" {
		t.Fatalf("got %q", got)
	}
	r.BlackHole(true)
	if _, err := io.WriteString(c, "held-1\nheld-2\n"); err != nil {
		t.Fatal(err)
	}
	// Nothing comes back while the hole is on, and the connection stays open.
	c.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
	if b, err := rd.ReadByte(); err == nil {
		t.Fatalf("read %q through a black hole", b)
	} else if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read during black hole: %v (want a timeout: the connection must stay open)", err)
	}
	// A connection opened during the hole is accepted but silent too.
	c2, rd2 := dial(t, r.Addr())
	io.WriteString(c2, "new\n")
	c2.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := rd2.ReadByte(); err == nil {
		t.Fatal("a new connection forwarded through a black hole")
	}
	r.BlackHole(false)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for _, want := range []string{"held-1\n", "held-2\n"} {
		got, err := rd.ReadString('\n')
		if err != nil || got != want {
			t.Fatalf("after the hole: %q, %v; want %q", got, err, want)
		}
	}
	c2.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := rd2.ReadString('\n'); err != nil || got != "new\n" {
		t.Fatalf("new connection after the hole: %q, %v", got, err)
	}
	if got, _ := roundTrip(t, c, rd, "after", 2*time.Second); got != "after" {
		t.Fatalf("got %q", got)
	}
}

func TestDelayAddsLatency(t *testing.T) {
	e := startEcho(t, "127.0.0.1:0")
	r := newRelay(t, e.addr())
	c, rd := dial(t, r.Addr())
	const d = 80 * time.Millisecond
	r.Delay(d)
	// Both directions are delayed: a round trip takes at least 2d. Only a
	// lower bound is asserted: a loaded machine may add any amount.
	if got, took := roundTrip(t, c, rd, "slow", 5*time.Second); got != "slow" || took < 2*d {
		t.Fatalf("round trip %q took %v, want at least %v", got, took, 2*d)
	}
	// Latency, not a queue: many chunks in flight are all late by about d,
	// not by d each. 5 lines written 20ms apart come back well before 5*2d.
	start := time.Now()
	go func() {
		for i := 0; i < 5; i++ {
			io.WriteString(c, "p\n")
			time.Sleep(20 * time.Millisecond)
		}
	}()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	for i := 0; i < 5; i++ {
		if _, err := rd.ReadString('\n'); err != nil {
			t.Fatal(err)
		}
	}
	if took := time.Since(start); took < 2*d {
		t.Fatalf("pipelined lines took %v, want at least %v", took, 2*d)
	}
	r.Delay(0)
	if got, _ := roundTrip(t, c, rd, "fast", 2*time.Second); got != "fast" {
		t.Fatalf("got %q", got)
	}
}

func TestCutClosesConnections(t *testing.T) {
	e := startEcho(t, "127.0.0.1:0")
	r := newRelay(t, e.addr())
	c, rd := dial(t, r.Addr())
	roundTrip(t, c, rd, "x", 2*time.Second)
	r.Cut()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := rd.ReadByte(); err == nil || isTimeout(err) {
		t.Fatalf("read after Cut: %v, want the connection closed", err)
	}
	// New connections still work.
	c2, rd2 := dial(t, r.Addr())
	if got, _ := roundTrip(t, c2, rd2, "again", 2*time.Second); got != "again" {
		t.Fatalf("got %q", got)
	}
	waitFor(t, func() bool { return r.Stats().Open == 1 }, "one open connection after Cut")
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func waitFor(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestTargetClosingEndsTheClientConnection(t *testing.T) {
	e := startEcho(t, "127.0.0.1:0")
	r := newRelay(t, e.addr())
	c, rd := dial(t, r.Addr())
	roundTrip(t, c, rd, "x", 2*time.Second)
	e.stop() // the target dies: its connections close
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := rd.ReadByte(); err == nil || isTimeout(err) {
		t.Fatalf("read after the target closed: %v, want the connection closed", err)
	}
}

func TestRefusesWhileTargetRefuses(t *testing.T) {
	e := startEcho(t, "127.0.0.1:0")
	target := e.addr()
	r := newRelay(t, target)
	c, rd := dial(t, r.Addr())
	roundTrip(t, c, rd, "x", 2*time.Second)
	e.stop()

	// The first connection after the target died may be accepted and closed
	// (that is how the relay learns); after that, connections are refused.
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", r.Addr(), time.Second)
		if err != nil {
			return errors.Is(err, syscall.ECONNREFUSED)
		}
		c.SetReadDeadline(time.Now().Add(time.Second))
		c.Read(make([]byte, 1))
		c.Close()
		return false
	}, "the relay to refuse connections")

	// The target comes back on the same address: so does the relay.
	startEcho(t, target)
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", r.Addr(), time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(time.Second))
		io.WriteString(c, "back\n")
		got, err := bufio.NewReader(c).ReadString('\n')
		return err == nil && got == "back\n"
	}, "the relay to forward again")
	if s := r.Stats(); s.Refused == 0 || s.Relistens == 0 {
		t.Fatalf("stats = %+v, want refusals and a relisten", s)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	e := startEcho(t, "127.0.0.1:0")
	before := runtime.NumGoroutine()
	r, err := Listen(e.addr())
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	for i := 0; i < 5; i++ {
		c, err := net.Dial("tcp", r.Addr())
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		io.WriteString(c, "x\n")
	}
	r.BlackHole(true) // goroutines blocked on the hole must stop as well
	for _, c := range conns {
		io.WriteString(c, "held\n")
	}
	waitFor(t, func() bool { return r.Stats().Open == 5 }, "5 open connections")
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil { // idempotent
		t.Fatal(err)
	}
	for _, c := range conns {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadAll(c); err != nil && !errors.Is(err, syscall.ECONNRESET) {
			t.Fatalf("read after Close: %v", err)
		}
		c.Close()
	}
	if _, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		t.Fatal("a closed relay accepted a connection")
	}
	// The echo server's own goroutines end once the relay's upstream
	// connections are closed; then we are back where we started.
	waitFor(t, func() bool { return runtime.NumGoroutine() <= before }, "goroutines to end")
}

// namedServer answers every line with its name, a colon and the line, and
// remembers the lines it received.
type namedServer struct {
	*echoServer
	mu    sync.Mutex
	lines []string
}

func startNamed(t *testing.T, name string) *namedServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	n := &namedServer{echoServer: &echoServer{ln: ln}}
	e := n.echoServer
	e.wg.Add(1)
	go func() { // ends when stop closes the listener
		defer e.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			e.mu.Lock()
			e.conn = append(e.conn, c)
			e.mu.Unlock()
			e.wg.Add(1)
			go func() { // ends when the connection closes
				defer e.wg.Done()
				defer c.Close()
				rd := bufio.NewReader(c)
				for {
					line, err := rd.ReadString('\n')
					if err != nil {
						return
					}
					n.mu.Lock()
					n.lines = append(n.lines, strings.TrimSpace(line))
					n.mu.Unlock()
					if _, err := io.WriteString(c, name+":"+line); err != nil {
						return
					}
				}
			}()
		}
	}()
	t.Cleanup(e.stop)
	return n
}

func (n *namedServer) received() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.lines...)
}

func TestRetargetMovesTheLinkAndDropsWhatWasQueued(t *testing.T) {
	a, b := startNamed(t, "a"), startNamed(t, "b")
	r := newRelay(t, a.addr())
	c, rd := dial(t, r.Addr())
	if got, _ := roundTrip(t, c, rd, "x", 2*time.Second); got != "a:x" {
		t.Fatalf("before: got %q, want a:x", got)
	}
	r.BlackHole(true)
	if _, err := io.WriteString(c, "held\n"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, func() bool { return r.Stats().BytesUp == 2 }, "the held line read by the relay") // only "x\n" went up
	r.Retarget(b.addr())
	r.BlackHole(false)
	if r.Target() != b.addr() {
		t.Fatalf("Target() = %s, want %s", r.Target(), b.addr())
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := rd.ReadByte(); err == nil || isTimeout(err) {
		t.Fatalf("read after Retarget: %v, want the connection closed", err)
	}
	c2, rd2 := dial(t, r.Addr())
	if got, _ := roundTrip(t, c2, rd2, "y", 2*time.Second); got != "b:y" {
		t.Fatalf("after: got %q, want b:y", got)
	}
	time.Sleep(50 * time.Millisecond)
	for _, srv := range []*namedServer{a, b} {
		for _, l := range srv.received() {
			if l == "held" {
				t.Fatalf("the line queued for the old target reached a server: %q", srv.received())
			}
		}
	}
}

func TestRetargetWhileTheOldTargetRefuses(t *testing.T) {
	a, b := startNamed(t, "a"), startNamed(t, "b")
	r := newRelay(t, a.addr())
	a.stop()
	// The relay notices the refusal on the next connection and stops listening.
	if c, err := net.DialTimeout("tcp", r.Addr(), time.Second); err == nil {
		c.Close()
	}
	waitFor(t, func() bool { return r.Stats().Refused >= 1 }, "the relay to see the target refuse")
	r.Retarget(b.addr())
	waitFor(t, func() bool {
		c, err := net.DialTimeout("tcp", r.Addr(), time.Second)
		if err != nil {
			return false
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(2 * time.Second))
		if _, err := io.WriteString(c, "z\n"); err != nil {
			return false
		}
		line, err := bufio.NewReader(c).ReadString('\n')
		return err == nil && line == "b:z\n"
	}, "the relay to forward to the new target")
}
