// Package gcfloor keeps the garbage collector from running many times a
// second while the live heap is small. The proxy's live heap is a few
// megabytes, yet it allocates an op for every lock command: at the
// default GOGC of 100 it would collect every few megabytes, and each
// collection has costs of its own (its phases, the goroutines' stacks)
// whatever the heap's size. Start lets the heap grow to a floor before the
// next collection (GOGC up to MaxPercent); once the live heap is large
// enough, GOGC is the default's 100 and nothing changes. Its cost is
// memory: at most Floor bytes of heap that the default would have
// collected sooner.
package gcfloor

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

const (
	// Floor is the heap the collector lets a small live heap grow to.
	Floor = 32 << 20
	// MaxPercent bounds GOGC: a live heap of Floor/5 or less grows to five
	// times its size before the next collection.
	MaxPercent = 400
)

// Percent is the GOGC for a live heap of live bytes: the one that lets the
// heap reach floor before the next collection, between 100 (the default)
// and most.
func Percent(live, floor uint64, most int) int {
	if live == 0 {
		return most
	}
	p := int(floor*100/live) - 100
	return min(max(p, 100), most)
}

// sentinel is the object whose finalizer runs once per collection (a
// pointer keeps it out of the tiny allocator, whose objects may never be
// finalized).
type sentinel struct {
	_ *int
	_ [8]byte
}

// Start sets GOGC after every collection from the live heap it leaves,
// unless the GOGC environment variable is set (then the operator's value
// stands and Start does nothing). It runs in the runtime's finalizer
// goroutine: no goroutine of its own. stop ends it and puts GOGC back to
// 100.
func Start() (stop func()) {
	if os.Getenv("GOGC") != "" {
		return func() {}
	}
	var stopped atomic.Bool
	sample := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	last := 100
	var arm func()
	arm = func() {
		runtime.SetFinalizer(new(sentinel), func(*sentinel) {
			if stopped.Load() {
				return
			}
			metrics.Read(sample)
			if sample[0].Value.Kind() == metrics.KindUint64 {
				if p := Percent(sample[0].Value.Uint64(), Floor, MaxPercent); p != last {
					debug.SetGCPercent(p)
					last = p
				}
			}
			arm()
		})
	}
	arm()
	return func() {
		if !stopped.Swap(true) {
			debug.SetGCPercent(100)
		}
	}
}
