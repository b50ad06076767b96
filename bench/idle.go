package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// idleConns is how many idle client connections the memory measurement
// opens: the proxy's default max_clients.
const idleConns = 10000

// idleResult is the memory that idle client connections cost the proxy
// and a lone Redis: each connection is opened, answers one PING, then
// stays idle.
type idleResult struct {
	Conns int `json:"connections"`
	N     int `json:"proxy_n"` // the proxy's backends

	ProxyKiB float64 `json:"proxy_kib_per_conn"` // the proxy's RSS growth (/proc VmRSS) per connection
	RedisKiB float64 `json:"redis_kib_per_conn"` // lone Redis's RSS growth (/proc VmRSS) per connection

	// Where the proxy's memory goes, from its runtime (the admin
	// address's /debug/pprof/heap?debug=1): heap and goroutine stacks in
	// use per connection, and the heap profile's largest allocation sites.
	ProxyHeapKiB  float64    `json:"proxy_heap_kib_per_conn"`
	ProxyStackKiB float64    `json:"proxy_stack_kib_per_conn"`
	ProxySites    []heapSite `json:"proxy_heap_sites"`
}

// heapSite is an allocation site's heap in use per connection.
type heapSite struct {
	Func string  `json:"func"`
	KiB  float64 `json:"kib_per_conn"`
}

// raiseNoFile lets this process hold need more descriptors, raising the
// soft RLIMIT_NOFILE up to the hard one; the children it starts later
// inherit the limit.
func raiseNoFile(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("getrlimit: %w", err)
	}
	if lim.Cur >= need {
		return nil
	}
	if lim.Max < need {
		return fmt.Errorf("%d idle connections need %d open files; the hard limit is %d (ulimit -Hn)", idleConns, need, lim.Max)
	}
	lim.Cur = need
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("setrlimit: %w", err)
	}
	return nil
}

// vmRSS reads a process's resident set size from /proc, in bytes.
func vmRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(v)
			if len(f) == 2 && f[1] == "kB" {
				kb, err := strconv.ParseInt(f[0], 10, 64)
				return kb << 10, err
			}
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// openIdle opens n connections to addr, each answering one PING (so the
// server has accepted it and set it up), and returns a function that
// closes them.
func openIdle(addr string, n int) (func(), error) {
	conns := make([]net.Conn, 0, n)
	closeAll := func() {
		for _, c := range conns {
			c.Close()
		}
	}
	buf := make([]byte, 64)
	for i := 0; i < n; i++ {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("idle connection %d to %s: %w", i+1, addr, err)
		}
		conns = append(conns, c)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err = c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err == nil {
			var k int
			k, err = io.ReadAtLeast(c, buf, len("+PONG\r\n"))
			if err == nil && string(buf[:k]) != "+PONG\r\n" {
				err = fmt.Errorf("PING answered %q", buf[:k])
			}
		}
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("idle connection %d to %s: %w", i+1, addr, err)
		}
		c.SetDeadline(time.Time{})
	}
	return closeAll, nil
}

// idleGrowth measures how much pid's RSS grows, per connection, when n
// idle connections to addr are open; sample, if not nil, is called before
// and after as well (with the connections still open).
func idleGrowth(addr string, pid, n int, sample func()) (float64, error) {
	time.Sleep(300 * time.Millisecond) // settle after the start
	before, err := vmRSS(pid)
	if err != nil {
		return 0, err
	}
	if sample != nil {
		sample()
	}
	closeAll, err := openIdle(addr, n)
	if err != nil {
		return 0, err
	}
	defer closeAll()
	time.Sleep(time.Second)
	after, err := vmRSS(pid)
	if err != nil {
		return 0, err
	}
	if sample != nil {
		sample()
	}
	return float64(after-before) / 1024 / float64(n), nil
}

// goHeap is what a Go process's /debug/pprof/heap?debug=1 says: its
// runtime's heap and stacks in use, and the heap in use per allocation
// site (the sampled profile scaled up, as pprof does).
type goHeap struct {
	HeapInuse, StackInuse int64
	Sites                 map[string]int64
}

// fetchHeap reads the heap profile of the process whose admin address is
// admin, after a garbage collection.
func fetchHeap(admin string) (goHeap, error) {
	cl := http.Client{Timeout: 10 * time.Second}
	resp, err := cl.Get("http://" + admin + "/debug/pprof/heap?debug=1&gc=1")
	if err != nil {
		return goHeap{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return goHeap{}, fmt.Errorf("heap profile: %s", resp.Status)
	}
	return parseHeap(resp.Body)
}

// parseHeap reads the text heap profile (debug=1): a header with twice the
// sampling rate, records "inuse_objects: inuse_bytes [alloc_objects:
// alloc_bytes] @ addresses" each followed by its frames ("#\taddr
// func+off file:line"), then runtime.MemStats as "# Name = value".
func parseHeap(r io.Reader) (goHeap, error) {
	h := goHeap{Sites: map[string]int64{}}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	rate := int64(0)
	var objs, bytes int64
	inRecord := false // a record's frames are being read
	site := ""        // its first frame
	for sc.Scan() {
		line := sc.Text()
		if inRecord && !strings.HasPrefix(line, "#\t") && site != "" {
			// Every frame of the record was the allocator's.
			h.Sites[site] += scaleHeapSample(objs, bytes, rate)
			inRecord = false
		}
		switch {
		case strings.HasPrefix(line, "heap profile:"):
			if i := strings.LastIndex(line, "heap/"); i >= 0 {
				v, _ := strconv.ParseInt(line[i+len("heap/"):], 10, 64)
				rate = v / 2
			}
		case strings.HasPrefix(line, "#\t") && inRecord:
			// The record's frames: it counts for the first that is not
			// the allocator's (the code that allocated), or else the
			// first.
			f := strings.Fields(line)
			if len(f) < 3 {
				break
			}
			fn := f[2]
			if i := strings.LastIndex(fn, "+0x"); i >= 0 {
				fn = fn[:i]
			}
			if site == "" {
				site = fn
			}
			if !allocator(fn) {
				h.Sites[fn] += scaleHeapSample(objs, bytes, rate)
				inRecord = false
			}
		case strings.HasPrefix(line, "# HeapInuse = "):
			h.HeapInuse, _ = strconv.ParseInt(strings.TrimPrefix(line, "# HeapInuse = "), 10, 64)
		case strings.HasPrefix(line, "# Stack = "):
			// "# Stack = inuse / sys"
			f := strings.Fields(strings.TrimPrefix(line, "# Stack = "))
			if len(f) > 0 {
				h.StackInuse, _ = strconv.ParseInt(f[0], 10, 64)
			}
		case strings.Contains(line, " @ ") && !strings.HasPrefix(line, "#"):
			// "1: 16384 [2: 32768] @ 0x... 0x..."
			var ao, ab int64
			if _, err := fmt.Sscanf(line, "%d: %d [%d: %d]", &objs, &bytes, &ao, &ab); err == nil {
				inRecord, site = true, ""
			}
		}
	}
	if err := sc.Err(); err != nil {
		return h, err
	}
	if h.HeapInuse == 0 {
		return h, fmt.Errorf("heap profile without runtime.MemStats")
	}
	return h, nil
}

// allocator tells the runtime's allocation entry points, which no reader
// of a profile means by "where".
func allocator(fn string) bool {
	for _, p := range []string{"runtime.mallocgc", "runtime.newobject", "runtime.make", "runtime.growslice",
		"runtime.mapassign", "runtime.rawstring", "runtime.rawbyteslice", "runtime.slicebyteto", "runtime.concatstring"} {
		if strings.HasPrefix(fn, p) {
			return true
		}
	}
	return false
}

// scaleHeapSample estimates the bytes that a sampled record stands for: an
// allocation of size s is sampled with probability 1-exp(-s/rate).
func scaleHeapSample(objs, bytes, rate int64) int64 {
	if objs <= 0 || bytes <= 0 || rate <= 1 {
		return bytes
	}
	avg := float64(bytes) / float64(objs)
	return int64(float64(bytes) / (1 - math.Exp(-avg/float64(rate))))
}

// heapSites lists the allocation sites whose heap in use grew by at least
// a fiftieth of the growth, largest first (at most five), per connection.
func heapSites(before, after goHeap, n int) []heapSite {
	var total int64
	growth := map[string]int64{}
	for fn, b := range after.Sites {
		if d := b - before.Sites[fn]; d > 0 {
			growth[fn] = d
			total += d
		}
	}
	var out []heapSite
	for fn, d := range growth {
		if d*50 >= total {
			out = append(out, heapSite{Func: fn, KiB: float64(d) / 1024 / float64(n)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].KiB > out[j].KiB })
	return out[:min(len(out), 5)]
}
