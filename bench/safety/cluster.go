package safety

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/faultnet"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// ClusterConfig describes the masters and proxies of a run.
type ClusterConfig struct {
	Dir      string // working directory for redis-server (required)
	Backends int    // redis-server masters (default 5)
	Proxies  int    // in-process proxies started with the cluster (default 2)
	// Slots is how many proxies there can be, those that join later
	// included (default and minimum Proxies). Slots past Proxies start
	// empty; StartProxy fills them.
	Slots int
	// Quarantine is every proxy's restart_quarantine; "" leaves the
	// proxy's own default.
	Quarantine     string
	MaxTTL         time.Duration // proxies' max_ttl (default 2s)
	BackendTimeout time.Duration // proxies' backend_timeout (default 50ms)
	// Replicas gives every master a replica (redis-server --replicaof),
	// which replicates through a relay of its own (ReplRelays) so that its
	// replication can be made to lag, and which Failover promotes.
	Replicas bool
	// Sentinels, with Replicas, starts that many redis-sentinel processes
	// watching every master's group ("m0", "m1", ...; quorum a majority of
	// them), which SentinelFailover moves. The proxies keep reaching the
	// masters' own addresses through the relays, whatever Sentinel does.
	Sentinels int
	// Durable masters run with appendonly yes and appendfsync always, and
	// restart with them: a restart reloads their append-only file.
	Durable bool
	// Clocks runs the masters with wall clocks the harness moves
	// (redisproc.StartWithClock; Cluster.Clock).
	Clocks bool
	// Shards, when set, makes every backend a Redis Cluster of that many
	// shards, each master with a replica, instead of a master behind a
	// relay: Backends is then the number of clusters (see
	// startOverRedisClusters).
	Shards int
	// BusCut: see Scenario.BusCut.
	BusCut bool
	// SlowPath gives the last proxy slot relays of its own to the masters
	// (SlowRelays), which a scenario delays: that proxy is further from the
	// masters than the others.
	SlowPath bool
	// ShutdownGrace, when set, is the proxies' shutdown_grace.
	ShutdownGrace time.Duration
	// LocalFences has clients take their fencing numbers from a counter
	// kept with the proxy they ask, instead of FENCE: a fencing source
	// that reads no majority (the fencing control; see localFences).
	LocalFences bool
	// Groups makes every backend a Sentinel-managed group of its own (a
	// master, a replica and three redis-sentinel processes: see
	// groups.go), named to the proxies as sentinel://HOST:PORT,.../NAME:
	// the proxies follow the master its Sentinels name, past no relay.
	Groups bool
	// OldRedis starts the single Redis the clients locked on before the
	// proxy (durable: appendonly yes, appendfsync always; see upgrade.go),
	// and UpgradeFrom names it to the proxies as upgrade_from, through a
	// relay of its own (OldRelay).
	OldRedis, UpgradeFrom bool
	// OldVolatile runs the old Redis without persistence: a restart
	// empties it.
	OldVolatile bool
	// Vouch vouches for the brand-new masters (VOUCH through the first
	// proxy) once the proxies reach them, so that they count at once
	// instead of after max_ttl + drift (not under restart_quarantine off,
	// which keeps no marker).
	Vouch bool
	Log   io.Writer // proxies' warnings and errors (nil: discarded)
}

func (c *ClusterConfig) defaults() {
	if c.Backends <= 0 {
		c.Backends = 5
	}
	if c.Proxies <= 0 {
		c.Proxies = 2
	}
	if c.Slots < c.Proxies {
		c.Slots = c.Proxies
	}
	if c.MaxTTL <= 0 {
		c.MaxTTL = 2 * time.Second
	}
	if c.BackendTimeout <= 0 {
		c.BackendTimeout = 50 * time.Millisecond
	}
}

// EffectiveQuarantine is the restart_quarantine the proxies run with.
func (c ClusterConfig) EffectiveQuarantine() string {
	if c.Quarantine != "" {
		return c.Quarantine
	}
	return config.Default().RestartQuarantine
}

// masterArgs are given to every redis-server: a master serves a new
// replica at once (by default it waits 5s for more replicas to batch).
var masterArgs = []string{"--repl-diskless-sync-delay", "0"}

// durableArgs make a master write every command to its append-only file
// before it answers.
var durableArgs = []string{"--appendonly", "yes", "--appendfsync", "always"}

// Cluster is N redis-server masters, a relay in front of each, and proxy
// slots whose proxies reach the masters only through the relays. Proxies
// can be stopped, started again with no memory of the masters, and added
// while the cluster runs; with Replicas, each master has a replica that
// Failover promotes in its place.
type Cluster struct {
	Config ClusterConfig
	// Relays[i] is the proxies' way to master i (a virtual IP: Failover
	// points it at the promoted replica).
	Relays []*faultnet.Relay
	// ReplRelays[i] is replica i's way to master i (with Replicas).
	ReplRelays []*faultnet.Relay
	// SlowRelays[i] is the last slot's own way to master i (with SlowPath).
	SlowRelays []*faultnet.Relay
	// Sentinels watch every master's group (with Sentinels).
	Sentinels []*redisproc.Sentinel
	// Groups are the backends, with Groups: Server(i) and Replica(i) are
	// group i's master and replica now (see setGroupMaster).
	Groups []*redisproc.Group
	// Old is the Redis the clients locked on before the proxy (with
	// OldRedis); OldRelay is the proxies' way to it (with UpgradeFrom).
	Old      *redisproc.Server
	OldRelay *faultnet.Relay
	// rc are the Redis Clusters that are the backends (with Shards).
	rc *redisClusters

	log     io.Writer
	started time.Time // before the first redis-server started

	mu       sync.Mutex
	servers  []*redisproc.Server // the master behind Relays[i]
	clocks   []*redisproc.Clock  // the masters' clocks, with Clocks
	replicas []*redisproc.Server // the replica of servers[i] (with Replicas)
	slots    []*proxySlot
	errs     []error        // proxies' Run errors
	retiring sync.WaitGroup // replaced proxies shutting down
}

// proxySlot is one place for a proxy: empty, or running one.
type proxySlot struct {
	app    *app.App
	stop   context.CancelFunc
	done   chan error
	starts int // proxies started in this slot so far
	// fences is the running proxy's local fencing counter (with
	// LocalFences); a proxy started in the slot starts a new one.
	fences *localFences
	// left collects what the running proxy logged as undos left pending at
	// its shutdown (see leftUndosHandler).
	left *leftUndos
}

// StartCluster starts the masters (and replicas), relays and proxies and
// waits until every proxy counts every master: connected, verified, and
// out of any quarantine its restart rule imposes on a fresh master. On error
// everything started is stopped.
func StartCluster(cfg ClusterConfig) (c *Cluster, err error) {
	cfg.defaults()
	if cfg.Dir == "" {
		return nil, errors.New("safety: ClusterConfig.Dir is required")
	}
	if cfg.Shards > 0 {
		return startOverRedisClusters(cfg)
	}
	c = newCluster(cfg)
	partial := c // a return of nil, err sets c to nil before this runs
	defer func() {
		if err != nil {
			partial.Close()
			c = nil
		}
	}()
	if cfg.OldRedis {
		if err := c.startOld(); err != nil {
			return nil, err
		}
	}
	args := masterArgs
	if cfg.Durable {
		args = append(append([]string(nil), masterArgs...), durableArgs...)
	}
	if cfg.Groups {
		err = c.startGroups()
	} else if cfg.Clocks {
		err = c.startWithClocks(args)
	} else {
		c.servers, err = redisproc.StartN(cfg.Dir, cfg.Backends, args...)
	}
	if err != nil {
		return nil, fmt.Errorf("safety: starting %d masters: %w", cfg.Backends, err)
	}
	relayed := c.servers
	if cfg.Groups {
		relayed = nil // the proxies reach the masters the Sentinels name
	}
	for _, s := range relayed {
		r, err := faultnet.Listen(s.Addr)
		if err != nil {
			return nil, fmt.Errorf("safety: relay to %s: %w", s.Addr, err)
		}
		c.Relays = append(c.Relays, r)
		if cfg.SlowPath {
			sr, err := faultnet.Listen(s.Addr)
			if err != nil {
				return nil, fmt.Errorf("safety: slow relay to %s: %w", s.Addr, err)
			}
			c.SlowRelays = append(c.SlowRelays, sr)
		}
	}
	if cfg.Replicas {
		for i, s := range c.servers {
			r, err := faultnet.Listen(s.Addr)
			if err != nil {
				return nil, fmt.Errorf("safety: replication relay to %s: %w", s.Addr, err)
			}
			c.ReplRelays = append(c.ReplRelays, r)
			rep, err := redisproc.StartReplica(cfg.Dir, r.Addr(), masterArgs...)
			if err != nil {
				return nil, fmt.Errorf("safety: replica of master %d: %w", i, err)
			}
			c.replicas = append(c.replicas, rep)
		}
		for i := range c.replicas {
			if err := c.WaitReplicaSynced(context.Background(), i, 10*time.Second); err != nil {
				return nil, err
			}
		}
		if err := c.startSentinels(); err != nil {
			return nil, err
		}
	}
	if err := c.startProxies(10*time.Second, "masters"); err != nil {
		return nil, err
	}
	if cfg.Vouch && cfg.EffectiveQuarantine() != "off" {
		if err := c.vouch(10 * time.Second); err != nil {
			return nil, err
		}
	}
	wctx, wcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer wcancel()
	if cfg.UpgradeFrom {
		if err := c.waitOldUp(wctx); err != nil {
			return nil, err
		}
	}
	// A rule that quarantines fresh masters keeps them out for the hold
	// (plus a second of uptime rounding) after they started.
	if !c.waitCounting(context.Background(), 2*c.Hold()+5*time.Second) {
		return nil, fmt.Errorf("safety: the proxies do not count every master %v after they started", 2*c.Hold()+5*time.Second)
	}
	return c, nil
}

// vouch sends VOUCH through the first proxy, as an operator would, until
// it is answered OK or d has passed (a master the proxy has not read yet
// is refused). VOUCH waits up to 10 s for the masters to count, so each
// call is given longer: its own answer, incomplete or not, says why.
func (c *Cluster) vouch(d time.Duration) error {
	rdb := redis.NewClient(&redis.Options{
		Addr: c.ProxyAddr(0), Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: time.Second, ReadTimeout: 15 * time.Second, WriteTimeout: time.Second,
	})
	defer rdb.Close()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		err := rdb.Do(ctx, "VOUCH").Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("safety: VOUCH over the brand-new masters: %w", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newCluster is an empty Cluster of cfg, its log set.
func newCluster(cfg ClusterConfig) *Cluster {
	c := &Cluster{Config: cfg, log: cfg.Log, started: time.Now()}
	if c.log == nil {
		c.log = io.Discard
	}
	return c
}

// startProxies starts the configured proxies and waits, up to wait, until
// each has a connection to every backend (what names the backends in the
// error).
func (c *Cluster) startProxies(wait time.Duration, what string) error {
	c.slots = make([]*proxySlot, c.Config.Slots)
	for i := range c.slots {
		c.slots[i] = &proxySlot{}
	}
	for i := 0; i < c.Config.Proxies; i++ {
		if err := c.StartProxy(i); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	defer cancel()
	for i := 0; i < c.Config.Proxies; i++ {
		if err := c.Proxy(i).Pool().WaitUp(ctx, c.Config.Backends); err != nil {
			return fmt.Errorf("safety: proxy %d does not see its %d %s: %w", i, c.Config.Backends, what, err)
		}
	}
	return nil
}

// startWithClocks starts the masters, each with a wall clock the harness
// moves.
func (c *Cluster) startWithClocks(args []string) error {
	for i := 0; i < c.Config.Backends; i++ {
		s, clock, err := redisproc.StartWithClock(c.Config.Dir, args...)
		if err != nil {
			return err
		}
		c.servers, c.clocks = append(c.servers, s), append(c.clocks, clock)
	}
	return nil
}

// Clock is master i's wall clock (with Clocks).
func (c *Cluster) Clock(i int) *redisproc.Clock { return c.clocks[i] }

// Hold is how long a restarted master stays out of the proxies' quorums:
// max_ttl plus its drift (and, for a Sentinel-managed group, the
// Sentinels' lease; for a Redis Cluster's shard, the lease of its
// confirmation by the other masters).
func (c *Cluster) Hold() time.Duration {
	hold := c.Config.MaxTTL + Drift(c.Config.MaxTTL)
	switch {
	case c.Config.EffectiveQuarantine() == "off":
	case c.Config.Groups:
		hold += netio.DefaultSentinelLease
	case c.Config.Shards > 0:
		hold += netio.DefaultClusterLease
	}
	return hold
}

// NumBackends is the number of masters (of groups, with Groups; of
// Redis Clusters, with Shards).
func (c *Cluster) NumBackends() int {
	if c.Config.Groups {
		return len(c.Groups)
	}
	return len(c.Relays) + c.rc.count()
}

// Majority is how many masters a lock needs.
func (c *Cluster) Majority() int { return c.NumBackends()/2 + 1 }

// Server is the redis-server that is master i now.
func (c *Cluster) Server(i int) *redisproc.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.servers[i]
}

// Replica is master i's replica now (nil without Replicas).
func (c *Cluster) Replica(i int) *redisproc.Server {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.replicas == nil {
		return nil
	}
	return c.replicas[i]
}

// NumProxies is the number of proxy slots, empty ones included.
func (c *Cluster) NumProxies() int { return len(c.slots) }

// Proxy is the proxy running in slot p, or nil.
func (c *Cluster) Proxy(p int) *app.App {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slots[p].app
}

// ProxyAddr is the address of the proxy in slot p, or "" when none runs.
func (c *Cluster) ProxyAddr(p int) string {
	if a := c.Proxy(p); a != nil {
		return a.Addr()
	}
	return ""
}

// Running is the slots that have a proxy now.
func (c *Cluster) Running() []int {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []int
	for i, s := range c.slots {
		if s.app != nil {
			out = append(out, i)
		}
	}
	return out
}

// StartProxy starts a fresh proxy in slot p: it knows nothing of the
// masters (as a new deployment or a restarted process). It returns once
// the proxy listens; it connects to the masters in the background.
func (c *Cluster) StartProxy(p int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slots[p]
	if s.app != nil {
		return fmt.Errorf("safety: proxy slot %d is running", p)
	}
	relays := c.Relays
	if c.Config.SlowPath && p == len(c.slots)-1 {
		relays = c.SlowRelays
	}
	var addrs []string
	for _, r := range relays {
		addrs = append(addrs, r.Addr())
	}
	for _, g := range c.Groups {
		addrs = append(addrs, g.Entry())
	}
	addrs = append(addrs, c.rc.entries()...)
	pc := config.Default()
	pc.Listen = "127.0.0.1:0"
	pc.Admin = ""
	pc.Backends = addrs
	pc.BackendTimeout = c.Config.BackendTimeout
	pc.MaxTTL = c.Config.MaxTTL
	if c.Config.Quarantine != "" {
		pc.RestartQuarantine = c.Config.Quarantine
	}
	if c.Config.ShutdownGrace > 0 {
		pc.ShutdownGrace = c.Config.ShutdownGrace
	}
	if c.Config.UpgradeFrom {
		pc.UpgradeFrom = c.OldRelay.Addr()
	}
	pc.LogLevel = "warn"
	if _, err := pc.Validate(); err != nil {
		return fmt.Errorf("safety: proxy config: %w", err)
	}
	left := &leftUndos{}
	log := slog.New(leftUndosHandler{slog.NewTextHandler(c.log, &slog.HandlerOptions{Level: slog.LevelWarn}), left}).With("proxy", p, "start", s.starts)
	a, err := app.New(pc, log)
	if err != nil {
		return fmt.Errorf("safety: proxy %d: %w", p, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }() // ends when StopProxy or Close cancels ctx
	s.app, s.stop, s.done = a, cancel, done
	s.fences = newLocalFences()
	s.left = left
	s.starts++
	return nil
}

// StopProxy stops the proxy in slot p (as its process ending would: its
// clients' connections close) and waits for it. An empty slot is left as
// it is.
func (c *Cluster) StopProxy(p int) {
	c.stopDetached(p, c.detach(p))
}

// StopProxyReporting stops the proxy in slot p and waits for it, as
// StopProxy does, but hands back the undos it logged as left pending at its
// shutdown, as logged, and what its Run returned (not counted among the
// cluster's errors). An empty slot returns nothing.
func (c *Cluster) StopProxyReporting(p int) (left []string, runErr error) {
	d := c.detach(p)
	if d == nil {
		return nil, nil
	}
	d.stop()
	runErr = <-d.done
	return d.left.get(), runErr
}

// detached is a proxy taken out of its slot, still running.
type detached struct {
	stop context.CancelFunc
	done chan error
	left *leftUndos
}

// detach takes the proxy out of slot p (nil when the slot is empty): new
// clients of the slot no longer reach it.
func (c *Cluster) detach(p int) *detached {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.slots[p]
	if s.stop == nil {
		return nil
	}
	d := &detached{stop: s.stop, done: s.done, left: s.left}
	s.app, s.stop, s.done, s.left = nil, nil, nil, nil
	return d
}

// stopDetached stops a detached proxy of slot p and waits for it (its
// shutdown answers the commands it has started, undos included, for up to
// its grace period).
func (c *Cluster) stopDetached(p int, d *detached) {
	if d == nil {
		return
	}
	d.stop()
	err := <-d.done
	switch {
	case err == nil:
	case errors.Is(err, app.ErrUndosPending) && c.Config.ShutdownGrace > 0:
		// A scenario that shortens shutdown_grace on purpose stops proxies
		// while masters are down: the undos they leave are logged by key,
		// their locks expire by their TTL, and the ghost-lock checker still
		// reads the masters.
		fmt.Fprintf(c.log, "proxy %d stopped: %v: %v\n", p, err, d.left.get())
	default:
		c.mu.Lock()
		c.errs = append(c.errs, fmt.Errorf("proxy %d: %w", p, err))
		c.mu.Unlock()
	}
}

// RestartProxy replaces the proxy in slot p (if any) by a fresh one that
// has never seen the masters, as a rolling restart does: the new proxy
// takes the slot's new clients at once while the old one shuts down in the
// background (Close waits for it); its clients lose their connections once
// it has answered what they sent.
func (c *Cluster) RestartProxy(p int) error {
	old := c.detach(p)
	err := c.StartProxy(p)
	if old != nil {
		c.retiring.Add(1)
		go func() { // ends when the old proxy has shut down; Close waits
			defer c.retiring.Done()
			c.stopDetached(p, old)
		}()
	}
	return err
}

// Failover promotes master i's replica in its place, as Sentinel or an
// operator would: REPLICAOF NO ONE on the replica, then the proxies'
// relay for master i is pointed at it (their connections are cut, as a
// moved virtual IP does), and the old master becomes the new one's replica
// (through ReplRelays[i]). The promoted replica has only what it had
// replicated.
func (c *Cluster) Failover(i int) error {
	c.mu.Lock()
	old, rep := c.servers[i], c.replicas[i]
	c.mu.Unlock()
	if rep == nil {
		return errors.New("safety: no replicas in this cluster")
	}
	if err := rep.Promote(); err != nil {
		return fmt.Errorf("safety: promoting master %d's replica: %w", i, err)
	}
	c.Relays[i].Retarget(rep.Addr)
	c.ReplRelays[i].Retarget(rep.Addr)
	c.ReplRelays[i].BlackHole(false)
	c.mu.Lock()
	c.servers[i], c.replicas[i] = rep, old
	c.mu.Unlock()
	if err := old.Follow(c.ReplRelays[i].Addr()); err != nil {
		return fmt.Errorf("safety: old master %d as the new one's replica: %w", i, err)
	}
	return nil
}

// WaitReplicaSynced waits until master i's replica reports its link to the
// master up and has replicated everything the master has written.
func (c *Cluster) WaitReplicaSynced(ctx context.Context, i int, d time.Duration) error {
	deadline := time.Now().Add(d)
	var last string
	for ctx.Err() == nil && time.Now().Before(deadline) {
		m, r := c.Server(i), c.Replica(i)
		mi, err1 := infoFields(ctx, m.Addr, "replication")
		ri, err2 := infoFields(ctx, r.Addr, "replication")
		if err := errors.Join(err1, err2); err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("link %s, master offset %s, replica offset %s", ri["master_link_status"], mi["master_repl_offset"], ri["slave_repl_offset"])
			if ri["master_link_status"] == "up" && mi["master_repl_offset"] == ri["slave_repl_offset"] {
				return nil
			}
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return fmt.Errorf("safety: master %d's replica not in sync after %v: %s", i, d, last)
}

// infoFields reads an INFO section of the redis-server at addr directly.
func infoFields(ctx context.Context, addr, section string) (map[string]string, error) {
	rdb := direct(addr)
	defer rdb.Close()
	s, err := rdb.Info(ctx, section).Result()
	if err != nil {
		return nil, fmt.Errorf("INFO %s of %s: %w", section, addr, err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(s, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
			out[k] = v
		}
	}
	return out, nil
}

// direct is a client of the redis-server at addr itself, past every relay
// and proxy.
func direct(addr string) *redis.Client { return directDB(addr, 0) }

// directDB is direct for database db.
func directDB(addr string, db int) *redis.Client {
	return redis.NewClient(&redis.Options{
		Addr: addr, DB: db, Protocol: 2, DisableIdentity: true, MaxRetries: -1, PoolSize: 1,
		DialTimeout: 500 * time.Millisecond, ReadTimeout: time.Second, WriteTimeout: time.Second,
	})
}

// Close stops the proxies (waiting for them), the relays and every
// redis-server. It is safe to call on a partly started cluster and more
// than once.
func (c *Cluster) Close() error {
	for _, s := range c.Sentinels {
		s.Stop() // first: no failover while the rest stops
	}
	for _, g := range c.Groups {
		if g == nil {
			continue
		}
		for _, s := range g.Sentinels {
			s.Stop()
		}
	}
	var wg sync.WaitGroup
	for p := range c.slots {
		wg.Add(1)
		go func() { // each proxy drains on its own; Close waits for all
			defer wg.Done()
			c.StopProxy(p)
		}()
	}
	wg.Wait()
	c.retiring.Wait()
	for _, r := range c.Relays {
		r.Close()
	}
	for _, r := range c.ReplRelays {
		r.Close()
	}
	for _, r := range c.SlowRelays {
		r.Close()
	}
	if c.OldRelay != nil {
		c.OldRelay.Close()
	}
	if c.Old != nil {
		c.Old.Stop()
	}
	for _, g := range c.Groups {
		if g != nil {
			g.Stop()
		}
	}
	c.mu.Lock()
	procs := append(append([]*redisproc.Server(nil), c.servers...), c.replicas...)
	errs := c.errs
	c.errs = nil
	c.mu.Unlock()
	for _, s := range procs {
		if s != nil {
			s.Stop()
		}
	}
	for _, clock := range c.clocks {
		clock.Close()
	}
	c.rc.stop()
	return errors.Join(errs...)
}

// restartsSeen is how many restarts of master i the proxy in slot p has
// detected, whether it is connected to it, and how many connections to it
// it has made. An empty slot has seen nothing.
func (c *Cluster) restartsSeen(p, i int) (restarts uint64, up bool, connects uint64) {
	a := c.Proxy(p)
	if a == nil {
		return 0, false, 0
	}
	h := a.Pool().Health()[i]
	return h.Restarts, h.Up, h.Connects
}

// waitCounting waits until every running proxy counts every master.
func (c *Cluster) waitCounting(ctx context.Context, d time.Duration) bool {
	return c.waitAll(ctx, d, func(_ int, a *app.App, now time.Time) bool {
		for _, h := range a.Pool().Health() {
			if !h.Counts(now) {
				return false
			}
		}
		return true
	})
}

// waitAll waits until ok holds of every running proxy (its slot, itself
// and the instant of the look), or d passes.
func (c *Cluster) waitAll(ctx context.Context, d time.Duration, ok func(p int, a *app.App, now time.Time) bool) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		all := true
		now := time.Now()
		c.eachProxy(func(p int, a *app.App) { all = all && ok(p, a, now) })
		if all {
			return true
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return false
}

// eachProxy calls f with every running proxy and its slot.
func (c *Cluster) eachProxy(f func(p int, a *app.App)) {
	for _, p := range c.Running() {
		if a := c.Proxy(p); a != nil {
			f(p, a)
		}
	}
}

// waitSlotCounting waits until the proxy in slot p runs and counts every
// master.
func (c *Cluster) waitSlotCounting(ctx context.Context, p int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if a := c.Proxy(p); a != nil {
			all := true
			now := time.Now()
			for _, h := range a.Pool().Health() {
				all = all && h.Counts(now)
			}
			if all {
				return true
			}
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
	return false
}

// waitSees waits until the proxy in slot p is connected to (and has
// verified) every master in ms.
func (c *Cluster) waitSees(ctx context.Context, p int, ms []int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		all := true
		for _, i := range ms {
			_, up, _ := c.restartsSeen(p, i)
			all = all && up
		}
		if all {
			return true
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return false
}

// connects returns, per proxy slot, how many connections it has made to
// each master in ms.
func (c *Cluster) connects(ms []int) [][]uint64 {
	out := make([][]uint64, c.NumProxies())
	for p := range out {
		for _, i := range ms {
			_, _, n := c.restartsSeen(p, i)
			out[p] = append(out[p], n)
		}
	}
	return out
}

// waitReconnected waits until every running proxy has made a new
// connection (since the counts in before) to each master in ms and is up
// on it.
func (c *Cluster) waitReconnected(ctx context.Context, ms []int, before [][]uint64, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for ctx.Err() == nil && time.Now().Before(deadline) {
		all := true
		for _, p := range c.Running() {
			for j, i := range ms {
				if _, up, n := c.restartsSeen(p, i); !up || n <= before[p][j] {
					all = false
				}
			}
		}
		if all {
			return true
		}
		sleepCtx(ctx, 10*time.Millisecond)
	}
	return false
}

// dialer reaches whatever proxy runs in slot p at dial time; while none
// runs there it waits up to a second for one to start (a client of an
// empty slot waits for a proxy to join it, and its operation fails after
// that second, so that a stopping workload is not held up).
func (c *Cluster) dialer(p int) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, _ string) (net.Conn, error) {
		a := c.ProxyAddr(p)
		for give := time.Now().Add(time.Second); a == ""; a = c.ProxyAddr(p) {
			if time.Now().After(give) || !sleepCtx(ctx, 10*time.Millisecond) {
				return nil, fmt.Errorf("safety: no proxy runs in slot %d", p)
			}
		}
		var d net.Dialer
		return d.DialContext(ctx, network, a)
	}
}
