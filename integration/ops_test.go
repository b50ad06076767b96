package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

func httpGet(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// sample returns the value of one exposition line, or -1.
func sample(exposition, series string) float64 {
	for _, line := range strings.Split(exposition, "\n") {
		if strings.HasPrefix(line, series+" ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(line[len(series):]), 64)
			return v
		}
	}
	return -1
}

var metricName = regexp.MustCompile(`^([a-zA-Z_:][a-zA-Z0-9_:]*)[{ ]`)

// exported lists the metric names in an exposition.
func exported(exposition string) map[string]bool {
	names := map[string]bool{}
	for _, line := range strings.Split(exposition, "\n") {
		if m := metricName.FindStringSubmatch(line); m != nil {
			names[m[1]] = true
		}
	}
	return names
}

// After traffic, /metrics shows the counters that moved and a latency
// histogram per backend; /readyz follows the quorum.
func TestMetricsAndReadiness(t *testing.T) {
	c := newCluster(t, 5, fastTimeout)
	ctx := context.Background()
	cl := c.client(2)
	for i := 0; i < 20; i++ {
		key := uniqueKey("m")
		cl.SetNX(ctx, key, "t", 10*time.Second)
		cl.SetNX(ctx, key, "u", 10*time.Second) // refused
		cl.Eval(ctx, seedRelease, []string{key}, "t")
	}
	cl.Do(ctx, "SET", "k", "v") // rejected
	cl.Ping(ctx)
	base := "http://" + c.app.AdminAddr()
	if code, _ := httpGet(t, base+"/healthz"); code != 200 {
		t.Fatalf("/healthz = %d", code)
	}
	if code, body := httpGet(t, base+"/readyz"); code != 200 {
		t.Fatalf("/readyz = %d %s", code, body)
	}
	_, m := httpGet(t, base+"/metrics")
	for series, min := range map[string]float64{
		`redlock_proxy_commands_total{command="set",result="granted"}`:     20,
		`redlock_proxy_commands_total{command="set",result="refused"}`:     20,
		`redlock_proxy_commands_total{command="release",result="granted"}`: 20,
		`redlock_proxy_commands_total{command="set",result="error"}`:       1,
		`redlock_proxy_commands_total{command="ping",result="ok"}`:         1,
		`redlock_proxy_command_duration_seconds_count{command="set"}`:      40,
		`redlock_proxy_validity_margin_ratio_count`:                        20,
		`redlock_proxy_connected_clients`:                                  1,
		`redlock_proxy_backends_counting`:                                  5,
		`redlock_proxy_majority`:                                           3,
	} {
		if v := sample(m, series); v < min {
			t.Errorf("%s = %v; want at least %v", series, v, min)
		}
	}
	for _, s := range c.servers {
		series := `redlock_proxy_backend_request_duration_seconds_count{backend="` + s.Addr + `"}`
		if v := sample(m, series); v < 40 {
			t.Errorf("%s = %v; want a histogram per backend with every command", series, v)
		}
		if v := sample(m, `redlock_proxy_backend_up{backend="`+s.Addr+`"}`); v != 1 {
			t.Errorf("backend %s up = %v", s.Addr, v)
		}
	}
	names := exported(m)
	for _, want := range []string{"go_goroutines", "process_cpu_seconds_total", "redlock_proxy_backend_timeouts_total",
		"redlock_proxy_backend_connections_established_total", "redlock_proxy_backend_losses_total", "redlock_proxy_undo_total",
		"redlock_proxy_backend_quarantined", "redlock_proxy_backend_quarantine_remaining_seconds"} {
		if !names[want] {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	for n := range names {
		if strings.Contains(n, "token") || strings.Contains(m, `key="`) {
			t.Errorf("a key or token leaked into the metrics: %s", n)
		}
	}

	// A majority hangs: not ready; back when they return.
	for _, i := range []int{0, 1, 2} {
		c.servers[i].Pause()
	}
	resumed := false
	defer func() {
		if !resumed {
			for _, i := range []int{0, 1, 2} {
				c.servers[i].Resume()
			}
		}
	}()
	waitHTTP(t, base+"/readyz", 503)
	_, m = httpGet(t, base+"/metrics")
	if v := sample(m, "redlock_proxy_backends_counting"); v >= 3 {
		t.Errorf("with 3 of 5 hung, backends_counting = %v", v)
	}
	for _, i := range []int{0, 1, 2} {
		c.servers[i].Resume()
	}
	resumed = true
	waitHTTP(t, base+"/readyz", 200)
	_, m = httpGet(t, base+"/metrics")
	if v := sample(m, `redlock_proxy_backend_timeouts_total{backend="`+c.servers[0].Addr+`"}`); v < 1 {
		t.Errorf("timeouts of the hung backend = %v", v)
	}
}

// waitHTTP waits until url answers with status want.
func waitHTTP(t *testing.T, url string, want int) {
	t.Helper()
	waitFor(t, 30*time.Second, fmt.Sprintf("%s to answer %d", url, want), func() error {
		if code, body := httpGet(t, url); code != want {
			return fmt.Errorf("%d %q", code, body)
		}
		return nil
	})
}

var promName = regexp.MustCompile(`\b(redlock_proxy_[a-z_]+|go_[a-z_]+|process_[a-z_]+)\b`)

// The Grafana dashboard and the alert rules only query metrics the proxy
// exports.
func TestDashboardAndAlertsMatchMetrics(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("dash")
	cl.SetNX(ctx, key, "t", time.Second)
	cl.SetNX(ctx, key, "u", time.Second)
	cl.Eval(ctx, seedRelease, []string{key}, "t")
	_, m := httpGet(t, "http://"+c.app.AdminAddr()+"/metrics")
	names := exported(m)
	// Sentinel and Redis Cluster backends have metrics of their own, which
	// a scrape of plain masters does not show.
	for _, n := range c.app.Metrics().Names() {
		names[n] = true
	}

	raw, err := os.ReadFile("../ops/grafana-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("grafana-dashboard.json is not valid JSON: %v", err)
	}
	if dash.Title == "" || len(dash.Panels) < 8 {
		t.Fatalf("dashboard has %d panels", len(dash.Panels))
	}
	var exprs []string
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	rawAlerts, err := os.ReadFile("../ops/prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := yaml.NewDecoder(bytes.NewReader(rawAlerts)).Decode(&rules); err != nil {
		t.Fatalf("prometheus-alerts.yml: %v", err)
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" {
				t.Errorf("alert rule without a name or expression: %+v", r)
			}
			exprs = append(exprs, r.Expr)
		}
	}
	checked := 0
	for _, e := range exprs {
		for _, n := range promName.FindAllString(e, -1) {
			checked++
			if !names[n] {
				t.Errorf("query %q uses %s, which the proxy does not export", e, n)
			}
		}
	}
	if checked < 20 {
		t.Fatalf("only %d metric references checked", checked)
	}
	// Panels for every kind of backend, and every kind of decision.
	all := strings.Join(exprs, "\n")
	for _, want := range []string{"redlock_proxy_backend_sentinel_confirmed", "redlock_proxy_backend_shard_counting",
		"redlock_proxy_backend_losses_total", "redlock_proxy_forced_unlocks_total"} {
		if !strings.Contains(all, want) {
			t.Errorf("no panel or alert queries %s", want)
		}
	}
	for _, kind := range []string{"share", "delete", "del", "vote", "fence", "extend-or-acquire"} {
		if !regexp.MustCompile(`command=~"[^"]*\b` + regexp.QuoteMeta(kind) + `\b`).MatchString(exprs[0]) {
			t.Errorf("the first panel (lock decisions) leaves out %s: %s", kind, exprs[0])
		}
	}
}

// Logs: JSON when asked, a start-up summary without secrets, nothing per
// command at the default level.
func TestStructuredLogs(t *testing.T) {
	servers := startRedis(t, 3)
	addrs := addrsOf(servers)
	cfg := config.Default()
	cfg.Listen, cfg.Admin = "127.0.0.1:0", ""
	cfg.Backends = addrs
	cfg.LogFormat = "json"
	cfg.RequirePass = "very-secret-pass"
	cfg.BackendPassword = "" // the backends have none
	if _, err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	var buf syncBuffer
	a, err := app.New(cfg, app.NewLogger(cfg, &buf))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	waitServing(t, a.Addr())
	cl := redis.NewClient(&redis.Options{Addr: a.Addr(), Password: "very-secret-pass"})
	defer cl.Close()
	for i := 0; i < 50; i++ {
		cl.SetNX(context.Background(), uniqueKey("log"), "t", time.Second)
	}
	cancel()
	<-done
	out := buf.String()
	if strings.Contains(out, "very-secret-pass") {
		t.Fatalf("a secret reached the logs:\n%s", out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var sawStart bool
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatalf("log line is not JSON: %q", l)
		}
		if rec["msg"] == "redlock-proxy starting" {
			sawStart = true
			if rec["backends"] == nil || rec["max_ttl"] == nil || rec["client_auth"] != true {
				t.Errorf("start-up summary lacks settings: %v", rec)
			}
		}
	}
	if !sawStart {
		t.Errorf("no start-up summary:\n%s", out)
	}
	if len(lines) > 20 {
		t.Errorf("%d log lines for 50 commands: something logs per command:\n%s", len(lines), out)
	}
}

// syncBuffer is a bytes.Buffer safe for the logger's goroutines.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
