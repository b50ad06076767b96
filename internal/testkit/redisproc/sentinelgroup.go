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

// GroupOptions shape a Sentinel-managed group. Zero values take the
// defaults written on each field: short timings, so that failures are
// noticed and failovers end within a second or two.
type GroupOptions struct {
	Replicas        int           // replicas of the first master (default 1)
	Sentinels       int           // Sentinels watching it (default 3)
	Quorum          int           // Sentinels that must agree the master is down (default a majority)
	DownAfter       time.Duration // down-after-milliseconds (default 300ms)
	FailoverTimeout time.Duration // failover-timeout (default 2s)
	ServerArgs      []string      // more redis-server arguments for the master and replicas
	// SentinelPassword makes the Sentinels require it (requirepass), of
	// their clients and of each other.
	SentinelPassword string
	// SentinelTLS serves the Sentinels on a TLS port too (Sentinel.TLSAddr),
	// with these files; they still speak plain text among themselves and to
	// the servers.
	SentinelTLS *TLSFiles
}

// Group is a master, its replicas and the Sentinels that watch them, on
// free loopback ports. Its servers change roles as the Sentinels fail over;
// Current tells which one is the master now.
type Group struct {
	Name      string
	Servers   []*Server // the first master, then its replicas
	Sentinels []*Sentinel
	opt       GroupOptions
}

// Sentinel is one redis-sentinel process.
type Sentinel struct {
	Port    int
	Addr    string
	TLSAddr string // set when the group serves its Sentinels over TLS too
	conf    string
	log     string
	tls     *tls.Config
	pass    string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

// StartGroup starts a master named name, its replicas and its Sentinels,
// and waits until every Sentinel knows the master, every replica and the
// other Sentinels (a failover needs all three).
func StartGroup(dir, name string, opt GroupOptions) (*Group, error) {
	if opt.Replicas == 0 {
		opt.Replicas = 1
	}
	if opt.Sentinels == 0 {
		opt.Sentinels = 3
	}
	if opt.Quorum == 0 {
		opt.Quorum = opt.Sentinels/2 + 1
	}
	if opt.DownAfter == 0 {
		opt.DownAfter = 300 * time.Millisecond
	}
	if opt.FailoverTimeout == 0 {
		opt.FailoverTimeout = 2 * time.Second
	}
	bin, err := SentinelBinary()
	if err != nil {
		return nil, err
	}
	g := &Group{Name: name, opt: opt}
	quick := append([]string{"--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"}, opt.ServerArgs...)
	m, err := Start(dir, quick...)
	if err != nil {
		return nil, err
	}
	g.Servers = append(g.Servers, m)
	for i := 0; i < opt.Replicas; i++ {
		r, err := StartReplica(dir, m.Addr, quick...)
		if err != nil {
			g.Stop()
			return nil, err
		}
		g.Servers = append(g.Servers, r)
	}
	for i := 0; i < opt.Sentinels; i++ {
		s, err := g.startSentinel(dir, bin, m)
		if err != nil {
			g.Stop()
			return nil, err
		}
		g.Sentinels = append(g.Sentinels, s)
	}
	if err := g.waitReady(15 * time.Second); err != nil {
		g.Stop()
		return nil, err
	}
	return g, nil
}

func (g *Group) startSentinel(dir, bin string, master *Server) (*Sentinel, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := FreePort()
		if err != nil {
			return nil, err
		}
		wd := filepath.Join(dir, "sentinel-"+strconv.Itoa(port))
		if err := os.MkdirAll(wd, 0o755); err != nil {
			return nil, err
		}
		s := &Sentinel{Port: port, Addr: fmt.Sprintf("127.0.0.1:%d", port), conf: filepath.Join(wd, "sentinel.conf"), log: filepath.Join(wd, "sentinel.log"),
			pass: g.opt.SentinelPassword}
		_, mport, _ := net.SplitHostPort(master.Addr)
		conf := []string{
			"port " + strconv.Itoa(port),
			"bind 127.0.0.1",
			"daemonize no",
			"protected-mode no",
			"dir " + wd,
			"logfile " + s.log,
			fmt.Sprintf("sentinel monitor %s 127.0.0.1 %s %d", g.Name, mport, g.opt.Quorum),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", g.Name, g.opt.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s %d", g.Name, g.opt.FailoverTimeout.Milliseconds()),
			fmt.Sprintf("sentinel parallel-syncs %s 1", g.Name),
		}
		if p := g.opt.SentinelPassword; p != "" {
			conf = append(conf, "requirepass "+p, "sentinel sentinel-pass "+p)
		}
		if f := g.opt.SentinelTLS; f != nil {
			tport, err := FreePort()
			if err != nil {
				return nil, err
			}
			s.TLSAddr, s.tls = fmt.Sprintf("127.0.0.1:%d", tport), f.Client
			conf = append(conf, "tls-port "+strconv.Itoa(tport), "tls-cert-file "+f.Cert, "tls-key-file "+f.Key,
				"tls-ca-cert-file "+f.CA, "tls-auth-clients no")
		}
		if err := os.WriteFile(s.conf, []byte(strings.Join(conf, "\n")+"\n"), 0o644); err != nil {
			return nil, err
		}
		if lastErr = s.start(bin); lastErr == nil {
			return s, nil
		}
	}
	return nil, lastErr
}

func (s *Sentinel) start(bin string) error {
	cmd := exec.Command(bin, s.conf)
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
			return fmt.Errorf("redisproc: redis-sentinel on port %d exited at start; see %s", s.Port, s.log)
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

// Do runs one command on the Sentinel's plain port (after AUTH when it
// requires a password) and returns its reply: a string for a simple, bulk
// or error reply ("" for nil), or a []any for an array.
func (s *Sentinel) Do(args ...string) (any, error) {
	if s.pass == "" {
		return DoReply(s.Addr, nil, args...)
	}
	return doReplies(s.Addr, nil, [][]string{{"AUTH", s.pass}, args})
}

// Stop ends the Sentinel (SIGKILL) and waits for it.
func (s *Sentinel) Stop() {
	s.signal(syscall.SIGCONT)
	s.signal(syscall.SIGKILL)
	s.mu.Lock()
	done := s.done
	s.mu.Unlock()
	if done != nil {
		<-done
	}
}

// Pause stops the Sentinel (SIGSTOP): it keeps its sockets but answers
// nothing and takes no part in failovers. Resume continues it.
func (s *Sentinel) Pause() error  { return s.signal(syscall.SIGSTOP) }
func (s *Sentinel) Resume() error { return s.signal(syscall.SIGCONT) }

func (s *Sentinel) signal(sig syscall.Signal) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cmd == nil || s.cmd.Process == nil {
		return errors.New("redisproc: not running")
	}
	return s.cmd.Process.Signal(sig)
}

// MasterAddr is the master this Sentinel names (SENTINEL
// get-master-addr-by-name).
func (s *Sentinel) MasterAddr(name string) (string, error) {
	r, err := s.Do("SENTINEL", "get-master-addr-by-name", name)
	if err != nil {
		return "", err
	}
	a, ok := r.([]any)
	if !ok || len(a) != 2 {
		return "", fmt.Errorf("redisproc: SENTINEL get-master-addr-by-name %s on %s: %v", name, s.Addr, r)
	}
	return net.JoinHostPort(fmt.Sprint(a[0]), fmt.Sprint(a[1])), nil
}

// Entry is the group as a backend entry: sentinel://HOST:PORT,.../NAME.
func (g *Group) Entry() string {
	var addrs []string
	for _, s := range g.Sentinels {
		addrs = append(addrs, s.Addr)
	}
	return "sentinel://" + strings.Join(addrs, ",") + "/" + g.Name
}

// TLSEntry is Entry with the Sentinels' TLS ports.
func (g *Group) TLSEntry() string {
	var addrs []string
	for _, s := range g.Sentinels {
		addrs = append(addrs, s.TLSAddr)
	}
	return "sentinel://" + strings.Join(addrs, ",") + "/" + g.Name
}

// Server is the group's server at addr, or nil.
func (g *Group) Server(addr string) *Server {
	for _, s := range g.Servers {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// Current is the master every running Sentinel names, or an error when
// they do not all name the same one.
func (g *Group) Current() (*Server, error) {
	seen := ""
	for _, s := range g.Sentinels {
		if !s.running() {
			continue
		}
		a, err := s.MasterAddr(g.Name)
		if err != nil {
			return nil, err
		}
		if seen != "" && a != seen {
			return nil, fmt.Errorf("redisproc: the Sentinels of %s disagree: %s and %s", g.Name, seen, a)
		}
		seen = a
	}
	if srv := g.Server(seen); srv != nil {
		return srv, nil
	}
	return nil, fmt.Errorf("redisproc: the Sentinels of %s name %q, none of its servers", g.Name, seen)
}

// Failover asks one Sentinel to fail over (SENTINEL FAILOVER) and waits
// until every running Sentinel names another master and that server says
// it is a master (see WaitSwitch). It returns the old and the new master.
// A Sentinel refuses while it knows no good replica: Failover asks again
// for up to 15 s.
func (g *Group) Failover() (from, to *Server, err error) {
	from, err = g.Current()
	if err != nil {
		return nil, nil, err
	}
	var r any
	for i := 0; i < 300; i++ {
		for _, s := range g.Sentinels {
			if !s.running() {
				continue
			}
			if r, err = s.Do("SENTINEL", "FAILOVER", g.Name); err == nil && r == "OK" {
				break
			}
		}
		if r == "OK" {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r != "OK" {
		return from, nil, fmt.Errorf("redisproc: SENTINEL FAILOVER %s: %v %v", g.Name, r, err)
	}
	to, err = g.WaitSwitch(from, 15*time.Second)
	return from, to, err
}

// KillMaster kills the current master with SIGKILL, as a crash, and
// returns it; the Sentinels then fail over by themselves (WaitSwitch).
func (g *Group) KillMaster() (*Server, error) {
	m, err := g.Current()
	if err != nil {
		return nil, err
	}
	m.Kill()
	return m, nil
}

// WaitSwitch waits until every running Sentinel names a master other than
// from and that server says it is a master, and returns the new master.
// The old master, when it runs, may still say it is a master for seconds:
// the Sentinels reconfigure it as a replica later (WaitFollowing).
func (g *Group) WaitSwitch(from *Server, within time.Duration) (*Server, error) {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		to, err := g.Current()
		switch {
		case err != nil:
			last = err
		case to == from:
			last = fmt.Errorf("redisproc: the Sentinels of %s still name %s", g.Name, from.Addr)
		case !hasRole(to, "master"):
			last = fmt.Errorf("redisproc: %s, named by the Sentinels of %s, is not a master yet", to.Addr, g.Name)
		default:
			return to, g.waitReplicasKnown(deadline)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil, last
}

// WaitFollowing waits until s is a replica of m with its link up: after a
// failover, until the Sentinels have reconfigured the old master.
func WaitFollowing(s, m *Server, within time.Duration) error {
	deadline := time.Now().Add(within)
	for !following(s, m) {
		if time.Now().After(deadline) {
			return fmt.Errorf("redisproc: %s does not follow %s", s.Addr, m.Addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Ready reports, with why not, whether the group can fail over again at
// once: every running Sentinel names the same master, which says it is a
// master; every other running server follows it with its link up; and
// every Sentinel counts them as replicas in good standing and is in no
// failover of the group.
func (g *Group) Ready() error {
	m, err := g.Current()
	if err != nil {
		return err
	}
	if !hasRole(m, "master") {
		return fmt.Errorf("redisproc: %s, named by the Sentinels of %s, is not a master", m.Addr, g.Name)
	}
	for _, s := range g.Servers {
		if s != m && s.Running() && !following(s, m) {
			return fmt.Errorf("redisproc: %s does not follow %s's master %s with its link up", s.Addr, g.Name, m.Addr)
		}
	}
	for _, s := range g.Sentinels {
		if !s.running() {
			continue
		}
		r, err := s.Do("SENTINEL", "master", g.Name)
		if err != nil {
			return err
		}
		if f := fields(r)["flags"]; f != "master" {
			return fmt.Errorf("redisproc: Sentinel %s flags %s's master %q", s.Addr, g.Name, f)
		}
		r, err = s.Do("SENTINEL", "replicas", g.Name)
		if err != nil {
			return err
		}
		good := map[string]bool{}
		if a, ok := r.([]any); ok {
			for _, rep := range a {
				f := fields(rep)
				good[net.JoinHostPort(f["ip"], f["port"])] = f["flags"] == "slave"
			}
		}
		for _, srv := range g.Servers {
			if srv != m && srv.Running() && !good[srv.Addr] {
				return fmt.Errorf("redisproc: Sentinel %s does not count %s as a replica of %s in good standing", s.Addr, srv.Addr, g.Name)
			}
		}
	}
	return nil
}

// hasRole reports whether INFO replication says role:role.
func hasRole(s *Server, role string) bool {
	info, err := s.Info("replication")
	return err == nil && strings.Contains(info, "role:"+role+"\r\n")
}

// following reports whether s is a replica of m with its link up.
func following(s, m *Server) bool {
	info, err := s.Info("replication")
	_, port, _ := net.SplitHostPort(m.Addr)
	return err == nil && strings.Contains(info, "master_port:"+port+"\r\n") && strings.Contains(info, "master_link_status:up")
}

// waitReady waits until every Sentinel knows the master, every other
// server as its replica, and every other Sentinel.
func (g *Group) waitReady(within time.Duration) error {
	deadline := time.Now().Add(within)
	if err := g.waitReplicasKnown(deadline); err != nil {
		return err
	}
	for _, s := range g.Sentinels {
		for {
			r, err := s.Do("SENTINEL", "sentinels", g.Name)
			if a, ok := r.([]any); err == nil && ok && len(a) == len(g.Sentinels)-1 {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("redisproc: Sentinel %s does not know the other Sentinels of %s: %v %v", s.Addr, g.Name, r, err)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// waitReplicasKnown waits until every running Sentinel lists every other
// running server of the group as a replica in good standing, so that a
// failover can choose one.
func (g *Group) waitReplicasKnown(deadline time.Time) error {
	m, err := g.Current()
	for err != nil && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		m, err = g.Current()
	}
	if err != nil {
		return err
	}
	want := 0
	for _, s := range g.Servers {
		if s != m && s.Running() {
			want++
		}
	}
	for _, s := range g.Sentinels {
		if !s.running() {
			continue
		}
		for {
			r, err := s.Do("SENTINEL", "replicas", g.Name)
			good := 0
			if a, ok := r.([]any); err == nil && ok {
				for _, rep := range a {
					f := fields(rep)
					if f["flags"] == "slave" {
						good++
					}
				}
			}
			if good >= want {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("redisproc: Sentinel %s knows %d good replicas of %s, want %d", s.Addr, good, g.Name, want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

// fields reads a flat name/value array reply into a map.
func fields(v any) map[string]string {
	out := map[string]string{}
	a, _ := v.([]any)
	for i := 0; i+1 < len(a); i += 2 {
		out[fmt.Sprint(a[i])] = fmt.Sprint(a[i+1])
	}
	return out
}

func (s *Sentinel) running() bool {
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

// Stop ends every process of the group and waits for them.
func (g *Group) Stop() {
	for _, s := range g.Sentinels {
		s.Stop()
	}
	for _, s := range g.Servers {
		s.Stop()
	}
}

// DoReply runs one command at addr (over TLS when cfg is set) on a fresh
// connection and returns its reply: a string for a simple, bulk or error
// reply ("" for nil; an error reply keeps its text, such as "ERR ..."), an
// int64 for an integer, a []any for an array.
func DoReply(addr string, cfg *tls.Config, args ...string) (any, error) {
	return doReplies(addr, cfg, [][]string{args})
}

// doReplies sends commands on one connection and returns the last reply.
func doReplies(addr string, cfg *tls.Config, cmds [][]string) (any, error) {
	var c net.Conn
	var err error
	if cfg != nil {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp", addr, cfg)
	} else {
		c, err = net.DialTimeout("tcp", addr, time.Second)
	}
	if err != nil {
		return nil, err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(2 * time.Second))
	var b strings.Builder
	for _, args := range cmds {
		fmt.Fprintf(&b, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	if _, err := c.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	var last any
	for range cmds {
		if last, err = readReply(br); err != nil {
			return nil, err
		}
	}
	return last, nil
}

// readReply reads one RESP2 reply.
func readReply(br *bufio.Reader) (any, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return nil, errors.New("redisproc: empty reply line")
	}
	switch line[0] {
	case '+', '-':
		return line[1:], nil
	case ':':
		return strconv.ParseInt(line[1:], 10, 64)
	case '$':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return "", err
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(line[1:])
		if err != nil || n < 0 {
			return []any(nil), err
		}
		out := make([]any, 0, n)
		for i := 0; i < n; i++ {
			v, err := readReply(br)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("redisproc: unexpected reply %q", line)
}

// Liar is a Sentinel that names whatever master it is told, as a Sentinel
// that lies or lags would: it answers SENTINEL get-master-addr-by-name with
// that address (and SENTINEL MASTER with it, config epoch 0), takes
// subscriptions (and never publishes), and says OK to anything else.
type Liar struct {
	ln    net.Listener
	mu    sync.Mutex
	says  string
	conns []net.Conn
	wg    sync.WaitGroup
}

// StartLiar serves a Liar on a free loopback port, naming says.
func StartLiar(says string) (*Liar, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	f := &Liar{ln: ln, says: says}
	f.wg.Add(1)
	go func() { // owned by the Liar: Close stops it and waits
		defer f.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, c)
			f.mu.Unlock()
			f.wg.Add(1)
			go f.serve(c)
		}
	}()
	return f, nil
}

// Addr is where the Liar listens.
func (f *Liar) Addr() string { return f.ln.Addr().String() }

// Say makes it name another master from now on.
func (f *Liar) Say(addr string) {
	f.mu.Lock()
	f.says = addr
	f.mu.Unlock()
}

func (f *Liar) serve(c net.Conn) {
	defer f.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		v, err := readReply(br)
		args, ok := v.([]any)
		if err != nil || !ok || len(args) == 0 {
			return
		}
		var out string
		switch strings.ToUpper(fmt.Sprint(args[0])) {
		case "SENTINEL":
			f.mu.Lock()
			host, port, _ := net.SplitHostPort(f.says)
			f.mu.Unlock()
			out = fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n", len(host), host, len(port), port)
			if len(args) > 1 && strings.EqualFold(fmt.Sprint(args[1]), "MASTER") {
				// The fields a proxy reads, the config epoch at 0.
				out = "*8\r\n"
				for _, f := range []string{"name", fmt.Sprint(args[len(args)-1]), "ip", host, "port", port, "config-epoch", "0"} {
					out += fmt.Sprintf("$%d\r\n%s\r\n", len(f), f)
				}
			}
		case "SUBSCRIBE":
			out = "*3\r\n$9\r\nsubscribe\r\n$14\r\n+switch-master\r\n:1\r\n"
		case "PING":
			out = "+PONG\r\n"
		default:
			out = "+OK\r\n"
		}
		if _, err := io.WriteString(c, out); err != nil {
			return
		}
	}
}

// Close stops the Liar and waits for its goroutines.
func (f *Liar) Close() {
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.wg.Wait()
}
