package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

type pipeResult struct {
	N     int     `json:"n"`
	Lone  float64 `json:"lone_set_per_sec"`
	Proxy float64 `json:"proxy_set_per_sec"`
}

// etcdInfo says how the etcd series ran.
type etcdInfo struct {
	Members int    `json:"members"`
	Version string `json:"version"`
	DataFS  string `json:"data_fs"`         // the file system of the members' data directories
	Tmpfs   bool   `json:"tmpfs"`           // -etcd-tmpfs: on /dev/shm, not the temporary directory
	WithN   int    `json:"measured_with_n"` // its rounds took turns with this N's series
}

type report struct {
	Started    time.Time       `json:"started"`
	Finished   time.Time       `json:"finished"`
	Host       string          `json:"host"`
	Duration   time.Duration   `json:"duration_per_point"`
	ProxyProcs int             `json:"proxy_gomaxprocs"` // 0: not set, the proxy's default
	Rounds     int             `json:"rounds"`
	Quick      bool            `json:"quick"` // one short round per point: targets are indicative
	Results    []result        `json:"results"`
	Pipelined  []pipeResult    `json:"pipelined"`
	Etcd       *etcdInfo       `json:"etcd,omitempty"`             // nil: no etcd series
	Idle       *idleResult     `json:"idle_connections,omitempty"` // nil: not measured
	HistBounds []float64       `json:"histogram_lower_bounds_us"`  // the latency histograms' buckets
	Peer       []peerResult    `json:"peer,omitempty"`             // the peer series (twemproxy); nil: not run
	Skipped    []skipNote      `json:"skipped,omitempty"`          // series this machine could not run
	Clusters   []clusterResult `json:"clusters,omitempty"`         // the cluster series (clusters.go); nil: not run
	Cores      int             `json:"cores,omitempty"`            // the host's CPUs, for the cluster series' note
}

// skipNote is a series the run left out for want of a tool.
type skipNote struct {
	Series string `json:"series"`
	Why    string `json:"why"`
	Get    string `json:"get"` // the command that installs it
}

// peerColumns are the peer series' table columns.
var peerColumns = []string{"clients", "load", "target", "requests/s", "vs lone", "own CPU/request", "Redis behind it/request"}

// peerRows are the peer series' cells: each client count and load, the
// targets in their order, requests/s against the lone Redis's.
func (r *report) peerRows() [][]string {
	var out [][]string
	for _, c := range peerClients {
		for _, cmd := range peerCommands {
			lone, _ := r.findPeer("lone", 0, cmd.Name, c)
			for _, t := range peerTargets {
				p, ok := r.findPeer(t.Name, t.N, cmd.Name, c)
				if !ok {
					continue
				}
				ratio := ""
				if lone.PerSec > 0 {
					ratio = fmt.Sprintf("%.2fx", p.PerSec/lone.PerSec)
				}
				behind := "–"
				if t.N > 0 {
					behind = cpuCell(p.BehindIt, true)
				}
				out = append(out, []string{strconv.Itoa(c), cmd.Name, p.label(), fmt.Sprintf("%.0f", p.PerSec), ratio,
					cpuCell(p.OwnCPU, true), behind})
			}
		}
	}
	return out
}

// peerLegend says what the peer series measures.
const peerLegend = "Peer series: the same redis-benchmark load (no pipelining, random keys: `SET key tok NX PX 30000`, " +
	"and the release script's `EVALSHA` on keys that do not hold the token) against a lone Redis, twemproxy (nutcracker) over one Redis, " +
	"redlock-proxy over one backend (the same work as twemproxy) and over five. Own CPU is the target process's (Redis, nutcracker " +
	"or the proxy) per request; the Redis servers behind it are counted apart. Read from /proc."

// skippedLines say which series were left out, and how to get them.
func (r *report) skippedLines() []string {
	var out []string
	for _, s := range r.Skipped {
		out = append(out, fmt.Sprintf("skipped %s: %s; to run it: %s", s.Series, s.Why, s.Get))
	}
	return out
}

// procsNote says how the proxy process was run.
func (r *report) procsNote() string {
	if r.ProxyProcs > 0 {
		return fmt.Sprintf("The proxy ran with GOMAXPROCS=%d (-proxy-procs), not its default", r.ProxyProcs)
	}
	return "The proxy ran as users run it: default settings, GOMAXPROCS not set (the proxy sets it from the CPU count or CPU quota)"
}

func (r *report) find(series string, n, clients int) (result, bool) {
	for _, x := range r.Results {
		if x.Series == series && x.N == n && x.Clients == clients {
			return x, true
		}
	}
	return result{}, false
}

// ns lists the backend counts of the Redis series (etcd's N is its
// cluster's size).
func (r *report) ns() []int {
	return r.distinct(func(x result) (int, bool) { return x.N, x.Series != "etcd" })
}

func (r *report) clients() []int {
	return r.distinct(func(x result) (int, bool) { return x.Clients, true })
}

// distinct lists the values of f over the results it keeps, sorted.
func (r *report) distinct(f func(result) (int, bool)) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range r.Results {
		if v, keep := f(x); keep && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Ints(out)
	return out
}

// bound is how a target's value must compare with its goal.
type bound uint8

const (
	atMost bound = iota + 1
	atLeast
)

// target is one goal, evaluated on this run.
type target struct {
	Name    string
	Value   float64
	Bound   bound
	Goal    float64
	Present bool // this run measured it
}

// Met reports whether the value is on the goal's side.
func (t target) Met() bool {
	if t.Bound == atMost {
		return t.Value <= t.Goal
	}
	return t.Value >= t.Goal
}

// Want writes the goal: "<= 20", ">= 0.55".
func (t target) Want() string {
	op := ">="
	if t.Bound == atMost {
		op = "<="
	}
	return op + " " + strconv.FormatFloat(t.Goal, 'f', -1, 64)
}

// targets evaluates the goals at the largest N and the client count
// closest to 50, then the peer series' goals.
func (r *report) targets() []target {
	ts := r.cycleTargets()
	return append(ts, r.peerTargets()...)
}

// cycleTargets are the lock cycle's goals at the largest N.
func (r *report) cycleTargets() []target {
	ns, cs := r.ns(), r.clients()
	if len(ns) == 0 {
		return nil
	}
	n := ns[len(ns)-1]
	c := cs[0]
	for _, x := range cs {
		if math.Abs(float64(x-50)) < math.Abs(float64(c-50)) {
			c = x
		}
	}
	var ts []target
	us := func(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }
	// At one client: the proxy's own CPU per cycle, and its latency.
	p1c, ok1c := r.find("proxy", n, cs[0])
	l1c, okl1c := r.find("lone", n, cs[0])
	if cs[0] == 1 {
		ts = append(ts, target{Name: fmt.Sprintf("proxy CPU per cycle (us), N=%d, 1 client", n), Bound: atMost, Goal: 120,
			Present: ok1c && p1c.ProxyCPUCycle > 0, Value: us(p1c.ProxyCPUCycle)})
		ts = append(ts, target{Name: fmt.Sprintf("p50 proxy / lone Redis, N=%d, 1 client", n), Bound: atMost, Goal: 2.0,
			Present: ok1c && okl1c && l1c.P50 > 0, Value: float64(p1c.P50) / float64(l1c.P50)})
	}
	p, ok1 := r.find("proxy", n, c)
	l, ok2 := r.find("lone", n, c)
	s, ok3 := r.find("redsync", n, c)
	ts = append(ts, target{Name: fmt.Sprintf("proxy CPU per cycle (us), N=%d, %d clients", n, c), Bound: atMost, Goal: 20,
		Present: ok1 && p.ProxyCPUCycle > 0, Value: us(p.ProxyCPUCycle)})
	ts = append(ts, target{Name: fmt.Sprintf("proxy / lone Redis, N=%d, %d clients", n, c), Bound: atLeast, Goal: 0.55,
		Present: ok1 && ok2 && l.PerSec > 0, Value: p.PerSec / l.PerSec})
	ts = append(ts, target{Name: fmt.Sprintf("proxy / redsync, N=%d, %d clients", n, c), Bound: atLeast, Goal: 4.0,
		Present: ok1 && ok3 && s.PerSec > 0, Value: p.PerSec / s.PerSec})
	if len(r.Pipelined) > 0 {
		// The median ratio of the interleaved rounds.
		var ratios []float64
		for _, x := range r.Pipelined {
			if x.Lone > 0 {
				ratios = append(ratios, x.Proxy/x.Lone)
			}
		}
		sort.Float64s(ratios)
		med := 0.0
		if len(ratios) > 0 {
			med = ratios[len(ratios)/2]
		}
		ts = append(ts, target{Name: fmt.Sprintf("pipelined -P 16 -c 50 proxy / lone, N=%d (median)", r.Pipelined[0].N), Bound: atLeast, Goal: 0.25,
			Present: len(ratios) > 0, Value: med})
	}
	return ts
}

// findPeer is the peer series' point for a target, load and client count.
func (r *report) findPeer(tgt string, n int, command string, clients int) (peerResult, bool) {
	for _, p := range r.Peer {
		if p.Target == tgt && p.N == n && p.Command == command && p.Clients == clients {
			return p, true
		}
	}
	return peerResult{}, false
}

// peerTargets are the peer series' goals: the proxy's own CPU per
// request, as a ratio to twemproxy's, under each load: over one backend
// (the same work as twemproxy) at or below it at 1 and 50 clients; over
// five at or below it at 50 clients.
func (r *report) peerTargets() []target {
	var ts []target
	for _, cmd := range peerCommands {
		for _, g := range []struct{ n, clients int }{{1, 1}, {1, 50}, {5, 50}} {
			tw, okT := r.findPeer("twemproxy", 1, cmd.Name, g.clients)
			px, okP := r.findPeer("proxy", g.n, cmd.Name, g.clients)
			ts = append(ts, target{
				Name:    fmt.Sprintf("own CPU per request, %s / twemproxy, %s, %d client%s", peerLabel("proxy", g.n), cmd.Name, g.clients, plural(g.clients)),
				Value:   float64(px.OwnCPU) / float64(tw.OwnCPU),
				Bound:   atMost,
				Goal:    1,
				Present: okT && okP && tw.OwnCPU > 0,
			})
		}
	}
	return ts
}

// cpuCell shows a CPU time per cycle or per command, or a dash when none
// was measured (a series that runs no proxy).
func cpuCell(d time.Duration, measured bool) string {
	if !measured {
		return "–"
	}
	return d.Round(100 * time.Nanosecond).String()
}

// columns are the table's and report.md's columns, short (table) and long
// (report.md) names.
var columns = []struct{ short, long string }{
	{"N", "N"}, {"clients", "clients"}, {"series", "series"}, {"cycles/s", "cycles/s"}, {"vs lone", "vs lone"},
	{"p50", "p50 cycle"}, {"p50/lone", "p50 vs lone"}, {"p99", "p99"}, {"p99.9", "p99.9"}, {"errors", "errors"},
	{"proxy/cycle", "proxy CPU per cycle"}, {"proxy/cmd", "proxy CPU per command"},
	{"backend/cycle", "backend CPU per cycle"}, {"backend/cmd", "backend CPU per command"},
}

// cpuLegend says what a cycle is and which CPU column is which.
func (r *report) cpuLegend() string {
	backends := "the series' Redis servers"
	if r.Etcd != nil {
		backends += ", or etcd's members"
	}
	return "A lock cycle is one acquire (`SET key token NX PX 30000`) and one release (compare-and-delete script): two commands. " +
		"CPU columns: the proxy process's own CPU time, and all backends' (" + backends + "), " +
		"read from /proc, per cycle and per command (half a cycle)."
}

// seriesOrder is the order of a row group.
var seriesOrder = []string{"lone", "proxy", "redsync"}

// point is series at n backends and c clients; etcd's at its own size.
func (r *report) point(series string, n, c int) (result, bool) {
	if series == "etcd" {
		n = etcdMembers
	}
	return r.find(series, n, c)
}

// loneFor is lone Redis at x's client count, measured in the same rounds.
func (r *report) loneFor(x result) result {
	n := x.N
	if x.Series == "etcd" && r.Etcd != nil {
		n = r.Etcd.WithN
	}
	l, _ := r.find("lone", n, x.Clients)
	return l
}

// row is one result's cells, against lone Redis at the same client count.
func (r *report) row(x result) []string {
	l := r.loneFor(x)
	ratio := func(a, b float64) string {
		if b <= 0 {
			return ""
		}
		return fmt.Sprintf("%.2fx", a/b)
	}
	us := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
	proxy := x.Series == "proxy"
	return []string{strconv.Itoa(x.N), strconv.Itoa(x.Clients), x.Series, fmt.Sprintf("%.0f", x.PerSec),
		ratio(x.PerSec, l.PerSec), us(x.P50), ratio(float64(x.P50), float64(l.P50)), us(x.P99), us(x.P999),
		strconv.FormatInt(x.Errors, 10),
		cpuCell(x.ProxyCPUCycle, proxy), cpuCell(x.ProxyCPUCmd, proxy),
		cpuCell(x.BackendCPUCycle, true), cpuCell(x.BackendCPUCmd, true)}
}

// rows lists every result's cells, grouped by N, then clients; etcd's
// last, a group of its own.
func (r *report) rows() [][]string {
	var out [][]string
	for _, n := range r.ns() {
		for _, c := range r.clients() {
			for _, s := range seriesOrder {
				if x, ok := r.find(s, n, c); ok {
					out = append(out, r.row(x))
				}
			}
		}
	}
	for _, c := range r.clients() {
		if x, ok := r.find("etcd", etcdMembers, c); ok {
			out = append(out, r.row(x))
		}
	}
	return out
}

// etcdNote says how the etcd series ran, or nothing when it did not.
func (r *report) etcdNote() string {
	e := r.Etcd
	if e == nil {
		return ""
	}
	where := "the temporary directory"
	if e.Tmpfs {
		where = "/dev/shm (-etcd-tmpfs)"
	}
	return fmt.Sprintf("`etcd` is go.etcd.io/etcd/client/v3/concurrency's Mutex (Lock, then Unlock: a transaction and a delete) "+
		"on a %d-member etcd %s cluster (its N column is the members), one client with one session (lease) per concurrent locker; "+
		"its rounds took turns with N=%d's and its vs-lone ratios are against that lone Redis. "+
		"The members' data directories are in %s, on %s; etcd syncs every write to disk, "+
		"the Redis servers run without persistence.", e.Members, e.Version, e.WithN, where, e.DataFS)
}

// verdict says whether a target was met; after a -quick run, as an
// indication only.
func (r *report) verdict(t target, met, notMet string) string {
	v := notMet
	if t.Met() {
		v = met
	}
	if r.Quick {
		v += " (indicative)"
	}
	return v
}

// indicativeNote explains the targets of a -quick run.
const indicativeNote = "indicative only: a -quick run measures one short round per point; run without -quick (and with -rounds 3) to judge the targets"

func (r *report) printTable(w io.Writer) {
	fmt.Fprintf(w, "\n%s.\n%s\n", r.procsNote(), strings.ReplaceAll(r.cpuLegend(), "`", ""))
	if note := r.etcdNote(); note != "" {
		fmt.Fprintln(w, strings.ReplaceAll(note, "`", ""))
	}
	fmt.Fprintln(w)
	rows := r.rows()
	width := make([]int, len(columns))
	for i, c := range columns {
		width[i] = len(c.short)
	}
	for _, row := range rows {
		for i, cell := range row {
			width[i] = max(width[i], utf8.RuneCountInString(cell))
		}
	}
	line := func(cells []string) {
		for i, cell := range cells {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(cell))
			if i < 3 { // N, clients, series: left-aligned
				fmt.Fprint(w, cell+pad+" ")
			} else {
				fmt.Fprint(w, " "+pad+cell)
			}
		}
		fmt.Fprintln(w)
	}
	var head []string
	for _, c := range columns {
		head = append(head, c.short)
	}
	line(head)
	for _, row := range rows {
		line(row)
	}
	for _, p := range r.Pipelined {
		fmt.Fprintf(w, "pipelined -P 16 -c 50, N=%d: lone %.0f SET/s, proxy %.0f SET/s (%.2fx)\n", p.N, p.Lone, p.Proxy, p.Proxy/p.Lone)
	}
	for _, l := range r.idleLines() {
		fmt.Fprintln(w, l)
	}
	if rows := r.peerRows(); len(rows) > 0 {
		fmt.Fprintf(w, "\n%s\n", strings.ReplaceAll(peerLegend, "`", ""))
		fmt.Fprintln(w, strings.Join(peerColumns, " | "))
		for _, row := range rows {
			fmt.Fprintln(w, strings.Join(row, " | "))
		}
	}
	fmt.Fprintln(w, "\ntargets:")
	if r.Quick {
		fmt.Fprintf(w, "  (%s)\n", indicativeNote)
	}
	for _, t := range r.targets() {
		if !t.Present {
			continue
		}
		fmt.Fprintf(w, "  %-50s %6.3f  (want %s)  %s\n", t.Name, t.Value, t.Want(), r.verdict(t, "MET", "NOT MET"))
	}
	for _, l := range r.skippedLines() {
		fmt.Fprintln(w, l)
	}
}

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# redlock-proxy benchmark\n\n%s, %s to %s, %v per point, %d round(s), median shown.\n%s.\n\n",
		r.Host, r.Started.Format(time.RFC3339), r.Finished.Format("15:04:05"), r.Duration, r.Rounds, r.procsNote())
	// The report shows results; the project's targets, and how runs
	// compare with them, are kept in docs/performance.md.
	if r.Quick {
		b.WriteString("This run's figures are " + indicativeNote + ".\n\n")
	}
	b.WriteString("Every cycle locks a key of its own (no contention); the Redis series use go-redis clients. ")
	b.WriteString("`lone` is the same client code as `proxy` on one Redis; `redsync` is client-side Redlock over the proxy's backends.\n\n")
	if note := r.etcdNote(); note != "" {
		b.WriteString(note + "\n\n")
	}
	b.WriteString(r.cpuLegend() + "\n\n|")
	for _, c := range columns {
		b.WriteString(" " + c.long + " |")
	}
	b.WriteString("\n|" + strings.Repeat("---|", len(columns)) + "\n")
	for _, row := range r.rows() {
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	if len(r.Pipelined) > 0 {
		b.WriteString("\n| pipelined (redis-benchmark -P 16 -c 50, SET NX PX random keys) | lone SET/s | proxy SET/s | ratio |\n|---|---|---|---|\n")
		for _, p := range r.Pipelined {
			fmt.Fprintf(&b, "| N=%d | %.0f | %.0f | %.2fx |\n", p.N, p.Lone, p.Proxy, p.Proxy/p.Lone)
		}
	}
	if lines := r.idleLines(); len(lines) > 0 {
		m := r.Idle
		b.WriteString("\n## Memory per idle connection\n\n")
		fmt.Fprintf(&b, "| %d idle connections | RSS per connection |\n|---|---|\n| redlock-proxy (N=%d) | %.1f KiB |\n| lone Redis | %.1f KiB |\n\n",
			m.Conns, m.N, m.ProxyKiB, m.RedisKiB)
		b.WriteString(lines[1] + "\n")
	}
	if rows := r.peerRows(); len(rows) > 0 {
		b.WriteString("\n## A peer: twemproxy\n\n" + peerLegend + "\n\n| " + strings.Join(peerColumns, " | ") + " |\n|" +
			strings.Repeat("---|", len(peerColumns)) + "\n")
		for _, row := range rows {
			b.WriteString("| " + strings.Join(row, " | ") + " |\n")
		}
	}
	b.WriteString(r.clusterSection())
	if lines := r.skippedLines(); len(lines) > 0 {
		b.WriteString("\n" + strings.Join(lines, ".\n") + ".\n")
	}
	b.WriteString("\n![chart](chart.svg)\n")
	if len(r.HistBounds) > 0 {
		fmt.Fprintf(&b, "\n## Cycle latency at N=%d\n\n", r.histN())
		b.WriteString(r.latencyTable())
		b.WriteString("\n![latency histograms](latency.svg)\n")
	}
	return b.String()
}

// idleLines describe the idle connections' memory, or nothing when it was
// not measured: the RSS per connection of the proxy and of lone Redis, then
// where the proxy's goes.
func (r *report) idleLines() []string {
	m := r.Idle
	if m == nil {
		return nil
	}
	lines := []string{
		fmt.Sprintf("%d idle client connections (each answered one PING, then idle), resident memory (/proc VmRSS) per connection: "+
			"redlock-proxy (N=%d) %.1f KiB, lone Redis %.1f KiB.", m.Conns, m.N, m.ProxyKiB, m.RedisKiB),
	}
	where := fmt.Sprintf("Where the proxy's goes (its Go runtime's statistics and sampled heap profile): per connection the heap in use grows by %.1f KiB "+
		"and goroutine stacks by %.1f KiB (one goroutine per connection; Go starts a stack at 2 KiB and grows it by doubling)",
		m.ProxyHeapKiB, m.ProxyStackKiB)
	var sites []string
	for _, s := range m.ProxySites {
		fn := s.Func[strings.LastIndex(s.Func, "/")+1:]
		what := ""
		switch {
		case strings.HasSuffix(s.Func, "redlock-proxy/proxy.newReader"):
			what = " (the client's read buffer, allocated whole; only the pages written to are resident)"
		case strings.HasSuffix(s.Func, "redlock-proxy/proxy.newClient"):
			what = " (the client's state)"
		case s.Func == "runtime.malg":
			what = " (the goroutine's descriptor)"
		}
		sites = append(sites, fmt.Sprintf("%s %.1f KiB%s", fn, s.KiB, what))
	}
	if len(sites) > 0 {
		where += "; the heap's largest allocation sites: " + strings.Join(sites, "; ")
	}
	lines = append(lines, where+". The client's done channel carries empty structs, so its buffer takes no memory. "+
		"RSS counts neither process's kernel socket buffers.")
	return lines
}

// svg draws throughput against clients (left) and latency percentiles at
// the client count closest to 50 (right), for the largest N.
func (r *report) svg() string {
	const W, H = 960, 420
	ns, cs := r.ns(), r.clients()
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`, W, H)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>`)
	if len(ns) == 0 || len(cs) == 0 {
		return b.String() + "</svg>"
	}
	n := ns[len(ns)-1]
	colors := seriesColors
	names := map[string]string{"proxy": "redlock-proxy", "lone": "lone Redis (no Redlock)", "redsync": "redsync (client-side Redlock)",
		"etcd": fmt.Sprintf("etcd Mutex (%d members)", etcdMembers)}

	// Left: throughput.
	x0, y0, pw, ph := 70.0, 50.0, 380.0, 300.0
	maxY := 0.0
	for _, x := range r.Results {
		maxY = math.Max(maxY, x.PerSec)
	}
	maxY = niceCeil(maxY)
	fmt.Fprintf(&b, `<text x="%v" y="25" font-size="15" font-weight="bold">Lock cycles per second (N=%d backends)</text>`, x0, n)
	xpos := func(i int) float64 {
		if len(cs) == 1 {
			return x0 + pw/2
		}
		return x0 + pw*float64(i)/float64(len(cs)-1)
	}
	ypos := func(v float64) float64 { return y0 + ph - ph*v/maxY }
	for k := 0; k <= 4; k++ {
		v := maxY * float64(k) / 4
		fmt.Fprintf(&b, `<line x1="%v" y1="%.1f" x2="%v" y2="%.1f" stroke="#ddd"/><text x="%v" y="%.1f" text-anchor="end">%s</text>`,
			x0, ypos(v), x0+pw, ypos(v), x0-6, ypos(v)+4, human(v))
	}
	for i, c := range cs {
		fmt.Fprintf(&b, `<text x="%.1f" y="%v" text-anchor="middle">%d</text>`, xpos(i), y0+ph+18, c)
	}
	fmt.Fprintf(&b, `<text x="%v" y="%v" text-anchor="middle">concurrent clients</text>`, x0+pw/2, y0+ph+36)
	for _, s := range []string{"lone", "redsync", "etcd", "proxy"} {
		var pts []string
		for i, c := range cs {
			if x, ok := r.point(s, n, c); ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos(i), ypos(x.PerSec)))
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2.5" points="%s"/>`, colors[s], strings.Join(pts, " "))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`, xy[0], xy[1], colors[s])
		}
	}
	legend := []string{"proxy", "lone", "redsync"}
	if r.Etcd != nil {
		legend = append(legend, "etcd")
	}
	for k, s := range legend {
		fmt.Fprintf(&b, `<rect x="%v" y="%v" width="12" height="12" fill="%s"/><text x="%v" y="%v">%s</text>`,
			x0+10, y0+8+float64(k)*18, colors[s], x0+28, y0+18+float64(k)*18, names[s])
	}

	// Right: latency percentiles at ~50 clients.
	c := cs[0]
	for _, x := range cs {
		if math.Abs(float64(x-50)) < math.Abs(float64(c-50)) {
			c = x
		}
	}
	x1 := 560.0
	fmt.Fprintf(&b, `<text x="%v" y="25" font-size="15" font-weight="bold">Lock cycle latency, %d clients (log scale)</text>`, x1, c)
	maxL := 0.0
	for _, s := range []string{"lone", "proxy", "redsync", "etcd"} {
		if x, ok := r.point(s, n, c); ok {
			maxL = math.Max(maxL, float64(x.P999))
		}
	}
	minL := float64(10 * time.Microsecond)
	if maxL <= minL {
		maxL = minL * 10
	}
	ly := func(v float64) float64 {
		v = math.Max(v, minL)
		return y0 + ph - ph*(math.Log10(v)-math.Log10(minL))/(math.Log10(maxL*1.5)-math.Log10(minL))
	}
	for d := minL; d <= maxL*1.5; d *= 10 {
		fmt.Fprintf(&b, `<line x1="%v" y1="%.1f" x2="%v" y2="%.1f" stroke="#ddd"/><text x="%v" y="%.1f" text-anchor="end">%v</text>`,
			x1, ly(d), x1+360, ly(d), x1-6, ly(d)+4, time.Duration(d))
	}
	for g, pct := range []string{"p50", "p99", "p99.9"} {
		gx := x1 + 20 + float64(g)*120
		fmt.Fprintf(&b, `<text x="%v" y="%v" text-anchor="middle">%s</text>`, gx+45, y0+ph+18, pct)
		for k, s := range []string{"lone", "proxy", "redsync", "etcd"} {
			x, ok := r.point(s, n, c)
			if !ok {
				continue
			}
			v := []time.Duration{x.P50, x.P99, x.P999}[g]
			top := ly(float64(v))
			fmt.Fprintf(&b, `<rect x="%v" y="%.1f" width="22" height="%.1f" fill="%s"><title>%s %s %v</title></rect>`,
				gx+float64(k)*25, top, y0+ph-top, colors[s], s, pct, v)
		}
	}
	if len(r.Pipelined) > 0 {
		p := r.Pipelined[len(r.Pipelined)-1]
		fmt.Fprintf(&b, `<text x="%v" y="%v">Pipelined (redis-benchmark -P 16 -c 50, N=%d): proxy %s SET/s, lone Redis %s SET/s (%.2fx)</text>`,
			x0, H-12, p.N, human(p.Proxy), human(p.Lone), p.Proxy/p.Lone)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// human writes a count with three significant digits and a k or M suffix:
// 12500 is 12.5k, not 12k.
func human(v float64) string {
	if v == 0 {
		return "0"
	}
	// Three significant digits; powers of ten are exact, their inverses not.
	if e := int(math.Floor(math.Log10(math.Abs(v)))) - 2; e > 0 {
		p := math.Pow10(e)
		v = math.Round(v/p) * p
	} else {
		p := math.Pow10(-e)
		v = math.Round(v*p) / p
	}
	switch {
	case v >= 1e6:
		return strconv.FormatFloat(v/1e6, 'f', -1, 64) + "M"
	case v >= 1e3:
		return strconv.FormatFloat(v/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

// histN is the N whose series the latency histograms show: the one etcd's
// rounds took turns with, or else the largest.
func (r *report) histN() int {
	if r.Etcd != nil {
		return r.Etcd.WithN
	}
	ns := r.ns()
	if len(ns) == 0 {
		return 0
	}
	return ns[len(ns)-1]
}

// histClients are the client counts the latency histograms show: 1, 10
// and 50 where measured, or else the three smallest.
func (r *report) histClients() []int {
	cs := r.clients()
	var out []int
	for _, c := range cs {
		if c == 1 || c == 10 || c == 50 {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		out = cs[:min(3, len(cs))]
	}
	return out
}

// histSeries are the series a latency histogram draws, in the order of
// the table.
var histSeries = []string{"lone", "proxy", "redsync", "etcd"}

var seriesColors = map[string]string{"proxy": "#d62728", "lone": "#1f77b4", "redsync": "#7f7f7f", "etcd": "#2ca02c"}

// latencyTable is report.md's percentiles of the histograms' series.
func (r *report) latencyTable() string {
	var b strings.Builder
	n := r.histN()
	fmt.Fprintf(&b, "| clients | series | p50 | p90 | p99 | p99.9 |\n|---|---|---|---|---|---|\n")
	for _, c := range r.histClients() {
		for _, s := range histSeries {
			x, ok := r.point(s, n, c)
			if !ok {
				continue
			}
			us := func(d time.Duration) string { return d.Round(time.Microsecond).String() }
			fmt.Fprintf(&b, "| %d | %s | %s | %s | %s | %s |\n", c, s, us(x.P50), us(x.P90), us(x.P99), us(x.P999))
		}
	}
	return b.String()
}

// latencySVG draws the lock cycles' latency histograms: a panel per client
// count (1, 10, 50), the share of cycles in each log-spaced bucket, a step
// line per series.
func (r *report) latencySVG() string {
	const W, H = 960, 400
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="12">`, W, H)
	b.WriteString(`<rect width="100%" height="100%" fill="white"/>`)
	n := r.histN()
	cs := r.histClients()
	title := fmt.Sprintf("Lock cycle latency: share of cycles per bucket (log-spaced, %d per decade), N=%d", histPerDecade, n)
	if r.Etcd != nil {
		title += fmt.Sprintf(", etcd %d members", r.Etcd.Members)
	}
	fmt.Fprintf(&b, `<text x="20" y="25" font-size="15" font-weight="bold">%s</text>`, title)
	const y0, ph, pw = 70.0, 240.0, 270.0
	for k, c := range cs {
		x0 := 60 + float64(k)*310
		var hs []struct {
			s string
			h histogram
		}
		maxShare := 0.0
		for _, s := range histSeries {
			x, ok := r.point(s, n, c)
			if !ok || len(x.Hist) != histLen || x.Hist.total() == 0 {
				continue
			}
			hs = append(hs, struct {
				s string
				h histogram
			}{s, x.Hist})
			for _, v := range x.Hist {
				maxShare = math.Max(maxShare, float64(v)/float64(x.Hist.total()))
			}
		}
		maxShare = niceCeil(maxShare * 100)
		xpos := func(i int) float64 { return x0 + pw*float64(i)/histLen }
		ypos := func(pct float64) float64 { return y0 + ph - ph*pct/maxShare }
		fmt.Fprintf(&b, `<text x="%.1f" y="%v" font-weight="bold" text-anchor="middle">%d client%s</text>`, x0+pw/2, y0-12, c, plural(c))
		for t := 0; t <= 2; t++ {
			v := maxShare * float64(t) / 2
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="#ddd"/><text x="%.1f" y="%.1f" text-anchor="end">%s%%</text>`,
				x0, ypos(v), x0+pw, ypos(v), x0-4, ypos(v)+4, human(v))
		}
		for d, label := range []string{"10µs", "100µs", "1ms", "10ms", "100ms", "1s"} {
			xi := xpos(1 + d*histPerDecade)
			fmt.Fprintf(&b, `<line x1="%.1f" y1="%v" x2="%.1f" y2="%v" stroke="#ddd"/><text x="%.1f" y="%v" text-anchor="middle">%s</text>`,
				xi, y0, xi, y0+ph+4, xi, y0+ph+18, label)
		}
		for _, e := range hs {
			tot := float64(e.h.total())
			pts := []string{fmt.Sprintf("%.1f,%.1f", xpos(0), ypos(0))}
			for i, v := range e.h {
				y := ypos(100 * float64(v) / tot)
				pts = append(pts, fmt.Sprintf("%.1f,%.1f %.1f,%.1f", xpos(i), y, xpos(i+1), y))
			}
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos(histLen), ypos(0)))
			fmt.Fprintf(&b, `<polyline fill="%s" fill-opacity="0.08" stroke="%s" stroke-width="2" points="%s"><title>%s, %d clients</title></polyline>`,
				seriesColors[e.s], seriesColors[e.s], strings.Join(pts, " "), e.s, c)
		}
	}
	fmt.Fprintf(&b, `<text x="%v" y="%v" text-anchor="middle">cycle latency (acquire + release)</text>`, W/2, y0+ph+38)
	names := map[string]string{"proxy": "redlock-proxy", "lone": "lone Redis", "redsync": "redsync", "etcd": "etcd Mutex"}
	lx := 60.0
	for _, s := range histSeries {
		if s == "etcd" && r.Etcd == nil {
			continue
		}
		fmt.Fprintf(&b, `<rect x="%v" y="%v" width="12" height="12" fill="%s"/><text x="%v" y="%v">%s</text>`,
			lx, H-30, seriesColors[s], lx+18, H-20, names[s])
		lx += 160
	}
	b.WriteString("</svg>\n")
	return b.String()
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
