package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The builds take turns in reversed order every other round, so that
// neither always runs first.
func TestRoundOrderAlternates(t *testing.T) {
	s := []string{"lone", "rev", "tree"}
	for r, want := range []string{"lone rev tree", "tree rev lone", "lone rev tree"} {
		if got := strings.Join(roundOrder(s, r), " "); got != want {
			t.Errorf("round %d: %s, want %s", r, got, want)
		}
	}
	if strings.Join(s, " ") != "lone rev tree" {
		t.Errorf("roundOrder changed its argument: %v", s)
	}
}

// sampleAgainst is three rounds at 1 client over five backends, and the
// one-backend SET NX PX load beside twemproxy.
func sampleAgainst() *againstReport {
	us := func(v float64) time.Duration { return time.Duration(v * float64(time.Microsecond)) }
	cyc := func(cpu, p50 float64, perSec float64) result {
		return result{ProxyCPUCycle: us(cpu), BackendCPUCycle: us(2 * cpu), PerSec: perSec, P50: us(p50), P99: us(4 * p50)}
	}
	peer := func(own float64) peerResult { return peerResult{OwnCPU: us(own), PerSec: 1e6 / own} }
	return &againstReport{Rev: "624366d", Commit: "624366d0123456789", Tree: "e3bebd87c785 + changes", Rounds: 3, Duration: time.Second,
		Host: "vm, 2 CPUs", Load: "2.00 2.00 2.00 -> 3.00 3.00 3.00",
		Cycles: []againstCycles{{N: 5, Clients: 1,
			Lone: []result{cyc(0, 100, 9000), cyc(0, 200, 5000), cyc(0, 100, 9000)},
			// Round 2 is slow for both: the paired ratio does not move.
			Rev:  []result{cyc(100, 300, 3000), cyc(200, 600, 1500), cyc(120, 300, 3000)},
			Tree: []result{cyc(90, 200, 3300), cyc(180, 400, 1650), cyc(96, 240, 3200)},
		}},
		Peer: []againstPeer{{Command: "SET NX PX", Clients: 50,
			Twemproxy: []peerResult{peer(10), peer(20), peer(10)},
			Rev:       []peerResult{peer(13), peer(26), peer(12)},
			Tree:      []peerResult{peer(9), peer(20), peer(10)},
		}},
	}
}

// Each figure is each build's median over the rounds, and the median and
// range of the per-round ratios: a round slow for both builds moves
// neither ratio.
func TestAgainstFigures(t *testing.T) {
	r := sampleAgainst()
	got := map[string]figure{}
	for _, f := range r.figures() {
		got[f.Name] = f
	}
	near := func(a, b float64) bool { return a-b < 1e-9 && b-a < 1e-9 }
	for _, w := range []figure{
		{Name: "N=5, 1 client: proxy CPU per cycle", Rev: 120, Tree: 96, Ratio: 0.9, RatioLo: 0.8, RatioHi: 0.9},
		{Name: "N=5, 1 client: backends' CPU per cycle", Rev: 240, Tree: 192, Ratio: 0.9, RatioLo: 0.8, RatioHi: 0.9},
		{Name: "N=5, 1 client: p50 / lone Redis's", Rev: 3, Tree: 2, Ratio: 2.0 / 3, RatioLo: 2.0 / 3, RatioHi: 0.8},
		{Name: "one backend, SET NX PX, 50 clients: own CPU per request", Rev: 13, Tree: 10, Ratio: 20.0 / 26, RatioLo: 9.0 / 13, RatioHi: 10.0 / 12},
		{Name: "one backend, SET NX PX, 50 clients: own CPU / twemproxy's", Rev: 1.3, Tree: 1, Ratio: 20.0 / 26, RatioLo: 9.0 / 13, RatioHi: 10.0 / 12},
	} {
		f, ok := got[w.Name]
		if !ok {
			t.Errorf("no figure %q", w.Name)
			continue
		}
		if !near(f.Rev, w.Rev) || !near(f.Tree, w.Tree) || !near(f.Ratio, w.Ratio) || !near(f.RatioLo, w.RatioLo) || !near(f.RatioHi, w.RatioHi) {
			t.Errorf("%s: %+v, want %+v", w.Name, f, w)
		}
	}
	if n := len(got); n != 6+3 {
		t.Errorf("%d figures; want 9 (six of lock cycles, three of the one-backend load)", n)
	}
	// Without twemproxy, no ratio to it.
	r.Peer[0].Twemproxy = nil
	for _, f := range r.figures() {
		if strings.Contains(f.Name, "twemproxy") {
			t.Errorf("figure %q without twemproxy", f.Name)
		}
	}
}

// The table and against.md name both builds and show each figure's
// values and ratio.
func TestAgainstReport(t *testing.T) {
	r := sampleAgainst()
	var table bytes.Buffer
	r.printAgainst(&table)
	md := r.againstMarkdown()
	for _, want := range []string{
		"| figure | 624366d | working tree (e3bebd87c785 + changes) | tree / 624366d, median (range) |",
		"| N=5, 1 client: proxy CPU per cycle | 120.0 us | 96.0 us | 0.900 (0.800-0.900) |",
		"| N=5, 1 client: cycles/s | 3000 | 3200 | 1.100 (1.067-1.100) |",
		"| N=5, 1 client: p99 of a cycle | 1200.0 us | 960.0 us |",
		"load average 2.00 2.00 2.00 -> 3.00 3.00 3.00",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("against.md lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(table.String(), "N=5, 1 client: proxy CPU per cycle") || !strings.Contains(table.String(), "0.900 (0.800-0.900)") {
		t.Errorf("the table lacks a figure:\n%s", table.String())
	}
	dir := t.TempDir()
	if err := r.write(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"against.md", "against.json"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

// A name that is not a revision fails at once, saying so.
func TestAgainstUnknownRevision(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = buildRevision(root, "no-such-revision-of-this-repository", t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "not a revision") {
		t.Errorf("err = %v; want not a revision", err)
	}
}

// The against mode on real processes: HEAD's proxy built from a temporary
// worktree (gone afterwards) and the working tree's, measured over real
// redis-server backends and beside twemproxy; every figure has both
// builds' values.
func TestAgainstRuns(t *testing.T) {
	twemproxy, err := nutcrackerBinary()
	if err != nil {
		t.Fatalf("%v (Debian's nutcracker; ./test.sh installs it)", err)
	}
	root, err := repoRoot()
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	before, err := gitIn(root, "worktree", "list", "--porcelain")
	if err != nil {
		t.Fatal(err)
	}
	r, err := runAgainst(againstOptions{rev: "HEAD", ns: []int{2}, clients: []int{1}, d: 300 * time.Millisecond, rounds: 2, quick: true,
		proxyLog: log, peer: true, twemproxy: twemproxy})
	if err != nil {
		t.Fatal(err)
	}
	if after, _ := gitIn(root, "worktree", "list", "--porcelain"); after != before {
		t.Errorf("the temporary worktree is still listed:\n%s\nbefore:\n%s", after, before)
	}
	if head, _ := gitIn(root, "rev-parse", "HEAD"); r.Commit != head {
		t.Errorf("built %q; HEAD is %q", r.Commit, head)
	}
	fs := r.figures()
	if len(fs) != 6+2*3 {
		t.Fatalf("%d figures; want 12", len(fs))
	}
	for _, f := range fs {
		if f.Rev <= 0 || f.Tree <= 0 || f.Ratio <= 0 {
			t.Errorf("%s: %+v", f.Name, f)
		}
	}
	for _, pt := range r.Cycles {
		for _, x := range append(pt.Rev, pt.Tree...) {
			if x.Errors > 0 {
				t.Errorf("%d failed cycles: %s", x.Errors, x.Error)
			}
		}
	}
}
