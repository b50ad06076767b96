// Package metrics exports what the proxy and its backend links observe as
// Prometheus metrics, with the Go runtime and process collectors.
//
// It promises: every metric name starts with redlock_proxy_, uses base
// units and the _total/_seconds conventions, and has bounded labels (the
// command table, the result kinds, the configured backend entries, such as
// a sentinel:// entry, never the master it names at the moment; never a key
// or a token). Hooks called on hot paths do no allocation.
package metrics

import (
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/proxy"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

const ns = "redlock_proxy"

// Metrics implements proxy.Observer and netio.Events.
type Metrics struct {
	reg *prometheus.Registry

	cmdTotal    *prometheus.CounterVec
	commands    map[string]map[string]prometheus.Counter // the pairs that can occur (proxy.Results)
	duration    map[string]prometheus.Observer
	margin      prometheus.Histogram
	undoOK      prometheus.Counter
	undoFail    prometheus.Counter
	undoExpired prometheus.Counter
	clients     prometheus.Gauge
	forced      prometheus.Counter

	backendLatency []prometheus.Observer
	backendConns   []prometheus.Counter
	backendLosses  []map[string]prometheus.Counter // by cause
	health         func() []netio.Health

	runMu sync.Mutex
	runs  []string // each backend's run_id when its connection was last lost (see Restarted)
}

// causesOf lists the causes of loss a backend can have: moved only for a
// Redis Cluster backend (its marker's slot can move), other for a loss
// another proxy recorded.
func causesOf(entry string) []string {
	out := []string{"restart", "flush", "promotion", "failback", "eviction", "clock", "replaced", "rollback", proxy.LossOther}
	if strings.HasPrefix(entry, "cluster://") {
		out = append(out, "moved")
	}
	return out
}

// New registers every metric. addrs are the backends' entries as
// configured, in pool order;
// health reads their state at scrape time; build is the running binary's.
func New(addrs []string, health func() []netio.Health, build buildinfo.Info) *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	m.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: ns, Name: "build_info",
		Help:        "Always 1; its labels say which build runs: version, source revision, Go version.",
		ConstLabels: prometheus.Labels{"version": build.Version, "revision": build.Revision, "goversion": build.GoVersion},
	}, func() float64 { return 1 }))

	m.cmdTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "commands_total",
		Help: "Commands answered, by command (lock scripts by their role) and result, by one rule for every command, reads included: " +
			"granted (a majority of counted backends did it), refused (a majority definitively said no), " +
			"no_quorum (fewer than a majority of counted backends answered or agreed, or no validity was left: a read's nil or -2 is then no answer), " +
			"error (an error reply), ok (any other answer: a read a majority answered, a command the proxy answers itself).",
	}, []string{"command", "result"})
	cmdDur := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "command_duration_seconds",
		Help:    "Time from sending a lock command to the backends to its decision, by command.",
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
	}, []string{"command"})
	m.commands = map[string]map[string]prometheus.Counter{}
	m.duration = map[string]prometheus.Observer{}
	for _, c := range proxy.CommandNames() {
		m.commands[c] = map[string]prometheus.Counter{}
		for _, r := range proxy.Results(c) {
			m.commands[c][r] = m.cmdTotal.WithLabelValues(c, r)
			if r == proxy.ResultNoQuorum { // decided by the backends: timed
				m.duration[c] = cmdDur.WithLabelValues(c)
			}
		}
	}
	m.margin = prometheus.NewHistogram(prometheus.HistogramOpts{
		Namespace: ns, Name: "validity_margin_ratio",
		Help:    "Share of the TTL still valid when a lock was granted or extended (validity / TTL).",
		Buckets: []float64{.5, .8, .9, .95, .98, .99, .995, .999},
	})
	undo := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: ns, Name: "undo_total",
		Help: "Compare-and-deletes that undo partial acquisitions, by what became of them: ok (ran), expired (the lock expired by itself first), failed (could not run before the lock's TTL; the log names the keys).",
	}, []string{"result"})
	m.undoOK, m.undoExpired, m.undoFail = undo.WithLabelValues(proxy.UndoOK), undo.WithLabelValues(proxy.UndoExpired), undo.WithLabelValues(proxy.UndoFailed)
	m.clients = prometheus.NewGauge(prometheus.GaugeOpts{Namespace: ns, Name: "connected_clients", Help: "Client connections open."})
	m.forced = prometheus.NewCounter(prometheus.CounterOpts{Namespace: ns, Name: "forced_unlocks_total",
		Help: "DELs that a majority of the backends carried out: held locks forced open (each logged at WARN with the key, the holder's token and the client)."})

	lat := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: ns, Name: "backend_request_duration_seconds",
		Help:    "Time from queueing a command for a backend to its reply, by backend.",
		Buckets: []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .5},
	}, []string{"backend"})
	conns := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "backend_connections_established_total",
		Help: "Connections established to a backend, the first one included: every one after the first is a reconnect."}, []string{"backend"})
	losses := prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: ns, Name: "backend_losses_total",
		Help: "Losses of a backend's data detected (each starts a quarantine), by cause: restart, flush (no replication marker: FLUSHALL, " +
			"a restart without its data, or a master no proxy used before), eviction (keys evicted, an evicting memory policy, or statistics reset), promotion (a replica " +
			"promoted), failback (a full resync from another master, then a promotion), clock (its clock jumped ahead), replaced (another " +
			"server answers at the address), moved (Redis Cluster: the marker's slot moved), other (a loss another proxy recorded)."},
		[]string{"backend", "cause"})
	m.health = health
	m.runs = make([]string, len(addrs))
	for _, a := range addrs {
		m.backendLatency = append(m.backendLatency, lat.WithLabelValues(a))
		m.backendConns = append(m.backendConns, conns.WithLabelValues(a))
		byCause := map[string]prometheus.Counter{}
		for _, cause := range causesOf(a) {
			byCause[cause] = losses.WithLabelValues(a, cause)
		}
		m.backendLosses = append(m.backendLosses, byCause)
	}
	m.reg.MustRegister(m.cmdTotal, cmdDur, m.margin, undo, m.clients, m.forced, lat, conns, losses, &state{addrs: addrs, health: health})
	return m
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry is the registry holding every metric (for tests).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Names lists the name of every metric the proxy can export, also those a
// scrape shows only for some kinds of backend (Sentinel groups, Redis
// Cluster shards).
func (m *Metrics) Names() []string {
	ch := make(chan *prometheus.Desc, 64)
	go func() { m.reg.Describe(ch); close(ch) }()
	var out []string
	for d := range ch {
		if n := descName.FindStringSubmatch(d.String()); n != nil {
			out = append(out, n[1])
		}
	}
	return out
}

// descName finds the name in a Desc's String.
var descName = regexp.MustCompile(`fqName: "([^"]+)"`)

// Command implements proxy.Observer.
func (m *Metrics) Command(name, result string, elapsed time.Duration) {
	byResult, ok := m.commands[name]
	if !ok {
		byResult = m.commands["unknown"]
	}
	if c, ok := byResult[result]; ok {
		c.Inc()
	} else {
		// A pair proxy.Results says cannot occur: still counted (the slow
		// way), never lost.
		m.cmdTotal.WithLabelValues(name, result).Inc()
	}
	if elapsed > 0 {
		if d, ok := m.duration[name]; ok {
			d.Observe(elapsed.Seconds())
		}
	}
}

// Margin implements proxy.Observer.
func (m *Metrics) Margin(ttl, validity time.Duration) {
	if ttl > 0 {
		m.margin.Observe(float64(validity) / float64(ttl))
	}
}

// Undo implements proxy.Observer.
func (m *Metrics) Undo(result string) {
	switch result {
	case proxy.UndoOK:
		m.undoOK.Inc()
	case proxy.UndoExpired:
		m.undoExpired.Inc()
	default:
		m.undoFail.Inc()
	}
}

// Clients implements proxy.Observer.
func (m *Metrics) Clients(n int) { m.clients.Set(float64(n)) }

// ForcedUnlock implements proxy.Observer.
func (m *Metrics) ForcedUnlock() { m.forced.Inc() }

// Reply implements netio.Events. Errors and timeouts are read from the
// backends' state at scrape time, as INFO reads them (see state).
func (m *Metrics) Reply(node int, latency time.Duration, _ bool) {
	m.backendLatency[node].Observe(latency.Seconds())
}

// Timeout implements netio.Events.
func (m *Metrics) Timeout(int) {}

// StateChange implements netio.Events: it notes the run of a backend whose
// connection was lost, so that a loss found when it is back can be told a
// restart (see Restarted).
func (m *Metrics) StateChange(node int, up bool) {
	if up {
		return
	}
	if hs := m.health(); node < len(hs) && hs[node].RunID != "" {
		m.runMu.Lock()
		m.runs[node] = hs[node].RunID
		m.runMu.Unlock()
	}
}

// Restarted implements netio.Events.
// It counts the loss under its cause, which the backend's state holds. A
// master back with another run_id than the one it had when its connection
// was lost restarted, whatever its data says (a restart without
// persistence also leaves no marker, as a FLUSHALL does).
func (m *Metrics) Restarted(node int, _ time.Time) {
	cause := proxy.LossOther
	if hs := m.health(); node < len(hs) {
		cause = proxy.LossCause(hs[node].QuarantineCause)
		m.runMu.Lock()
		before := m.runs[node]
		m.runs[node] = hs[node].RunID
		m.runMu.Unlock()
		if ran := before != "" && hs[node].RunID != before; ran && (cause == "flush" || cause == proxy.LossOther) {
			cause = "restart"
		}
	}
	if c, ok := m.backendLosses[node][cause]; ok {
		c.Inc()
	}
}

// Reconnect implements netio.Events: it is called for every connection
// established, the first one included.
func (m *Metrics) Reconnect(node int) { m.backendConns[node].Inc() }

// state reads the backends' state at scrape time.
type state struct {
	addrs  []string
	health func() []netio.Health
}

var (
	upDesc = prometheus.NewDesc(ns+"_backend_up",
		"1 when the backend is connected and its identity verified.", []string{"backend"}, nil)
	quarDesc = prometheus.NewDesc(ns+"_backend_quarantined",
		"1 while the backend's votes do not count after a restart.", []string{"backend"}, nil)
	quarLeftDesc = prometheus.NewDesc(ns+"_backend_quarantine_remaining_seconds",
		"Time until a quarantined backend's votes count again.", []string{"backend"}, nil)
	latDesc = prometheus.NewDesc(ns+"_backend_latency_seconds",
		"Smoothed reply latency of the backend.", []string{"backend"}, nil)
	sentDesc = prometheus.NewDesc(ns+"_backend_commands_total",
		"Commands written to the backend.", []string{"backend"}, nil)
	writesDesc = prometheus.NewDesc(ns+"_backend_writes_total",
		"Write calls to the backend (commands / writes is the mean batch).", []string{"backend"}, nil)
	errorsDesc = prometheus.NewDesc(ns+"_backend_errors_total",
		"Error replies from a backend, and commands refused because it was down or overloaded (INFO proxy's errors).", []string{"backend"}, nil)
	timeoutsDesc = prometheus.NewDesc(ns+"_backend_timeouts_total",
		"Commands that got no reply within the per-backend timeout (INFO proxy's timeouts).", []string{"backend"}, nil)
	countingDesc = prometheus.NewDesc(ns+"_backends_counting",
		"Backends whose votes count now (up and not quarantined).", nil, nil)
	backendsDesc  = prometheus.NewDesc(ns+"_backends", "Backends configured.", nil, nil)
	confirmedDesc = prometheus.NewDesc(ns+"_backend_sentinel_confirmed",
		"Sentinel-managed backends only: 1 while a majority of its Sentinels name the master it is connected to (its votes need it).", []string{"backend"}, nil)
	agreeDesc = prometheus.NewDesc(ns+"_backend_sentinels_agreeing",
		"Sentinel-managed backends only: Sentinels that named the master in the last round of questions.", []string{"backend"}, nil)
	switchesDesc = prometheus.NewDesc(ns+"_backend_sentinel_switches_total",
		"Sentinel-managed backends only: switches of master (failovers) seen; each quarantines the new master.", []string{"backend"}, nil)
	majorityDesc = prometheus.NewDesc(ns+"_majority", "Backends needed for a majority.", nil, nil)
	// Redis Cluster backends: one series per shard master (bounded by the
	// cluster's masters at the scrape).
	shardCountsDesc = prometheus.NewDesc(ns+"_backend_shard_counting",
		"Redis Cluster backends: 1 while the shard's master counts for the keys in its slots (up, identity checked, not quarantined).", []string{"backend", "shard"}, nil)
	shardQuarDesc = prometheus.NewDesc(ns+"_backend_shard_quarantine_remaining_seconds",
		"Redis Cluster backends: time until the shard's master counts again after a restart, a promotion or a moved marker.", []string{"backend", "shard"}, nil)
	shardSlotsDesc = prometheus.NewDesc(ns+"_backend_shard_slots",
		"Redis Cluster backends: the slots the shard's master owns.", []string{"backend", "shard"}, nil)
)

func (s *state) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{upDesc, quarDesc, quarLeftDesc, latDesc, sentDesc, writesDesc, errorsDesc, timeoutsDesc, countingDesc, backendsDesc, majorityDesc,
		confirmedDesc, agreeDesc, switchesDesc, shardCountsDesc, shardQuarDesc, shardSlotsDesc} {
		ch <- d
	}
}

func (s *state) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	counting := 0
	hs := s.health()
	for i, h := range hs {
		a := s.addrs[i]
		b2f := func(b bool) float64 {
			if b {
				return 1
			}
			return 0
		}
		state, _ := h.State(now)
		quarantined := state == netio.StateQuarantined
		left := 0.0
		if now.Before(h.QuarantinedUntil) {
			left = h.QuarantinedUntil.Sub(now).Seconds()
		}
		if state == netio.StateCounting {
			counting++
		}
		ch <- prometheus.MustNewConstMetric(upDesc, prometheus.GaugeValue, b2f(h.Up), a)
		ch <- prometheus.MustNewConstMetric(quarDesc, prometheus.GaugeValue, b2f(quarantined), a)
		ch <- prometheus.MustNewConstMetric(quarLeftDesc, prometheus.GaugeValue, left, a)
		ch <- prometheus.MustNewConstMetric(latDesc, prometheus.GaugeValue, h.Latency.Seconds(), a)
		ch <- prometheus.MustNewConstMetric(sentDesc, prometheus.CounterValue, float64(h.Sent), a)
		ch <- prometheus.MustNewConstMetric(writesDesc, prometheus.CounterValue, float64(h.Writes), a)
		ch <- prometheus.MustNewConstMetric(errorsDesc, prometheus.CounterValue, float64(h.Errors), a)
		ch <- prometheus.MustNewConstMetric(timeoutsDesc, prometheus.CounterValue, float64(h.Timeouts), a)
		if sh := h.Sentinel; sh != nil {
			ch <- prometheus.MustNewConstMetric(confirmedDesc, prometheus.GaugeValue, b2f(now.Before(sh.Confirmed)), a)
			ch <- prometheus.MustNewConstMetric(agreeDesc, prometheus.GaugeValue, float64(sh.Agree), a)
			ch <- prometheus.MustNewConstMetric(switchesDesc, prometheus.CounterValue, float64(sh.Switches), a)
		}
		for _, sh := range h.Shards {
			left := 0.0
			if now.Before(sh.QuarantinedUntil) {
				left = sh.QuarantinedUntil.Sub(now).Seconds()
			}
			ch <- prometheus.MustNewConstMetric(shardCountsDesc, prometheus.GaugeValue, b2f(sh.Counts(now)), a, sh.Addr)
			ch <- prometheus.MustNewConstMetric(shardQuarDesc, prometheus.GaugeValue, left, a, sh.Addr)
			ch <- prometheus.MustNewConstMetric(shardSlotsDesc, prometheus.GaugeValue, float64(sh.SlotCount), a, sh.Addr)
		}
	}
	ch <- prometheus.MustNewConstMetric(countingDesc, prometheus.GaugeValue, float64(counting))
	ch <- prometheus.MustNewConstMetric(backendsDesc, prometheus.GaugeValue, float64(len(hs)))
	ch <- prometheus.MustNewConstMetric(majorityDesc, prometheus.GaugeValue, float64(quorum.Majority(len(hs))))
}
