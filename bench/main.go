// Command bench measures redlock-proxy against its baselines, in one run on
// one machine, and reports ratios:
//
//	go run ./bench                    # the full comparison (several minutes)
//	go run ./bench -quick             # a short smoke run
//	go run ./bench -mode safety       # the fault-injection safety harness
//	go run ./bench -mode load -target 127.0.0.1:7379 -clients 50 -duration 30s [-pid PID]
//	go run ./bench -against main -rounds 5   # the working tree against main
//	go run ./bench -mode pgo                 # default.pgo from the bench's loads
//
// The throughput comparison starts real redis-server processes and the
// proxy (as its own process, so its CPU is measured apart), then for each
// client count and each N runs, interleaved: (a) the proxy over N backends,
// (b) the same client code against one lone Redis, (c) client-side Redlock
// (redsync) over the same N backends, and at the largest N (d) etcd's lock
// (go.etcd.io/etcd/client/v3/concurrency's Mutex) on a three-member etcd
// cluster (/usr/bin/etcd; -etcd=false skips it); plus redis-benchmark -P 16
// pipelined SETs against the proxy and a lone Redis; a cluster series
// (clusters.go, -cluster-shards "" skips it): the proxy over three Redis
// Clusters of 1, 2 and 3 shards; and a peer series
// (peer.go, -peer=false skips it): redis-benchmark's SET NX PX and release
// EVALSHA against a lone Redis, twemproxy over one Redis and the proxy over
// one and five backends, each server process's own CPU per request. A
// series whose tool the machine lacks (etcd, redis-benchmark, nutcracker)
// is skipped, and the end of the report says which and how to install it.
// A lock cycle is an
// acquire and a release; CPU is reported per cycle and per command (half a
// cycle). At the largest N it also measures the memory of 10,000 idle
// client connections to a fresh proxy and to a lone Redis (-idle=false
// skips it). It prints progress (stderr) and a table (stdout), and writes
// report.md, chart.svg, results.json and the proxies' and etcd's logs
// under -out. Every process it starts is stopped on every exit path,
// SIGINT and SIGTERM included.
//
// The proxy runs as users run it: its own binary, its default settings, no
// GOMAXPROCS in its environment (it sets GOMAXPROCS from the CPU count or
// the container's CPU quota). -proxy-procs N sets GOMAXPROCS=N instead, to
// compare.
package main

import (
	"cmp"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

func main() {
	if safetyMode(os.Args[1:]) {
		// The safety harness has flags of its own (see safety.go).
		os.Exit(runSafety(os.Args[1:]))
	}
	mode := flag.String("mode", "throughput", "throughput, load, pgo or safety")
	quick := flag.Bool("quick", false, "short run: fewer points, 1s each; its targets are indicative only")
	dur := flag.Duration("duration", 3*time.Second, "measured time per point")
	clientsFlag := flag.String("clients", "1,10,50,200", "client counts")
	nsFlag := flag.String("n", "1,3,5", "backend counts")
	rounds := flag.Int("rounds", 1, "interleaved rounds; the median is reported")
	out := flag.String("out", "bench/results", "directory for report.md, chart.svg, latency.svg, results.json and the logs")
	pipeline := flag.Bool("pipeline", true, "also run redis-benchmark -P 16 -c 50")
	target := flag.String("target", "", "load mode: address to drive with lock cycles (a proxy or a Redis)")
	pid := flag.Int("pid", 0, "load mode: also give this process's CPU per cycle (e.g. the proxy's behind -target)")
	procs := flag.Int("proxy-procs", 0, "GOMAXPROCS of the proxy process (0: not set, the proxy's default)")
	render := flag.String("render", "", "write report.md and the charts under -out from an earlier results.json, without measuring")
	etcd := flag.Bool("etcd", true, "also measure etcd's lock (concurrency.Mutex) on a three-member cluster of /usr/bin/etcd")
	idle := flag.Bool("idle", true, fmt.Sprintf("also measure the memory of %d idle client connections to the proxy (largest N) and to a lone Redis", idleConns))
	etcdTmpfs := flag.Bool("etcd-tmpfs", false, "keep etcd's data directories on a tmpfs (/dev/shm) instead of the temporary directory")
	clusterShards := flag.String("cluster-shards", "1,2,3", "the cluster series: shards per cluster, over three Redis Clusters (\"\": no cluster series)")
	clusterClients := flag.Int("cluster-clients", 50, "the cluster series: clients")
	against := flag.String("against", "", "compare the working tree's proxy with this revision's (built from a temporary git worktree), interleaved: lock cycles at -clients (default 1,50) over -n (default 5) backends, and the one-backend redis-benchmark loads beside twemproxy (-peer); writes against.md and against.json under -out")
	pgoOut := flag.String("pgo-out", "", "pgo mode: where to write the merged profile (default: default.pgo at the module's root, beside main.go)")
	peer := flag.Bool("peer", true, "also run the peer series: redis-benchmark's SET NX PX and release EVALSHA at 1 and 50 clients against a lone Redis, twemproxy (nutcracker) over one Redis, and the proxy over one and five backends")
	flag.Parse()

	if *render != "" {
		b, err := os.ReadFile(*render)
		check(err)
		var rep report
		check(json.Unmarshal(b, &rep))
		check(rep.write(*out))
		rep.printTable(os.Stdout)
		return
	}

	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if *against != "" {
		if !set["clients"] {
			*clientsFlag = "1,50"
		}
		if !set["n"] {
			*nsFlag = "5"
		}
		if *quick && !set["duration"] {
			*dur = time.Second
		}
		os.Exit(mainAgainst(*against, *clientsFlag, *nsFlag, *dur, *rounds, *quick, *procs, *peer, *out))
	}
	switch *mode {
	case "load":
		// Drive any address with lock cycles, e.g. while profiling a proxy.
		cs, err := ints(*clientsFlag)
		check(err)
		res := cycles(*target, cs[0], *dur, func() (time.Duration, time.Duration) {
			if *pid == 0 {
				return 0, 0
			}
			return cpuOf([]int{*pid}), 0
		})
		fmt.Printf("%s: %d clients, %.0f cycles/s, p50 %v, p99 %v, errors %d", *target, cs[0], res.PerSec, res.P50, res.P99, res.Errors)
		if *pid != 0 {
			fmt.Printf(", CPU of pid %d per cycle %v", *pid, res.ProxyCPUCycle.Round(100*time.Nanosecond))
		}
		fmt.Println()
		if res.Error != "" {
			fmt.Printf("first error: %s\n", res.Error)
		}
		return
	case "pgo":
		if !set["duration"] {
			*dur = 20 * time.Second
		}
		check(os.MkdirAll(*out, 0o755))
		proxyLog, err := os.Create(filepath.Join(*out, proxyLogName))
		check(err)
		defer proxyLog.Close()
		handleSignals()
		dst := *pgoOut
		if dst == "" {
			root, err := repoRoot()
			check(err)
			dst = filepath.Join(root, "default.pgo")
		}
		check(makePGO(dst, *dur, proxyLog))
		fmt.Printf("wrote %s (the proxy's CPU profile under the bench's loads, %v each); go build uses it\n", dst, *dur)
		return
	case "throughput":
	case "safety": // normally dispatched above, before flag.Parse
		os.Exit(runSafety(os.Args[1:]))
	default:
		fmt.Fprintf(os.Stderr, "unknown -mode %q\n", *mode)
		os.Exit(2)
	}
	if *quick {
		*dur = time.Second
		*clientsFlag = "1,10,50"
		*nsFlag = "1,5"
	}
	clients, err := ints(*clientsFlag)
	check(err)
	ns, err := ints(*nsFlag)
	check(err)
	var shards []int
	if *clusterShards != "" {
		shards, err = ints(*clusterShards)
		check(err)
	}
	// Every series this machine can run runs; the others are named at the
	// end, with how to get what they need.
	skipped, twemproxy := available(etcd, pipeline, peer)
	// The proxies' own log goes to a file, not between the table's lines.
	check(os.MkdirAll(*out, 0o755))
	proxyLog, err := os.Create(filepath.Join(*out, proxyLogName))
	check(err)
	defer proxyLog.Close()
	var etcdLog *os.File
	if *etcd {
		etcdLog, err = os.Create(filepath.Join(*out, etcdLogName))
		check(err)
		defer etcdLog.Close()
	}
	handleSignals()
	rep, err := throughput(options{ns: ns, clients: clients, d: *dur, rounds: *rounds, pipe: *pipeline, procs: *procs,
		proxyLog: proxyLog, etcdLog: etcdLog, etcdTmpfs: *etcdTmpfs, idle: *idle, quick: *quick, peer: *peer, twemproxy: twemproxy,
		clusterShards: shards, clusterClients: *clusterClients})
	check(err)
	rep.Quick = *quick
	rep.Skipped = skipped
	check(rep.write(*out))
	rep.printTable(os.Stdout)
	fmt.Printf("\n%s\n", wrote(*out, *etcd))
}

// mainAgainst is the against mode's command line (against.go).
func mainAgainst(rev, clientsFlag, nsFlag string, d time.Duration, rounds int, quick bool, procs int, peer bool, out string) int {
	clients, err := ints(clientsFlag)
	check(err)
	ns, err := ints(nsFlag)
	check(err)
	etcd, pipeline := false, false
	skipped, twemproxy := available(&etcd, &pipeline, &peer)
	check(os.MkdirAll(out, 0o755))
	proxyLog, err := os.Create(filepath.Join(out, proxyLogName))
	check(err)
	defer proxyLog.Close()
	handleSignals()
	rep, err := runAgainst(againstOptions{rev: rev, ns: ns, clients: clients, d: d, rounds: rounds, quick: quick, procs: procs,
		proxyLog: proxyLog, peer: peer, twemproxy: twemproxy})
	check(err)
	check(rep.write(out))
	rep.printAgainst(os.Stdout)
	for _, s := range skipped {
		fmt.Printf("skipped %s: %s; to run it: %s\n", s.Series, s.Why, s.Get)
	}
	fmt.Printf("\nwrote %s, %s, %s\n", filepath.Join(out, "against.md"), filepath.Join(out, "against.json"), filepath.Join(out, proxyLogName))
	return 0
}

// available turns off the series whose tools this machine lacks, and says
// which and how to get them; it returns where twemproxy is ("" when it is
// missing: the peer series then runs without it).
func available(etcd, pipeline, peer *bool) (skipped []skipNote, twemproxy string) {
	if _, err := etcdBinary(); *etcd && err != nil {
		*etcd = false
		skipped = append(skipped, skipNote{Series: "etcd", Why: err.Error(), Get: "apt-get install -y etcd-server"})
	}
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		for _, s := range []struct {
			on   *bool
			name string
		}{{pipeline, "pipelined"}, {peer, "peer"}} {
			if *s.on {
				*s.on = false
				skipped = append(skipped, skipNote{Series: s.name, Why: "redis-benchmark not found", Get: "apt-get install -y redis-tools"})
			}
		}
	}
	if *peer {
		p, err := nutcrackerBinary()
		if err != nil {
			skipped = append(skipped, skipNote{Series: "peer: twemproxy", Why: err.Error(), Get: "apt-get install -y nutcracker"})
		}
		twemproxy = p
	}
	return skipped, twemproxy
}

// proxyLogName and etcdLogName are the files under -out that hold the
// proxies' and the etcd members' logs.
const (
	proxyLogName = "proxy.log"
	etcdLogName  = "etcd.log"
)

// wrote names every file a run leaves under dir.
func wrote(dir string, etcd bool) string {
	var files []string
	for _, f := range []string{"report.md", "chart.svg", "latency.svg", "results.json", proxyLogName} {
		files = append(files, filepath.Join(dir, f))
	}
	what := "the table, the charts, every measurement, the proxies' log"
	if etcd {
		files = append(files, filepath.Join(dir, etcdLogName))
		what += ", etcd's log"
	}
	return "wrote " + strings.Join(files, ", ") + " (" + what + ")"
}

// check ends the run on an error, in one line, after stopping every child
// process.
func check(err error) {
	if err != nil {
		runCleanups()
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad number %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

func progress(format string, a ...any) {
	if exiting.Load() {
		return
	}
	fmt.Fprintf(os.Stderr, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, a...))
}

// options are a throughput run's settings.
type options struct {
	ns, clients    []int
	d              time.Duration
	rounds         int
	pipe           bool
	procs          int      // the proxy's GOMAXPROCS; 0: not set
	proxyLog       *os.File // the proxies' stderr
	etcdLog        *os.File // etcd's; nil: no etcd series
	etcdTmpfs      bool     // etcd's data on /dev/shm, not the temporary directory
	idle           bool     // measure idle connections' memory
	quick          bool     // -quick: fewer requests in the peer series
	peer           bool     // run the peer series
	twemproxy      string   // nutcracker's binary; "": the peer series without it
	clusterShards  []int    // the cluster series' shards per cluster; nil: none
	clusterClients int
}

// throughput runs the whole comparison. Every child process it starts is
// stopped when it returns, and on every other exit path (see atExit).
func throughput(o options) (*report, error) {
	tmp, err := os.MkdirTemp("", "redlock-bench-")
	if err != nil {
		return nil, err
	}
	defer atExit(func() { os.RemoveAll(tmp) })()
	ns, d, rounds := o.ns, o.d, o.rounds
	rep := &report{Started: time.Now(), Duration: d, Rounds: rounds, Host: hostInfo(), ProxyProcs: o.procs, HistBounds: histBounds()}
	var cluster *etcdCluster
	if o.etcdLog != nil {
		// First, so that a missing or broken etcd fails the run at once.
		dataRoot := tmp
		if o.etcdTmpfs {
			if dataRoot, err = os.MkdirTemp("/dev/shm", "redlock-bench-etcd-"); err != nil {
				return nil, fmt.Errorf("etcd on tmpfs: %w", err)
			}
			defer atExit(func() { os.RemoveAll(dataRoot) })()
		}
		progress("starting etcd (%d members, data in %s)", etcdMembers, dataRoot)
		if cluster, err = startEtcd(dataRoot, o.etcdLog); err != nil {
			return nil, fmt.Errorf("etcd: %w", err)
		}
		defer atExit(cluster.stop)()
		rep.Etcd = &etcdInfo{Members: etcdMembers, Version: cluster.Version, DataFS: fsName(dataRoot), Tmpfs: o.etcdTmpfs, WithN: ns[len(ns)-1]}
	}
	progress("building the proxy")
	bin, err := buildProxy(tmp)
	if err != nil {
		return nil, err
	}
	lone, err := redisproc.Start(tmp)
	if err != nil {
		return nil, err
	}
	defer atExit(lone.Stop)()
	b := &bencher{o: o, rep: rep, tmp: tmp, bin: bin, lone: lone, lonePID: redisPID(lone.Addr), cluster: cluster}
	for _, n := range ns {
		if err := b.measureN(n, n == ns[len(ns)-1]); err != nil {
			return nil, err
		}
	}
	if o.peer {
		if err := b.measurePeers(o.twemproxy); err != nil {
			return nil, fmt.Errorf("peer series: %w", err)
		}
	}
	if len(o.clusterShards) > 0 {
		if err := b.measureClusters(o.clusterShards, o.clusterClients); err != nil {
			return nil, fmt.Errorf("cluster series: %w", err)
		}
	}
	rep.Finished = time.Now()
	return rep, nil
}

// bencher is what the measurements of every N share.
type bencher struct {
	o        options
	rep      *report
	tmp, bin string
	lone     *redisproc.Server
	lonePID  int
	cluster  *etcdCluster // nil: no etcd series
}

// measureN measures every series at every client count over N backends
// (and, at the largest N, etcd and the pipelined runs); its servers and
// proxy are stopped when it returns.
func (b *bencher) measureN(n int, largest bool) error {
	o := b.o
	rig, stop, err := startRig(b.tmp, b.bin, n, o.procs, o.proxyLog)
	if err != nil {
		return err
	}
	defer stop()
	px, addrs, pids := rig.px, rig.addrs, rig.pids
	progress("N=%d: proxy %s over %s", n, px.Addr, strings.Join(addrs, ","))
	series := []string{"lone", "proxy", "redsync"}
	if b.cluster != nil && largest {
		// etcd's rounds take turns with the largest N's.
		series = append(series, "etcd")
	}
	for _, c := range o.clients {
		samples := make([][]result, len(series))
		for r := 0; r < o.rounds; r++ {
			// Interleaved: the series take turns, so drift in the
			// machine's load touches them alike.
			for i, s := range series {
				var res result
				switch s {
				case "lone":
					res = b.loneCycles(c, o.d)
				case "proxy":
					res = cycles(px.Addr, c, o.d, rig.cpu)
				case "redsync":
					rs, closeRS := newRedsync(addrs, c)
					res = run(c, o.d, redsyncCycle(rs), func() (time.Duration, time.Duration) { return 0, cpuOf(pids) })
					closeRS()
				case "etcd":
					l, err := newEtcdLocker(b.cluster, c)
					if err != nil {
						return err
					}
					res = run(c, o.d, l.cycle(), func() (time.Duration, time.Duration) { return 0, cpuOf(b.cluster.pids()) })
					l.close()
				}
				res.Series, res.N = s, n
				if s == "etcd" {
					res.N = etcdMembers
				}
				progress("N=%d clients=%-3d %-8s %9.0f cycles/s  p50 %-9v p99 %-9v errors %d  CPU per cycle: proxy %s, backends %s",
					res.N, c, s, res.PerSec, res.P50.Round(time.Microsecond), res.P99.Round(time.Microsecond), res.Errors,
					cpuCell(res.ProxyCPUCycle, s == "proxy"), cpuCell(res.BackendCPUCycle, true))
				if res.Error != "" {
					progress("  first error: %s", res.Error)
				}
				samples[i] = append(samples[i], res)
			}
		}
		for i := range samples {
			b.rep.Results = append(b.rep.Results, median(samples[i]))
		}
	}
	if o.pipe && largest {
		for r := 0; r < o.rounds; r++ {
			l, err := pipelined(b.lone.Addr, 50, 16, 400000)
			if err != nil {
				return err
			}
			p, err := pipelined(px.Addr, 50, 16, 200000)
			if err != nil {
				return err
			}
			progress("N=%d pipelined -P 16 -c 50: lone %.0f SET/s, proxy %.0f SET/s (%.2fx)", n, l, p, p/l)
			b.rep.Pipelined = append(b.rep.Pipelined, pipeResult{N: n, Lone: l, Proxy: p})
		}
	}
	if o.idle && largest {
		idle, err := b.measureIdle(addrs)
		if err != nil {
			return fmt.Errorf("idle connections: %w", err)
		}
		b.rep.Idle = idle
	}
	return nil
}

// loneCycles measures lock cycles on the lone Redis.
func (b *bencher) loneCycles(c int, d time.Duration) result {
	return cycles(b.lone.Addr, c, d, func() (time.Duration, time.Duration) { return 0, cpuOf([]int{b.lonePID}) })
}

// measureIdle measures the memory of idle client connections to a fresh
// proxy over addrs (its admin address serving the heap profile) and to a
// fresh lone Redis (maxclients raised to hold them).
func (b *bencher) measureIdle(addrs []string) (*idleResult, error) {
	if err := raiseNoFile(idleConns + 1024); err != nil {
		return nil, err
	}
	res := &idleResult{Conns: idleConns, N: len(addrs)}
	port, err := redisproc.FreePort()
	if err != nil {
		return nil, err
	}
	admin := fmt.Sprintf("127.0.0.1:%d", port)
	px, err := startProxy(b.bin, addrs, b.o.procs, b.o.proxyLog, "-admin", admin)
	if err != nil {
		return nil, err
	}
	stopProxy := atExit(px.stop)
	defer stopProxy()
	var heaps []goHeap
	var heapErr error
	sample := func() {
		h, err := fetchHeap(admin)
		if err != nil && heapErr == nil {
			heapErr = err
		}
		heaps = append(heaps, h)
	}
	if res.ProxyKiB, err = idleGrowth(px.Addr, px.pid(), idleConns, sample); err != nil {
		return nil, err
	}
	if heapErr != nil {
		return nil, fmt.Errorf("the proxy's heap profile: %w", heapErr)
	}
	res.ProxyHeapKiB = float64(heaps[1].HeapInuse-heaps[0].HeapInuse) / 1024 / idleConns
	res.ProxyStackKiB = float64(heaps[1].StackInuse-heaps[0].StackInuse) / 1024 / idleConns
	res.ProxySites = heapSites(heaps[0], heaps[1], idleConns)
	stopProxy()

	rs, err := redisproc.Start(b.tmp, "--maxclients", strconv.Itoa(idleConns+100))
	if err != nil {
		return nil, err
	}
	defer atExit(rs.Stop)()
	if res.RedisKiB, err = idleGrowth(rs.Addr, redisPID(rs.Addr), idleConns, nil); err != nil {
		return nil, err
	}
	progress("%d idle connections: proxy (N=%d) %.1f KiB each (Go heap %.1f, stacks %.1f), lone Redis %.1f KiB each",
		idleConns, res.N, res.ProxyKiB, res.ProxyHeapKiB, res.ProxyStackKiB, res.RedisKiB)
	return res, nil
}

// median picks the sample with the median throughput.
func median(rs []result) result { return medianBy(rs, func(r result) float64 { return r.PerSec }) }

// medianBy picks the sample whose key is the median (of two, the larger).
func medianBy[T any](rs []T, key func(T) float64) T {
	sorted := slices.Clone(rs)
	slices.SortStableFunc(sorted, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return sorted[len(sorted)/2]
}

func hostInfo() string {
	h, _ := os.Hostname()
	cpus := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		cpus = strings.Count(string(b), "processor\t:")
	}
	return fmt.Sprintf("%s, %d CPUs", h, cpus)
}

func (r *report) write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(r, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "results.json"), b, 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "chart.svg"), []byte(r.svg()), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "latency.svg"), []byte(r.latencySVG()), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "report.md"), []byte(r.markdown()), 0o644)
}
