package integration

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// occupied returns an address something is already listening on.
func occupied(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestStartupErrorsAreOneLineAndNonZeroExit(t *testing.T) {
	bin := buildBinary(t)
	busy := occupied(t)
	const cannotStart, invalid = "redlock-proxy: cannot start: ", "redlock-proxy: invalid configuration: "
	cases := []struct {
		name   string
		args   []string
		prefix string // how the line starts
		want   string // what the line must name
		code   int    // 0: any non-zero exit code
	}{
		{"client address in use", []string{"-listen", busy, "-admin", ""}, cannotStart, busy, 0},
		{"admin address in use", []string{"-listen", "127.0.0.1:0", "-admin", busy}, cannotStart, busy, 0},
		// A TLS file is configuration: refused as every other mistake is.
		{"unreadable TLS certificate", []string{"-listen", "127.0.0.1:0", "-admin", "", "-tls_cert_file", "/nonexistent/cert.pem", "-tls_key_file", "/nonexistent/key.pem"},
			invalid + "tls_cert_file: ", "/nonexistent/cert.pem", 2},
		{"a bad duration", []string{"-max_ttl", "30"}, invalid + "-max_ttl: ", "want a duration", 2},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(bin, c.args...)
			var stderr, stdout bytes.Buffer
			cmd.Stderr, cmd.Stdout = &stderr, &stdout
			done := make(chan error, 1)
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				cmd.Process.Kill()
				<-done
				t.Fatalf("still running after 10s; stderr:\n%s", stderr.String())
			}
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 || c.code != 0 && exit.ExitCode() != c.code {
				t.Fatalf("exit: %v, want a non-zero exit code (%d if not 0)", err, c.code)
			}
			lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
			if len(lines) != 1 {
				t.Fatalf("stderr has %d lines, want one:\n%s", len(lines), stderr.String())
			}
			if !strings.HasPrefix(lines[0], c.prefix) || !strings.Contains(lines[0], c.want) {
				t.Errorf("stderr %q: want one line starting %q naming %s", lines[0], c.prefix, c.want)
			}
		})
	}
}

func TestFailedAdminListenReleasesTheClientPort(t *testing.T) {
	servers := startRedis(t, 3)
	cfg := config.Default()
	cfg.Listen = freeAddr(t)
	cfg.Admin = occupied(t)
	for _, s := range servers {
		cfg.Backends = append(cfg.Backends, s.Addr)
	}
	if _, err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	a, err := app.New(cfg, testLogger(t))
	if err == nil {
		a.Run(canceledContext())
		t.Fatal("app.New succeeded with the admin address in use")
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		t.Fatalf("the client address is still held after a failed start: %v", err)
	}
	ln.Close()
}

// canceledContext returns a context that is already done.
func canceledContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}
