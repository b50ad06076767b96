package redisproc

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ErrNoSentinel is returned when no redis-sentinel binary can be found.
var ErrNoSentinel = errors.New("redisproc: redis-sentinel not found (install it: apt-get install -y redis-sentinel, or run ./test.sh)")

// SentinelBinary finds redis-sentinel.
func SentinelBinary() (string, error) {
	if p := os.Getenv("REDIS_SENTINEL"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("redis-sentinel"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-sentinel", "/usr/sbin/redis-sentinel", "/usr/local/bin/redis-sentinel"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", ErrNoSentinel
}

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

// Sentinel is one redis-sentinel process, started from a configuration
// generated in a directory of its own (Sentinel rewrites it as it learns
// replicas, other Sentinels and failovers).
type Sentinel struct {
	Port int
	Addr string
	Conf string // the configuration file

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartSentinel runs redis-sentinel on a free loopback port, watching the
// configured masters, and waits until it answers PING.
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
		s := &Sentinel{Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port)}
		if lastErr = s.start(bin, dir, cfg); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func (s *Sentinel) start(bin, dir string, cfg SentinelConfig) error {
	wd := filepath.Join(dir, "sentinel-"+strconv.Itoa(s.Port))
	if err := os.MkdirAll(wd, 0o755); err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "port %d\nbind 127.0.0.1\nprotected-mode no\ndaemonize no\ndir %s\nlogfile %s\n",
		s.Port, wd, filepath.Join(wd, "sentinel.log"))
	for _, m := range cfg.Monitors {
		host, port, err := net.SplitHostPort(m.Addr)
		if err != nil {
			return fmt.Errorf("redisproc: master address of %s: %w", m.Name, err)
		}
		q := max(m.Quorum, 1)
		fmt.Fprintf(&b, "sentinel monitor %s %s %s %d\n", m.Name, host, port, q)
		fmt.Fprintf(&b, "sentinel down-after-milliseconds %s %d\n", m.Name, cfg.DownAfter.Milliseconds())
		fmt.Fprintf(&b, "sentinel failover-timeout %s %d\n", m.Name, cfg.FailoverTimeout.Milliseconds())
		fmt.Fprintf(&b, "sentinel parallel-syncs %s 1\n", m.Name)
	}
	s.Conf = filepath.Join(wd, "sentinel.conf")
	if err := os.WriteFile(s.Conf, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	cmd := exec.Command(bin, s.Conf)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisproc: start %s: %w", bin, err)
	}
	done := make(chan struct{})
	go func() { // owned by the Sentinel: ends when the process exits, which Stop waits for
		cmd.Wait()
		close(done)
	}()
	s.mu.Lock()
	s.cmd, s.done = cmd, done
	s.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-done:
			return fmt.Errorf("redisproc: redis-sentinel on port %d exited at start; see %s", s.Port, filepath.Join(wd, "sentinel.log"))
		default:
		}
		if r, err := s.Do("PING"); err == nil && r == "PONG" {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Stop()
	return fmt.Errorf("redisproc: redis-sentinel on port %d did not answer PING in 10s", s.Port)
}

// Do runs one command on a fresh connection and returns the first line of
// the reply without its type byte ("OK", or an error's text).
func (s *Sentinel) Do(args ...string) (string, error) {
	line, _, err := s.exchange(args)
	return line, err
}

// Failover forces a failover of the master group name (SENTINEL FAILOVER):
// Sentinel promotes one of its replicas without asking the others.
func (s *Sentinel) Failover(name string) error {
	r, err := s.Do("SENTINEL", "FAILOVER", name)
	if err != nil {
		return fmt.Errorf("redisproc: SENTINEL FAILOVER %s on %s: %w", name, s.Addr, err)
	}
	if r != "OK" {
		return fmt.Errorf("redisproc: SENTINEL FAILOVER %s on %s answered %q", name, s.Addr, r)
	}
	return nil
}

// MasterAddr is the address this Sentinel gives for the master of group
// name (SENTINEL GET-MASTER-ADDR-BY-NAME).
func (s *Sentinel) MasterAddr(name string) (string, error) {
	line, items, err := s.exchange([]string{"SENTINEL", "GET-MASTER-ADDR-BY-NAME", name})
	if err != nil {
		return "", fmt.Errorf("redisproc: SENTINEL GET-MASTER-ADDR-BY-NAME %s on %s: %w", name, s.Addr, err)
	}
	if len(items) != 2 {
		return "", fmt.Errorf("redisproc: SENTINEL GET-MASTER-ADDR-BY-NAME %s on %s answered %q", name, s.Addr, line)
	}
	return net.JoinHostPort(items[0], items[1]), nil
}

// exchange sends one command and reads its reply: the first line, and the
// bulk strings of an array reply (one level deep).
func (s *Sentinel) exchange(args []string) (string, []string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if err != nil {
		return "", nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return "", nil, err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if len(line) == 0 {
		return "", nil, errors.New("redisproc: empty reply")
	}
	if line[0] != '*' {
		return line[1:], nil, nil
	}
	n, err := strconv.Atoi(line[1:])
	if err != nil {
		return line, nil, fmt.Errorf("redisproc: array reply %q: %w", line, err)
	}
	var items []string
	for i := 0; i < n; i++ {
		hdr, err := br.ReadString('\n')
		if err != nil {
			return line, nil, err
		}
		hdr = strings.TrimRight(hdr, "\r\n")
		if len(hdr) == 0 || hdr[0] != '$' {
			items = append(items, strings.TrimPrefix(hdr, "+"))
			continue
		}
		size, err := strconv.Atoi(hdr[1:])
		if err != nil || size < 0 {
			items = append(items, "")
			continue
		}
		buf := make([]byte, size+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return line, nil, err
		}
		items = append(items, string(buf[:size]))
	}
	return line, items, nil
}

// Stop ends the process (SIGKILL) and waits for it. It is safe to call
// more than once.
func (s *Sentinel) Stop() {
	s.mu.Lock()
	cmd, done := s.cmd, s.done
	s.mu.Unlock()
	if cmd == nil || cmd.Process == nil {
		return
	}
	cmd.Process.Kill()
	<-done
}
