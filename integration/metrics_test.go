package integration

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Every loss of a backend's data is counted by its cause: a FLUSHALL as a
// flush and a restart as a restart (a FLUSHALL is no restart). The
// per-backend errors and timeouts of /metrics are INFO proxy's, and
// commands_total has only the label pairs that can occur (no error for
// QUIT, no no_quorum for PING).
func TestMetricsAgreeWithInfoAndCountLossesByCause(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	metrics := func() string {
		_, m := httpGet(t, "http://"+c.app.AdminAddr()+"/metrics")
		return m
	}
	losses := func(m string, i int, cause string) float64 {
		return sample(m, fmt.Sprintf(`redlock_proxy_backend_losses_total{backend="%s",cause="%s"}`, c.servers[i].Addr, cause))
	}
	waitLoss := func(i int, cause string) string {
		t.Helper()
		var m string
		waitFor(t, 15*time.Second, fmt.Sprintf("a %s loss of backend %d counted", cause, i), func() error {
			if m = metrics(); losses(m, i, cause) < 1 {
				return fmt.Errorf("\n%s", grepLines(m, "backend_losses_total"))
			}
			return nil
		})
		return m
	}

	m := metrics()
	if v := losses(m, 0, "flush"); v != 0 {
		t.Fatalf("backend 0 flush losses before any = %v; want a zero series", v)
	}
	if _, err := c.servers[0].Do("FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	m = waitLoss(0, "flush")
	if v := losses(m, 0, "restart"); v != 0 {
		t.Errorf("a FLUSHALL counted as a restart (%v)", v)
	}
	if err := c.servers[1].Restart(); err != nil {
		t.Fatal(err)
	}
	m = waitLoss(1, "restart")
	if v := losses(m, 1, "flush"); v != 0 {
		t.Errorf("a restart also counted as a flush (%v)", v)
	}

	// Errors and timeouts: the same numbers in INFO and /metrics.
	for i := 0; i < 5; i++ {
		cl.SetNX(ctx, uniqueKey("agree"), "t", time.Second)
	}
	info, err := cl.Info(ctx, "proxy").Result()
	if err != nil {
		t.Fatal(err)
	}
	m = metrics()
	for i, s := range c.servers {
		line := regexp.MustCompile(fmt.Sprintf(`backend%d:addr=[^,]+,.*timeouts=(\d+),errors=(\d+)`, i)).FindStringSubmatch(info)
		if line == nil {
			t.Fatalf("INFO proxy has no line for backend %d:\n%s", i, info)
		}
		for j, name := range []string{"timeouts", "errors"} {
			want, _ := strconv.ParseFloat(line[j+1], 64)
			if got := sample(m, fmt.Sprintf(`redlock_proxy_backend_%s_total{backend="%s"}`, name, s.Addr)); got != want {
				t.Errorf("backend %d %s: /metrics %v, INFO %v", i, name, got, want)
			}
		}
	}

	// Only the pairs that can occur.
	for _, series := range []string{
		`redlock_proxy_commands_total{command="quit",result="error"}`,
		`redlock_proxy_commands_total{command="ping",result="no_quorum"}`,
		`redlock_proxy_commands_total{command="get",result="granted"}`,
		`redlock_proxy_command_duration_seconds_count{command="ping"}`,
	} {
		if v := sample(m, series); v != -1 {
			t.Errorf("/metrics has %s, which cannot occur", series)
		}
	}
	for _, series := range []string{
		`redlock_proxy_commands_total{command="set",result="granted"}`,
		`redlock_proxy_commands_total{command="get",result="no_quorum"}`,
		`redlock_proxy_commands_total{command="ping",result="ok"}`,
	} {
		if v := sample(m, series); v < 0 {
			t.Errorf("/metrics lacks %s", series)
		}
	}
}

// grepLines is the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
