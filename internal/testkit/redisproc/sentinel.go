package redisproc

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// A Sentinel watching several master groups at once, for the safety
// harness (a Group, sentinelgroup.go, is one master with its own
// Sentinels).

// Monitor is one master group a Sentinel watches.
type Monitor struct {
	Name   string // the group's name (SENTINEL FAILOVER name)
	Addr   string // the master's host:port
	Quorum int    // Sentinels that must agree the master is down (default 1)
}

// SentinelConfig is what a Sentinel is started with.
type SentinelConfig struct {
	Monitors []Monitor
	// DownAfter is down-after-milliseconds (default 10s: only a forced
	// failover, SENTINEL FAILOVER, moves a master that keeps answering).
	DownAfter time.Duration
	// FailoverTimeout is failover-timeout (default 60s).
	FailoverTimeout time.Duration
}

// StartSentinel runs redis-sentinel on a free loopback port, watching the
// configured masters, from a configuration generated in a directory of its
// own (Sentinel rewrites it as it learns replicas, other Sentinels and
// failovers), and waits until it answers PING.
func StartSentinel(dir string, cfg SentinelConfig) (*Sentinel, error) {
	bin, err := SentinelBinary()
	if err != nil {
		return nil, err
	}
	if cfg.DownAfter <= 0 {
		cfg.DownAfter = 10 * time.Second
	}
	if cfg.FailoverTimeout <= 0 {
		cfg.FailoverTimeout = time.Minute
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		wd := filepath.Join(dir, "sentinel-"+strconv.Itoa(port))
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return nil, fmt.Errorf("redisproc: %w", err)
		}
		s := &Sentinel{Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port),
			conf: filepath.Join(wd, "sentinel.conf"), log: filepath.Join(wd, "sentinel.log")}
		var b strings.Builder
		fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\nlogfile %s\n", port, wd, s.log)
		for _, m := range cfg.Monitors {
			host, mport, err := net.SplitHostPort(m.Addr)
			if err != nil {
				return nil, fmt.Errorf("redisproc: master address of %s: %w", m.Name, err)
			}
			fmt.Fprintf(&b, "sentinel monitor %s %s %s %d\n", m.Name, host, mport, max(m.Quorum, 1))
			fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", m.Name, cfg.DownAfter.Milliseconds())
			fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", m.Name, cfg.FailoverTimeout.Milliseconds())
			fmt.Fprintf(&b, "sentinel parallel-syncs %s 1\n", m.Name)
		}
		if err := os.WriteFile(s.conf, []byte(b.String()), 0o644); err != nil {
			return nil, fmt.Errorf("redisproc: %w", err)
		}
		if lastErr = s.start(bin); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// Failover forces a failover of the master group name (SENTINEL FAILOVER):
// Sentinel promotes one of its replicas without asking the others.
func (s *Sentinel) Failover(name string) error {
	r, err := s.Do("SENTINEL", "FAILOVER", name)
	if err != nil {
		return fmt.Errorf("redisproc: SENTINEL FAILOVER %s on %s: %w", name, s.Addr, err)
	}
	if r != "OK" {
		return fmt.Errorf("redisproc: SENTINEL FAILOVER %s on %s answered %v", name, s.Addr, r)
	}
	return nil
}
