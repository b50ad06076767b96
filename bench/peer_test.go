package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// A target's goal is data: a bound and a number, compared as numbers.
func TestTargetsAreTypedData(t *testing.T) {
	for _, tt := range []struct {
		t    target
		want string
		met  bool
	}{
		{target{Value: 20, Bound: atMost, Goal: 20}, "<= 20", true},
		{target{Value: 20.5, Bound: atMost, Goal: 20}, "<= 20", false},
		{target{Value: 0.5, Bound: atLeast, Goal: 0.55}, ">= 0.55", false},
		{target{Value: 4, Bound: atLeast, Goal: 4}, ">= 4", true},
	} {
		if got := tt.t.Want(); got != tt.want {
			t.Errorf("Want() = %q, want %q", got, tt.want)
		}
		if got := tt.t.Met(); got != tt.met {
			t.Errorf("%+v: Met() = %v, want %v", tt.t, got, tt.met)
		}
	}
}

// peerSample is a peer series of one round: every target, load and client
// count; own CPU per request in µs by target.
func peerSample(own map[string]float64) []peerResult {
	var out []peerResult
	for _, c := range peerClients {
		for _, cmd := range peerCommands {
			for _, tg := range peerTargets {
				key := peerLabel(tg.Name, tg.N)
				us, ok := own[key]
				if !ok {
					continue
				}
				out = append(out, peerResult{Target: tg.Name, N: tg.N, Command: cmd.Name, Clients: c, Requests: 1000,
					PerSec: 10000 / us, OwnCPU: time.Duration(us * float64(time.Microsecond)), BehindIt: 20 * time.Microsecond})
			}
		}
	}
	return out
}

// The peer series' rows and goals: the proxy's own CPU against
// twemproxy's, over one backend at 1 and 50 clients and over five at 50,
// for each load; without twemproxy, no goal is judged.
func TestPeerReport(t *testing.T) {
	r := sampleReport(false)
	r.Peer = peerSample(map[string]float64{"lone Redis": 20, "twemproxy, one Redis": 30, "redlock-proxy, one backend": 24, "redlock-proxy, 5 backends": 45})
	var table bytes.Buffer
	r.printTable(&table)
	md := r.markdown()
	for _, want := range []string{
		"| 50 | SET NX PX | twemproxy, one Redis | 333 | 0.67x | 30µs | 20µs |",
		"| 1 | EVALSHA release | lone Redis | 500 | 1.00x | 20µs | – |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	// The goals are judged in the table; report.md shows results only.
	for _, want := range []string{
		"own CPU per request, redlock-proxy, one backend / twemproxy, SET NX PX, 1 client  0.800  (want <= 1)  MET",
		"own CPU per request, redlock-proxy, 5 backends / twemproxy, EVALSHA release, 50 clients  1.500  (want <= 1)  NOT MET",
	} {
		if !strings.Contains(strings.Join(strings.Fields(table.String()), " "), strings.Join(strings.Fields(want), " ")) {
			t.Errorf("the table lacks %q:\n%s", want, table.String())
		}
		if name, _, _ := strings.Cut(want, "  "); strings.Contains(md, name) {
			t.Errorf("report.md judges the goal %q", name)
		}
	}
	if !strings.Contains(table.String(), "own CPU per request, redlock-proxy, 5 backends / twemproxy, SET NX PX, 50 clients") {
		t.Errorf("the table lacks the peer goals:\n%s", table.String())
	}
	n := 0
	for _, tg := range r.peerTargets() {
		if tg.Present {
			n++
		}
	}
	if n != 6 {
		t.Errorf("%d peer goals judged; want 6 (two loads: one backend at 1 and 50 clients, five at 50)", n)
	}
	r.Peer = peerSample(map[string]float64{"lone Redis": 20, "redlock-proxy, one backend": 24, "redlock-proxy, 5 backends": 45})
	for _, tg := range r.peerTargets() {
		if tg.Present {
			t.Errorf("goal %q judged without twemproxy", tg.Name)
		}
	}
}

// A machine without a tool runs the other series and says, at the end,
// which it skipped and how to get it.
func TestMissingToolsSkipTheirSeries(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	etcdPath, nutcrackerPath = "/nonexistent/etcd", "/nonexistent/nutcracker"
	defer func() { etcdPath, nutcrackerPath = "/usr/bin/etcd", "/usr/sbin/nutcracker" }()
	etcd, pipe, peer := true, true, true
	skipped, twemproxy := available(&etcd, &pipe, &peer)
	if etcd || pipe || peer || twemproxy != "" {
		t.Errorf("with no tool: etcd %v, pipelined %v, peer %v, twemproxy %q; want all off", etcd, pipe, peer, twemproxy)
	}
	r := sampleReport(false)
	r.Skipped = skipped
	var table bytes.Buffer
	r.printTable(&table)
	md := r.markdown()
	for _, want := range []string{
		"skipped etcd: etcd not found; to run it: apt-get install -y etcd-server",
		"skipped pipelined: redis-benchmark not found; to run it: apt-get install -y redis-tools",
		"skipped peer: redis-benchmark not found; to run it: apt-get install -y redis-tools",
	} {
		if !strings.Contains(table.String(), want) || !strings.Contains(md, want) {
			t.Errorf("the table or report.md lacks %q:\n%s", want, table.String())
		}
	}
	// redis-benchmark there, nutcracker not: the peer series runs without
	// twemproxy, and says so.
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "redis-benchmark"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir)
	etcd, pipe, peer = false, true, true
	skipped, twemproxy = available(&etcd, &pipe, &peer)
	if !pipe || !peer || twemproxy != "" || len(skipped) != 1 || skipped[0].Series != "peer: twemproxy" || skipped[0].Get != "apt-get install -y nutcracker" {
		t.Errorf("without nutcracker: pipelined %v, peer %v, twemproxy %q, skipped %+v", pipe, peer, twemproxy, skipped)
	}
}

// The peer series runs on real processes: a lone Redis, nutcracker over
// it, and the proxy over one and five backends; every point is measured.
func TestPeerSeriesRuns(t *testing.T) {
	twemproxy, err := nutcrackerBinary()
	if err != nil {
		t.Fatalf("%v (Debian's nutcracker; ./test.sh installs it)", err)
	}
	tmp := t.TempDir()
	bin, err := buildProxy(tmp)
	if err != nil {
		t.Fatal(err)
	}
	lone, err := redisproc.Start(tmp)
	if err != nil {
		t.Fatal(err)
	}
	defer lone.Stop()
	log, err := os.Create(filepath.Join(tmp, "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	b := &bencher{o: options{rounds: 1, quick: true, proxyLog: log}, rep: &report{}, tmp: tmp, bin: bin, lone: lone, lonePID: redisPID(lone.Addr)}
	if err := b.measurePeers(twemproxy); err != nil {
		t.Fatal(err)
	}
	if want := len(peerTargets) * len(peerCommands) * len(peerClients); len(b.rep.Peer) != want {
		t.Fatalf("%d points; want %d", len(b.rep.Peer), want)
	}
	for _, p := range b.rep.Peer {
		if p.PerSec <= 0 || p.Clients == 50 && p.OwnCPU <= 0 || p.N > 0 && p.Clients == 50 && p.BehindIt <= 0 {
			t.Errorf("%s, %s, %d clients: %.0f requests/s, own CPU %v, behind it %v", p.label(), p.Command, p.Clients, p.PerSec, p.OwnCPU, p.BehindIt)
		}
	}
	if n := len(b.rep.peerTargets()); n != 6 {
		t.Errorf("%d peer goals", n)
	}
}
