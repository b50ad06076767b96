package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// A client that sends commands but never reads their replies is dropped
// once a reply has waited write_timeout to be taken.
func TestWriteTimeoutDropsAClientThatDoesNotRead(t *testing.T) {
	c := newCluster(t, 3, func(cfg *config.Config) { cfg.WriteTimeout = 300 * time.Millisecond })
	ctx := context.Background()
	watcher := c.client(2)
	if n := infoField(t, watcher, "clients", "connected_clients"); n != 1 {
		t.Fatalf("connected_clients = %d before the test; want 1 (this watcher)", n)
	}

	nc, err := net.Dial("tcp", c.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	nc.(*net.TCPConn).SetReadBuffer(4096) // take as little as the kernel allows
	// ECHO of 256 KiB, over and over: far more than the socket buffers hold.
	payload := strings.Repeat("x", 256<<10)
	cmd := []byte(fmt.Sprintf("*2\r\n$4\r\nECHO\r\n$%d\r\n%s\r\n", len(payload), payload))
	writerDone := make(chan struct{})
	go func() { // ends when the proxy drops the connection or the test closes it
		defer close(writerDone)
		for {
			if _, err := nc.Write(cmd); err != nil {
				return
			}
		}
	}()
	defer func() {
		nc.Close()
		<-writerDone
	}()

	sawIt := false
	waitFor(t, 15*time.Second, "the reader-less client dropped after write_timeout", func() error {
		n := infoField(t, watcher, "clients", "connected_clients")
		if n == 2 {
			sawIt = true
		}
		if !sawIt || n != 1 {
			return fmt.Errorf("connected_clients = %d (the reader-less client seen: %v)", n, sawIt)
		}
		return nil
	})
	// Its connection is closed: once the buffered replies are read, EOF.
	nc.SetReadDeadline(time.Now().Add(10 * time.Second))
	buf := make([]byte, 1<<20)
	for {
		if _, err := nc.Read(buf); err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("the connection is still open after the client was dropped")
			}
			break
		}
	}
	// Others are served as before.
	if ok, err := watcher.SetNX(ctx, uniqueKey("wt"), "t", time.Second).Result(); !ok || err != nil {
		t.Errorf("SET NX after the drop = %v, %v", ok, err)
	}
}

// On SIGINT the proxy stops accepting, lets the undo of a failed acquire
// reach a master that was slow to answer, and exits 0 within the 5 s grace.
func TestSIGINTShutdownFinishesUndosInTime(t *testing.T) {
	servers := startRedis(t, 3)
	addrs := addrsOf(servers)
	ctx := context.Background()
	key := uniqueKey("sigint")
	// Another client's lock is on masters 1 and 2: an attempt is refused
	// there, and what it set on master 0 must be undone.
	for _, i := range []int{1, 2} {
		if _, err := servers[i].Do("SET", key, "theirs", "PX", "120000"); err != nil {
			t.Fatal(err)
		}
	}
	bin := buildBinary(t)
	port, _ := redisproc.FreePort()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin, "-listen", addr, "-admin", "", "-backends", strings.Join(addrs, ","),
		"-backend_timeout", "3s", "-restart_quarantine", "run-id", "-log_level", "info")
	var logs syncBuffer
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
	cl := proxyClient(t, addr, 2)
	if err := cl.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}

	// Master 0 hangs: the SET waits there while 1 and 2 refuse it.
	if err := servers[0].Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			servers[0].Resume()
		}
	}()
	if ok, err := cl.SetNX(ctx, key, "mine", 10*time.Second).Result(); ok || err != nil {
		t.Fatalf("SET NX refused by a majority = %v, %v; want nil", ok, err)
	}
	sent := time.Now()
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	resumed = true
	if err := servers[0].Resume(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		reaped = true
		if err != nil {
			t.Fatalf("proxy exited with %v after SIGINT; logs:\n%s", err, logs.String())
		}
	case <-time.After(config.Default().ShutdownGrace + 2*time.Second):
		t.Fatalf("proxy still running %v after SIGINT; logs:\n%s", config.Default().ShutdownGrace+2*time.Second, logs.String())
	}
	took := time.Since(sent)
	if strings.Contains(logs.String(), "did not finish in time") {
		t.Errorf("shutdown gave up on commands in flight:\n%s", logs.String())
	}
	// Master 0 ran the SET when it resumed, and the undo after it.
	for i, s := range servers {
		d := redis.NewClient(&redis.Options{Addr: s.Addr})
		v, err := d.Get(ctx, key).Result()
		d.Close()
		switch {
		case i == 0 && !errors.Is(err, redis.Nil):
			t.Errorf("master 0 holds %q (%v) after the shutdown: the failed acquire was not undone", v, err)
		case i > 0 && v != "theirs":
			t.Errorf("master %d holds %q (%v); the other client's lock must be untouched", i, v, err)
		}
	}
	t.Logf("exited %v after SIGINT", took.Round(time.Millisecond))
}

// min_validity: a lock (or an extension) that would leave less validity
// than min_validity is refused, and an acquisition is undone. Lock
// scripts are held to it as SET is: bsm/redislock's obtain and refresh.
func TestMinValidityHoldsForSetAndScripts(t *testing.T) {
	c := newCluster(t, 3, func(cfg *config.Config) { cfg.MinValidity = 5 * time.Second })
	ctx := context.Background()
	locker := redislock.New(c.client(2))
	absent := func(step, key string) {
		t.Helper()
		waitFor(t, 3*time.Second, step+": the refused acquisition undone", func() error {
			held := 0
			for _, d := range c.direct {
				if n, _ := d.Exists(ctx, key).Result(); n > 0 {
					held++
				}
			}
			if held > 0 {
				return fmt.Errorf("the key is still on %d masters", held)
			}
			return nil
		})
	}

	// 4 s of TTL cannot leave 5 s of validity.
	k1 := uniqueKey("minval")
	if _, err := locker.Obtain(ctx, k1, 4*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Obtain for 4s with min_validity 5s: %v; want ErrNotObtained", err)
	}
	absent("acquire script for 4s", k1)
	k2 := uniqueKey("minval")
	if v, err := c.client(2).Do(ctx, "SET", k2, "t", "NX", "PX", "4000").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("SET NX PX 4000 with min_validity 5s = %v, %v; want nil", v, err)
	}
	absent("SET NX for 4s", k2)

	// 10 s leaves enough; an extension to 4 s does not, to 10 s does.
	k3 := uniqueKey("minval")
	lock, err := locker.Obtain(ctx, k3, 10*time.Second, nil)
	if err != nil {
		t.Fatalf("Obtain for 10s with min_validity 5s: %v", err)
	}
	if err := lock.Refresh(ctx, 4*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
		t.Fatalf("Refresh to 4s with min_validity 5s: %v; want ErrNotObtained", err)
	}
	if err := lock.Refresh(ctx, 10*time.Second, nil); err != nil {
		t.Fatalf("Refresh to 10s with min_validity 5s: %v", err)
	}

	// Control: the same requests through a proxy without min_validity.
	var addrs []string
	for _, s := range c.servers {
		addrs = append(addrs, s.Addr)
	}
	plain, _ := startApp(t, addrs)
	k4 := uniqueKey("minval")
	if _, err := redislock.New(proxyClient(t, plain.Addr(), 2)).Obtain(ctx, k4, 4*time.Second, nil); err != nil {
		t.Fatalf("control: Obtain for 4s without min_validity: %v", err)
	}
}

// The proxy presents its client certificate to masters that require one
// (tls-auth-clients yes); without it they refuse the proxy and no lock is
// granted.
func TestBackendTLSClientCertificate(t *testing.T) {
	cs := newCerts(t)
	var addrs []string
	var direct []*redis.Client
	for i := 0; i < 3; i++ {
		s, err := redisproc.StartTLS(t.TempDir(), redisproc.TLSFiles{Cert: cs.ServerCert, Key: cs.ServerKey, CA: cs.CA, Client: cs.clientTLS()},
			"--tls-auth-clients", "yes")
		if err != nil {
			t.Fatalf("redis-server with TLS: %v", err)
		}
		t.Cleanup(s.Stop)
		addrs = append(addrs, s.Addr)
		d := redis.NewClient(&redis.Options{Addr: s.Addr, TLSConfig: cs.clientTLS()})
		t.Cleanup(func() { d.Close() })
		direct = append(direct, d)
	}
	ctx := context.Background()
	// The masters really require a certificate.
	noCert := cs.clientTLS()
	noCert.Certificates = nil
	if err := redis.NewClient(&redis.Options{Addr: addrs[0], TLSConfig: noCert, MaxRetries: -1}).Ping(ctx).Err(); err == nil {
		t.Fatal("a master with tls-auth-clients yes accepted a client without a certificate")
	}

	withCert := func(cfg *config.Config) {
		cfg.BackendTLS = true
		cfg.BackendTLSCAFile = cs.CA
		cfg.BackendTLSCertFile, cfg.BackendTLSKeyFile = cs.ClientCert, cs.ClientKey
	}
	a, _ := startApp(t, addrs, withCert)
	cl := proxyClient(t, a.Addr(), 2)
	key := uniqueKey("mtls")
	if ok, err := cl.SetNX(ctx, key, "t", 5*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX over TLS with a client certificate: %v, %v", ok, err)
	}
	for i, d := range direct {
		if v, err := d.Get(ctx, key).Result(); v != "t" {
			t.Errorf("master %d holds %q (%v); want the token", i, v, err)
		}
	}

	// Control: the same proxy without the certificate never gets in.
	cfg := config.Default()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", ""
	cfg.Backends = addrs
	cfg.RestartQuarantine = "run-id"
	withCert(&cfg)
	cfg.BackendTLSCertFile, cfg.BackendTLSKeyFile = "", ""
	if _, err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	b, err := app.New(cfg, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	bctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- b.Run(bctx) }()
	defer func() {
		cancel()
		<-done
	}()
	time.Sleep(time.Second)
	for _, h := range b.Pool().Health() {
		if h.Up {
			t.Errorf("backend %s is up for a proxy without a client certificate", h.Addr)
		}
	}
	if ok, _ := proxyClient(t, b.Addr(), 2).SetNX(ctx, uniqueKey("mtls"), "t", 5*time.Second).Result(); ok {
		t.Error("a lock was granted through a proxy the masters refuse")
	}
}
