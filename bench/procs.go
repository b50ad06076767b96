package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// repoRoot finds the module root, to build the proxy from source.
func repoRoot() (string, error) {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", fmt.Errorf("run the benchmark from inside the redlock-proxy module")
	}
	return filepath.Dir(mod), nil
}

// buildProxy compiles the working tree's proxy binary into dir.
func buildProxy(dir string) (string, error) {
	root, err := repoRoot()
	if err != nil {
		return "", err
	}
	return buildProxyFrom(root, filepath.Join(dir, "redlock-proxy"))
}

// buildProxyFrom compiles the proxy whose source is src (a checkout of the
// module) into bin.
func buildProxyFrom(src, bin string) (string, error) {
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = src
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("building the proxy: %w", err)
	}
	built := make(chan struct{})
	var err error
	go func() { // owned by buildProxyFrom: ends when the build does, which it waits for
		err = cmd.Wait()
		close(built)
	}()
	// An exit while it builds waits for the build, which would otherwise
	// write into dir after dir is removed.
	defer atExit(func() { <-built })()
	<-built
	if err != nil {
		return "", fmt.Errorf("building the proxy: %w\n%s", err, out.String())
	}
	return bin, nil
}

// proxyProc is a proxy running as its own process, so that its CPU time
// can be measured apart from the load generator's.
type proxyProc struct {
	cmd  *exec.Cmd
	Addr string
	done chan struct{}
}

// startProxy runs the proxy over backends; its log (stderr) is appended to
// logFile, so that it never lands in the middle of the results.
func startProxy(bin string, backends []string, procs int, logFile *os.File, extra ...string) (*proxyProc, error) {
	port, err := redisproc.FreePort()
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// The backends are fresh, so the default restart rule would refuse locks
	// for max_ttl + drift after they start; the run-id rule differs only in
	// that, not in how a lock command is served.
	args := append([]string{"-listen", addr, "-admin", "", "-backends", strings.Join(backends, ","), "-log_level", "warn",
		"-restart_quarantine", "run-id"}, extra...)
	cmd := exec.Command(bin, args...)
	fmt.Fprintf(logFile, "== %s %s\n", time.Now().Format(time.RFC3339), strings.Join(args, " "))
	cmd.Stderr = logFile
	cmd.Env = proxyEnv(os.Environ(), procs)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the bench
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p := &proxyProc{cmd: cmd, Addr: addr, done: make(chan struct{})}
	go func() { // owned by proxyProc: ends when the process exits (stop waits for it)
		cmd.Wait()
		close(p.done)
	}()
	// Ready once every backend counts.
	cl := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer cl.Close()
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		info, err := cl.Info(context.Background(), "proxy").Result()
		if err == nil && strings.Contains(info, fmt.Sprintf("backends_counting:%d\r", len(backends))) {
			return p, nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	p.stop()
	return nil, fmt.Errorf("proxy on %s did not become ready; its log is in %s", addr, logFile.Name())
}

// proxyRig is a proxy process over redis-server backends of its own.
type proxyRig struct {
	px    *proxyProc
	addrs []string // the backends'
	pids  []int    // the backends'
}

// startRig starts n redis-server backends under tmp and the proxy bin over
// them, with extra flags. stop ends both; it is also registered to run at
// exit.
func startRig(tmp, bin string, n, procs int, logFile *os.File, extra ...string) (rig *proxyRig, stop func(), err error) {
	servers, err := redisproc.StartN(tmp, n)
	if err != nil {
		return nil, nil, err
	}
	stopServers := atExit(func() {
		for _, s := range servers {
			s.Stop()
		}
	})
	rig = &proxyRig{}
	for _, s := range servers {
		rig.addrs = append(rig.addrs, s.Addr)
		rig.pids = append(rig.pids, redisPID(s.Addr))
	}
	if rig.px, err = startProxy(bin, rig.addrs, procs, logFile, extra...); err != nil {
		stopServers()
		return nil, nil, err
	}
	stopProxy := atExit(rig.px.stop)
	return rig, func() { stopProxy(); stopServers() }, nil
}

// cpu reads the proxy's CPU time and its backends'.
func (r *proxyRig) cpu() (proxy, backends time.Duration) {
	return cpuOf([]int{r.px.pid()}), cpuOf(r.pids)
}

// cycles drives addr (a proxy or a Redis) with c go-redis clients doing
// lock cycles for d; cpu reads the CPU times to spread over them.
func cycles(addr string, c int, d time.Duration, cpu func() (proxy, backends time.Duration)) result {
	cl := redis.NewClient(&redis.Options{Addr: addr, PoolSize: c, MaxRetries: -1})
	defer cl.Close()
	return run(c, d, singleInstanceCycle(cl), cpu)
}

// proxyEnv is the proxy's environment: the bench's own without GOMAXPROCS
// (a user's proxy picks its own), plus GOMAXPROCS=procs when procs > 0.
func proxyEnv(env []string, procs int) []string {
	out := make([]string, 0, len(env)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") {
			out = append(out, kv)
		}
	}
	if procs > 0 {
		out = append(out, fmt.Sprintf("GOMAXPROCS=%d", procs))
	}
	return out
}

func (p *proxyProc) pid() int { return p.cmd.Process.Pid }

func (p *proxyProc) stop() {
	p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuTime reads a process's user+system CPU time from /proc.
func cpuTime(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("unexpected /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	const clkTck = 100 // USER_HZ on Linux
	return time.Duration(ut+st) * time.Second / clkTck, nil
}

// cpuOf sums the CPU time of several processes.
func cpuOf(pids []int) time.Duration {
	var total time.Duration
	for _, p := range pids {
		if d, err := cpuTime(p); err == nil {
			total += d
		}
	}
	return total
}

// redisPID finds a redis-server's pid from its port (INFO server).
func redisPID(addr string) int {
	cl := redis.NewClient(&redis.Options{Addr: addr})
	defer cl.Close()
	info, err := cl.Info(context.Background(), "server").Result()
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:"); ok {
			n, _ := strconv.Atoi(v)
			return n
		}
	}
	return 0
}

// hostPort splits an address for redis-benchmark.
func hostPort(addr string) (string, string) {
	h, p, _ := net.SplitHostPort(addr)
	return h, p
}

// cleanups are the stops of the run's child processes (Redis servers,
// proxies, etcd members), so that every exit path stops them: the normal
// one by deferring what atExit returns, an error by check, SIGINT or
// SIGTERM by handleSignals.
var cleanups struct {
	sync.Mutex
	next   int
	fns    map[int]func()
	closed bool // runCleanups has run: the process is exiting
}

// atExit registers stop and returns a function that runs it once and
// unregisters it. Once the process is exiting, it runs stop at once and
// never returns: nothing more is started.
func atExit(stop func()) func() {
	cleanups.Lock()
	if cleanups.closed {
		cleanups.Unlock()
		stop()
		select {}
	}
	defer cleanups.Unlock()
	if cleanups.fns == nil {
		cleanups.fns = map[int]func(){}
	}
	id := cleanups.next
	cleanups.next++
	var once sync.Once
	run := func() { once.Do(stop) }
	cleanups.fns[id] = run
	return func() {
		cleanups.Lock()
		delete(cleanups.fns, id)
		cleanups.Unlock()
		run()
	}
}

// runCleanups stops whatever is still registered, newest first.
func runCleanups() {
	cleanups.Lock()
	var ids []int
	for id := range cleanups.fns {
		ids = append(ids, id)
	}
	fns := cleanups.fns
	cleanups.fns, cleanups.closed = nil, true
	cleanups.Unlock()
	slices.Sort(ids)
	for i := len(ids) - 1; i >= 0; i-- {
		fns[ids[i]]()
	}
}

// exiting is set once a signal has come: progress then keeps quiet about
// the measurements that the stopped servers cut short.
var exiting atomic.Bool

// handleSignals stops the child processes and exits on SIGINT or SIGTERM.
// Its goroutine lives as long as the process.
func handleSignals() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() { // owned by the process: waits for a signal until exit
		s := <-ch
		exiting.Store(true)
		fmt.Fprintf(os.Stderr, "bench: %v: stopping the servers\n", s)
		runCleanups()
		os.Exit(130)
	}()
}
