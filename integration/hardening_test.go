package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// exchange writes payload on a fresh connection and reads until the proxy
// closes it (or a deadline passes); closed reports whether it did close.
func exchange(t *testing.T, addr, payload string, wait time.Duration) (reply string, closed bool) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte(payload))
	c.SetReadDeadline(time.Now().Add(wait))
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			var ne net.Error
			return string(out), !(errors.As(err, &ne) && ne.Timeout())
		}
	}
}

// Hostile input gets Redis's error wording and closes only that connection;
// the process, other clients and the locks they hold carry on.
func TestHostileInput(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	holder := c.client(2)
	key := uniqueKey("held")
	if ok, _ := holder.SetNX(ctx, key, "mine", time.Minute).Result(); !ok {
		t.Fatal("SET NX")
	}
	for _, tc := range []struct{ name, in, want string }{
		{"multibulk count 2^63-1", "*9223372036854775807\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"bulk length 2^63-1", "*1\r\n$9223372036854775807\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"negative bulk", "*1\r\n$-1\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk above max_bulk", "*2\r\n$3\r\nSET\r\n$1048577\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"too many arguments", "*100000\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"not a bulk", "*1\r\n+PING\r\n", "-ERR Protocol error: expected '$', got '+'\r\n"},
		{"unbalanced quotes", "SET \"k v NX\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"inline without end", strings.Repeat("A", 70000), "-ERR Protocol error: too big inline request\r\n"},
		{"count without end", "*" + strings.Repeat("1", 70000), "-ERR Protocol error: too big mbulk count string\r\n"},
		{"after a good command", "PING\r\n*-9x\r\n", "+PONG\r\n-ERR Protocol error: invalid multibulk length\r\n"},
	} {
		got, closed := exchange(t, c.app.Addr(), tc.in, 3*time.Second)
		if got != tc.want || !closed {
			t.Errorf("%s: got %q (closed %v); want %q and the connection closed", tc.name, got, closed, tc.want)
		}
	}
	// Everyone else is fine, and nothing held was lost.
	if v, err := holder.Get(ctx, key).Result(); err != nil || v != "mine" {
		t.Fatalf("after hostile clients, GET = %q, %v", v, err)
	}
	c.checkHeld(t, "after hostile clients", key, "mine")
	if err := c.client(3).Ping(ctx).Err(); err != nil {
		t.Fatalf("a new client after hostile ones: %v", err)
	}
}

// Bad lock commands are answered with Redis's own words.
func TestBadLockCommandsWording(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	for _, tc := range []struct {
		args []any
		want string
	}{
		{[]any{"SET", "k", "v", "NX", "PX", "0"}, "ERR invalid expire time in 'set' command"},
		{[]any{"SET", "k", "v", "NX", "PX", "-5"}, "ERR invalid expire time in 'set' command"},
		{[]any{"SET", "k", "v", "NX", "PX", "abc"}, "ERR value is not an integer or out of range"},
		{[]any{"SET", "k", "v", "NX", "XX", "PX", "10"}, "ERR syntax error"},
		{[]any{"SET", "k", "v", "NX", "PX"}, "ERR syntax error"},
		{[]any{"SET", "k", "v", "NX", "EX", "10", "PX", "10"}, "ERR syntax error"},
		{[]any{"SET", "k"}, "ERR wrong number of arguments for 'set' command"},
		{[]any{"EVAL", seedRelease, "5", "k"}, "ERR Number of keys can't be greater than number of args"},
		{[]any{"EVAL", seedRelease, "-1", "k"}, "ERR Number of keys can't be negative"},
		{[]any{"EVAL", seedRelease, "x", "k"}, "ERR value is not an integer or out of range"},
		{[]any{"PTTL"}, "ERR wrong number of arguments for 'pttl' command"},
		{[]any{"DEL"}, "ERR wrong number of arguments for 'del' command"},
		{[]any{"CLIENT", "NOPE"}, "ERR unknown subcommand 'NOPE'. Try CLIENT HELP."},
	} {
		err := cl.Do(ctx, tc.args...).Err()
		if err == nil || err.Error() != tc.want {
			t.Errorf("%v: %v; want %q", short(tc.args), err, tc.want)
		}
	}
}

// requirepass: nothing but AUTH, HELLO and QUIT before authenticating;
// Redis's NOAUTH and WRONGPASS; the pre-auth limits of Redis.
func TestClientAuthentication(t *testing.T) {
	c := newCluster(t, 3, func(cfg *config.Config) {
		cfg.RequirePass = "s3cret"
		cfg.Users = []config.UserConfig{{Name: "app", Password: "apppass"}}
	})
	addr := c.app.Addr()
	ctx := context.Background()
	for _, tc := range []struct{ in, want string }{
		{"SET k v NX PX 1000\r\n", "-NOAUTH Authentication required.\r\n"},
		{"AUTH wrong\r\n", "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{"AUTH app s3cret\r\n", "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{"AUTH s3cret\r\nPING\r\n", "+OK\r\n+PONG\r\n"},
		{"AUTH app apppass\r\nPING\r\n", "+OK\r\n+PONG\r\n"},
		{"HELLO 2 AUTH default s3cret\r\nPING\r\n", "*14\r\n"},
		{"HELLO 3\r\n", "-NOAUTH HELLO must be called with the client already authenticated"},
		// Redis's pre-authentication limits: a handful of arguments, small bulks.
		{"*11\r\n", "-ERR Protocol error: unauthenticated multibulk length\r\n"},
		{"*2\r\n$4\r\nAUTH\r\n$20000\r\n", "-ERR Protocol error: unauthenticated bulk length\r\n"},
	} {
		got, _ := exchange(t, addr, tc.in, 300*time.Millisecond)
		if !strings.HasPrefix(got, tc.want) {
			t.Errorf("%q: got %q; want %q", tc.in, got, tc.want)
		}
	}
	// After AUTH the full limits apply: a 20 KB argument is fine.
	big := strings.Repeat("x", 20000)
	got, _ := exchange(t, addr, "AUTH s3cret\r\n*2\r\n$4\r\nECHO\r\n$20000\r\n"+big+"\r\n", 500*time.Millisecond)
	if got != "+OK\r\n$20000\r\n"+big+"\r\n" {
		t.Errorf("a 20 KB argument after AUTH: got %d bytes %q...", len(got), got[:min(len(got), 60)])
	}
	// go-redis with a password, RESP2 and RESP3; and a named user.
	for _, o := range []*redis.Options{
		{Addr: addr, Password: "s3cret", Protocol: 2},
		{Addr: addr, Password: "s3cret", Protocol: 3},
		{Addr: addr, Username: "app", Password: "apppass", Protocol: 3},
	} {
		cl := redis.NewClient(o)
		key := uniqueKey("auth")
		if ok, err := cl.SetNX(ctx, key, "t", time.Second).Result(); !ok || err != nil {
			t.Errorf("go-redis %s/RESP%d: SET NX = %v, %v", o.Username, o.Protocol, ok, err)
		}
		cl.Close()
	}
	if err := redis.NewClient(&redis.Options{Addr: addr, Password: "bad"}).Ping(ctx).Err(); err == nil ||
		!strings.HasPrefix(err.Error(), "WRONGPASS") {
		t.Errorf("go-redis with a wrong password: %v", err)
	}
	// redis-cli -a.
	_, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command("redis-cli", "-p", port, "--no-auth-warning", "-a", "s3cret", "SET", "cli-auth", "v", "NX", "PX", "5000").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "OK" {
		t.Errorf("redis-cli -a: %v %q", err, out)
	}
}

// The proxy authenticates to its backends with its own credentials, never
// the clients'.
func TestBackendCredentials(t *testing.T) {
	servers := startRedis(t, 3, "--requirepass", "backendpass")
	addrs := addrsOf(servers)
	a, _ := startApp(t, addrs, func(cfg *config.Config) {
		cfg.BackendPassword = "backendpass"
		cfg.RequirePass = "clientpass"
	})
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: a.Addr(), Password: "clientpass"})
	defer cl.Close()
	if ok, err := cl.SetNX(ctx, "bk", "t", 5*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX with backend credentials: %v, %v", ok, err)
	}
	for _, s := range servers {
		d := redis.NewClient(&redis.Options{Addr: s.Addr, Password: "backendpass"})
		if v, _ := d.Get(ctx, "bk").Result(); v != "t" {
			t.Errorf("backend %s does not hold the lock", s.Addr)
		}
		d.Close()
	}
}

// TLS to clients (go-redis and redis-cli) and to backends, with
// certificates the test generates.
func TestTLS(t *testing.T) {
	cs := newCerts(t)
	var addrs []string
	for i := 0; i < 3; i++ {
		s, err := redisproc.StartTLS(t.TempDir(), redisproc.TLSFiles{Cert: cs.ServerCert, Key: cs.ServerKey, CA: cs.CA, Client: cs.clientTLS()})
		if err != nil {
			t.Fatalf("redis-server with TLS: %v", err)
		}
		t.Cleanup(s.Stop)
		addrs = append(addrs, s.Addr)
	}
	a, _ := startApp(t, addrs, func(cfg *config.Config) {
		cfg.TLSCertFile, cfg.TLSKeyFile, cfg.TLSCAFile = cs.ServerCert, cs.ServerKey, cs.CA
		cfg.TLSAuthClients = true
		cfg.BackendTLS = true
		cfg.BackendTLSCAFile = cs.CA
	})
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: a.Addr(), TLSConfig: cs.clientTLS()})
	defer cl.Close()
	key := uniqueKey("tls")
	if ok, err := cl.SetNX(ctx, key, "t", 5*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX over TLS both ways: %v, %v", ok, err)
	}
	if n, err := cl.Eval(ctx, seedRelease, []string{key}, "t").Int(); n != 1 || err != nil {
		t.Fatalf("release over TLS: %d, %v", n, err)
	}
	// Without a client certificate the handshake fails (tls_auth_clients).
	noCert := cs.clientTLS()
	noCert.Certificates = nil
	if err := redis.NewClient(&redis.Options{Addr: a.Addr(), TLSConfig: noCert, MaxRetries: -1}).Ping(ctx).Err(); err == nil {
		t.Errorf("a client without a certificate was accepted")
	}
	// Plain TCP to the TLS port gets nothing useful.
	if got, _ := exchange(t, a.Addr(), "PING\r\n", 500*time.Millisecond); strings.Contains(got, "PONG") {
		t.Errorf("plain PING on the TLS port answered %q", got)
	}
	_, port, _ := net.SplitHostPort(a.Addr())
	out, err := exec.Command("redis-cli", "-p", port, "--tls", "--cacert", cs.CA, "--cert", cs.ClientCert, "--key", cs.ClientKey,
		"SET", "cli-tls", "v", "NX", "PX", "5000").CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "OK" {
		t.Errorf("redis-cli --tls: %v %q", err, out)
	}
}

// max_clients, idle_timeout and command_timeout; thousands of idle
// connections do not starve a new client.
func TestConnectionLimits(t *testing.T) {
	c := newCluster(t, 3, func(cfg *config.Config) {
		cfg.MaxClients = 3000
		cfg.IdleTimeout = 0
		cfg.CommandTimeout = 300 * time.Millisecond
	})
	addr := c.app.Addr()
	// A command dripped in too slowly is cut off.
	got, closed := exchange(t, addr, "*1\r\n$4\r\nPI", 3*time.Second)
	if !closed || !strings.Contains(got, "command_timeout") {
		t.Errorf("slow drip: got %q, closed %v; want the command_timeout error and a close", got, closed)
	}
	// Thousands of idle connections...
	var idle []net.Conn
	defer func() {
		for _, cn := range idle {
			cn.Close()
		}
	}()
	for i := 0; i < 2000; i++ {
		cn, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		idle = append(idle, cn)
	}
	// ...and a new client still locks at once.
	ctx := context.Background()
	start := time.Now()
	if ok, err := c.client(2).SetNX(ctx, uniqueKey("starve"), "t", time.Second).Result(); !ok || err != nil {
		t.Fatalf("with 2000 idle connections: %v, %v", ok, err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("with 2000 idle connections a new client took %v", d)
	}
	for _, cn := range idle {
		cn.Close()
	}
	idle = nil

	small := newCluster(t, 3, func(cfg *config.Config) {
		cfg.MaxClients = 2
		cfg.IdleTimeout = 300 * time.Millisecond
	})
	a1, _ := net.Dial("tcp", small.app.Addr())
	defer a1.Close()
	a2, _ := net.Dial("tcp", small.app.Addr())
	defer a2.Close()
	a1.Write([]byte("PING\r\n"))
	a2.Write([]byte("PING\r\n"))
	bufio.NewReader(a1).ReadString('\n')
	bufio.NewReader(a2).ReadString('\n')
	got, closed = exchange(t, small.app.Addr(), "PING\r\n", 2*time.Second)
	if got != "-ERR max number of clients reached\r\n" || !closed {
		t.Errorf("third client with max_clients 2: %q (closed %v)", got, closed)
	}
	// Idle clients are closed after idle_timeout.
	a1.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := a1.Read(make([]byte, 10)); err == nil || errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("an idle client was not closed: %v", err)
	}
}

// shutdownBound is the shutdown the docs promise, 5 s for the commands in
// flight, and a second for the process to close and exit.
const shutdownBound = 5*time.Second + time.Second

// SIGTERM under load: the proxy stops accepting, answers what it has
// started, and exits 0 within the grace the docs promise.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	servers := startRedis(t, 3)
	addrs := addrsOf(servers)
	bin := buildBinary(t)
	port, _ := redisproc.FreePort()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "-listen", addr, "-admin", "", "-backends", strings.Join(addrs, ","), "-log_level", "info",
		"-restart_quarantine", "run-id") // the masters are fresh: the default rule would refuse locks for max_ttl
	var logs syncBuffer // read while the proxy may still write to it
	cmd.Stderr = &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	reaped := false
	defer func() {
		if !reaped {
			cmd.Process.Kill()
			<-exited
		}
	}()
	waitServing(t, addr)

	ctx := context.Background()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var granted, protocolErrors int
	stop := make(chan struct{})
	for w := 0; w < 20; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, PoolSize: 1})
			defer cl.Close()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				key := fmt.Sprintf("shut:%d:%d", w, i)
				ok, err := cl.SetNX(ctx, key, "t", 10*time.Second).Result()
				mu.Lock()
				if ok {
					granted++
				}
				if err != nil && strings.Contains(err.Error(), "protocol") {
					protocolErrors++
				}
				mu.Unlock()
				if err != nil {
					return // the proxy is going away
				}
			}
		}(w)
	}
	time.Sleep(500 * time.Millisecond)
	if err := cmd.Process.Signal(sigterm()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		reaped = true
		if err != nil {
			t.Fatalf("proxy exited with %v after SIGTERM; logs:\n%s", err, logs.String())
		}
	case <-time.After(shutdownBound):
		t.Fatalf("proxy did not exit within %v of SIGTERM; logs:\n%s", shutdownBound, logs.String())
	}
	close(stop)
	wg.Wait()
	if granted == 0 || protocolErrors != 0 {
		t.Fatalf("granted %d locks, %d protocol errors (a reply cut in half)", granted, protocolErrors)
	}
	if !strings.Contains(logs.String(), "stopped") {
		t.Errorf("no 'stopped' in the logs:\n%s", logs.String())
	}
}

// A client that speaks plain text to the TLS listener is logged, once:
// without the line nothing says why its connections close.
func TestPlainTextClientOnTLSListenerIsLoggedOnce(t *testing.T) {
	cs := newCerts(t)
	servers := startRedis(t, 3)
	logs := &syncBuffer{}
	a := startLogged(t, []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}, logs, func(cfg *config.Config) {
		cfg.TLSCertFile, cfg.TLSKeyFile = cs.ServerCert, cs.ServerKey
	})
	for i := 0; i < 3; i++ {
		exchange(t, a.Addr(), "PING\r\n", 300*time.Millisecond)
	}
	line := waitLog(t, logs, "spoke plain text to the TLS listener", 3*time.Second)
	if !strings.Contains(line, "level=WARN") || !strings.Contains(line, "client=127.0.0.1:") {
		t.Errorf("the log line: %s", line)
	}
	if n := strings.Count(logs.String(), "spoke plain text"); n != 1 {
		t.Errorf("%d lines for 3 plain-text connections; want 1", n)
	}
}
