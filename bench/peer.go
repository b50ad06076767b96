package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The peer series puts the proxy beside another proxy: twemproxy
// (nutcracker, a C proxy that forwards each command to one Redis). The same
// redis-benchmark load, SET NX PX on random keys and the release script's
// EVALSHA, runs against four targets: a lone Redis, twemproxy over one
// Redis, this proxy over one backend (the same work as twemproxy: one
// Redis behind it) and this proxy over five. Each server process's own CPU
// is measured per request: the target's (Redis, nutcracker or the proxy)
// and, apart, the Redis servers' behind it.

// peerTargets are the series' targets, in the order they take turns.
var peerTargets = []struct {
	Name string // lone, twemproxy, proxy
	N    int    // Redis servers behind it (0: the target is a Redis)
}{{"lone", 0}, {"twemproxy", 1}, {"proxy", 1}, {"proxy", 5}}

// peerCommands are the loads: redis-benchmark's arguments (keys from
// __rand_int__), by name; {sha} is the release script's SHA1.
var peerCommands = []struct{ Name, Args string }{
	{"SET NX PX", "SET bench:peer:__rand_int__ tok NX PX 30000"},
	{"EVALSHA release", "EVALSHA {sha} 1 bench:peer:__rand_int__ tok"},
}

// peerClients are the client counts of the series.
var peerClients = []int{1, 50}

// peerResult is one target under one load.
type peerResult struct {
	Target   string        `json:"target"`  // lone, twemproxy, proxy
	N        int           `json:"n"`       // Redis servers behind the target
	Command  string        `json:"command"` // SET NX PX, EVALSHA release
	Clients  int           `json:"clients"`
	Requests int           `json:"requests"`
	PerSec   float64       `json:"requests_per_sec"`
	OwnCPU   time.Duration `json:"own_cpu_per_request"`     // the target process's CPU per request
	BehindIt time.Duration `json:"backend_cpu_per_request"` // the Redis servers' behind it, per request
}

// label names a target as the report does.
func (p peerResult) label() string { return peerLabel(p.Target, p.N) }

func peerLabel(target string, n int) string {
	switch target {
	case "lone":
		return "lone Redis"
	case "twemproxy":
		return "twemproxy, one Redis"
	}
	if n == 1 {
		return "redlock-proxy, one backend"
	}
	return fmt.Sprintf("redlock-proxy, %d backends", n)
}

// peerRequests is how many requests a point sends at each client count.
func peerRequests(quick bool, clients int) int {
	switch {
	case quick && clients == 1:
		return 10000
	case quick:
		return 50000
	case clients == 1:
		return 20000
	}
	return 100000
}

// nutcrackerPath is where Debian's nutcracker package installs twemproxy.
var nutcrackerPath = "/usr/sbin/nutcracker"

// nutcrackerBinary finds twemproxy, on PATH or at nutcrackerPath.
func nutcrackerBinary() (string, error) {
	if p, err := exec.LookPath("nutcracker"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(nutcrackerPath); err == nil {
		return nutcrackerPath, nil
	}
	return "", fmt.Errorf("nutcracker not found")
}

// peerEndpoint is a running target: where redis-benchmark sends, and the
// processes whose CPU is measured.
type peerEndpoint struct {
	target, addr string
	n            int
	own          int   // the target's pid
	behind       []int // the Redis servers' behind it
}

// startNutcracker runs twemproxy over one Redis, its log in dir; stop
// ends it and waits for it.
func startNutcracker(bin, dir, backend string) (addr string, pid int, stop func(), err error) {
	port, err := redisproc.FreePort()
	if err != nil {
		return "", 0, nil, err
	}
	stats, err := redisproc.FreePort()
	if err != nil {
		return "", 0, nil, err
	}
	addr = fmt.Sprintf("127.0.0.1:%d", port)
	conf := filepath.Join(dir, "nutcracker.yml")
	yml := fmt.Sprintf("peer:\n  listen: %s\n  hash: fnv1a_64\n  distribution: ketama\n  redis: true\n  auto_eject_hosts: false\n  timeout: 2000\n  servers:\n    - %s:1\n", addr, backend)
	if err := os.WriteFile(conf, []byte(yml), 0o644); err != nil {
		return "", 0, nil, err
	}
	cmd := exec.Command(bin, "-c", conf, "-o", filepath.Join(dir, "nutcracker.log"), "-a", "127.0.0.1", "-s", strconv.Itoa(stats))
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // never outlives the bench
	if err := cmd.Start(); err != nil {
		return "", 0, nil, fmt.Errorf("nutcracker: %w", err)
	}
	done := make(chan struct{})
	go func() { // owned by stop: ends when the process exits
		cmd.Wait()
		close(done)
	}()
	stop = func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	}
	// Forwarding once a command comes back from the Redis behind it (raw:
	// twemproxy closes the connection on a command it lacks, as a client
	// library's HELLO).
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if forwards(addr) {
			return addr, cmd.Process.Pid, stop, nil
		}
	}
	stop()
	return "", 0, nil, fmt.Errorf("nutcracker on %s did not forward to %s; its log is %s", addr, backend, filepath.Join(dir, "nutcracker.log"))
}

// measurePeers runs the peer series. twemproxy is "" when nutcracker is
// missing: its target is then left out.
func (b *bencher) measurePeers(twemproxy string) error {
	var eps []peerEndpoint
	for _, t := range peerTargets {
		switch {
		case t.Name == "lone":
			eps = append(eps, peerEndpoint{target: "lone", addr: b.lone.Addr, own: b.lonePID})
		case t.Name == "twemproxy" && twemproxy == "":
		case t.Name == "twemproxy":
			addr, pid, stop, err := startNutcracker(twemproxy, b.tmp, b.lone.Addr)
			if err != nil {
				return err
			}
			defer atExit(stop)()
			eps = append(eps, peerEndpoint{target: "twemproxy", addr: addr, n: 1, own: pid, behind: []int{b.lonePID}})
		default:
			ep, stop, err := b.proxyEndpoint(b.bin, t.N)
			if err != nil {
				return err
			}
			defer stop()
			eps = append(eps, ep)
		}
	}
	sha, err := b.loadRelease(eps)
	if err != nil {
		return err
	}
	for _, c := range peerClients {
		for _, cmd := range peerCommands {
			samples := make([][]peerResult, len(eps))
			for r := 0; r < b.o.rounds; r++ {
				for i, ep := range eps { // interleaved, as the other series
					res, err := peerLoad(ep, c, peerRequests(b.o.quick, c), cmd.Name, sha, ep.label())
					if err != nil {
						return err
					}
					samples[i] = append(samples[i], res)
				}
			}
			for _, s := range samples {
				b.rep.Peer = append(b.rep.Peer, medianBy(s, func(r peerResult) float64 { return r.PerSec }))
			}
		}
	}
	return nil
}

// proxyEndpoint starts the proxy bin over n backends of its own, as a
// target of the peer series; stop ends them.
func (b *bencher) proxyEndpoint(bin string, n int) (ep peerEndpoint, stop func(), err error) {
	rig, stop, err := startRig(b.tmp, bin, n, b.o.procs, b.o.proxyLog)
	if err != nil {
		return peerEndpoint{}, nil, err
	}
	return peerEndpoint{target: "proxy", addr: rig.px.Addr, n: n, own: rig.px.pid(), behind: rig.pids}, stop, nil
}

// label names an endpoint as the report does.
func (ep peerEndpoint) label() string { return peerLabel(ep.target, ep.n) }

// loadRelease makes the release script known to every target and returns
// its SHA1: it is loaded on the lone Redis (which twemproxy forwards to,
// and which cannot load it through twemproxy) and through each proxy.
func (b *bencher) loadRelease(eps []peerEndpoint) (string, error) {
	lone := redis.NewClient(&redis.Options{Addr: b.lone.Addr})
	sha, err := releaseScript.Load(context.Background(), lone).Result()
	lone.Close()
	if err != nil {
		return "", fmt.Errorf("SCRIPT LOAD on the lone Redis: %w", err)
	}
	for _, ep := range eps {
		if ep.target == "proxy" {
			cl := redis.NewClient(&redis.Options{Addr: ep.addr})
			_, err := releaseScript.Load(context.Background(), cl).Result()
			cl.Close()
			if err != nil {
				return "", fmt.Errorf("SCRIPT LOAD through the proxy: %w", err)
			}
		}
	}
	return sha, nil
}

// peerLoad runs the load named command (one of peerCommands; sha is the
// release script's) against ep, and says so under name.
func peerLoad(ep peerEndpoint, clients, requests int, command, sha, name string) (peerResult, error) {
	var args []string
	for _, c := range peerCommands {
		if c.Name == command {
			args = strings.Fields(strings.ReplaceAll(c.Args, "{sha}", sha))
		}
	}
	res, err := peerPoint(ep, clients, requests, args)
	if err != nil {
		return res, err
	}
	res.Command = command
	progress("peer %-28s %-15s clients=%-2d %9.0f requests/s  own CPU %v per request, Redis behind it %v",
		name, command, clients, res.PerSec, res.OwnCPU.Round(100*time.Nanosecond), res.BehindIt.Round(100*time.Nanosecond))
	return res, nil
}

// peerPoint runs one redis-benchmark load against ep and measures the CPU
// its processes spent meanwhile.
func peerPoint(ep peerEndpoint, clients, requests int, args []string) (peerResult, error) {
	h, p := hostPort(ep.addr)
	argv := append([]string{"-h", h, "-p", p, "-c", strconv.Itoa(clients), "-n", strconv.Itoa(requests), "-r", "100000000", "--csv"}, args...)
	own0, behind0 := cpuOf([]int{ep.own}), cpuOf(ep.behind)
	out, err := exec.Command("redis-benchmark", argv...).CombinedOutput()
	own1, behind1 := cpuOf([]int{ep.own}), cpuOf(ep.behind)
	if err != nil {
		return peerResult{}, fmt.Errorf("redis-benchmark against %s: %w\n%s", peerLabel(ep.target, ep.n), err, out)
	}
	rps, err := benchmarkRPS(string(out))
	if err != nil {
		return peerResult{}, fmt.Errorf("against %s: %w", peerLabel(ep.target, ep.n), err)
	}
	return peerResult{Target: ep.target, N: ep.n, Clients: clients, Requests: requests, PerSec: rps,
		OwnCPU: (own1 - own0) / time.Duration(requests), BehindIt: (behind1 - behind0) / time.Duration(requests)}, nil
}

// benchmarkRPS reads the requests per second of redis-benchmark --csv's
// one test.
func benchmarkRPS(out string) (float64, error) {
	for _, line := range strings.Split(out, "\n") {
		f := strings.Split(line, ",")
		if len(f) < 2 || !strings.HasPrefix(f[0], `"`) || f[0] == `"test"` {
			continue
		}
		if v, err := strconv.ParseFloat(strings.Trim(f[1], `"`), 64); err == nil {
			return v, nil
		}
	}
	return 0, fmt.Errorf("redis-benchmark printed no result:\n%s", out)
}

// forwards reports whether a SET sent to addr comes back OK.
func forwards(addr string) bool {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("*5\r\n$3\r\nSET\r\n$16\r\nbench:peer:ready\r\n$1\r\n1\r\n$2\r\nPX\r\n$4\r\n1000\r\n")); err != nil {
		return false
	}
	buf := make([]byte, 5)
	n, _ := io.ReadFull(c, buf)
	return string(buf[:n]) == "+OK\r\n"
}
