package main

import (
	"fmt"
	"runtime"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The cluster series: the proxy over three Redis Clusters (each one vote),
// each of S shards, for each S of -cluster-shards, at -cluster-clients
// clients doing lock cycles on keys of their own, spread over every slot.
// It shows how lock cycles per second grow with the shards: every lock
// command goes to every vote, but within a vote only to the shard of its
// key, so the Redis side's ceiling rises with S. On a machine with few
// cores the shards, the proxy and the clients share them, and the series
// shows the cost of the routing more than the gain (the report says so).

// clusterResult is one point of the cluster series.
type clusterResult struct {
	Shards   int           `json:"shards"`   // shards per cluster
	Clusters int           `json:"clusters"` // clusters (votes)
	Clients  int           `json:"clients"`
	PerSec   float64       `json:"per_sec"`
	P50      time.Duration `json:"p50"`
	P99      time.Duration `json:"p99"`
	Errors   int64         `json:"errors"`
	ProxyCPU time.Duration `json:"proxy_cpu_per_cycle"`
	RedisCPU time.Duration `json:"backend_cpu_per_cycle"` // every node of every cluster
}

// clusterVotes is how many clusters the series votes over.
const clusterVotes = 3

// measureClusters runs the cluster series; its clusters and proxies are
// stopped when it returns.
func (b *bencher) measureClusters(shards []int, clients int) error {
	for _, s := range shards {
		if err := b.measureClusterPoint(s, clients); err != nil {
			return err
		}
	}
	b.rep.Cores = runtime.NumCPU()
	return nil
}

func (b *bencher) measureClusterPoint(shards, clients int) error {
	var entries []string
	var pids []int
	for i := 0; i < clusterVotes; i++ {
		c, err := redisproc.StartCluster(b.tmp, shards, 0)
		if err != nil {
			return err
		}
		defer atExit(c.Stop)()
		// The flag form: the addresses of one entry joined by "+".
		entries = append(entries, "cluster://"+strings.ReplaceAll(c.Seeds(), ",", "+"))
		for _, n := range c.Nodes {
			pids = append(pids, redisPID(n.Addr))
		}
	}
	px, err := startProxy(b.bin, entries, b.o.procs, b.o.proxyLog)
	if err != nil {
		return err
	}
	defer atExit(px.stop)()
	var samples []result
	for r := 0; r < b.o.rounds; r++ {
		samples = append(samples, cycles(px.Addr, clients, b.o.d, func() (time.Duration, time.Duration) { return cpuOf([]int{px.pid()}), cpuOf(pids) }))
	}
	res := median(samples)
	progress("clusters=%d shards=%d clients=%d %9.0f cycles/s  p50 %v p99 %v errors %d", clusterVotes, shards, clients, res.PerSec,
		res.P50.Round(time.Microsecond), res.P99.Round(time.Microsecond), res.Errors)
	b.rep.Clusters = append(b.rep.Clusters, clusterResult{Shards: shards, Clusters: clusterVotes, Clients: clients, PerSec: res.PerSec,
		P50: res.P50, P99: res.P99, Errors: res.Errors, ProxyCPU: res.ProxyCPUCycle, RedisCPU: res.BackendCPUCycle})
	return nil
}

// clusterSection is the report's cluster series, or "" when it did not run.
func (r *report) clusterSection() string {
	if len(r.Clusters) == 0 {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## Redis Cluster backends\n\nThe proxy over %d Redis Clusters (each one vote) of S shards each, no replicas, "+
		"lock cycles (SET NX PX, release by EVALSHA) on keys of their own over every slot.", r.Clusters[0].Clusters)
	if r.Cores < 8 {
		fmt.Fprintf(&b, " **This host has %d cores**: the %d to %d Redis processes, the proxy and the clients share them, "+
			"so these small figures show the series runs and what routing by slot costs, not how throughput grows with shards; "+
			"that needs a core or more per shard.", r.Cores, r.Clusters[0].Clusters*r.Clusters[0].Shards, r.Clusters[len(r.Clusters)-1].Clusters*r.Clusters[len(r.Clusters)-1].Shards)
	}
	b.WriteString("\n\n| shards per cluster | clients | cycles/s | vs 1 shard | p50 | p99 | errors | proxy CPU/cycle | Redis CPU/cycle |\n|---|---|---|---|---|---|---|---|---|\n")
	base := r.Clusters[0].PerSec
	for _, c := range r.Clusters {
		fmt.Fprintf(&b, "| %d | %d | %.0f | %.2fx | %v | %v | %d | %v | %v |\n", c.Shards, c.Clients, c.PerSec, c.PerSec/base,
			c.P50.Round(time.Microsecond), c.P99.Round(time.Microsecond), c.Errors, c.ProxyCPU.Round(time.Microsecond), c.RedisCPU.Round(time.Microsecond))
	}
	return b.String()
}
