package integration

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// startLogged runs a proxy over addrs whose log (INFO and up) is kept in
// logs as well as in the test log.
func startLogged(t *testing.T, addrs []string, logs *syncBuffer, mutate ...func(*config.Config)) *app.App {
	t.Helper()
	cfg := config.Default()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Backends = addrs
	cfg.BackendTimeout = time.Second
	cfg.RestartQuarantine = "run-id" // the masters are fresh
	for _, m := range mutate {
		m(&cfg)
	}
	if _, err := cfg.Validate(); err != nil {
		t.Fatalf("config: %v", err)
	}
	log := slog.New(slog.NewTextHandler(io.MultiWriter(logs, tlogWriter{t}), &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := app.New(cfg, log)
	if err != nil {
		t.Fatalf("app.New: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("app.Run: %v", err)
		}
	})
	return a
}

// waitLog waits until the log has a line containing want and returns it.
func waitLog(t *testing.T, logs *syncBuffer, want string, within time.Duration) string {
	t.Helper()
	var line string
	waitFor(t, within, fmt.Sprintf("a log line with %q", want), func() error {
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, want) {
				line = l
				return nil
			}
		}
		return fmt.Errorf("the log:\n%s", logs.String())
	})
	return line
}

// countLines counts the log lines containing s.
func countLines(logs *syncBuffer, s string) int {
	return strings.Count(logs.String(), s)
}

// Two of three masters killed: one WARN says the quorum is lost and that
// locks are refused; once they are back and their restart quarantine is
// over, one INFO says it is regained.
func TestLostAndRegainedQuorumAreLogged(t *testing.T) {
	servers := startRedis(t, 3)
	addrs := addrsOf(servers)
	var logs syncBuffer
	a := startLogged(t, addrs, &logs, func(cfg *config.Config) {
		cfg.BackendTimeout = 100 * time.Millisecond
		cfg.MaxTTL = 2 * time.Second // a restarted master is quarantined for max_ttl + drift
	})
	waitLog(t, &logs, "quorum: 3 of 3 backends count, 2 needed; locks are granted", 10*time.Second)
	cl := proxyClient(t, a.Addr(), 2)
	ctx := context.Background()

	servers[1].Kill()
	servers[2].Kill()
	lost := waitLog(t, &logs, "quorum lost: 1 of 3 backends count, 2 needed; locks are refused", 10*time.Second)
	if !strings.Contains(lost, "level=WARN") || !strings.Contains(lost, "down=2") {
		t.Errorf("quorum lost line %q; want a WARN with down=2", lost)
	}
	// What a client sees meanwhile looks like contention; the log says why.
	if ok, err := cl.SetNX(ctx, uniqueKey("q"), "t", time.Second).Result(); ok || err != nil {
		t.Errorf("SET NX without a quorum = %v, %v; want nil", ok, err)
	}

	for _, i := range []int{1, 2} {
		if err := servers[i].Restart(); err != nil {
			t.Fatal(err)
		}
	}
	regained := waitLog(t, &logs, "quorum regained: ", 15*time.Second)
	if !strings.Contains(regained, "level=INFO") || !strings.Contains(regained, "locks are granted again") {
		t.Errorf("quorum regained line %q; want an INFO saying locks are granted again", regained)
	}
	if ok, err := cl.SetNX(ctx, uniqueKey("q"), "t", time.Second).Result(); !ok || err != nil {
		t.Errorf("SET NX after the quorum is back = %v, %v; want OK", ok, err)
	}
	out := logs.String()
	if n, m := countLines(&logs, "quorum lost: "), countLines(&logs, "quorum regained: "); n != 1 || m != 1 {
		t.Errorf("%d quorum lost and %d quorum regained lines; want one each:\n%s", n, m, out)
	}
	if strings.Index(out, "quorum lost: ") > strings.Index(out, "quorum regained: ") {
		t.Errorf("quorum regained logged before quorum lost:\n%s", out)
	}
}
