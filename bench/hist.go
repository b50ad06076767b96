package main

import (
	"math"
	"time"
)

// The latency histogram's buckets are log-spaced, HDR-style: histPerDecade
// a decade from histMin to histMax, each about 26% wider than the one
// before it, plus one for anything faster than histMin and one for
// anything from histMax on.
const (
	histMin       = 10 * time.Microsecond
	histMax       = time.Second
	histPerDecade = 10
	histDecades   = 5 // histMax / histMin = 10^5
	histLen       = histDecades*histPerDecade + 2
)

// histLower is the lowest latency that bucket i counts: 0 for bucket 0,
// histMin·10^((i-1)/histPerDecade) for the others (histMax for the last).
func histLower(i int) time.Duration {
	if i <= 0 {
		return 0
	}
	return time.Duration(math.Round(float64(histMin) * math.Pow(10, float64(i-1)/histPerDecade)))
}

// histUpper is the bound below which bucket i counts (its next bucket's
// lower bound); the last bucket has none (math.MaxInt64).
func histUpper(i int) time.Duration {
	if i >= histLen-1 {
		return math.MaxInt64
	}
	return histLower(i + 1)
}

// histIndex is the bucket that counts d: the i with histLower(i) <= d <
// histUpper(i).
func histIndex(d time.Duration) int {
	switch {
	case d < histMin:
		return 0
	case d >= histMax:
		return histLen - 1
	}
	i := int(math.Floor(histPerDecade*math.Log10(float64(d)/float64(histMin)))) + 1
	// The logarithm may round across a bound: settle on the exact bucket.
	for i > 1 && d < histLower(i) {
		i--
	}
	for i < histLen-2 && d >= histLower(i+1) {
		i++
	}
	return i
}

// histogram counts latencies per bucket.
type histogram []int64

func newHistogram(ds []time.Duration) histogram {
	h := make(histogram, histLen)
	for _, d := range ds {
		h[histIndex(d)]++
	}
	return h
}

func (h histogram) total() int64 {
	var n int64
	for _, c := range h {
		n += c
	}
	return n
}

// quantile is the upper bound of the bucket that holds the q-quantile: at
// most one bucket (26%) above the exact value (the last bucket's lower
// bound when it falls there).
func (h histogram) quantile(q float64) time.Duration {
	n := h.total()
	if n == 0 {
		return 0
	}
	rank := int64(math.Ceil(q * float64(n)))
	rank = max(rank, 1)
	var seen int64
	for i, c := range h {
		seen += c
		if seen >= rank {
			if i == histLen-1 {
				return histLower(i)
			}
			return histUpper(i)
		}
	}
	return histLower(histLen - 1)
}

// histBounds are the buckets' lower bounds in microseconds, for
// results.json.
func histBounds() []float64 {
	out := make([]float64, histLen)
	for i := range out {
		out[i] = float64(histLower(i)) / float64(time.Microsecond)
	}
	return out
}
