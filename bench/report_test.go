package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sampleReport is a small run: N = 1 and 5, 50 clients, every series.
func sampleReport(quick bool) *report {
	r := &report{Quick: quick, Rounds: 1, Duration: time.Second}
	for _, n := range []int{1, 5} {
		r.Results = append(r.Results,
			result{Series: "lone", N: n, Clients: 50, PerSec: 50000, P50: time.Millisecond, RedisCPU: 7 * time.Microsecond},
			result{Series: "proxy", N: n, Clients: 50, PerSec: 12500, P50: 2 * time.Millisecond, ProxyCPU: time.Duration(10*n) * time.Microsecond, RedisCPU: 11 * time.Microsecond},
			result{Series: "redsync", N: n, Clients: 50, PerSec: 7000, P50: 7 * time.Millisecond, RedisCPU: 55 * time.Microsecond})
	}
	r.Pipelined = []pipeResult{{N: 5, Lone: 973000, Proxy: 141437}}
	return r
}

// Rows of series that run no proxy show a dash for its CPU, not 0s.
func TestNoProxyNoProxyCPU(t *testing.T) {
	var table bytes.Buffer
	r := sampleReport(false)
	r.printTable(&table)
	md := r.markdown()
	// The proxy CPU column: the ninth field of a table row, the tenth cell
	// of a report.md row.
	var cells [][]string
	for _, line := range strings.Split(table.String(), "\n") {
		if f := strings.Fields(line); len(f) == 10 {
			cells = append(cells, []string{f[2], f[8]})
		}
	}
	for _, line := range strings.Split(md, "\n") {
		if f := strings.Split(strings.Trim(line, "|"), "|"); len(f) == 11 {
			cells = append(cells, []string{strings.TrimSpace(f[2]), strings.TrimSpace(f[9])})
		}
	}
	rows := 0
	for _, c := range cells {
		series, cpu := c[0], c[1]
		switch series {
		case "lone", "redsync":
			rows++
			if cpu != "–" {
				t.Errorf("a %s row shows a proxy CPU of %q; want –", series, cpu)
			}
		case "proxy":
			rows++
			if !strings.HasSuffix(cpu, "µs") {
				t.Errorf("a proxy row shows a proxy CPU of %q", cpu)
			}
		}
	}
	if rows != 12 {
		t.Fatalf("read %d rows of the table and report.md, want 12:\n%s\n%s", rows, table.String(), md)
	}
	if !strings.Contains(table.String(), "MET") || strings.Contains(table.String()+md, "indicative") {
		t.Errorf("a full run's targets are marked indicative:\n%s", table.String())
	}
}

// A -quick run marks its targets as indicative, in the table and the report.
func TestQuickTargetsAreIndicative(t *testing.T) {
	var table bytes.Buffer
	r := sampleReport(true)
	r.printTable(&table)
	md := r.markdown()
	for name, text := range map[string]string{"table": table.String(), "report.md": md} {
		if !strings.Contains(text, "indicative only: a -quick run measures one short round per point") {
			t.Errorf("%s does not say the targets are indicative:\n%s", name, text)
		}
	}
	for _, line := range strings.Split(table.String(), "\n") {
		if strings.Contains(line, "(want ") && !strings.HasSuffix(line, "MET (indicative)") {
			t.Errorf("target line %q is not marked indicative", line)
		}
	}
}

// Axis labels and counts keep three significant digits.
func TestHumanCounts(t *testing.T) {
	for v, want := range map[float64]string{
		0: "0", 950: "950", 1000: "1k", 12500: "12.5k", 37500: "37.5k", 6250: "6.25k",
		141437: "141k", 973000: "973k", 999950: "1M", 1250000: "1.25M", 0.5: "0.5",
	} {
		if got := human(v); got != want {
			t.Errorf("human(%v) = %q, want %q", v, got, want)
		}
	}
	svg := sampleReport(false).svg()
	for _, tick := range []string{">12.5k<", ">25k<", ">37.5k<", ">50k<"} {
		if !strings.Contains(svg, tick) {
			t.Errorf("chart lacks the axis label %s", tick)
		}
	}
}

// The closing line names every file the run wrote.
func TestWroteNamesEveryFile(t *testing.T) {
	got := wrote("bench/results")
	for _, f := range []string{"report.md", "chart.svg", "results.json", proxyLogName} {
		if !strings.Contains(got, filepath.Join("bench/results", f)) {
			t.Errorf("%q does not name %s", got, f)
		}
	}
}

// By default the proxy runs as users run it: no GOMAXPROCS of the bench's
// leaks into its environment, and the report says so.
func TestProxyDefaults(t *testing.T) {
	env := []string{"HOME=/h", "GOMAXPROCS=3", "PATH=/bin"}
	if got := strings.Join(proxyEnv(env, 0), " "); got != "HOME=/h PATH=/bin" {
		t.Errorf("proxyEnv(0) = %q", got)
	}
	if got := strings.Join(proxyEnv(env, 2), " "); got != "HOME=/h PATH=/bin GOMAXPROCS=2" {
		t.Errorf("proxyEnv(2) = %q", got)
	}
	r := sampleReport(false)
	if md := r.markdown(); !strings.Contains(md, "GOMAXPROCS not set") {
		t.Errorf("report.md does not say the proxy ran with its defaults:\n%s", md)
	}
	r.ProxyProcs = 1
	if md := r.markdown(); !strings.Contains(md, "GOMAXPROCS=1 (-proxy-procs)") {
		t.Errorf("report.md does not say the proxy's GOMAXPROCS was set:\n%s", md)
	}
}
