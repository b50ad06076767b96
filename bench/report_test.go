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
			result{Series: "lone", N: n, Clients: 50, PerSec: 50000, P50: time.Millisecond,
				BackendCPUCycle: 14 * time.Microsecond, BackendCPUCmd: 7 * time.Microsecond},
			result{Series: "proxy", N: n, Clients: 50, PerSec: 12500, P50: 2 * time.Millisecond,
				ProxyCPUCycle: time.Duration(20*n) * time.Microsecond, ProxyCPUCmd: time.Duration(10*n) * time.Microsecond,
				BackendCPUCycle: 22 * time.Microsecond, BackendCPUCmd: 11 * time.Microsecond},
			result{Series: "redsync", N: n, Clients: 50, PerSec: 7000, P50: 7 * time.Millisecond,
				BackendCPUCycle: 110 * time.Microsecond, BackendCPUCmd: 55 * time.Microsecond})
	}
	r.Results = append(r.Results, result{Series: "etcd", N: etcdMembers, Clients: 50, PerSec: 700, P50: 10 * time.Millisecond,
		BackendCPUCycle: time.Millisecond, BackendCPUCmd: 500 * time.Microsecond})
	r.Etcd = &etcdInfo{Members: etcdMembers, Version: "3.4.23", DataFS: "ext4", WithN: 5}
	r.Pipelined = []pipeResult{{N: 5, Lone: 973000, Proxy: 141437}}
	return r
}

// Rows of series that run no proxy show a dash for its CPU, not 0s; a
// proxy row shows its CPU per cycle and per command (half of it).
func TestNoProxyNoProxyCPU(t *testing.T) {
	var table bytes.Buffer
	r := sampleReport(false)
	r.printTable(&table)
	md := r.markdown()
	// The series, the proxy's CPU per cycle and per command, the backends'
	// per cycle: fields 2, 10, 11 and 12 of a table row and of a report.md
	// row.
	var cells [][]string
	rowsPart, _, _ := strings.Cut(table.String(), "\ntargets:")
	for _, line := range strings.Split(rowsPart, "\n") {
		if f := strings.Fields(line); len(f) == len(columns) && f[0] != "N" {
			cells = append(cells, []string{f[2], f[10], f[11], f[12]})
		}
	}
	for _, line := range strings.Split(md, "\n") {
		if f := strings.Split(strings.Trim(line, "|"), "|"); len(f) == len(columns) && strings.TrimSpace(f[0]) != "N" && !strings.HasPrefix(f[0], "-") {
			for i := range f {
				f[i] = strings.TrimSpace(f[i])
			}
			cells = append(cells, []string{f[2], f[10], f[11], f[12]})
		}
	}
	rows := 0
	for _, c := range cells {
		series, cycle, cmd, backend := c[0], c[1], c[2], c[3]
		switch series {
		case "lone", "redsync", "etcd":
			rows++
			if cycle != "–" || cmd != "–" {
				t.Errorf("a %s row shows a proxy CPU of %q, %q; want –", series, cycle, cmd)
			}
		case "proxy":
			rows++
			if cycle != "20µs" && cycle != "100µs" || cmd != "10µs" && cmd != "50µs" {
				t.Errorf("a proxy row shows a proxy CPU of %q per cycle, %q per command", cycle, cmd)
			}
		}
		if _, err := time.ParseDuration(backend); err != nil {
			t.Errorf("a %s row shows a backend CPU of %q", series, backend)
		}
	}
	if rows != 14 {
		t.Fatalf("read %d rows of the table and report.md, want 14:\n%s\n%s", rows, table.String(), md)
	}
	if !strings.Contains(table.String(), "MET") || strings.Contains(table.String()+md, "indicative") {
		t.Errorf("a full run's targets are marked indicative:\n%s", table.String())
	}
	// report.md shows results: the targets live in docs/performance.md.
	if strings.Contains(md, "## Targets") || strings.Contains(strings.ToLower(md), "not met") || strings.Contains(md, "| goal |") {
		t.Errorf("report.md holds the targets; it should show results only:\n%s", md)
	}
	for _, want := range []string{"proxy CPU per cycle", "proxy CPU per command", "backend CPU per cycle", "p50 vs lone", "two commands"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	// p50 against lone Redis's: 2ms / 1ms.
	if !strings.Contains(md, "| 2ms | 2.00x |") {
		t.Errorf("report.md lacks the proxy's p50 against lone Redis's:\n%s", md)
	}
}

// etcd's rows are a group of their own, last, against the lone Redis its
// rounds took turns with; the report says how etcd ran; the chart draws it.
func TestEtcdSeries(t *testing.T) {
	r := sampleReport(false)
	if got := r.ns(); len(got) != 2 || got[0] != 1 || got[1] != 5 {
		t.Errorf("ns() = %v: etcd's cluster size is no N of the Redis series", got)
	}
	rows := r.rows()
	last := rows[len(rows)-1]
	if last[2] != "etcd" || last[0] != "3" || last[4] != "0.01x" || last[6] != "10.00x" {
		t.Errorf("the last row is %q; want etcd's, 0.01x lone's cycles/s and 10x its p50", last)
	}
	md := r.markdown()
	for _, want := range []string{"3-member etcd 3.4.23 cluster", "in the temporary directory, on ext4", "took turns with N=5's"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q", want)
		}
	}
	r.Etcd.Tmpfs, r.Etcd.DataFS = true, "tmpfs"
	if md := r.markdown(); !strings.Contains(md, "in /dev/shm (-etcd-tmpfs), on tmpfs") {
		t.Errorf("report.md does not say etcd's data was on a tmpfs")
	}
	if svg := r.svg(); !strings.Contains(svg, "etcd Mutex (3 members)") {
		t.Errorf("the chart has no etcd series")
	}
	r.Etcd = nil
	r.Results = r.Results[:len(r.Results)-1]
	if md := r.markdown(); strings.Contains(md, "etcd") {
		t.Errorf("a run without etcd speaks of it:\n%s", md)
	}
}

// CPU time is spread over cycles, and over commands, two a cycle.
func TestCPUPerCycleAndCommand(t *testing.T) {
	r := result{Cycles: 1000}
	r.setCPU(50*time.Millisecond, 20*time.Millisecond)
	if r.ProxyCPUCycle != 50*time.Microsecond || r.ProxyCPUCmd != 25*time.Microsecond ||
		r.BackendCPUCycle != 20*time.Microsecond || r.BackendCPUCmd != 10*time.Microsecond {
		t.Errorf("setCPU: %+v", r)
	}
	var none result
	none.setCPU(time.Second, time.Second)
	if none.ProxyCPUCycle != 0 || none.BackendCPUCmd != 0 {
		t.Errorf("setCPU without cycles: %+v", none)
	}
}

// A -quick run marks its targets (in the table) and its figures (in the
// report) as indicative.
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
	got := wrote("bench/results", true)
	for _, f := range []string{"report.md", "chart.svg", "latency.svg", "results.json", proxyLogName, etcdLogName} {
		if !strings.Contains(got, filepath.Join("bench/results", f)) {
			t.Errorf("%q does not name %s", got, f)
		}
	}
	if got := wrote("bench/results", false); strings.Contains(got, etcdLogName) {
		t.Errorf("%q names etcd's log of a run without etcd", got)
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
