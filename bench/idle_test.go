package main

import (
	"bufio"
	"math"
	"net"
	"os"
	"strings"
	"testing"
)

// A text heap profile as /debug/pprof/heap?debug=1 writes it.
const heapText = `heap profile: 5: 49680 [11: 90480] @ heap/1048576
2: 32768 [2: 32768] @ 0x1 0x2
#	0x4b1234	github.com/redlock-proxy/redlock-proxy/proxy.newReader+0x44	/src/proxy/reader.go:98
#	0x4b2234	github.com/redlock-proxy/redlock-proxy/proxy.newClient+0x120	/src/proxy/conn.go:69

1: 432 [7: 57232] @ 0x3
#	0x4c0234	runtime.newobject+0x60	/go/src/runtime/malloc.go:1000
#	0x4c1234	github.com/redlock-proxy/redlock-proxy/proxy.newClient+0x60	/src/proxy/conn.go:65
#	0x4c2234	github.com/redlock-proxy/redlock-proxy/proxy.(*Server).accept+0x60	/src/proxy/server.go:184

1: 416 [1: 416] @ 0x4
#	0x4c0234	runtime.mallocgc+0xa4	/go/src/runtime/malloc.go:1150
#	0x4c0234	runtime.newobject+0x24	/go/src/runtime/malloc.go:1000
#	0x4d1234	runtime.malg+0x2f	/go/src/runtime/proc.go:5000
#	0x4d2234	runtime.newproc1+0x60	/go/src/runtime/proc.go:5100

1: 64 [1: 64] @ 0x5
#	0x4c0234	runtime.mallocgc+0xa4	/go/src/runtime/malloc.go:1150


# runtime.MemStats
# Alloc = 1234
# HeapInuse = 2000000
# Stack = 458752 / 458752
# NumGC = 3
`

// The heap profile's records are scaled up as pprof scales them, and
// summed per allocating function; MemStats' heap and stacks are read.
func TestParseHeap(t *testing.T) {
	h, err := parseHeap(strings.NewReader(heapText))
	if err != nil {
		t.Fatal(err)
	}
	if h.HeapInuse != 2000000 || h.StackInuse != 458752 {
		t.Errorf("HeapInuse %d, StackInuse %d", h.HeapInuse, h.StackInuse)
	}
	// The rate is half the header's: 512 KiB. A 16 KiB object is sampled
	// with probability 1-exp(-1/32).
	want := int64(32768 / (1 - math.Exp(-16384.0/524288)))
	if got := h.Sites["github.com/redlock-proxy/redlock-proxy/proxy.newReader"]; got != want {
		t.Errorf("newReader: %d bytes, want %d", got, want)
	}
	if got := h.Sites["github.com/redlock-proxy/redlock-proxy/proxy.newClient"]; got < 432*1000 || got > 432*1300 {
		t.Errorf("newClient: %d bytes, want about 432/(1-exp(-432/524288))", got)
	}
	if got := h.Sites["runtime.malg"]; got < 416*1000 {
		t.Errorf("runtime.malg (the goroutine descriptor): %d bytes", got)
	}
	if got := h.Sites["runtime.mallocgc"]; got < 64*1000 {
		t.Errorf("runtime.mallocgc (only the allocator's frames): %d bytes", got)
	}
	if len(h.Sites) != 4 {
		t.Errorf("sites: %v; want newReader, newClient, runtime.malg, runtime.mallocgc", h.Sites)
	}
	if _, err := parseHeap(strings.NewReader("heap profile: 0: 0 [0: 0] @ heap/1048576\n")); err == nil {
		t.Error("a profile without MemStats parsed")
	}
}

// heapSites keeps the sites that grew by a fiftieth of the growth or more,
// largest first, per connection.
func TestHeapSites(t *testing.T) {
	before := goHeap{Sites: map[string]int64{"a": 1000, "b": 5000}}
	after := goHeap{Sites: map[string]int64{"a": 1000 + 16<<20, "b": 5000 + 2<<20, "c": 100 << 10, "d": 10}}
	got := heapSites(before, after, 1024)
	if len(got) != 2 || got[0].Func != "a" || got[0].KiB != 16 || got[1].Func != "b" || got[1].KiB != 2 {
		t.Errorf("heapSites = %+v; want a 16 KiB, b 2 KiB", got)
	}
}

func TestVmRSS(t *testing.T) {
	rss, err := vmRSS(os.Getpid())
	if err != nil || rss < 1<<20 {
		t.Errorf("vmRSS of this process: %d, %v", rss, err)
	}
}

// openIdle opens connections that each answered a PING, and closes them;
// a reply other than PONG fails it.
func TestOpenIdle(t *testing.T) {
	for _, tt := range []struct {
		reply string
		ok    bool
	}{{"+PONG\r\n", true}, {"-ERR unknown command\r\n", false}} {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		served := make(chan struct{})
		go func() { // owned by the test: ends when the listener closes
			defer close(served)
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				go func() { // ends when openIdle's close reaches it
					defer c.Close()
					rd := bufio.NewReader(c)
					for {
						line, err := rd.ReadString('\n')
						if err != nil {
							return
						}
						if strings.HasPrefix(line, "PING") {
							c.Write([]byte(tt.reply))
						}
					}
				}()
			}
		}()
		closeAll, err := openIdle(l.Addr().String(), 20)
		switch {
		case tt.ok && err != nil:
			t.Error(err)
		case !tt.ok && (err == nil || !strings.Contains(err.Error(), "PING answered")):
			t.Errorf("reply %q: err = %v; want PING answered", tt.reply, err)
		}
		if err == nil {
			closeAll()
		}
		l.Close()
		<-served
	}
}

// The report gives both processes' RSS per connection and where the
// proxy's goes.
func TestIdleReport(t *testing.T) {
	r := sampleReport(false)
	r.Idle = &idleResult{Conns: 10000, N: 5, ProxyKiB: 10.6, RedisKiB: 9.5, ProxyHeapKiB: 17.6, ProxyStackKiB: 4,
		ProxySites: []heapSite{{Func: "github.com/redlock-proxy/redlock-proxy/proxy.newReader", KiB: 16}}}
	md := r.markdown()
	for _, want := range []string{"| redlock-proxy (N=5) | 10.6 KiB |", "| lone Redis | 9.5 KiB |",
		"heap in use grows by 17.6 KiB", "stacks by 4.0 KiB", "proxy.newReader 16.0 KiB (the client's read buffer"} {
		if !strings.Contains(md, want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	var table strings.Builder
	r.printTable(&table)
	if !strings.Contains(table.String(), "redlock-proxy (N=5) 10.6 KiB, lone Redis 9.5 KiB") {
		t.Errorf("the table lacks the idle connections:\n%s", table.String())
	}
	r.Idle = nil
	if md := r.markdown(); strings.Contains(md, "idle") {
		t.Errorf("a run without the idle measurement speaks of it")
	}
}
