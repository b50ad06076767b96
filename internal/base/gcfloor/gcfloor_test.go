package gcfloor

import (
	"runtime"
	"runtime/metrics"
	"testing"
	"time"
)

// GOGC lets the heap reach the floor, within 100 and the bound.
func TestPercent(t *testing.T) {
	for _, tt := range []struct {
		live uint64
		want int
	}{
		{0, 400}, {1 << 20, 400}, {Floor / 5, 400}, {Floor / 4, 300}, {Floor / 2, 100}, {Floor, 100}, {10 * Floor, 100},
	} {
		if got := Percent(tt.live, Floor, MaxPercent); got != tt.want {
			t.Errorf("Percent(%d) = %d, want %d", tt.live, got, tt.want)
		}
	}
}

// gogc reads the collector's GOGC.
func gogc() uint64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// waitGOGC collects until GOGC is want (the finalizer runs after a
// collection, in its own goroutine).
func waitGOGC(t *testing.T, want uint64) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		runtime.GC()
		if gogc() == want {
			return
		}
	}
	t.Fatalf("GOGC %d, want %d", gogc(), want)
}

var keep []byte

// Started, a small heap gets the bound's GOGC and a heap above the floor
// the default's; stopped, GOGC is 100 again. The GOGC environment
// variable turns it off.
func TestStart(t *testing.T) {
	t.Setenv("GOGC", "")
	stop := Start()
	waitGOGC(t, MaxPercent)
	keep = make([]byte, Floor)
	for i := range keep {
		keep[i] = 1
	}
	waitGOGC(t, 100)
	keep = nil
	waitGOGC(t, MaxPercent)
	stop()
	if gogc() != 100 {
		t.Errorf("GOGC %d after stop, want 100", gogc())
	}
	runtime.GC()
	time.Sleep(50 * time.Millisecond)
	runtime.GC()
	if gogc() != 100 {
		t.Errorf("GOGC %d after stop and a collection, want 100", gogc())
	}
	t.Setenv("GOGC", "150")
	Start()()
	runtime.GC()
	if gogc() != 100 {
		t.Errorf("GOGC %d with GOGC set in the environment, want it untouched (100)", gogc())
	}
}
