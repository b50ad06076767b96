// Package app composes redlock-proxy from its parts: the backend links
// (netio), the front end (proxy), the embedded demo backends, and the admin
// HTTP server. main.go and the tests start the proxy through it.
//
// It promises: New either returns a listening proxy or releases everything
// it started; Run stops accepting on cancellation, lets in-flight commands
// and their undos finish within a bound, then closes every part in reverse
// order of start.
package app

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/app/demo"
	"github.com/redlock-proxy/redlock-proxy/internal/app/metrics"
	"github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/proxy"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// App is a running proxy.
type App struct {
	cfg     config.Config
	log     *slog.Logger
	demo    *demo.Set
	pool    *netio.Pool
	srv     *proxy.Server
	ln      net.Listener
	admin   *http.Server
	adminLn net.Listener
	metrics *metrics.Metrics
	served  chan error
	// draining is set when the shutdown starts: /readyz answers 503.
	draining atomic.Bool
}

// NewLogger builds the logger the configuration asks for.
func NewLogger(cfg config.Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	lvl.UnmarshalText([]byte(cfg.LogLevel))
	opts := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		opts.ReplaceAttr = readableDurations
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// readableDurations writes durations in JSON logs as Go writes them
// ("1m0.602s", "250ms"), as the text format does, rather than as bare
// nanoseconds.
func readableDurations(_ []string, a slog.Attr) slog.Attr {
	if a.Value.Kind() == slog.KindDuration {
		return slog.String(a.Key, a.Value.Duration().String())
	}
	return a
}

// New listens for clients and the admin HTTP server, then starts the
// backends' links. The configuration must have been validated. On error
// nothing it started is left running or listening, and the error names the
// address or file at fault.
func New(cfg config.Config, log *slog.Logger) (*App, error) {
	a := &App{cfg: cfg, log: log, served: make(chan error, 2)}
	if err := a.start(); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// start does New's work; close releases whatever it got to.
func (a *App) start() error {
	cfg, log := a.cfg, a.log
	// Everything that can fail on the operator's input comes first, before
	// anything starts: the certificates and the two listen addresses.
	backendTLS, err := cfg.BackendTLSConfig()
	if err != nil {
		return err
	}
	sentinelTLS, err := cfg.SentinelTLSConfig()
	if err != nil {
		return err
	}
	clientTLS, err := cfg.ClientTLS()
	if err != nil {
		return err
	}
	scripts := classify.NewRegistry()
	if err := cfg.RegisterScripts(scripts); err != nil {
		return err
	}
	if a.ln, err = net.Listen("tcp", cfg.Listen); err != nil {
		return fmt.Errorf("clients: %w", err)
	}
	if cfg.Admin != "" {
		if a.adminLn, err = net.Listen("tcp", cfg.Admin); err != nil {
			return fmt.Errorf("admin: %w", err)
		}
	}
	if clientTLS != nil {
		a.ln = tls.NewListener(a.ln, clientTLS)
	}

	specs, err := cfg.BackendSpecs()
	if err != nil {
		return err
	}
	backends := []string(cfg.Backends)
	if len(backends) == 0 {
		if a.demo, err = demo.Start(cfg.EmbeddedBackends); err != nil {
			return err
		}
		backends = a.demo.Addrs()
		log.Warn("NO BACKENDS CONFIGURED: running on embedded in-process demo backends. "+
			"They share this process and fail with it: this is a demo, NOT FOR PRODUCTION. "+
			"Pass -backends host:port,host:port,host:port for real Redis masters.",
			"embedded_backends", backends)
	}
	timing := cfg.Timing()
	hold := cfg.MaxTTL + timing.Drift(cfg.MaxTTL)
	rule := quorum.RestartRule{Hold: hold, Mode: quorum.RuleStrict}
	switch cfg.RestartQuarantine {
	case "run-id":
		rule.Mode = quorum.RuleRunID
	case "off":
		rule = quorum.RestartRule{}
	}
	build := buildinfo.Read()
	a.metrics = metrics.New(backends, func() []netio.Health { return a.pool.Health() }, build)
	// The front end is made after the links; the backends' invalidations of
	// tracked keys (client-side caching) reach it once it exists.
	var front atomic.Pointer[proxy.Server]
	invalidated := func(node int, key []byte) {
		if s := front.Load(); s != nil {
			s.Invalidated(node, key)
		}
	}
	// Release notices of lock scripts, published by any proxy (see the
	// proxy's pub/sub), reach this one's subscribers the same way.
	released := func(node int, payload []byte) {
		if s := front.Load(); s != nil {
			s.Released(node, payload)
		}
	}
	var opts []netio.Options
	for i, b := range backends {
		o := netio.Options{
			Addr: b, Timeout: cfg.BackendTimeout, Restart: rule, Logger: log,
			Username: cfg.BackendUsername, Password: cfg.BackendPassword, Events: a.metrics,
			InProcess: a.demo != nil, Invalidated: invalidated, Released: released,
		}
		if i < len(specs) && specs[i].Kind == config.BackendSentinel {
			// The master changes: the link asks the Sentinels for it, and
			// verifies each one's certificate against its own host. Its hold
			// has the Sentinels' lease on top (see netio's sentinel.go).
			sp := specs[i]
			o.Sentinel = &netio.SentinelOptions{Addrs: sp.Addrs, Name: sp.Name,
				Username: cfg.SentinelUsername, Password: cfg.SentinelPassword, TLS: sentinelTLS}
			if o.Restart.Hold > 0 {
				o.Restart.Hold += netio.DefaultSentinelLease
			}
			o.TLS = backendTLS
		} else if i < len(specs) && specs[i].Kind == config.BackendCluster {
			// A Redis Cluster: one vote, a link per shard master (each
			// verifies the certificate of the host it dials).
			// Its hold has the lease of the cluster's confirmation on top (see
			// netio's cluster_confirm.go).
			o.Cluster = &netio.ClusterOptions{Seeds: specs[i].Addrs}
			if o.Restart.Hold > 0 {
				o.Restart.Hold += netio.DefaultClusterLease
			}
			o.TLS = backendTLS
		} else if backendTLS != nil && a.demo == nil {
			t := backendTLS.Clone()
			if t.ServerName == "" {
				t.ServerName, _, _ = net.SplitHostPort(b)
			}
			o.TLS = t
		}
		opts = append(opts, o)
	}
	a.pool = netio.NewPool(opts)
	if cfg.UpgradeFrom != "" {
		o := netio.Options{
			Addr: cfg.UpgradeFrom, Timeout: cfg.BackendTimeout, Logger: log.With("role", "upgrade_from"),
			Username: cfg.BackendUsername, Password: cfg.BackendPassword, DB: cfg.UpgradeFromDB, Invalidated: invalidated,
			// Not a vote, but a veto that follows a vote's rule: after any
			// loss of its data (a restart, a flush, another server at its
			// address) it grants nothing for the hold, since an old client
			// may hold a lock it forgot. Its evictions are no loss (its
			// clients had that risk before). Its clients are watched.
			Restart: rule, WatchClients: true, Veto: true,
		}
		if cfg.UpgradeFromPassword != "" {
			o.Username, o.Password = cfg.UpgradeFromUsername, cfg.UpgradeFromPassword
		}
		if backendTLS != nil {
			t := backendTLS.Clone()
			if t.ServerName == "" {
				t.ServerName, _, _ = net.SplitHostPort(cfg.UpgradeFrom)
			}
			o.TLS = t
		}
		a.pool.SetVeto(o)
	}
	a.pool.Start()

	users := map[string]proxy.User{}
	for _, u := range cfg.Users {
		rules, err := u.ACL()
		if err != nil {
			return err
		}
		users[u.Name] = proxy.User{Password: u.Password, Rules: rules}
	}
	a.srv = proxy.New(proxy.Config{
		Scripts:            scripts,
		VoteUnknownScripts: cfg.UnknownScripts == "vote",
		Timing:             timing,
		BackendTimeout:     cfg.BackendTimeout,
		MaxTTL:             cfg.MaxTTL,
		RequirePass:        cfg.RequirePass,
		Users:              users,
		MaxClients:         cfg.MaxClients,
		IdleTimeout:        cfg.IdleTimeout,
		CommandTimeout:     cfg.CommandTimeout,
		WriteTimeout:       cfg.WriteTimeout,
		Limits: proxy.Limits{
			MaxArgs: cfg.MaxArgs, MaxBulk: cfg.MaxBulk, MaxInline: cfg.MaxInline, MaxCommandBytes: cfg.MaxCommandBytes,
			MaxToken: cfg.MaxToken,
		},
		Logger:   log,
		Observer: a.metrics,
		Version:  build.Version,
		Addr:     a.ln.Addr().String(),
		Cluster:  a.pool.Clustered(),
	}, backendsOf{a.pool})
	front.Store(a.srv)
	if a.adminLn != nil {
		a.admin = &http.Server{Handler: a.adminHandler(), ReadHeaderTimeout: 5 * time.Second}
	}
	log.Info("redlock-proxy starting",
		"version", build.Version, "revision", build.Revision, "go_version", build.GoVersion,
		"listen", a.ln.Addr().String(), "admin", cfg.Admin, "pprof", a.admin != nil && cfg.ServesPprof(),
		"backends", strings.Join(backends, ","), "majority", quorum.Majority(len(backends)), "upgrade_from", cfg.UpgradeFrom,
		"drift_factor", cfg.DriftFactor, "drift_floor", cfg.DriftFloor, "min_validity", cfg.MinValidity,
		"backend_timeout", cfg.BackendTimeout, "max_ttl", cfg.MaxTTL,
		"restart_quarantine", cfg.RestartQuarantine, "quarantine_hold", hold,
		"unknown_scripts", cfg.UnknownScripts, "configured_scripts", len(cfg.Scripts),
		"client_auth", cfg.RequirePass != "" || len(cfg.Users) > 0, "client_tls", clientTLS != nil,
		"backend_auth", cfg.BackendPassword != "", "backend_tls", backendTLS != nil,
		"sentinel_auth", cfg.SentinelPassword != "", "sentinel_tls", sentinelTLS != nil,
		"max_clients", cfg.MaxClients, "idle_timeout", cfg.IdleTimeout, "command_timeout", cfg.CommandTimeout,
		"gomaxprocs", runtime.GOMAXPROCS(0))
	return nil
}

// Addr is the address clients connect to.
func (a *App) Addr() string { return a.ln.Addr().String() }

// AdminAddr is the admin HTTP address, or "".
func (a *App) AdminAddr() string {
	if a.adminLn == nil {
		return ""
	}
	return a.adminLn.Addr().String()
}

// Pool exposes the backend links (for tests and the benchmark harness).
func (a *App) Pool() *netio.Pool { return a.pool }

// Metrics exposes the metrics (for tests: the names of every metric, also
// those a scrape shows only for some kinds of backend).
func (a *App) Metrics() *metrics.Metrics { return a.metrics }

// ErrUndosPending is returned by Run when undos of partial acquisitions
// had not run when the shutdown grace ended: those locks stay on their
// masters until their TTL. main exits with status 3 for it.
var ErrUndosPending = errors.New("undos still pending at shutdown")

// Run serves until ctx is cancelled or a listener fails, then shuts down:
// /readyz answers 503 from then on, no new clients are accepted, and
// commands in flight and their undos get shutdown_grace to finish.
func (a *App) Run(ctx context.Context) error {
	stopWatch := a.watchQuorum()
	go func() { a.served <- a.srv.Serve(a.ln) }() // ends when Shutdown closes the listener
	if a.admin != nil {
		go func() { a.served <- a.admin.Serve(a.adminLn) }() // ends at admin.Shutdown
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-a.served:
		if errors.Is(err, proxy.ErrServerClosed) || errors.Is(err, http.ErrServerClosed) {
			err = nil
		}
	}
	a.draining.Store(true) // a load balancer stops sending clients here
	if d := a.cfg.ShutdownDelay; d > 0 && err == nil {
		// Clients are still served (and new ones accepted) while the load
		// balancer sees /readyz at 503 and stops sending them.
		a.log.Info("shutting down: /readyz answers 503; still serving for shutdown_delay", "shutdown_delay", d)
		time.Sleep(d)
	}
	sctx, cancel := context.WithTimeout(context.Background(), a.cfg.ShutdownGrace)
	defer cancel()
	stopWatch() // before the backends close: their closing is no lost quorum
	a.log.Info("shutting down: no new clients; finishing commands in flight", "shutdown_grace", a.cfg.ShutdownGrace)
	if serr := a.srv.Shutdown(sctx); serr != nil {
		a.log.Warn("clients did not finish in time", "err", serr)
	}
	if derr := a.pool.Drain(sctx); derr != nil {
		a.log.Warn("backend commands did not finish within shutdown_grace", "err", derr)
	}
	if a.admin != nil {
		a.admin.Shutdown(sctx)
	}
	a.close()
	if keys := a.pool.LeftUndos(); len(keys) > 0 {
		a.log.Warn("undos of partial acquisitions did not run within shutdown_grace: these locks stay on their masters until their TTL",
			"count", len(keys), "undos", summarize(keys, 20))
		if err == nil {
			err = fmt.Errorf("%w: %d (see the log)", ErrUndosPending, len(keys))
		}
	}
	a.log.Info("stopped")
	return err
}

// hold is how long a master that may have lost writes stays out, and how
// long the upgrade's old Redis must go without direct clients.
func (a *App) hold() time.Duration {
	return a.cfg.MaxTTL + a.cfg.Timing().Drift(a.cfg.MaxTTL)
}

// summarize lists the first n of items and how many more there are.
func summarize(items []string, n int) string {
	if len(items) <= n {
		return strings.Join(items, "; ")
	}
	return strings.Join(items[:n], "; ") + fmt.Sprintf("; and %d more", len(items)-n)
}

// close releases what New started, in reverse order.
func (a *App) close() {
	if a.ln != nil {
		a.ln.Close() // also after Serve: closing twice is harmless
	}
	if a.adminLn != nil {
		a.adminLn.Close()
	}
	if a.pool != nil {
		a.pool.Close()
	}
	if a.demo != nil {
		a.demo.Close()
	}
}

// backendsOf adapts the netio pool to what the proxy needs (checked at
// compile time).
type backendsOf struct{ *netio.Pool }

var _ proxy.Backends = backendsOf{}

func (b backendsOf) Veto() (netio.Health, bool) { return b.Pool.VetoHealth() }

func (b backendsOf) Send(node int, cmd []byte, sc *resp.Script, rcv netio.Receiver, tag int, deadline time.Time, flags netio.SendFlags) {
	b.Pool.SendWith(node, cmd, sc, rcv, tag, deadline, flags)
}

// adminHandler serves /metrics, /healthz, /readyz, and /debug/pprof when
// the pprof key allows it (by default only on a loopback admin address).
func (a *App) adminHandler() http.Handler {
	mux := http.NewServeMux()
	if a.cfg.ServesPprof() {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	}
	mux.Handle("/metrics", a.metrics.Handler())
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		ready, text := readiness(a.pool.Health(), now)
		if h, ok := a.pool.VetoHealth(); ok {
			text += statusOf(h, a.hold(), now).line(a.hold()) + "\n"
			if !h.Up {
				ready = false
			}
		}
		if a.draining.Load() {
			ready, text = false, "not ready: shutting down (finishing commands in flight and their undos)\n"
		}
		if !ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprint(w, text)
	})
	return mux
}

// readiness says whether a majority of backends count, and why not: how
// many are quarantined and for how long, and what each one that does not
// count is doing.
func readiness(hs []netio.Health, now time.Time) (bool, string) {
	counting, quarantined := 0, 0
	var longest time.Duration
	for _, h := range hs {
		switch state, _ := h.State(now); state {
		case netio.StateCounting:
			counting++
		case netio.StateQuarantined:
			quarantined++
			longest = max(longest, h.QuarantinedUntil.Sub(now))
		}
	}
	need := quorum.Majority(len(hs))
	var b strings.Builder
	if counting >= need {
		fmt.Fprintf(&b, "ready: %d of %d backends count", counting, len(hs))
	} else {
		fmt.Fprintf(&b, "not ready: %d of %d backends count, %d needed; locks are refused", counting, len(hs), need)
	}
	if quarantined > 0 {
		fmt.Fprintf(&b, "; %d quarantined, the last counts in %v", quarantined, longest.Round(time.Second))
	}
	b.WriteString("\n")
	for _, h := range hs {
		name := h.Addr
		if s := h.Sentinel; s != nil {
			name = s.Name + ", master " + h.Addr
		}
		if h.Shards != nil {
			shardLines(&b, h, now)
			continue
		}
		switch state, _ := h.State(now); state {
		case netio.StateCounting:
			if s := h.Sentinel; s != nil {
				fmt.Fprintf(&b, "backend %d (%s): counts; %d of %d Sentinels name it%s\n", h.Node, name, s.Agree, s.Sentinels, switchNote(s, now))
			}
		case netio.StateQuarantined:
			fmt.Fprintf(&b, "backend %d (%s): quarantined for %v: %s%s\n", h.Node, name,
				h.QuarantinedUntil.Sub(now).Round(time.Millisecond), h.QuarantineReason, switchNote(h.Sentinel, now))
		case netio.StateUnconfirmed:
			fmt.Fprintf(&b, "backend %d (%s): not counted: no majority of its %d Sentinels confirms its master: %s\n", h.Node, name,
				h.Sentinel.Sentinels, sentinelAnswers(h.Sentinel))
		case netio.StateUnsure:
			fmt.Fprintf(&b, "backend %d (%s): %s\n", h.Node, name, unsureLine)
		default:
			fmt.Fprintf(&b, "backend %d (%s): down: %s\n", h.Node, name, h.LastError)
		}
	}
	return counting >= need, b.String()
}

// unsureLine is /readyz's word on a backend (or shard) whose continuity
// check failed: not a quarantine, and not down.
const unsureLine = "not counted: a continuity check failed; it is checked again"

// switchNote says when a Sentinel-managed backend last switched master.
func switchNote(s *netio.SentinelHealth, now time.Time) string {
	if s == nil || s.SwitchAt.IsZero() {
		return ""
	}
	return fmt.Sprintf("; Sentinel switched master %s -> %s %v ago", s.From, s.Master, now.Sub(s.SwitchAt).Round(time.Second))
}

// sentinelAnswers is what the Sentinels said in the last round, or that
// they agreed.
func sentinelAnswers(s *netio.SentinelHealth) string {
	if s.Answers != "" {
		return s.Answers
	}
	return fmt.Sprintf("%d of them answered the last round", s.Reachable)
}

// shardLines says, for a Redis Cluster backend that does not count as a
// whole, which of its shards do not count and why: its votes still count
// for the keys of the shards that do.
func shardLines(b *strings.Builder, h netio.Health, now time.Time) {
	if h.Counts(now) {
		return
	}
	if len(h.Shards) == 0 || !h.Up && h.LastError != "" && !strings.HasPrefix(h.LastError, "shard ") {
		fmt.Fprintf(b, "backend %d (%s): down: %s\n", h.Node, h.Addr, h.LastError)
	}
	for _, s := range h.Shards {
		switch state, _ := s.State(now); state {
		case netio.StateCounting:
		case netio.StateQuarantined:
			fmt.Fprintf(b, "backend %d (%s) shard %s (slots %s): quarantined for %v: %s\n", h.Node, h.Addr, s.Addr, s.Slots,
				s.QuarantinedUntil.Sub(now).Round(time.Millisecond), s.QuarantineReason)
		case netio.StateUnsure, netio.StateUnconfirmed:
			fmt.Fprintf(b, "backend %d (%s) shard %s (slots %s): %s\n", h.Node, h.Addr, s.Addr, s.Slots, unsureLine)
		default:
			fmt.Fprintf(b, "backend %d (%s) shard %s (slots %s): down: %s\n", h.Node, h.Addr, s.Addr, s.Slots, s.LastError)
		}
	}
}
