package integration

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo"
)

// What an operator meets: the messages of common mistakes and of the first
// start, what the admin address exposes, and the counts INFO gives.

// backend_tls against masters that speak plain text: the masters are
// reachable, and the reason given is the TLS setting, not "unreachable".
func TestBackendTLSAgainstPlainTextMasters(t *testing.T) {
	servers := startRedis(t, 3)
	addrs := addrsOf(servers)
	cs := newCerts(t)
	var logs syncBuffer
	a := startLogged(t, addrs, &logs, func(cfg *config.Config) {
		cfg.BackendTLS = true
		cfg.BackendTLSCAFile = cs.CA
	})
	const want = "TLS handshake failed: the server does not seem to speak TLS"
	line := waitLog(t, &logs, want, 10*time.Second)
	if !strings.Contains(line, "addr=127.0.0.1:") {
		t.Errorf("log line %q does not name the backend's address", line)
	}
	waitFor(t, 10*time.Second, "/readyz to answer 503 with each backend's TLS handshake named", func() error {
		code, body := httpGet(t, "http://"+a.AdminAddr()+"/readyz")
		if code != 503 || strings.Count(body, want) != 3 || strings.Contains(body, "unreachable") {
			return fmt.Errorf("/readyz = %d %q", code, body)
		}
		return nil
	})
	if strings.Contains(logs.String(), "unreachable") {
		t.Errorf("reachable masters logged as unreachable:\n%s", logs.String())
	}
}

// A command the proxy does not serve gets Redis's own reply first, then
// where to see what this server serves, with something redis-cli runs
// (redis-cli answers HELP itself).
func TestUnknownCommandSaysWhatIsServed(t *testing.T) {
	c := newCluster(t, 3)
	got := rawDo(t, c.app.Addr(), "LPUSH queue job\r\n")
	want := "-ERR unknown command 'LPUSH', with args beginning with: 'queue' 'job' (redlock-proxy serves lock commands only; COMMAND LIST lists them, redis-cli's help @lock describes them)\r\n"
	if got != want {
		t.Errorf("LPUSH = %q; want %q", got, want)
	}
}

// A client with half a command read when the proxy shuts down is told it is
// a shutdown, not a command_timeout.
func TestShutdownWithHalfACommandRead(t *testing.T) {
	c := newCluster(t, 3)
	conn, err := net.Dial("tcp", c.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("*3\r\n$3\r\nGET\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond) // for the proxy to read the first part

	stopped := make(chan struct{})
	go func() { // ends when the proxy has shut down
		c.stopApp()
		close(stopped)
	}()
	conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 512)
	n, _ := conn.Read(buf)
	got := string(buf[:n])
	<-stopped
	want := "-ERR redlock-proxy: shutting down: the command had not arrived whole and was not run; closing the connection\r\n"
	if got != want {
		t.Errorf("half a command at shutdown: got %q; want %q", got, want)
	}
}

// INFO stats counts acquisitions, extends and releases apart.
func TestInfoStatsCountsGrantsAndReleasesApart(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	var keys []string
	for i := 0; i < 3; i++ {
		k := uniqueKey("stats")
		keys = append(keys, k)
		if ok, err := cl.SetNX(ctx, k, "t", 10*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX: %v, %v", ok, err)
		}
	}
	if ok, _ := cl.SetNX(ctx, keys[0], "u", 10*time.Second).Result(); ok {
		t.Fatal("a held lock was granted again")
	}
	mustDo(t, cl, 1, "EVAL", oneLineExtend, 1, keys[0], "t", 20000)
	mustDo(t, cl, 0, "EVAL", oneLineExtend, 1, keys[0], "u", 20000)
	mustDo(t, cl, 1, "EVAL", seedRelease, 1, keys[0], "t")
	mustDo(t, cl, 1, "DELIFEQ", keys[1], "t")
	mustDo(t, cl, 0, "EVAL", seedRelease, 1, keys[2], "u")
	mustDo(t, cl, "t", "GET", keys[2])
	info, err := cl.Info(ctx, "stats").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"lock_granted:3\r\n", "lock_refused:1\r\n", "lock_extended:1\r\n", "lock_extend_refused:1\r\n",
		"lock_released:2\r\n", "lock_release_refused:1\r\n", "lock_no_quorum:0\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO stats lacks %q:\n%s", want, info)
		}
	}
}

// Go's profiles are served on a loopback admin address, not on one bound
// beyond it unless asked for; /metrics is served either way.
func TestPprofOnlyWhereAsked(t *testing.T) {
	servers := startRedis(t, 3)
	addrs := addrsOf(servers)
	for _, tt := range []struct {
		admin, pprof string
		served       bool
	}{
		{"127.0.0.1:0", "auto", true},
		{"0.0.0.0:0", "auto", false},
		{"0.0.0.0:0", "true", true},
		{"127.0.0.1:0", "false", false},
	} {
		a, stop := startApp(t, addrs, func(cfg *config.Config) { cfg.Admin, cfg.Pprof = tt.admin, tt.pprof })
		_, port, _ := net.SplitHostPort(a.AdminAddr())
		base := "http://127.0.0.1:" + port
		if code, _ := httpGet(t, base+"/metrics"); code != 200 {
			t.Errorf("admin %s: /metrics = %d", tt.admin, code)
		}
		code, body := httpGet(t, base+"/debug/pprof/")
		if served := code == 200 && strings.Contains(body, "goroutine"); served != tt.served {
			t.Errorf("admin %s, pprof %s: /debug/pprof/ = %d; served %v, want %v", tt.admin, tt.pprof, code, served, tt.served)
		}
		stop()
	}
}

// The build is named in /metrics and in INFO server, as the start-up line
// names it.
func TestBuildInfoInMetricsAndInfo(t *testing.T) {
	c := newCluster(t, 3)
	build := buildinfo.Read()
	_, m := httpGet(t, "http://"+c.app.AdminAddr()+"/metrics")
	series := `redlock_proxy_build_info{goversion="` + runtime.Version() + `",revision="` + build.Revision + `",version="` + build.Version + `"}`
	if v := sample(m, series); v != 1 {
		t.Errorf("%s = %v; want 1", series, v)
	}
	for _, s := range c.servers {
		if v := sample(m, `redlock_proxy_backend_connections_established_total{backend="`+s.Addr+`"}`); v != 1 {
			t.Errorf("connections established to %s = %v; want 1 (the first connection counts)", s.Addr, v)
		}
	}
	info, err := c.client(2).Info(context.Background(), "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"redlock_proxy_version:" + build.Version + "\r\n", "redlock_proxy_revision:" + build.Revision + "\r\n",
		"go_version:" + runtime.Version() + "\r\n"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO server lacks %q:\n%s", want, info)
		}
	}
}

// Fresh masters at the first start, under the default strict rule: no
// quorum yet while they are quarantined, /readyz says for how long, and
// once each quarantine has ended the quorum is reached (never "regained":
// there was none before).
func TestFreshMastersAtTheFirstStart(t *testing.T) {
	waits(t)
	servers := startRedis(t, 3)
	addrs := addrsOf(servers)
	var logs syncBuffer
	a := startLogged(t, addrs, &logs, func(cfg *config.Config) {
		cfg.RestartQuarantine = "strict"
		cfg.MaxTTL = 4 * time.Second // the quarantine is max_ttl + drift
		cfg.BackendTimeout = 100 * time.Millisecond
	})
	code, body := httpGet(t, "http://"+a.AdminAddr()+"/readyz")
	if code != 503 || !strings.Contains(body, "not ready: ") {
		t.Errorf("/readyz during the quarantines = %d %q; want 503 saying not ready", code, body)
	}
	waitLog(t, &logs, "no quorum yet: 0 of 3 backends count, 2 needed; locks are refused", 5*time.Second)
	reached := waitLog(t, &logs, "quorum reached: 3 of 3 backends count, 2 needed; locks are granted", 15*time.Second)
	if !strings.Contains(reached, "level=INFO") || !strings.Contains(reached, "since_start=") {
		t.Errorf("quorum reached line %q; want an INFO with since_start", reached)
	}
	out := logs.String()
	if strings.Contains(out, "quorum regained") {
		t.Errorf("a quorum that never was is logged as regained:\n%s", out)
	}
	before := out[:strings.Index(out, "quorum reached: ")]
	if n := strings.Count(before, "backend's quarantine ended"); n != 3 {
		t.Errorf("%d quarantine ends logged before the quorum was reached; want 3:\n%s", n, out)
	}
	if code, _ := httpGet(t, "http://"+a.AdminAddr()+"/readyz"); code != 200 {
		t.Errorf("/readyz after the quorum is reached = %d", code)
	}
}
