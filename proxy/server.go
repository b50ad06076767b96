package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/acl"

	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Config configures the front end. Zero values mean the default written on
// the field.
type Config struct {
	Timing         quorum.Timing      // drift and minimum validity (default quorum.DefaultTiming)
	BackendTimeout time.Duration      // per-backend timeout of every command (default 50ms)
	MaxTTL         time.Duration      // longest TTL a client may ask for (default 5m)
	Limits         Limits             // input limits (see Limits)
	MaxClients     int                // connected clients (default 10000)
	IdleTimeout    time.Duration      // close a client idle this long (default 0: never)
	WriteTimeout   time.Duration      // give up on a client that does not read its replies (default 10s)
	Scripts        *classify.Registry // lock scripts: classifications, library facts, declarations (default: the facts)
	// VoteUnknownScripts runs scripts the classifier refuses (except those
	// seen writing without an expiry) on every backend and replies what a
	// majority answer (default: refuse them). Safe only for scripts that
	// keep their state in the keys they are given.
	VoteUnknownScripts bool
	Logger             *slog.Logger
	Observer           Observer
	RequirePass        string          // password of the default user (default: none)
	Users              map[string]User // more users, by name; with users and no RequirePass the default user is disabled
	CommandTimeout     time.Duration   // a command whose first byte arrived must be whole within this (default 10s)
	Version            string          // the proxy's version, for INFO
	Addr               string          // the listen address, for INFO
	// Cluster says some backend is a Redis Cluster: a script's keys must
	// share a slot, or it is refused before anything is sent, as a
	// cluster refuses it (CROSSSLOT).
	Cluster bool
}

// DefaultConfig is the front end's configuration when nothing is set: the
// one place its defaults are written (the configuration file's defaults are
// these).
func DefaultConfig() Config {
	return Config{
		Timing:         quorum.DefaultTiming(),
		BackendTimeout: quorum.DefaultNodeTimeout,
		MaxTTL:         5 * time.Minute,
		Limits:         DefaultLimits(),
		MaxClients:     10000,
		WriteTimeout:   10 * time.Second,
		CommandTimeout: 10 * time.Second,
	}
}

func (c *Config) defaults() {
	d := DefaultConfig()
	if c.Timing == (quorum.Timing{}) {
		c.Timing = d.Timing
	}
	for _, f := range []struct{ v, def *time.Duration }{
		{&c.BackendTimeout, &d.BackendTimeout}, {&c.MaxTTL, &d.MaxTTL},
		{&c.WriteTimeout, &d.WriteTimeout}, {&c.CommandTimeout, &d.CommandTimeout},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
	c.Limits.defaults()
	if c.MaxClients <= 0 {
		c.MaxClients = d.MaxClients
	}
	if c.Scripts == nil {
		c.Scripts = classify.NewRegistry()
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Version == "" {
		c.Version = "dev"
	}
}

// Server is the RESP front end: it accepts clients and runs their commands
// against the backends.
//
// cfg, be, eng, runID, started and acls are set by New and only read
// after. mu guards the listeners, the client tables (clients, byID) and
// closing: the accept loop adds a client, its goroutine removes it,
// Shutdown walks them, and CLIENT TRACKING's REDIRECT and the
// invalidations it sends (from the backends' goroutines) look a client up
// by id. Nothing else is locked while mu is held. The other fields each
// have their own lock or are atomic (stats, track, sems, semHints,
// ksCache, subs).
type Server struct {
	cfg     Config
	be      Backends
	eng     engine
	stats   stats
	runID   string
	started time.Time

	mu       sync.Mutex
	lns      []net.Listener
	clients  map[*client]struct{}
	byID     map[int64]*client // the same clients, by CLIENT ID (tracking's REDIRECT)
	closing  bool
	wg       sync.WaitGroup
	nextID   atomic.Int64
	shutdown chan struct{}
	track    tracker // client-side caching (tracking.go)
	sems     *classify.Semaphores
	semHints semHints // kind_sem.go
	ksCache  keyspaceCache
	acls     map[string]*userACL // the users' compiled rules (acl.go); none: everything allowed
	// plainTextSeen: a plain-text client on the TLS listener was logged.
	plainTextSeen atomic.Bool

	subs subscriptions // pub/sub and release notices (cmds_pubsub.go)
	// counters are the names of counters of grants seen (fenced.go).
	counters counterNames
	signals  signals // BLPOP waiters on release signals (signals.go)
}

// User is a client user: its password, and its ACL rules (nil: it may run
// every command on every key).
type User struct {
	Password string
	Rules    *acl.Rules
}

// New returns a server over the given backends.
func New(cfg Config, be Backends) *Server {
	cfg.defaults()
	var id [20]byte
	rand.Read(id[:])
	s := &Server{
		cfg: cfg, be: be, runID: hex.EncodeToString(id[:]), started: time.Now(),
		clients: map[*client]struct{}{}, byID: map[int64]*client{}, shutdown: make(chan struct{}), sems: classify.NewSemaphores(),
	}
	s.stats.obs = cfg.Observer
	s.eng = engine{
		be: be, n: be.N(), timing: cfg.Timing, timeout: cfg.BackendTimeout,
		stats: &s.stats, maxToken: cfg.Limits.MaxToken, track: &s.track,
	}
	_, s.eng.veto = be.Veto()
	s.acls = map[string]*userACL{}
	for name, u := range cfg.Users {
		if u.Rules != nil {
			s.acls[name] = compileACL(u.Rules)
		}
	}
	return s
}

// ErrServerClosed is returned by Serve after Shutdown.
var ErrServerClosed = errors.New("proxy: server closed")

// Serve accepts clients on ln until Shutdown. It always returns an error.
func (s *Server) Serve(ln net.Listener) error {
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		ln.Close()
		return ErrServerClosed
	}
	s.lns = append(s.lns, ln)
	s.mu.Unlock()
	var delay time.Duration
	for {
		nc, err := ln.Accept()
		if err != nil {
			s.mu.Lock()
			closing := s.closing
			s.mu.Unlock()
			if closing {
				return ErrServerClosed
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() || isTemporary(err) {
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				s.cfg.Logger.Warn("accept failed; retrying", "err", err, "delay", delay)
				time.Sleep(delay)
				continue
			}
			return fmt.Errorf("proxy: accept: %w", err)
		}
		delay = 0
		s.accept(nc)
	}
}

func isTemporary(err error) bool {
	var t interface{ Temporary() bool }
	return errors.As(err, &t) && t.Temporary()
}

func (s *Server) accept(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
		tc.SetKeepAlive(true)
	}
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.clients) >= s.cfg.MaxClients {
		s.mu.Unlock()
		// As Redis does: say why, then close.
		nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		nc.Write([]byte("-" + msgMaxClients + "\r\n"))
		nc.Close()
		return
	}
	c := newClient(s, netio.Raw(nc))
	s.clients[c] = struct{}{}
	s.byID[c.id] = c
	n := len(s.clients)
	s.wg.Add(1)
	s.mu.Unlock()
	s.stats.connsTotal.Add(1)
	s.stats.clients.Store(int64(n))
	if s.cfg.Observer != nil {
		s.cfg.Observer.Clients(n)
	}
	go func() { // owned by the server: Shutdown waits for it
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.clients, c)
		delete(s.byID, c.id)
		n := len(s.clients)
		s.mu.Unlock()
		s.stats.clients.Store(int64(n))
		if s.cfg.Observer != nil {
			s.cfg.Observer.Clients(n)
		}
	}()
}

// Shutdown stops accepting, lets every client finish the commands it has
// sent (their replies are written), then closes the connections. It
// returns when all client goroutines are done, or ctx's error if ctx ends
// first (the connections are then closed at once).
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closing {
		s.closing = true
		close(s.shutdown)
		s.signals.close() // a BLPOP waiting is answered nil, and its client finishes
	}
	for _, ln := range s.lns {
		ln.Close()
	}
	for c := range s.clients {
		c.nc.SetReadDeadline(time.Now()) // wake readers; in-flight commands still finish
	}
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { // ends when every client goroutine has: bounded by the close below
		s.wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		s.mu.Lock()
		for c := range s.clients {
			c.nc.Close()
		}
		s.mu.Unlock()
		<-done
		return ctx.Err()
	}
}

// Clients is the number of connected clients.
func (s *Server) Clients() int { return int(s.stats.clients.Load()) }
