package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
)

type pipeResult struct {
	N     int     `json:"n"`
	Lone  float64 `json:"lone_set_per_sec"`
	Proxy float64 `json:"proxy_set_per_sec"`
}

type report struct {
	Started    time.Time     `json:"started"`
	Finished   time.Time     `json:"finished"`
	Host       string        `json:"host"`
	Duration   time.Duration `json:"duration_per_point"`
	ProxyProcs int           `json:"proxy_gomaxprocs"` // 0: not set, the proxy's default
	Rounds     int           `json:"rounds"`
	Quick      bool          `json:"quick"` // one short round per point: targets are indicative
	Results    []result      `json:"results"`
	Pipelined  []pipeResult  `json:"pipelined"`
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

func (r *report) ns() []int      { return r.distinct(func(x result) int { return x.N }) }
func (r *report) clients() []int { return r.distinct(func(x result) int { return x.Clients }) }

// distinct lists the values of f over the results, sorted.
func (r *report) distinct(f func(result) int) []int {
	seen := map[int]bool{}
	var out []int
	for _, x := range r.Results {
		if v := f(x); !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	sort.Ints(out)
	return out
}

// target is one of the goals, evaluated on this run.
type target struct {
	Name    string
	Value   float64
	Want    string
	Met     bool
	Present bool
}

// targets evaluates the goals at the largest N and the client count
// closest to 50.
func (r *report) targets() []target {
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
	p, ok1 := r.find("proxy", n, c)
	l, ok2 := r.find("lone", n, c)
	s, ok3 := r.find("redsync", n, c)
	ts = append(ts, target{Name: fmt.Sprintf("proxy / lone Redis, N=%d, %d clients", n, c), Want: ">= 0.50",
		Present: ok1 && ok2 && l.PerSec > 0, Value: p.PerSec / l.PerSec})
	ts = append(ts, target{Name: fmt.Sprintf("proxy / redsync, N=%d, %d clients", n, c), Want: ">= 4.0",
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
		ts = append(ts, target{Name: fmt.Sprintf("pipelined -P 16 -c 50 proxy / lone, N=%d (median)", r.Pipelined[0].N), Want: ">= 0.25",
			Present: len(ratios) > 0, Value: med})
	}
	p1, ok4 := r.find("proxy", ns[0], c)
	ts = append(ts, target{Name: fmt.Sprintf("proxy CPU/op N=%d / N=%d, %d clients", n, ns[0], c), Want: "<= 2.5",
		Present: ok1 && ok4 && p1.ProxyCPU > 0 && n != ns[0], Value: float64(p.ProxyCPU) / float64(p1.ProxyCPU)})
	for i := range ts {
		switch ts[i].Want[:2] {
		case ">=":
			var w float64
			fmt.Sscan(ts[i].Want[3:], &w)
			ts[i].Met = ts[i].Value >= w
		case "<=":
			var w float64
			fmt.Sscan(ts[i].Want[3:], &w)
			ts[i].Met = ts[i].Value <= w
		}
	}
	return ts
}

// proxyCPU shows the proxy's CPU per operation, or a dash for a series
// that runs no proxy.
func proxyCPU(x result) string {
	if x.Series != "proxy" {
		return "–"
	}
	return x.ProxyCPU.Round(100 * time.Nanosecond).String()
}

// verdict says whether a target was met; after a -quick run, as an
// indication only.
func (r *report) verdict(t target, met, notMet string) string {
	v := notMet
	if t.Met {
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
	fmt.Fprintf(w, "\n%s.\n", r.procsNote())
	fmt.Fprintf(w, "\n%-3s %-8s %-8s %12s %10s %10s %10s %8s %12s %12s\n", "N", "clients", "series", "cycles/s", "p50", "p99", "p999", "errors", "proxy CPU/op", "redis CPU/op")
	for _, n := range r.ns() {
		for _, c := range r.clients() {
			for _, s := range []string{"lone", "proxy", "redsync"} {
				x, ok := r.find(s, n, c)
				if !ok {
					continue
				}
				fmt.Fprintf(w, "%-3d %-8d %-8s %12.0f %10v %10v %10v %8d %12s %12v\n", n, c, s, x.PerSec,
					x.P50.Round(time.Microsecond), x.P99.Round(time.Microsecond), x.P999.Round(time.Microsecond), x.Errors,
					proxyCPU(x), x.RedisCPU.Round(100*time.Nanosecond))
			}
		}
	}
	for _, p := range r.Pipelined {
		fmt.Fprintf(w, "pipelined -P 16 -c 50, N=%d: lone %.0f SET/s, proxy %.0f SET/s (%.2fx)\n", p.N, p.Lone, p.Proxy, p.Proxy/p.Lone)
	}
	fmt.Fprintln(w, "\ntargets:")
	if r.Quick {
		fmt.Fprintf(w, "  (%s)\n", indicativeNote)
	}
	for _, t := range r.targets() {
		if !t.Present {
			continue
		}
		fmt.Fprintf(w, "  %-50s %6.3f  (want %s)  %s\n", t.Name, t.Value, t.Want, r.verdict(t, "MET", "NOT MET"))
	}
}

func (r *report) markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# redlock-proxy benchmark\n\n%s, %s to %s, %v per point, %d round(s), median shown.\n%s.\n\n",
		r.Host, r.Started.Format(time.RFC3339), r.Finished.Format("15:04:05"), r.Duration, r.Rounds, r.procsNote())
	b.WriteString("Lock cycle = `SET key token NX PX 30000` + compare-and-delete release, random keys, go-redis clients.\n")
	b.WriteString("`lone` is the same client code on one Redis; `redsync` is client-side Redlock over the proxy's backends.\n\n")
	b.WriteString("| N | clients | series | cycles/s | vs lone | p50 | p99 | p999 | errors | proxy CPU/op | Redis CPU/op |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, n := range r.ns() {
		for _, c := range r.clients() {
			l, _ := r.find("lone", n, c)
			for _, s := range []string{"lone", "proxy", "redsync"} {
				x, ok := r.find(s, n, c)
				if !ok {
					continue
				}
				ratio := ""
				if l.PerSec > 0 {
					ratio = fmt.Sprintf("%.2fx", x.PerSec/l.PerSec)
				}
				fmt.Fprintf(&b, "| %d | %d | %s | %.0f | %s | %v | %v | %v | %d | %s | %v |\n", n, c, s, x.PerSec, ratio,
					x.P50.Round(time.Microsecond), x.P99.Round(time.Microsecond), x.P999.Round(time.Microsecond), x.Errors,
					proxyCPU(x), x.RedisCPU.Round(100*time.Nanosecond))
			}
		}
	}
	if len(r.Pipelined) > 0 {
		b.WriteString("\n| pipelined (redis-benchmark -P 16 -c 50, SET NX PX random keys) | lone SET/s | proxy SET/s | ratio |\n|---|---|---|---|\n")
		for _, p := range r.Pipelined {
			fmt.Fprintf(&b, "| N=%d | %.0f | %.0f | %.2fx |\n", p.N, p.Lone, p.Proxy, p.Proxy/p.Lone)
		}
	}
	b.WriteString("\n## Targets\n\n")
	if r.Quick {
		b.WriteString("Targets are " + indicativeNote + ".\n\n")
	}
	b.WriteString("| target | this run | goal | |\n|---|---|---|---|\n")
	for _, t := range r.targets() {
		if !t.Present {
			continue
		}
		fmt.Fprintf(&b, "| %s | %.3f | %s | %s |\n", t.Name, t.Value, t.Want, r.verdict(t, "met", "**not met**"))
	}
	b.WriteString("\n![chart](chart.svg)\n")
	return b.String()
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
	colors := map[string]string{"proxy": "#d62728", "lone": "#1f77b4", "redsync": "#7f7f7f"}
	names := map[string]string{"proxy": "redlock-proxy", "lone": "lone Redis (no Redlock)", "redsync": "redsync (client-side Redlock)"}

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
	for _, s := range []string{"lone", "redsync", "proxy"} {
		var pts []string
		for i, c := range cs {
			if x, ok := r.find(s, n, c); ok {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", xpos(i), ypos(x.PerSec)))
			}
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2.5" points="%s"/>`, colors[s], strings.Join(pts, " "))
		for _, p := range pts {
			xy := strings.Split(p, ",")
			fmt.Fprintf(&b, `<circle cx="%s" cy="%s" r="3.5" fill="%s"/>`, xy[0], xy[1], colors[s])
		}
	}
	for k, s := range []string{"proxy", "lone", "redsync"} {
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
	for _, s := range []string{"lone", "proxy", "redsync"} {
		if x, ok := r.find(s, n, c); ok {
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
	for g, pct := range []string{"p50", "p99", "p999"} {
		gx := x1 + 20 + float64(g)*120
		fmt.Fprintf(&b, `<text x="%v" y="%v" text-anchor="middle">%s</text>`, gx+45, y0+ph+18, pct)
		for k, s := range []string{"lone", "proxy", "redsync"} {
			x, ok := r.find(s, n, c)
			if !ok {
				continue
			}
			v := []time.Duration{x.P50, x.P99, x.P999}[g]
			top := ly(float64(v))
			fmt.Fprintf(&b, `<rect x="%v" y="%.1f" width="28" height="%.1f" fill="%s"><title>%s %s %v</title></rect>`,
				gx+float64(k)*32, top, y0+ph-top, colors[s], s, pct, v)
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
