package safety

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/config"
	"github.com/redlock-proxy/redlock-proxy/internal/faultnet"
	"github.com/redlock-proxy/redlock-proxy/internal/redisproc"
)

// ClusterConfig describes the masters and proxies of a run.
type ClusterConfig struct {
	Dir            string        // working directory for redis-server (required)
	Backends       int           // redis-server masters (default 5)
	Proxies        int           // in-process proxies over the same masters (default 2)
	Quarantine     string        // restart_quarantine of every proxy (default "run-id")
	MaxTTL         time.Duration // proxies' max_ttl (default 2s)
	BackendTimeout time.Duration // proxies' backend_timeout (default 50ms)
	Log            io.Writer     // proxies' warnings and errors (nil: discarded)
}

func (c *ClusterConfig) defaults() {
	if c.Backends <= 0 {
		c.Backends = 5
	}
	if c.Proxies <= 0 {
		c.Proxies = 2
	}
	if c.Quarantine == "" {
		c.Quarantine = "run-id"
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = 2 * time.Second
	}
	if c.BackendTimeout <= 0 {
		c.BackendTimeout = 50 * time.Millisecond
	}
}

// Cluster is N redis-server masters, a relay in front of each, and P
// proxies that reach the masters only through the relays.
type Cluster struct {
	Config  ClusterConfig
	Servers []*redisproc.Server
	Relays  []*faultnet.Relay
	Proxies []*app.App

	cancel context.CancelFunc
	done   []chan error
}

// StartCluster starts the masters, relays and proxies and waits until every
// proxy sees every master. On error everything started is stopped.
func StartCluster(cfg ClusterConfig) (c *Cluster, err error) {
	cfg.defaults()
	if cfg.Dir == "" {
		return nil, errors.New("safety: ClusterConfig.Dir is required")
	}
	c = &Cluster{Config: cfg}
	defer func() {
		if err != nil {
			c.Close()
			c = nil
		}
	}()
	c.Servers, err = redisproc.StartN(cfg.Dir, cfg.Backends)
	if err != nil {
		return nil, fmt.Errorf("safety: starting %d redis-server: %w", cfg.Backends, err)
	}
	var addrs []string
	for _, s := range c.Servers {
		r, err := faultnet.Listen(s.Addr)
		if err != nil {
			return nil, fmt.Errorf("safety: relay to %s: %w", s.Addr, err)
		}
		c.Relays = append(c.Relays, r)
		addrs = append(addrs, r.Addr())
	}
	w := cfg.Log
	if w == nil {
		w = io.Discard
	}
	ctx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	for i := 0; i < cfg.Proxies; i++ {
		pc := config.Default()
		pc.Listen = "127.0.0.1:0"
		pc.Admin = ""
		pc.Backends = addrs
		pc.BackendTimeout = cfg.BackendTimeout
		pc.MaxTTL = cfg.MaxTTL
		pc.RestartQuarantine = cfg.Quarantine
		pc.LogLevel = "warn"
		if _, err := pc.Validate(); err != nil {
			return nil, fmt.Errorf("safety: proxy config: %w", err)
		}
		log := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn})).With("proxy", i)
		a, err := app.New(pc, log)
		if err != nil {
			return nil, fmt.Errorf("safety: proxy %d: %w", i, err)
		}
		done := make(chan error, 1)
		go func() { done <- a.Run(ctx) }() // ends when Close cancels ctx
		c.Proxies = append(c.Proxies, a)
		c.done = append(c.done, done)
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	for i, a := range c.Proxies {
		if err := a.Pool().WaitUp(wctx, cfg.Backends); err != nil {
			return nil, fmt.Errorf("safety: proxy %d does not see its %d masters: %w", i, cfg.Backends, err)
		}
	}
	return c, nil
}

// Hold is how long a restarted master stays out of the proxies' quorums:
// max_ttl plus its drift.
func (c *Cluster) Hold() time.Duration { return c.Config.MaxTTL + Drift(c.Config.MaxTTL) }

// Close stops the proxies (waiting for them), the relays and the masters.
// It is safe to call on a partly started cluster and more than once.
func (c *Cluster) Close() error {
	var errs []error
	if c.cancel != nil {
		c.cancel()
		for i, d := range c.done {
			if err := <-d; err != nil {
				errs = append(errs, fmt.Errorf("proxy %d: %w", i, err))
			}
		}
		c.done = nil
	}
	for _, r := range c.Relays {
		r.Close()
	}
	for _, s := range c.Servers {
		s.Stop()
	}
	return errors.Join(errs...)
}

// restartsSeen is how many restarts of master i the proxy p has detected,
// and whether it is connected to it.
func (c *Cluster) restartsSeen(p, i int) (restarts uint64, up bool) {
	h := c.Proxies[p].Pool().Health()[i]
	return h.Restarts, h.Up
}
