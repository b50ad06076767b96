// Package redisproc starts and controls real redis-server and
// redis-sentinel processes on free loopback ports, for the integration tests
// and the benchmark and safety harnesses.
//
// It promises: a Server started here is stopped by Stop (or Kill), which
// waits for the process to exit; Pause/Resume use SIGSTOP/SIGCONT; Restart
// brings a fresh process (a new run_id, no data unless its arguments make it
// load a file) up on the same port, with the same arguments, in the role it
// last had (a replica started with StartReplica or turned into one by Follow
// comes back following its master; after Promote, a master). A Sentinel
// (StartSentinel) runs from a configuration generated in a directory of its
// own and is stopped, and waited for, by Stop.
//
// A Group (sentinelgroup.go) is a master, its replicas and the
// redis-sentinel processes that watch them; Group.Stop ends them all. A
// Liar is a fake Sentinel that names whatever master it is told. A Clock
// (clockshift.go) moves one server's wall clock.
package redisproc

import (
	"bufio"
	"crypto/tls"
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
	"syscall"
	"time"
)

// ErrNoRedis is returned when no redis-server binary can be found.
var ErrNoRedis = errors.New("redisproc: redis-server not found (install it: apt-get install -y redis-server, or run ./test.sh)")

// Binary finds redis-server.
func Binary() (string, error) {
	if p := os.Getenv("REDIS_SERVER"); p != "" {
		return p, nil
	}
	if p, err := exec.LookPath("redis-server"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/bin/redis-server", "/usr/sbin/redis-server", "/usr/local/bin/redis-server"} {
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	return "", ErrNoRedis
}

// Server is one redis-server process.
type Server struct {
	Port  int
	Addr  string
	bin   string
	dir   string
	extra []string
	env   []string // added to the process's environment
	host  string   // the loopback address it binds ("" is 127.0.0.1)

	tls *tls.Config // set for a TLS-only server: how to reach it

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when the current process has exited
}

// FreePort returns a loopback port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Start runs redis-server on a free port with no persistence, plus extra
// arguments (e.g. "--requirepass", "x").
func Start(dir string, extra ...string) (*Server, error) {
	return startOnFreePort(func(s *Server) { s.dir, s.extra = dir, extra })
}

// startOnFreePort starts a server set up by setup on a free port, trying a
// few ports: another process may take a port between its choice and use.
func startOnFreePort(setup func(*Server)) (*Server, error) {
	bin, err := Binary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		s := &Server{Port: port, bin: bin}
		setup(s)
		s.Addr = net.JoinHostPort(s.bindHost(), strconv.Itoa(port))
		// A new server starts empty: a directory left by an earlier
		// server on this port (one parent directory serves many) may hold
		// its dump.rdb (a replica's full sync writes one), its append-only
		// files or a cluster's nodes.conf, which this one would load.
		if err := os.RemoveAll(s.Dir()); err != nil {
			return nil, fmt.Errorf("redisproc: %w", err)
		}
		if lastErr = s.start(); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

// TLSFiles are the PEM files of a TLS-only server.
type TLSFiles struct {
	Cert, Key, CA string
	Client        *tls.Config // how this package's own Ping reaches it
}

// StartTLS runs redis-server serving only TLS (no plain port), not
// requiring client certificates, plus extra arguments.
func StartTLS(dir string, files TLSFiles, extra ...string) (*Server, error) {
	return startOnFreePort(func(s *Server) {
		s.dir, s.tls = dir, files.Client
		s.extra = append([]string{"--tls-cert-file", files.Cert, "--tls-key-file", files.Key,
			"--tls-ca-cert-file", files.CA, "--tls-auth-clients", "no"}, extra...)
	})
}

// StartReplica runs redis-server on a free port as a replica of the master
// at masterAddr (host:port), plus extra arguments.
func StartReplica(dir, masterAddr string, extra ...string) (*Server, error) {
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return nil, fmt.Errorf("redisproc: master address: %w", err)
	}
	return Start(dir, append([]string{"--replicaof", host, port}, extra...)...)
}

// Promote makes the server a master (REPLICAOF NO ONE), as a failover
// does; it keeps what it had replicated so far. A later Restart starts it
// as a master.
func (s *Server) Promote() error {
	if err := s.doOK("REPLICAOF", "NO", "ONE"); err != nil {
		return err
	}
	s.mu.Lock()
	s.extra = withoutReplicaOf(s.extra)
	s.mu.Unlock()
	return nil
}

// Follow makes the server a replica of the master at masterAddr (REPLICAOF
// host port): it drops its data and synchronises from that master. A later
// Restart starts it as that master's replica.
func (s *Server) Follow(masterAddr string) error {
	host, port, err := net.SplitHostPort(masterAddr)
	if err != nil {
		return fmt.Errorf("redisproc: master address: %w", err)
	}
	if err := s.doOK("REPLICAOF", host, port); err != nil {
		return err
	}
	s.mu.Lock()
	s.extra = append([]string{"--replicaof", host, port}, withoutReplicaOf(s.extra)...)
	s.mu.Unlock()
	return nil
}

// doOK runs a command that must answer +OK (REPLICAOF of the master a
// server already follows answers "OK Already connected to specified
// master").
func (s *Server) doOK(args ...string) error {
	r, err := s.Do(args...)
	if err != nil {
		return fmt.Errorf("redisproc: %s on %s: %w", strings.Join(args, " "), s.Addr, err)
	}
	if r != "OK" && !strings.HasPrefix(r, "OK ") {
		return fmt.Errorf("redisproc: %s on %s answered %q", strings.Join(args, " "), s.Addr, r)
	}
	return nil
}

// withoutReplicaOf returns args without any "--replicaof host port".
func withoutReplicaOf(args []string) []string {
	var out []string
	for i := 0; i < len(args); i++ {
		if args[i] == "--replicaof" && i+2 < len(args) {
			i += 2
			continue
		}
		out = append(out, args[i])
	}
	return out
}

// StartN starts n servers.
func StartN(dir string, n int, extra ...string) ([]*Server, error) {
	var out []*Server
	for i := 0; i < n; i++ {
		s, err := Start(dir, extra...)
		if err != nil {
			for _, s := range out {
				s.Stop()
			}
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// Dir is the server's working directory: its log, and any file it
// persists to (an append-only file's directory, appendonlydir, with
// --appendonly yes). A restart on the same port uses it again.
func (s *Server) Dir() string { return filepath.Join(s.dir, "redis-"+strconv.Itoa(s.Port)) }

func (s *Server) start() error {
	wd := s.Dir()
	if err := os.MkdirAll(wd, 0o755); err != nil {
		return err
	}
	portArgs := []string{"--port", strconv.Itoa(s.Port)}
	if s.tls != nil {
		portArgs = []string{"--port", "0", "--tls-port", strconv.Itoa(s.Port)}
	}
	s.mu.Lock()
	extra := append([]string(nil), s.extra...)
	s.mu.Unlock()
	args := append(append(portArgs,
		"--bind", s.bindHost(), "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--dir", wd, "--logfile", filepath.Join(wd, "redis.log"),
		"--protected-mode", "no",
	), extra...)
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout, cmd.Stderr = nil, nil
	if len(s.env) > 0 {
		cmd.Env = append(os.Environ(), s.env...)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("redisproc: start %s: %w", s.bin, err)
	}
	done := make(chan struct{})
	go func() { // owned by the Server: ends when the process exits, which Stop waits for
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
			return fmt.Errorf("redisproc: redis-server on port %d exited at start; see %s", s.Port, filepath.Join(wd, "redis.log"))
		default:
		}
		if s.Ping() == nil {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	s.Kill()
	return fmt.Errorf("redisproc: redis-server on port %d did not answer PING in 10s", s.Port)
}

// bindHost is the address the server binds.
func (s *Server) bindHost() string {
	if s.host == "" {
		return "127.0.0.1"
	}
	return s.host
}

// Ping sends PING on a fresh connection (raw RESP; no client library).
func (s *Server) Ping() error {
	r, err := s.Do("PING")
	if err != nil {
		return err
	}
	if r != "PONG" && !strings.HasPrefix(r, "NOAUTH") {
		return fmt.Errorf("redisproc: PING answered %q", r)
	}
	return nil
}

// Do runs one command on a fresh connection and returns the first line of
// the reply without its type byte (enough for PING, DEBUG, CONFIG SET).
func (s *Server) Do(args ...string) (string, error) {
	c, err := s.send(2*time.Second, args...)
	if err != nil {
		return "", err
	}
	defer c.Close()
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(line[1:], "\r\n"), nil
}

// send writes one command on a fresh connection, whose deadline is d from
// now; the caller reads the reply and closes it.
func (s *Server) send(d time.Duration, args ...string) (net.Conn, error) {
	var c net.Conn
	var err error
	if s.tls != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", s.Addr, s.tls)
	} else {
		c, err = net.DialTimeout("tcp", s.Addr, time.Second)
	}
	if err != nil {
		return nil, err
	}
	c.SetDeadline(time.Now().Add(d))
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Info returns the text of INFO section, read whole.
func (s *Server) Info(section string) (string, error) {
	c, err := net.DialTimeout("tcp", s.Addr, time.Second)
	if s.tls != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", s.Addr, s.tls)
	}
	if err != nil {
		return "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(c, "*2\r\n$4\r\nINFO\r\n$%d\r\n%s\r\n", len(section), section); err != nil {
		return "", err
	}
	br := bufio.NewReader(c)
	line, err := br.ReadString('\n')
	if err != nil {
		return "", err
	}
	if !strings.HasPrefix(line, "$") {
		return "", fmt.Errorf("redisproc: INFO %s: %s", section, strings.TrimSpace(line))
	}
	n, err := strconv.Atoi(strings.TrimSpace(line[1:]))
	if err != nil {
		return "", fmt.Errorf("redisproc: INFO %s: %w", section, err)
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(br, buf); err != nil {
		return "", err
	}
	return string(buf), nil
}

func (s *Server) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redisproc: not running")
	}
	return s.cmd.Process.Signal(sig)
}

// Pause stops the process (SIGSTOP): it keeps its sockets but answers nothing.
func (s *Server) Pause() error { return s.signal(syscall.SIGSTOP) }

// Resume continues a paused process (SIGCONT).
func (s *Server) Resume() error { return s.signal(syscall.SIGCONT) }

// Kill ends the process with SIGKILL (no shutdown, like a crash) and waits.
func (s *Server) Kill() {
	s.signal(syscall.SIGCONT)
	s.signal(syscall.SIGKILL)
	s.wait()
}

// Stop ends the process and waits for it.
func (s *Server) Stop() { s.Kill() }

func (s *Server) wait() {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Restart kills the process and starts a fresh one on the same port: it has
// a new run_id and has forgotten every key.
func (s *Server) Restart() error {
	s.Kill()
	var err error
	for i := 0; i < 50; i++ { // the port may take a moment to be free again
		if err = s.start(); err == nil {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return err
}

// Running reports whether the process is alive.
func (s *Server) Running() bool {
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done == nil {
		return false
	}
	select {
	case <-done:
		return false
	default:
		return true
	}
}
