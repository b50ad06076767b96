package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/redlock-proxy/redlock-proxy/bench/safety"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// safetyMode reports whether the arguments ask for -mode safety, which has
// flags of its own and so is dispatched before the benchmark's flags are
// parsed.
func safetyMode(args []string) bool {
	for i, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if a == "--" {
			return false
		}
		if !strings.HasPrefix(a, "-") || name != "mode" {
			continue
		}
		if !hasVal && i+1 < len(args) {
			val = args[i+1]
		}
		return val == "safety"
	}
	return false
}

// runSafety is the fault-injection safety harness's command line:
//
//	go run ./bench -mode safety                        # every scenario, 60s each
//	go run ./bench -mode safety -scenario kill9,mixed -duration 5m
//	go run ./bench -mode safety -scenario controls     # prove the checkers see
//
// It prints progress to stderr and a table to stdout, and exits 1 when a
// scenario did not meet its expectations (a violation in a fault scenario,
// no grants while a majority was up, a control that went undetected).
func runSafety(args []string) int {
	fs := flag.NewFlagSet("bench -mode safety", flag.ContinueOnError)
	fs.String("mode", "safety", "safety (this harness)")
	scenarios := fs.String("scenario", "all", "comma-separated scenarios, or all, faults, controls; -list shows them")
	list := fs.Bool("list", false, "list the scenarios and exit")
	dur := fs.Duration("duration", 60*time.Second, "workload time of each fault scenario")
	clients := fs.Int("clients", 16, "contending clients")
	keys := fs.Int("keys", 3, "hot keys")
	proxies := fs.Int("proxies", 2, "proxies over the same masters")
	backends := fs.Int("backends", 5, "redis-server masters")
	seed := fs.Uint64("seed", 0, "random seed (0: from the clock; printed so a run can be repeated)")
	ttlMin := fs.Duration("ttl-min", 500*time.Millisecond, "shortest workload TTL")
	ttlMax := fs.Duration("ttl-max", time.Second, "longest workload TTL")
	maxTTL := fs.Duration("max-ttl", 2*time.Second, "proxies' max_ttl (the restart quarantine is this plus drift)")
	backendTimeout := fs.Duration("backend-timeout", 50*time.Millisecond, "proxies' backend_timeout")
	quarantine := fs.String("quarantine", "", "proxies' restart_quarantine in scenarios that do not name one (default: the proxy's default)")
	linTimeout := fs.Duration("lin-timeout", 2*time.Minute, "linearizability search budget per key")
	viz := fs.String("viz", "", "write porcupine visualizations of non-linearizable keys to this directory")
	jsonOut := fs.String("json", "", "write the reports as JSON to this file")
	verbose := fs.Bool("v", false, "print the proxies' warnings and every fault")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *list {
		for _, s := range safety.Scenarios() {
			fmt.Printf("%-24s %s\n", s.Name, s.About)
		}
		return 0
	}
	scs, err := safety.Lookup(*scenarios)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 2
	}
	if _, err := redisproc.Binary(); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		return 1
	}
	for _, sc := range scs {
		if _, err := redisproc.SentinelBinary(); err != nil && sc.Sentinels > 0 {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
	}
	if *seed == 0 {
		*seed = uint64(time.Now().UnixNano())
	}
	var proxyLog io.Writer
	if *verbose {
		proxyLog = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	progress("safety harness: %d scenarios, seed %d, %d masters, %d proxies, %d clients on %d keys",
		len(scs), *seed, *backends, *proxies, *clients, *keys)
	var reps []*safety.Report
	failed := false
	for _, sc := range scs {
		rep, err := safety.Run(ctx, sc, safety.Options{
			Duration: *dur, Clients: *clients, Keys: *keys, Proxies: *proxies, Backends: *backends,
			Seed: *seed, TTLMin: *ttlMin, TTLMax: *ttlMax, MaxTTL: *maxTTL, BackendTimeout: *backendTimeout, Quarantine: *quarantine,
			LinTimeout: *linTimeout, VizDir: *viz, ProxyLog: proxyLog,
			Progress: func(s string) { progress("%s", s) },
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
		rep.WriteDetails(os.Stderr, *verbose)
		reps = append(reps, rep)
		failed = failed || !rep.Passed()
	}
	fmt.Println()
	safety.WriteTable(os.Stdout, reps)
	if *jsonOut != "" {
		b, _ := json.MarshalIndent(reps, "", "  ")
		err := os.MkdirAll(filepath.Dir(*jsonOut), 0o755)
		if err == nil {
			err = os.WriteFile(*jsonOut, b, 0o644)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			return 1
		}
	}
	if failed {
		fmt.Println("\nFAIL: some scenarios did not meet their expectations (see PROBLEM lines above)")
		return 1
	}
	fmt.Println("\nPASS: no violation in any fault scenario; every control detected")
	return 0
}
