package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The against mode judges a change to the proxy against another revision
// in one run: `go run ./bench -against REV` builds REV's proxy from a
// temporary git worktree (removed afterwards) and the working tree's, and
// runs the same load against both, interleaved round by round, so that the
// shared machine's drifting load touches both alike. Each build gets
// redis-server backends of its own. Per client count: lock cycles (go-redis
// SET NX PX and the release script) against each proxy over N backends and
// against a lone Redis (for the p50 ratio); then, over one backend,
// redis-benchmark's SET NX PX and release EVALSHA against each proxy and
// twemproxy (the peer series' loads). It reports every figure of both
// builds and their ratio, taken round by round (the median, and the range).

// againstOptions are an against run's settings.
type againstOptions struct {
	rev         string // the revision to compare the working tree with
	ns, clients []int
	d           time.Duration
	rounds      int
	quick       bool
	procs       int
	proxyLog    *os.File
	peer        bool   // also the one-backend redis-benchmark loads
	twemproxy   string // nutcracker's binary; "": without it
}

// againstPeerClients are the client counts of the one-backend loads.
var againstPeerClients = []int{50}

// againstReport is an against run: every round's sample of each figure.
type againstReport struct {
	Started    time.Time       `json:"started"`
	Finished   time.Time       `json:"finished"`
	Host       string          `json:"host"`
	Load       string          `json:"load_average"` // /proc/loadavg when the run started and ended
	Rev        string          `json:"rev"`          // as given
	Commit     string          `json:"rev_commit"`   // what it named
	Tree       string          `json:"tree"`         // the working tree: its HEAD, and whether it had changes
	Duration   time.Duration   `json:"duration_per_point"`
	Rounds     int             `json:"rounds"`
	ProxyProcs int             `json:"proxy_gomaxprocs"`
	Cycles     []againstCycles `json:"cycles"`
	Peer       []againstPeer   `json:"peer,omitempty"`
}

// againstCycles is one N and client count: a sample per round of each.
type againstCycles struct {
	N       int      `json:"n"`
	Clients int      `json:"clients"`
	Lone    []result `json:"lone"`
	Rev     []result `json:"rev"`
	Tree    []result `json:"tree"`
}

// againstPeer is one redis-benchmark load over one backend.
type againstPeer struct {
	Command   string       `json:"command"`
	Clients   int          `json:"clients"`
	Twemproxy []peerResult `json:"twemproxy,omitempty"` // nil: nutcracker missing
	Rev       []peerResult `json:"rev"`
	Tree      []peerResult `json:"tree"`
}

// roundOrder is the order the series take turns in round r: reversed every
// other round, so that neither build always runs first.
func roundOrder[T any](series []T, r int) []T {
	out := slices.Clone(series)
	if r%2 == 1 {
		slices.Reverse(out)
	}
	return out
}

// gitIn runs git in dir and returns its trimmed output.
func gitIn(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return strings.TrimSpace(string(out)), nil
}

// buildRevision builds rev's proxy into dir from a temporary git worktree,
// which it removes before it returns (and on any exit while it builds).
// It returns the binary and the commit rev names.
func buildRevision(root, rev, dir string) (bin, commit string, err error) {
	if commit, err = gitIn(root, "rev-parse", "--verify", "--quiet", rev+"^{commit}"); err != nil {
		return "", "", fmt.Errorf("-against %q: not a revision of %s: %w", rev, root, err)
	}
	src := filepath.Join(dir, "src-"+commit[:12])
	if _, err := gitIn(root, "worktree", "add", "--detach", "--quiet", src, commit); err != nil {
		return "", "", err
	}
	defer atExit(func() {
		if _, err := gitIn(root, "worktree", "remove", "--force", src); err != nil {
			os.RemoveAll(src)
			gitIn(root, "worktree", "prune")
		}
	})()
	bin, err = buildProxyFrom(src, filepath.Join(dir, "redlock-proxy-"+commit[:12]))
	if err != nil {
		return "", "", fmt.Errorf("%s: %w", rev, err)
	}
	return bin, commit, nil
}

// treeName names the working tree's build: HEAD's commit, "+ changes"
// when files differ from it.
func treeName(root string) string {
	head, err := gitIn(root, "rev-parse", "--short=12", "HEAD")
	if err != nil {
		return "working tree"
	}
	if st, err := gitIn(root, "status", "--porcelain", "--untracked-files=no"); err == nil && st != "" {
		return head + " + changes"
	}
	return head
}

// loadAvg is /proc/loadavg's first three fields.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	return strings.Join(f[:min(3, len(f))], " ")
}

// runAgainst builds both proxies and measures them; every process it
// starts is stopped when it returns.
func runAgainst(o againstOptions) (*againstReport, error) {
	root, err := repoRoot()
	if err != nil {
		return nil, err
	}
	tmp, err := os.MkdirTemp("", "redlock-bench-against-")
	if err != nil {
		return nil, err
	}
	defer atExit(func() { os.RemoveAll(tmp) })()
	rep := &againstReport{Started: time.Now(), Host: hostInfo(), Load: loadAvg(), Rev: o.rev, Tree: treeName(root),
		Duration: o.d, Rounds: o.rounds, ProxyProcs: o.procs}
	progress("building %s's proxy (in a temporary worktree) and the working tree's", o.rev)
	revBin, commit, err := buildRevision(root, o.rev, tmp)
	if err != nil {
		return nil, err
	}
	rep.Commit = commit
	treeBin, err := buildProxy(tmp)
	if err != nil {
		return nil, err
	}
	lone, err := redisproc.Start(tmp)
	if err != nil {
		return nil, err
	}
	defer atExit(lone.Stop)()
	b := &bencher{o: options{rounds: o.rounds, procs: o.procs, proxyLog: o.proxyLog, quick: o.quick}, tmp: tmp, lone: lone, lonePID: redisPID(lone.Addr)}
	names := map[string]string{"rev": o.rev, "tree": "working tree"}
	for _, n := range o.ns {
		if err := b.againstCycles(rep, n, o.clients, o.d, revBin, treeBin, names); err != nil {
			return nil, err
		}
	}
	if o.peer {
		if err := b.againstPeers(rep, o.twemproxy, revBin, treeBin, names); err != nil {
			return nil, fmt.Errorf("one-backend loads: %w", err)
		}
	}
	rep.Finished = time.Now()
	rep.Load += " -> " + loadAvg()
	return rep, nil
}

// againstCycles measures lock cycles over n backends at every client
// count: the lone Redis and each build, interleaved.
func (b *bencher) againstCycles(rep *againstReport, n int, clients []int, d time.Duration, revBin, treeBin string, names map[string]string) error {
	rigs := map[string]*proxyRig{}
	for _, s := range []struct{ name, bin string }{{"rev", revBin}, {"tree", treeBin}} {
		rig, stop, err := startRig(b.tmp, s.bin, n, b.o.procs, b.o.proxyLog)
		if err != nil {
			return fmt.Errorf("%s: %w", names[s.name], err)
		}
		defer stop()
		rigs[s.name] = rig
	}
	for _, c := range clients {
		pt := againstCycles{N: n, Clients: c}
		for r := 0; r < b.o.rounds; r++ {
			for _, s := range roundOrder([]string{"lone", "rev", "tree"}, r) {
				switch s {
				case "lone":
					pt.Lone = append(pt.Lone, b.loneCycles(c, d))
				default:
					rig := rigs[s]
					res := cycles(rig.px.Addr, c, d, rig.cpu)
					if s == "rev" {
						pt.Rev = append(pt.Rev, res)
					} else {
						pt.Tree = append(pt.Tree, res)
					}
				}
				last := map[string][]result{"lone": pt.Lone, "rev": pt.Rev, "tree": pt.Tree}[s]
				x := last[len(last)-1]
				name := names[s]
				if s == "lone" {
					name = "lone Redis"
				}
				progress("round %d N=%d clients=%-3d %-14s %9.0f cycles/s  p50 %-9v p99 %-9v errors %d  CPU per cycle: proxy %s, backends %s",
					r+1, n, c, name, x.PerSec, x.P50.Round(time.Microsecond), x.P99.Round(time.Microsecond), x.Errors,
					cpuCell(x.ProxyCPUCycle, s != "lone"), cpuCell(x.BackendCPUCycle, true))
				if x.Error != "" {
					progress("  first error: %s", x.Error)
				}
			}
		}
		rep.Cycles = append(rep.Cycles, pt)
	}
	return nil
}

// againstPeers runs the one-backend redis-benchmark loads against each
// build and twemproxy ("" when missing), interleaved.
func (b *bencher) againstPeers(rep *againstReport, twemproxy, revBin, treeBin string, names map[string]string) error {
	eps := map[string]peerEndpoint{}
	for _, s := range []struct{ name, bin string }{{"rev", revBin}, {"tree", treeBin}} {
		ep, stop, err := b.proxyEndpoint(s.bin, 1)
		if err != nil {
			return fmt.Errorf("%s: %w", names[s.name], err)
		}
		defer stop()
		eps[s.name] = ep
	}
	series := []string{"rev", "tree"}
	if twemproxy != "" {
		addr, pid, stop, err := startNutcracker(twemproxy, b.tmp, b.lone.Addr)
		if err != nil {
			return err
		}
		defer atExit(stop)()
		eps["twemproxy"] = peerEndpoint{target: "twemproxy", addr: addr, n: 1, own: pid, behind: []int{b.lonePID}}
		series = []string{"twemproxy", "rev", "tree"}
	}
	var all []peerEndpoint
	for _, s := range series {
		all = append(all, eps[s])
	}
	sha, err := b.loadRelease(all)
	if err != nil {
		return err
	}
	for _, c := range againstPeerClients {
		for _, cmd := range peerCommands {
			pt := againstPeer{Command: cmd.Name, Clients: c}
			for r := 0; r < b.o.rounds; r++ {
				for _, s := range roundOrder(series, r) {
					name := names[s]
					if s == "twemproxy" {
						name = "twemproxy"
					}
					res, err := peerLoad(eps[s], c, peerRequests(b.o.quick, c), cmd.Name, sha, fmt.Sprintf("round %d %s, one backend", r+1, name))
					if err != nil {
						return err
					}
					switch s {
					case "twemproxy":
						pt.Twemproxy = append(pt.Twemproxy, res)
					case "rev":
						pt.Rev = append(pt.Rev, res)
					default:
						pt.Tree = append(pt.Tree, res)
					}
				}
			}
			rep.Peer = append(rep.Peer, pt)
		}
	}
	return nil
}

// figure is one compared figure: each build's median over the rounds, and
// the median and range of the per-round ratios tree / rev.
type figure struct {
	Name                    string
	Unit                    string // "us", "/s", "x"
	Rev, Tree               float64
	Ratio, RatioLo, RatioHi float64
}

// compare makes a figure of per-round values of both builds (paired by
// round; a round where REV's value is 0 has no ratio).
func compare(name, unit string, rev, tree []float64) figure {
	f := figure{Name: name, Unit: unit, Rev: medianOf(rev), Tree: medianOf(tree)}
	var ratios []float64
	for i := range min(len(rev), len(tree)) {
		if rev[i] > 0 {
			ratios = append(ratios, tree[i]/rev[i])
		}
	}
	if len(ratios) > 0 {
		f.Ratio, f.RatioLo, f.RatioHi = medianOf(ratios), slices.Min(ratios), slices.Max(ratios)
	}
	return f
}

// medianOf is the median of vs (of an even count, the mean of the middle
// two); 0 for none.
func medianOf(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(vs))
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// each maps the samples through f.
func each[T any](xs []T, f func(T) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(x)
	}
	return out
}

func usOf(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// figures lists every compared figure, in the report's order.
func (r *againstReport) figures() []figure {
	var fs []figure
	for _, pt := range r.Cycles {
		at := fmt.Sprintf("N=%d, %d client%s: ", pt.N, pt.Clients, plural(pt.Clients))
		cyc := func(name, unit string, f func(result) float64) {
			fs = append(fs, compare(at+name, unit, each(pt.Rev, f), each(pt.Tree, f)))
		}
		cyc("proxy CPU per cycle", "us", func(x result) float64 { return usOf(x.ProxyCPUCycle) })
		cyc("backends' CPU per cycle", "us", func(x result) float64 { return usOf(x.BackendCPUCycle) })
		cyc("cycles/s", "/s", func(x result) float64 { return x.PerSec })
		cyc("p50 of a cycle", "us", func(x result) float64 { return usOf(x.P50) })
		cyc("p99 of a cycle", "us", func(x result) float64 { return usOf(x.P99) })
		// Against the lone Redis of the same round.
		vsLone := func(xs []result) []float64 {
			out := make([]float64, len(xs))
			for i, x := range xs {
				if i < len(pt.Lone) && pt.Lone[i].P50 > 0 {
					out[i] = float64(x.P50) / float64(pt.Lone[i].P50)
				}
			}
			return out
		}
		fs = append(fs, compare(at+"p50 / lone Redis's", "x", vsLone(pt.Rev), vsLone(pt.Tree)))
	}
	for _, pt := range r.Peer {
		at := fmt.Sprintf("one backend, %s, %d client%s: ", pt.Command, pt.Clients, plural(pt.Clients))
		own := func(p peerResult) float64 { return usOf(p.OwnCPU) }
		fs = append(fs, compare(at+"own CPU per request", "us", each(pt.Rev, own), each(pt.Tree, own)))
		fs = append(fs, compare(at+"requests/s", "/s", each(pt.Rev, func(p peerResult) float64 { return p.PerSec }),
			each(pt.Tree, func(p peerResult) float64 { return p.PerSec })))
		if len(pt.Twemproxy) > 0 {
			// Each build's own CPU against twemproxy's in the same round.
			vsTw := func(xs []peerResult) []float64 {
				out := make([]float64, len(xs))
				for i, x := range xs {
					if i < len(pt.Twemproxy) && pt.Twemproxy[i].OwnCPU > 0 {
						out[i] = float64(x.OwnCPU) / float64(pt.Twemproxy[i].OwnCPU)
					}
				}
				return out
			}
			fs = append(fs, compare(at+"own CPU / twemproxy's", "x", vsTw(pt.Rev), vsTw(pt.Tree)))
		}
	}
	return fs
}

// cell writes a figure's value in its unit.
func cell(v float64, unit string) string {
	switch unit {
	case "us":
		if v >= 10000 {
			return strconv.FormatFloat(v/1000, 'f', 2, 64) + " ms"
		}
		return strconv.FormatFloat(v, 'f', 1, 64) + " us"
	case "/s":
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 2, 64) + "x"
}

// againstColumns are the comparison's columns, the builds named.
func (r *againstReport) againstColumns() []string {
	rev := r.Rev
	if !strings.HasPrefix(r.Commit, r.Rev) {
		rev += " (" + r.Commit[:min(12, len(r.Commit))] + ")"
	}
	return []string{"figure", rev, "working tree (" + r.Tree + ")", "tree / " + r.Rev + ", median (range)"}
}

// againstRows are the comparison's cells.
func (r *againstReport) againstRows() [][]string {
	var out [][]string
	for _, f := range r.figures() {
		ratio := "–"
		if f.RatioHi > 0 {
			ratio = fmt.Sprintf("%.3f (%.3f-%.3f)", f.Ratio, f.RatioLo, f.RatioHi)
		}
		out = append(out, []string{f.Name, cell(f.Rev, f.Unit), cell(f.Tree, f.Unit), ratio})
	}
	return out
}

// againstLegend says how the figures were taken.
func (r *againstReport) againstLegend() string {
	twem := ""
	for _, p := range r.Peer {
		if len(p.Twemproxy) > 0 {
			twem = " and twemproxy (nutcracker)"
		}
	}
	return fmt.Sprintf("%s, %s to %s, load average %s. %d interleaved round(s) of %v per point, the order reversed every other round; "+
		"each build has redis-server backends of its own. A lock cycle is go-redis `SET key token NX PX 30000` and the release script; "+
		"CPU is each process's own from /proc (the proxy's, and its backends' together). "+
		"The one-backend loads are redis-benchmark's (no pipelining, random keys) against each build over one backend%s. "+
		"Each column is the median of the rounds; the ratio is taken round by round (a build against the other in the same round).",
		r.Host, r.Started.Format(time.RFC3339), r.Finished.Format("15:04:05"), r.Load, r.Rounds, r.Duration, twem)
}

// printAgainst writes the comparison as aligned text.
func (r *againstReport) printAgainst(w io.Writer) {
	fmt.Fprintf(w, "\n%s\n\n", strings.ReplaceAll(r.againstLegend(), "`", ""))
	head := r.againstColumns()
	rows := r.againstRows()
	width := make([]int, len(head))
	for _, row := range append([][]string{head}, rows...) {
		for i, c := range row {
			width[i] = max(width[i], len(c))
		}
	}
	for _, row := range append([][]string{head}, rows...) {
		fmt.Fprintf(w, "%-*s", width[0], row[0])
		for i := 1; i < len(row); i++ {
			fmt.Fprintf(w, "  %*s", width[i], row[i])
		}
		fmt.Fprintln(w)
	}
}

// againstMarkdown is against.md.
func (r *againstReport) againstMarkdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# redlock-proxy: the working tree against %s\n\n%s\n\n", r.Rev, r.againstLegend())
	head := r.againstColumns()
	b.WriteString("| " + strings.Join(head, " | ") + " |\n|" + strings.Repeat("---|", len(head)) + "\n")
	for _, row := range r.againstRows() {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

// write saves against.json and against.md under dir.
func (r *againstReport) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	j, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "against.json"), j, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "against.md"), []byte(r.againstMarkdown()), 0o644)
}
