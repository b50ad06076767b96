package main

import (
	"strings"
	"testing"
	"time"
)

// The buckets are ten a decade from 10µs to 1s, each counting from its
// lower bound up to (not including) the next one's.
func TestHistogramBuckets(t *testing.T) {
	if histLen != 52 {
		t.Fatalf("histLen = %d, want 52: under 10µs, 50 buckets, from 1s on", histLen)
	}
	for i, want := range map[int]time.Duration{0: 0, 1: 10 * time.Microsecond, 11: 100 * time.Microsecond,
		21: time.Millisecond, 31: 10 * time.Millisecond, 41: 100 * time.Millisecond, 51: time.Second} {
		if got := histLower(i); got != want {
			t.Errorf("histLower(%d) = %v, want %v", i, got, want)
		}
	}
	for i := 0; i < histLen; i++ {
		lo, hi := histLower(i), histUpper(i)
		if lo >= hi {
			t.Fatalf("bucket %d: [%v, %v)", i, lo, hi)
		}
		if i > 1 && i < histLen-1 {
			// About 26% wider than the bucket before it: 10^(1/10).
			if r := float64(hi) / float64(lo); r < 1.25 || r > 1.27 {
				t.Errorf("bucket %d: [%v, %v) is %.3fx wide", i, lo, hi, r)
			}
		}
		if got := histIndex(lo); got != i {
			t.Errorf("histIndex(%v) = %d, want %d (its lower bound)", lo, got, i)
		}
		if i < histLen-1 {
			if got := histIndex(hi - 1); got != i {
				t.Errorf("histIndex(%v) = %d, want %d (just below its upper bound)", hi-1, got, i)
			}
		}
	}
	for d, want := range map[time.Duration]int{0: 0, 9 * time.Microsecond: 0, 10 * time.Microsecond: 1,
		12 * time.Microsecond: 1, 13 * time.Microsecond: 2, 500 * time.Microsecond: 17, 999 * time.Millisecond: 50,
		time.Second: 51, time.Minute: 51} {
		if got := histIndex(d); got != want {
			t.Errorf("histIndex(%v) = %d, want %d", d, got, want)
		}
	}
	if b := histBounds(); len(b) != histLen || b[1] != 10 || b[21] != 1000 || b[51] != 1e6 {
		t.Errorf("histBounds() = %v", b)
	}
}

// A histogram's quantile is its bucket's upper bound: exact to one bucket.
func TestHistogramQuantile(t *testing.T) {
	var ds []time.Duration
	for i := 0; i < 90; i++ {
		ds = append(ds, 50*time.Microsecond)
	}
	for i := 0; i < 9; i++ {
		ds = append(ds, 2*time.Millisecond)
	}
	ds = append(ds, 3*time.Second)
	h := newHistogram(ds)
	if h.total() != 100 || h[histIndex(50*time.Microsecond)] != 90 || h[histLen-1] != 1 {
		t.Fatalf("histogram %v", h)
	}
	for q, want := range map[float64]time.Duration{0.5: histUpper(histIndex(50 * time.Microsecond)),
		0.9: histUpper(histIndex(50 * time.Microsecond)), 0.95: histUpper(histIndex(2 * time.Millisecond)), 1: time.Second} {
		if got := h.quantile(q); got != want {
			t.Errorf("quantile(%v) = %v, want %v", q, got, want)
		}
	}
	if got := h.quantile(0.5); got < 50*time.Microsecond || float64(got) > 1.26*50e3 {
		t.Errorf("p50 %v is more than a bucket from 50µs", got)
	}
	if got := histogram(make([]int64, histLen)).quantile(0.5); got != 0 {
		t.Errorf("an empty histogram's p50 is %v", got)
	}
}

// report.md gives the histograms' percentiles, and latency.svg draws a
// panel per client count (1, 10, 50) and a line per series.
func TestLatencyReport(t *testing.T) {
	r := sampleReport(false)
	r.HistBounds = histBounds()
	for i := range r.Results {
		x := &r.Results[i]
		x.P90, x.P99, x.P999 = 2*x.P50, 3*x.P50, 4*x.P50
		x.Hist = newHistogram([]time.Duration{x.P50, x.P50, x.P90, x.P99})
	}
	md := r.markdown()
	for _, want := range []string{"## Cycle latency at N=5", "| clients | series | p50 | p90 | p99 | p99.9 |",
		"| 50 | proxy | 2ms | 4ms | 6ms | 8ms |", "| 50 | etcd | 10ms | 20ms | 30ms | 40ms |", "![latency histograms](latency.svg)"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	svg := r.latencySVG()
	for _, want := range []string{">50 clients<", "<title>lone, 50 clients</title>", "<title>proxy, 50 clients</title>",
		"<title>redsync, 50 clients</title>", "<title>etcd, 50 clients</title>", ">1ms<", ">etcd Mutex<"} {
		if !strings.Contains(svg, want) {
			t.Errorf("latency.svg lacks %q", want)
		}
	}
	if strings.Contains(svg, "N=1,") || strings.Contains(svg, "<title>proxy, 1 client") {
		t.Errorf("latency.svg draws what was not measured at N=5")
	}
	if got := r.histClients(); len(got) != 1 || got[0] != 50 {
		t.Errorf("histClients() = %v, want [50]", got)
	}
}
