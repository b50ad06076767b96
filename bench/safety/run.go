package safety

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Scenario is a fault schedule (or an orchestrated control) and what the
// run must show.
type Scenario struct {
	Name  string
	About string
	// Quarantine is the proxies' restart_quarantine; "" leaves the proxy's
	// default (only controls name a rule).
	Quarantine string
	// Faults runs the fault schedule; it must heal every fault before it
	// returns and stop when ctx is done.
	Faults func(ctx context.Context, e *Env)
	// Drive, when set, orchestrates a specific interleaving with its own
	// clients while the workload runs; the run lasts until it returns.
	Drive func(ctx context.Context, e *Env) error
	// MajorityUp: a majority of masters always counts, so locks must keep
	// being granted: at least one grant in every whole second of the run,
	// and no acquire of a key nobody else uses refused.
	MajorityUp bool
	// Recovers: after the last interval without a majority, grants resume.
	Recovers bool
	// DetectLock: a control that breaks mutual exclusion; the windows and linearizability checkers
	// must both report it.
	DetectLock bool
	// DetectLost: a control that loses an update while the lock itself
	// holds; the register checker must report it, the windows and linearizability checkers must not.
	DetectLost bool
	// DetectFence: a control whose fencing numbers break their contract
	// while the lock itself holds; the fencing checker must report it, the others
	// must not.
	DetectFence bool
	// DetectGhost: a control that leaves a ghost lock (a token of an
	// acquire answered nil, on a majority) while the lock itself holds;
	// the ghost-lock checker must report it, the others must not.
	DetectGhost bool
	// ReportedGhosts: a ghost lock on a key that a proxy stopped while
	// masters hung reported, at its shutdown, as an undo left pending is
	// expected, not a violation; at least one must be found, and every key
	// reported left on a majority must be found. Any other ghost lock is a
	// violation.
	ReportedGhosts bool
	// LocalFences: the clients take their fencing numbers from a counter
	// kept with the proxy they ask, with no majority read, instead of
	// FENCE (the fencing control).
	LocalFences bool
	// FencedRegisters: every register is fenced (it refuses a number lower
	// than the highest it has seen), and RefusesStale: it must refuse at
	// least one stale write.
	FencedRegisters, RefusesStale bool

	// The shape the scenario needs; zero values take the run's Options.
	Backends int // masters
	Keys     int // keys the contenders share
	Proxies  int // proxies started with the cluster
	Slots    int // proxy slots, those that join later included
	// ProbeSlot adds a proxy that only the fault schedule's own probe
	// client uses (the last slot): what it sends is alone on the masters'
	// links.
	ProbeSlot bool
	Replicas  bool // every master has a replica (for failovers)
	// Sentinels runs that many redis-sentinel processes watching every
	// master (implies Replicas).
	Sentinels int
	Durable   bool // masters run appendonly yes, appendfsync always
	Clocks    bool // masters run with wall clocks the harness moves
	// Shards makes every backend a Redis Cluster of that many shards, each
	// master with a replica (Backends is then the number of clusters).
	Shards int
	// BusCut starts each Redis Cluster with its second shard's master on a
	// loopback address of its own (one that sorts before 127.0.0.1:PORT)
	// and a long cluster-node-timeout, so that a drive can cut that master
	// off from the cluster bus while the proxies still reach it (see
	// clusterpartition.go).
	BusCut bool
	// Groups makes every backend a Sentinel-managed group (a master, a
	// replica and three Sentinels of its own), which the proxies follow.
	Groups bool
	// OldRedis runs the single Redis the clients locked on before the
	// proxy, with OldClients clients still locking on it directly;
	// UpgradeFrom names it to the proxies as upgrade_from.
	OldRedis, UpgradeFrom bool
	OldClients            int
	// OldVolatile runs the old Redis without persistence.
	OldVolatile bool
	// Vouch vouches for the brand-new masters (VOUCH) as the cluster
	// starts, so that they count at once under a long max_ttl.
	Vouch bool
	// SlowPath gives the last proxy slot relays of its own to the masters,
	// which the scenario delays.
	SlowPath bool
	// ShutdownGrace, when set, is the proxies' shutdown_grace.
	ShutdownGrace  time.Duration
	MaxTTL         time.Duration
	TTLMin, TTLMax time.Duration // the contenders' TTLs
	Think          time.Duration // a contender's work takes up to this
	// BackendTimeout, when set, is the proxies' backend_timeout in this
	// scenario, for faults whose load alone (on a small machine, under the
	// race detector) can take a reply past the default.
	BackendTimeout time.Duration

	// Clients besides the contenders, spread over the proxy slots.
	Extenders   int // holders that extend with redsync's extend-or-acquire script
	Pipeliners  int // raw clients pipelining SET NX with a slow PTTL in one write
	FreeLockers int // clients locking keys nobody else uses
}

// Control reports whether the scenario is a control run (it must report
// violations).
func (s Scenario) Control() bool {
	return s.DetectLock || s.DetectLost || s.DetectFence || s.DetectGhost
}

// Scenarios returns every scenario: the fault scenarios first, then the
// controls.
func Scenarios() []Scenario {
	return []Scenario{
		{Name: "none", About: "baseline: no faults", Faults: scheduleNone, MajorityUp: true},
		{Name: "kill9", About: "kill -9 one master, start it again 0.5-1.5s later", Faults: scheduleKill9, MajorityUp: true},
		{Name: "kill9-restart", About: "kill -9 one master and restart it at once (restart quarantine at work)", Faults: scheduleKill9Restart, MajorityUp: true},
		{Name: "sigstop", About: "SIGSTOP one or two masters for 0.3-1.5s, then SIGCONT", Faults: scheduleSigstop, MajorityUp: true},
		{Name: "blackhole", About: "black-hole one or two masters' links for 0.3-1.5s", Faults: scheduleBlackHole, MajorityUp: true},
		{Name: "delay", About: "delay one or two masters' links by 30-100ms each way", Faults: scheduleDelay, MajorityUp: true},
		{Name: "mixed", About: "random faults of every kind, never more than 2 of 5 masters at once", Faults: scheduleMixed, MajorityUp: true},
		{Name: "majority-down", About: "kill -9 a majority for 1.5s, then start them again: refusals allowed, no grant without a majority", Faults: scheduleMajorityDown, Recovers: true},
		{Name: "restart-majority", About: "a majority restarts at once while a 2s lock is held (early in a wall-clock second): the lock must hold",
			Faults: scheduleNone, Drive: driveRestart(restartPlan{key: "ctl:restart", phase: 0.05})},
		{Name: "restart-uptime", About: "as restart-majority, late in a second, the proxies reconnecting just after it (uptime_in_seconds then reads 1 for a master up 0.2s): the lock must hold",
			Faults: scheduleNone, Drive: driveRestart(restartPlan{key: "ctl:uptime", phase: 0.80, holeAcross: true})},
		{Name: "proxy-join", About: "3 masters: a proxy restarts while M2 is down, A locks on M0+M1, M2 starts empty, M1 restarts, a new proxy joins: A's lock must hold against it",
			Backends: 3, Slots: 3, ShutdownGrace: joinGrace, Faults: scheduleNone, Drive: driveProxyJoin("ctl:join")},
		{Name: "proxy-churn", About: "3 masters, 3 proxy slots: proxies restart and join while masters are killed and restarted; long holds",
			Backends: 3, Slots: 3, TTLMin: time.Second, TTLMax: 2 * time.Second, Think: time.Second, Faults: scheduleProxyChurn, Recovers: true},
		{Name: "replica-promote", About: "3 masters with replicas: two replicas lag, A locks, both are promoted and their relays moved to them: A's lock must hold",
			Backends: 3, Replicas: true, Faults: scheduleNone, Drive: drivePromote("ctl:promote")},
		{Name: "failover", About: "3 masters with replicas: a majority's replication lags, then they fail over to their replicas, again and again; long holds",
			Backends: 3, Replicas: true, TTLMin: time.Second, TTLMax: 2 * time.Second, Think: time.Second, Faults: scheduleFailover, Recovers: true},
		{Name: "sentinel-failback", About: "3 masters with replicas and 3 redis-sentinel: Sentinel fails two masters over (SENTINEL FAILOVER), A locks on the old masters and extends, Sentinel turns them into replicas (they resync without A's lock) and fails back: A's lock must hold",
			Backends: 3, Replicas: true, Sentinels: 3, MaxTTL: 4 * time.Second, Faults: scheduleNone, Drive: driveSentinelFailback("ctl:sentinel")},
		{Name: "pipeline-slow", About: "auto-pipelining clients write SET NX PX 20-60 and a PTTL in one write while one or two masters hang: no grant may arrive after its validity",
			Pipeliners: 6, Faults: scheduleSigstop, MajorityUp: true},
		{Name: "extend-partial", About: "holders extend with redsync's extend-or-acquire script while two masters are down or black-holed and a third hangs 200ms: a failed extend must not free a held lock",
			Extenders: 8, Faults: scheduleExtendPartial, Recovers: true},
		{Name: "ghost-pause", About: "a majority of masters hangs (SIGSTOP) 1.2-1.6s during acquires on 32 keys, then continues: no token of an acquire answered nil may stay on a majority",
			Keys: 32, ProbeSlot: true, MaxTTL: 3 * time.Second, TTLMin: 2500 * time.Millisecond, TTLMax: 3 * time.Second, Faults: scheduleGhostPause, Recovers: true},
		{Name: "ghost-cut", About: "a majority's links are cut mid-command (masters hung, or links slowed past the backend timeout) during acquires on 32 keys: no token of an acquire answered nil may stay on a majority",
			Keys: 32, ProbeSlot: true, MaxTTL: 3 * time.Second, TTLMin: 2500 * time.Millisecond, TTLMax: 3 * time.Second, Faults: scheduleGhostCut, Recovers: true},
		{Name: "greedy", About: "a greedy client pipelines 4x256 GETs of 64KiB values: locks keep being granted, keys nobody else uses are never refused",
			FreeLockers: 4, Faults: scheduleGreedy, MajorityUp: true, BackendTimeout: 250 * time.Millisecond},
		{Name: "fenced-pause", About: "as control-pause, on a fenced register: the paused holder's write carries a number lower than the next holder's and is refused; no update is lost",
			Faults: scheduleNone, Drive: drivePause, FencedRegisters: true, RefusesStale: true},
		{Name: "stale-aof", About: "3 durable masters (appendonly yes, appendfsync always): appendonly switched off at runtime or the file copied, A locks, two masters are killed (-9) and restarted from the stale file with their durable settings: A's lock must hold",
			Backends: 3, Durable: true, BackendTimeout: 250 * time.Millisecond, Faults: scheduleNone, Drive: driveStaleAOF("ctl:aof")},
		{Name: "eviction-toggle", About: "3 masters: A locks; on two, maxmemory-policy volatile-ttl with maxmemory 1 evicts it, then the policy is reverted at once or after 1.2-1.5s: A's lock must hold",
			Backends: 3, MaxTTL: 3 * time.Second, Faults: scheduleNone, Drive: driveEviction("ctl:evict")},
		{Name: "clock-step", About: "3 masters whose wall clocks the harness moves: A locks; on two, the clock steps ahead by A's TTL + 1s, or was set back as far before A's grant and is set right again: A's lock, expired early there, must hold",
			Backends: 3, Clocks: true, MaxTTL: 3 * time.Second, Faults: scheduleNone, Drive: driveClockStep("ctl:clock")},
		{Name: "extend-two-proxies", About: "holders extend to 150-300ms through a proxy 1-6ms further from the masters, then at once to 0.8-1.5s through the near one: the late step must not shorten the later extend",
			SlowPath: true, Faults: scheduleTwoProxies(twoProxyHolders, false), MajorityUp: true},
		{Name: "script-flush", About: "SCRIPT FLUSH on every master (in every other cycle a majority) twenty times in a row under load, a probe acquiring after each, then a probe refused on a key a majority holds (its undo meets NOSCRIPT): no ghost lock may remain, no refused probe's token on any master",
			Keys: 32, ProbeSlot: true, MaxTTL: 3 * time.Second, TTLMin: 2500 * time.Millisecond, TTLMax: 3 * time.Second, Faults: scheduleScriptFlush(false)},
		{Name: "shutdown-hang", About: "a majority hangs (SIGSTOP), a probe acquires, its proxy is stopped with shutdown_grace 300ms before the masters continue: the ghost lock left must be the one the proxy reported",
			ProbeSlot: true, MaxTTL: 4 * time.Second, ShutdownGrace: 300 * time.Millisecond, Faults: scheduleShutdownHang(false), ReportedGhosts: true, Recovers: true},
		{Name: "sentinel-groups", About: "3 Sentinel-managed groups (a master, a replica and 3 redis-sentinel each) as backends: groups fail over one after another (SENTINEL FAILOVER, kill -9 with automatic failover), sometimes two at once, often to a replica whose replication was cut, and back in their turn; in probe rounds A holds a lock while two groups fail over to replicas that never saw it: C must be refused",
			Backends: 3, Groups: true, MaxTTL: groupsMaxTTL, Faults: scheduleGroups},
		{Name: "sentinel-failback-undemoted", About: "3 Sentinel-managed groups: two fail over (SENTINEL FAILOVER) while their masters cannot be demoted (REPLICAOF refused), A locks once the promoted replicas count, and both fail back to the old masters, never replicas, which lack A's lock: C must be refused",
			Backends: 3, Groups: true, MaxTTL: failbackMaxTTL, Faults: scheduleNone, Drive: driveGroupsFailback},
		{Name: "upgrade", About: "an old single Redis named as upgrade_from: 8 clients lock on it directly (SET NX PX, the release script) on the proxy clients' keys; it hangs, is killed and started again (durable), or is cut off from the proxies, while the masters take mixed faults: no two holders across both groups",
			OldClients: 8, UpgradeFrom: true, MaxTTL: 3 * time.Second, Faults: scheduleUpgrade, Recovers: true},
		{Name: "rollback", About: "3 masters: on two, the marker is copied to database 1 (in some rounds a loss is recorded after), A locks, the copy comes back with SWAPDB 0 1 (in some rounds every proxy replaced by a fresh one across the swap): A's lock must hold",
			Backends: 3, MaxTTL: rollbackMaxTTL, ShutdownGrace: joinGrace, Faults: scheduleNone, Drive: driveRollback("ctl:rollback")},
		{Name: "upgrade-restart", About: "an old Redis without persistence named as upgrade_from: an old client locks on it directly, then it is killed (-9) and started again empty, or another redis-server (empty, or holding a copy of its marker from before the lock) comes to answer at its address: no proxy client may get the lock while the old client's validity lasts",
			UpgradeFrom: true, OldVolatile: true, MaxTTL: 3 * time.Second, BackendTimeout: 250 * time.Millisecond, Faults: scheduleNone, Drive: driveUpgradeRestart("ctl:upgrade")},
		{Name: "mixed-ttl", About: "5 masters with replicas, max_ttl 10m, vouched for at the start: TTLs of 100ms to 2s, a holder keeping 3-12s locks, one lock of minutes late in the run; masters restarted empty and failed over to lagging replicas, one at a time or two at once: no two holders, and each lost master counts again soon after the locks it may have held expired",
			Replicas: true, Vouch: true, MaxTTL: mixedMaxTTL, TTLMin: 100 * time.Millisecond, TTLMax: 2 * time.Second, BackendTimeout: 250 * time.Millisecond, Faults: scheduleMixedTTL},
		{Name: "standby-fresh", About: "3 masters: standbys up longer than the hold get copies of two masters' markers, A locks, every proxy is replaced by a fresh one while the two masters' addresses move to the standbys: A's lock must hold",
			Backends: 3, MaxTTL: rollbackMaxTTL, ShutdownGrace: joinGrace, Faults: scheduleNone, Drive: driveStandbyFresh("ctl:standby")},
		{Name: "upgrade-standby-fresh", About: "the old Redis named as upgrade_from: a standby up longer than the hold gets a copy of its marker, an old client locks on it directly, every proxy is replaced by a fresh one while its address moves to the standby: no proxy client may get the lock while the old client's validity lasts",
			UpgradeFrom: true, OldVolatile: true, MaxTTL: 3 * time.Second, ShutdownGrace: joinGrace, BackendTimeout: 250 * time.Millisecond, Faults: scheduleNone, Drive: driveUpgradeStandbyFresh("ctl:standby")},
		{Name: "control-quarantine-off", About: "CONTROL: as restart-majority with restart_quarantine off: a second holder must be seen",
			Quarantine: "off", Faults: scheduleNone, Drive: driveRestart(restartPlan{key: "ctl:restart", phase: 0.05}), DetectLock: true},
		{Name: "control-run-id-join", About: "CONTROL: proxy-join with restart_quarantine run-id (it trusts a master it sees for the first time): a second holder must be seen",
			Quarantine: "run-id", Backends: 3, Slots: 3, ShutdownGrace: joinGrace, Faults: scheduleNone, Drive: driveProxyJoin("ctl:join"), DetectLock: true},
		{Name: "control-pause", About: "CONTROL: a holder pauses past its validity before writing: a lost update must be seen", Faults: scheduleNone, Drive: drivePause, DetectLost: true},
		{Name: "control-fence-local", About: "CONTROL: the clients take fencing numbers from a counter in the proxy they ask, with no majority read: numbers out of grant order must be seen",
			Faults: scheduleNone, LocalFences: true, DetectFence: true},
		{Name: "control-sentinel-off", About: "CONTROL: sentinel-failback with restart_quarantine off (no marker, no continuity check): a second holder must be seen",
			Quarantine: "off", Backends: 3, Replicas: true, Sentinels: 3, MaxTTL: 4 * time.Second, Faults: scheduleNone, Drive: driveSentinelFailback("ctl:sentinel"), DetectLock: true},
		{Name: "control-stale-aof-off", About: "CONTROL: stale-aof with restart_quarantine off: a second holder must be seen",
			Quarantine: "off", Backends: 3, Durable: true, BackendTimeout: 250 * time.Millisecond, Faults: scheduleNone, Drive: driveStaleAOF("ctl:aof"), DetectLock: true},
		{Name: "control-eviction-off", About: "CONTROL: eviction-toggle with restart_quarantine off: a second holder must be seen",
			Quarantine: "off", Backends: 3, MaxTTL: 3 * time.Second, Faults: scheduleNone, Drive: driveEviction("ctl:evict"), DetectLock: true},
		{Name: "control-clock-off", About: "CONTROL: clock-step with restart_quarantine off (no marker, no clock check): a second holder must be seen",
			Quarantine: "off", Backends: 3, Clocks: true, MaxTTL: 3 * time.Second, Faults: scheduleNone, Drive: driveClockStep("ctl:clock"), DetectLock: true},
		{Name: "control-extend-late-step", About: "CONTROL: extend-two-proxies, each long extend followed by the short extend's TTL set again on the masters directly (an unconditional late second step): a second holder must be seen",
			SlowPath: true, Faults: scheduleTwoProxies(twoProxyHolders, true), DetectLock: true},
		{Name: "control-undo-gives-up", About: "CONTROL: script-flush, the probe's acquire made by a client acting as a proxy whose undo gives up at NOSCRIPT: a ghost lock must be seen",
			Keys: 32, ProbeSlot: true, MaxTTL: 3 * time.Second, TTLMin: 2500 * time.Millisecond, TTLMax: 3 * time.Second, Faults: scheduleScriptFlush(true), DetectGhost: true},
		{Name: "control-sentinel-groups-off", About: "CONTROL: sentinel-groups' probe round with restart_quarantine off: the promoted masters count at once and hand out A's lock: a second holder must be seen",
			Quarantine: "off", Backends: 3, Groups: true, MaxTTL: groupsMaxTTL, Faults: scheduleNone, Drive: driveGroups, DetectLock: true},
		{Name: "control-sentinel-failback-undemoted-off", About: "CONTROL: sentinel-failback-undemoted with restart_quarantine off: the old masters count at once and hand out A's lock: a second holder must be seen",
			Quarantine: "off", Backends: 3, Groups: true, MaxTTL: failbackMaxTTL, Faults: scheduleNone, Drive: driveGroupsFailback, DetectLock: true},
		{Name: "control-upgrade-unnamed", About: "CONTROL: upgrade without upgrade_from: the old clients and the proxy clients hold one key at once: a second holder must be seen",
			OldClients: 8, OldRedis: true, MaxTTL: 3 * time.Second, Faults: scheduleUpgrade, DetectLock: true},
		{Name: "control-rollback-off", About: "CONTROL: rollback with restart_quarantine off (no marker, no continuity check): a second holder must be seen",
			Quarantine: "off", Backends: 3, MaxTTL: rollbackMaxTTL, ShutdownGrace: joinGrace, Faults: scheduleNone, Drive: driveRollback("ctl:rollback"), DetectLock: true},
		{Name: "control-upgrade-restart-off", About: "CONTROL: upgrade-restart with restart_quarantine off: the old Redis's grant counts at once after it lost its data: a second holder must be seen",
			Quarantine: "off", UpgradeFrom: true, OldVolatile: true, MaxTTL: 3 * time.Second, BackendTimeout: 250 * time.Millisecond, Faults: scheduleNone, Drive: driveUpgradeRestart("ctl:upgrade"), DetectLock: true},
		{Name: "control-mixed-ttl-off", About: "CONTROL: mixed-ttl with restart_quarantine off (no hold, no record read): a second holder must be seen",
			Quarantine: "off", Replicas: true, MaxTTL: mixedMaxTTL, TTLMin: 100 * time.Millisecond, TTLMax: 2 * time.Second, BackendTimeout: 250 * time.Millisecond, Faults: scheduleMixedTTL, DetectLock: true},
		{Name: "control-shutdown-unreported", About: "CONTROL: shutdown-hang, what the stopped proxy reported dropped (as a proxy that exits 0 and names no key): a ghost lock must be seen",
			ProbeSlot: true, MaxTTL: 4 * time.Second, ShutdownGrace: 300 * time.Millisecond, Faults: scheduleShutdownHang(true), DetectGhost: true},
		{Name: "cluster-shards", About: "3 Redis Clusters of 3 shards (a replica each) as backends, 16 keys: the replica of a held lock's shard is cut off and takes over (its master killed or stopped; the cluster's failover or CLUSTER FAILOVER FORCE) on two clusters, or on one of the two that hold the lock when the third refused it, while the lock's slot and hot keys' slots move between shards on the others; graceful failovers, kills and reshardings between rounds: the lock must hold",
			Backends: 3, Shards: 3, Keys: 16, MaxTTL: 4 * time.Second, Faults: scheduleNone, Drive: driveClusterShards, MajorityUp: true},
		{Name: "cluster-loss-follows", About: "3 Redis Clusters of 3 shards (a replica each): on two, the replica of a held lock's shard is cut off and takes over (its shard stops counting: it lacks the lock), then the lock's slot moves on to another shard, which counts; every other round the last proxy restarts after the move: the slot's hold follows it, the lock must hold",
			Backends: 3, Shards: 3, Keys: 16, MaxTTL: lossMaxTTL, Faults: scheduleNone, Drive: driveClusterLossFollows},
		{Name: "cluster-partition", About: "3 Redis Clusters of 3 shards (a replica each): on two, a shard's master is cut off from the cluster bus (iptables) while the proxies still reach it, its replica takes over (CLUSTER FAILOVER TAKEOVER) and the old master goes on answering as master; the last proxy restarts and reads the map from another master, A locks through it, and C tries through the proxy that read the map from the old masters: the old masters must not count",
			Backends: 3, Shards: 3, BusCut: true, Keys: 16, MaxTTL: partitionMaxTTL, Faults: scheduleNone, Drive: driveClusterPartition},
		{Name: "control-cluster-shards-off", About: "CONTROL: cluster-shards with restart_quarantine off (no marker, no continuity check on any shard): a second holder must be seen",
			Quarantine: "off", Backends: 3, Shards: 3, Keys: 16, MaxTTL: 4 * time.Second, Faults: scheduleNone, Drive: driveClusterShards, DetectLock: true},
		{Name: "control-cluster-partition-off", About: "CONTROL: cluster-partition with restart_quarantine off (each proxy takes the slot map of the first master that answers, no confirmation by the other masters): a second holder must be seen",
			Quarantine: "off", Backends: 3, Shards: 3, BusCut: true, Keys: 16, MaxTTL: partitionMaxTTL, Faults: scheduleNone, Drive: driveClusterPartition, DetectLock: true},
		{Name: "control-cluster-loss-follows-off", About: "CONTROL: cluster-loss-follows with restart_quarantine off (no marker, no slot holds): a second holder must be seen",
			Quarantine: "off", Backends: 3, Shards: 3, Keys: 16, MaxTTL: lossMaxTTL, Faults: scheduleNone, Drive: driveClusterLossFollows, DetectLock: true},
	}
}

// Lookup finds scenarios by name. "all" is every scenario, "faults" every
// non-control one, "controls" the controls; names may be comma-separated.
func Lookup(names string) ([]Scenario, error) {
	all := Scenarios()
	var out []Scenario
	seen := map[string]bool{}
	add := func(s Scenario) {
		if !seen[s.Name] {
			seen[s.Name] = true
			out = append(out, s)
		}
	}
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, s := range all {
			if n == "all" || n == s.Name || (n == "faults" && !s.Control()) || (n == "controls" && s.Control()) {
				add(s)
				found = true
			}
		}
		if !found {
			var known []string
			for _, s := range all {
				known = append(known, s.Name)
			}
			return nil, fmt.Errorf("safety: unknown scenario %q (known: all, faults, controls, %s)", n, strings.Join(known, ", "))
		}
	}
	return out, nil
}

// Options shape a run. Zero values take the default written on the field.
type Options struct {
	Duration       time.Duration // workload time of a fault scenario (default 60s)
	Cooldown       time.Duration // faults are healed this long before the end (default 1s)
	Clients        int           // contending clients (default 16)
	Keys           int           // hot keys (default 3)
	Proxies        int           // proxies over the same masters (default 2)
	Backends       int           // masters (default 5)
	Seed           uint64        // random seed of faults and clients (default: from the clock)
	TTLMin, TTLMax time.Duration // workload TTLs (default 500ms-1s)
	MaxTTL         time.Duration // proxies' max_ttl (default 2s): the restart quarantine is this plus drift
	BackendTimeout time.Duration // proxies' backend_timeout (default 50ms)
	// Quarantine is the proxies' restart_quarantine in every scenario that
	// does not name one (default: the proxy's own default).
	Quarantine string
	Think      time.Duration // a holder's work takes up to this (default 10ms)
	Margin     time.Duration // validity a holder keeps in hand before writing (default 100ms)
	RetryMax   time.Duration // a refused client waits up to this (default 10ms)
	LinTimeout time.Duration // porcupine's budget per key (default 60s)
	VizDir     string        // write porcupine visualizations of illegal keys here
	Dir        string        // redis-server working directory (default: a temporary one)
	// Prepared is the cluster to run on, started ahead by Prepare for the
	// same scenario and options (default: Run starts one).
	Prepared *Prepared
	ProxyLog io.Writer    // proxies' warnings (default: discarded)
	Progress func(string) // progress lines (default: none)
}

func (o *Options) defaults() {
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.Duration, 60*time.Second)
	def(&o.Cooldown, time.Second)
	def(&o.TTLMin, 500*time.Millisecond)
	def(&o.TTLMax, time.Second)
	def(&o.MaxTTL, 2*time.Second)
	def(&o.BackendTimeout, 50*time.Millisecond)
	def(&o.Think, 10*time.Millisecond)
	def(&o.Margin, 100*time.Millisecond)
	def(&o.RetryMax, 10*time.Millisecond)
	def(&o.LinTimeout, 60*time.Second)
	if o.Clients <= 0 {
		o.Clients = 16
	}
	if o.Keys <= 0 {
		o.Keys = 3
	}
	if o.Proxies <= 0 {
		o.Proxies = 2
	}
	if o.Backends <= 0 {
		o.Backends = 5
	}
	if o.Seed == 0 {
		o.Seed = uint64(time.Now().UnixNano())
	}
	if o.TTLMax < o.TTLMin {
		o.TTLMax = o.TTLMin
	}
}

// shaped returns the options with the scenario's own shape applied.
func (o Options) shaped(sc Scenario) Options {
	set := func(d *time.Duration, v time.Duration) {
		if v > 0 {
			*d = v
		}
	}
	if sc.Backends > 0 {
		o.Backends = sc.Backends
	}
	if sc.Proxies > 0 {
		o.Proxies = sc.Proxies
	}
	if sc.Keys > 0 {
		o.Keys = sc.Keys
	}
	set(&o.MaxTTL, sc.MaxTTL)
	set(&o.TTLMin, sc.TTLMin)
	set(&o.TTLMax, sc.TTLMax)
	set(&o.Think, sc.Think)
	set(&o.BackendTimeout, sc.BackendTimeout)
	if sc.Quarantine != "" {
		o.Quarantine = sc.Quarantine
	}
	if o.TTLMax < o.TTLMin {
		o.TTLMax = o.TTLMin
	}
	return o
}

func (o *Options) progress(format string, a ...any) {
	if o.Progress != nil {
		o.Progress(fmt.Sprintf(format, a...))
	}
}

// Prepared is the cluster a scenario runs on, started and counted ahead
// of its run.
type Prepared struct {
	scenario  string
	c         *Cluster
	dir       string
	ownDir    bool // Prepare made dir: Close removes it
	took      time.Duration
	closeOnce sync.Once
	closeErr  error
}

// Prepare starts the cluster that scenario sc runs on with options opt and
// waits until every proxy counts every master (a master no proxy has used
// may be kept out for max_ttl + drift). It may be called while another
// scenario runs, so that the wait overlaps that run (the new cluster's
// processes are idle meanwhile); hand the result to Run in
// Options.Prepared, or Close it.
func Prepare(sc Scenario, opt Options) (p *Prepared, err error) {
	opt.defaults()
	opt = opt.shaped(sc)
	if opt.TTLMax > opt.MaxTTL {
		return nil, fmt.Errorf("safety: %s: TTLMax %v exceeds MaxTTL %v", sc.Name, opt.TTLMax, opt.MaxTTL)
	}
	proxies, slots := opt.Proxies, sc.Slots
	if sc.ProbeSlot {
		if slots > proxies {
			return nil, fmt.Errorf("safety: %s: a probe slot cannot go with slots for joining proxies", sc.Name)
		}
		proxies++
		slots = proxies
	}
	p = &Prepared{scenario: sc.Name, dir: opt.Dir}
	if p.dir == "" {
		if p.dir, err = os.MkdirTemp("", "redlock-safety-"); err != nil {
			return nil, fmt.Errorf("safety: %w", err)
		}
		p.ownDir = true
		dir := p.dir // p is nil once an error is returned
		defer func() {
			if err != nil {
				os.RemoveAll(dir)
			}
		}()
	}
	began := time.Now()
	cfg := ClusterConfig{
		Dir: p.dir, Backends: opt.Backends, Proxies: proxies, Slots: slots, Quarantine: opt.Quarantine,
		MaxTTL: opt.MaxTTL, BackendTimeout: opt.BackendTimeout, Replicas: sc.Replicas || sc.Sentinels > 0, Sentinels: sc.Sentinels,
		Durable: sc.Durable, Clocks: sc.Clocks, Shards: sc.Shards, BusCut: sc.BusCut, SlowPath: sc.SlowPath, ShutdownGrace: sc.ShutdownGrace, LocalFences: sc.LocalFences,
		Groups: sc.Groups, OldRedis: sc.OldRedis || sc.UpgradeFrom, UpgradeFrom: sc.UpgradeFrom, OldVolatile: sc.OldVolatile, Vouch: sc.Vouch, Log: opt.ProxyLog,
	}
	// A set-up that failed before any workload ran is tried once more on
	// new ports: a port freed by another cluster's stopped process can be
	// reached by that cluster's nodes or Sentinels still running (Redis
	// Cluster's bus gossip, Sentinel hellos on a master of the same
	// name), which the new one then mistakes for its own. The second
	// failure is the one reported, with the first.
	if p.c, err = StartCluster(cfg); err != nil {
		first := err
		opt.progress("  %s: starting the cluster failed, trying once more: %v", sc.Name, first)
		// In a directory of its own: a node's files (a cluster's
		// nodes.conf) must not come back on a port used again.
		cfg.Dir = filepath.Join(p.dir, "again")
		if err = os.MkdirAll(cfg.Dir, 0o755); err != nil {
			return nil, fmt.Errorf("safety: %w", err)
		}
		if p.c, err = StartCluster(cfg); err != nil {
			return nil, fmt.Errorf("%w (the first try: %v)", err, first)
		}
	}
	p.took = time.Since(began)
	return p, nil
}

// Close stops the cluster (and removes the directory Prepare made for it).
// Run closes the Prepared it was given.
func (p *Prepared) Close() error {
	p.closeOnce.Do(func() {
		p.closeErr = p.c.Close()
		if p.ownDir {
			os.RemoveAll(p.dir)
		}
	})
	return p.closeErr
}

// Run runs one scenario on a fresh cluster (Options.Prepared, or one it
// starts) and checks its history. The error is for a run that could not be
// carried out (no redis-server, a proxy that would not start); violations
// are in the Report.
func Run(ctx context.Context, sc Scenario, opt Options) (rep *Report, err error) {
	opt.defaults()
	opt = opt.shaped(sc)
	opt.progress("%s: %s", sc.Name, sc.About)
	p := opt.Prepared
	opt.Prepared = nil
	if p == nil {
		if p, err = Prepare(sc, opt); err != nil {
			return nil, err
		}
	} else if p.scenario != sc.Name {
		p.Close()
		return nil, fmt.Errorf("safety: a cluster prepared for %s given to %s", p.scenario, sc.Name)
	}
	defer func() {
		closing := time.Now()
		defer func() { opt.progress("  cluster closed in %v", time.Since(closing).Round(time.Millisecond)) }()
		if cerr := p.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("safety: stopping the cluster: %w", cerr)
		}
	}()
	c := p.c
	opt.progress("  cluster up and counted in %v", p.took.Round(time.Millisecond))
	h := NewHistory()
	h.FencedRegisters = sc.FencedRegisters
	keys := make([]string, opt.Keys)
	for i := range keys {
		keys[i] = fmt.Sprintf("hot:%d", i)
	}
	wl := WorkloadConfig{Keys: keys, TTLMin: opt.TTLMin, TTLMax: opt.TTLMax, Think: opt.Think, Margin: opt.Margin, RetryMax: opt.RetryMax}
	env := newEnv(c, h, opt.Seed, h.Start.Add(opt.Duration-opt.Cooldown), opt.Progress)
	env.Workload = wl
	workSlots := c.NumProxies()
	if sc.ProbeSlot {
		workSlots--
		env.ProbeSlot = workSlots
	}

	// The workload: contenders, then the scenario's other clients, spread
	// over the proxy slots (a client of an empty slot waits for a proxy to
	// join it).
	wctx, stopWorkload := context.WithCancel(ctx)
	defer stopWorkload()
	pick := rand.New(rand.NewPCG(opt.Seed, 0xc11e))
	var clients []*Client
	var cwg sync.WaitGroup
	spawn := func(id int, loop func(cl *Client)) {
		cl := NewClient(id, pick.IntN(workSlots), c, h, opt.Seed)
		clients = append(clients, cl)
		cwg.Add(1)
		go func() { // ends when the workload is stopped
			defer cwg.Done()
			loop(cl)
		}()
	}
	for i := 0; i < opt.Clients; i++ {
		spawn(i, func(cl *Client) { cl.Loop(wctx, wl) })
	}
	for i := 0; i < sc.Extenders; i++ {
		// An extender asks for its extends' numbers through the next slot:
		// the same grant must get the same number through any proxy.
		spawn(extenderIDs+i, func(cl *Client) {
			cl.FenceExtendsVia((cl.Proxy + 1) % workSlots)
			cl.ExtendLoop(wctx, wl)
		})
	}
	pc := PipelineConfig{Keys: []string{"pipe:0", "pipe:1"}, Slow: "pipe:slow", TTLMin: 20 * time.Millisecond, TTLMax: 60 * time.Millisecond, RetryMax: 5 * time.Millisecond}
	for i := 0; i < sc.Pipeliners; i++ {
		spawn(pipelinerIDs+i, func(cl *Client) { cl.PipelineLoop(wctx, c, pc) })
	}
	free := WorkloadConfig{TTLMin: 500 * time.Millisecond, TTLMax: time.Second, RetryMax: 20 * time.Millisecond}
	for i := 0; i < sc.FreeLockers; i++ {
		spawn(freeLockerIDs+i, func(cl *Client) { cl.FreeLoop(wctx, free) })
	}
	// The clients not yet moved to the proxy lock on the old Redis
	// directly, on the same keys.
	for i := 0; i < sc.OldClients; i++ {
		cl := NewOldClient(oldClientIDs+i, c, h, opt.Seed)
		clients = append(clients, cl)
		cwg.Add(1)
		go func() { // ends when the workload is stopped
			defer cwg.Done()
			cl.Loop(wctx, wl)
		}()
	}

	// Progress, once a second.
	pctx, stopProgress := context.WithCancel(ctx)
	var pwg sync.WaitGroup
	if opt.Progress != nil {
		pwg.Add(1)
		go func() {
			defer pwg.Done()
			t := time.NewTicker(time.Second)
			defer t.Stop()
			for {
				select {
				case <-pctx.Done():
					return
				case <-t.C:
					opt.progress("  %s holds %d, refusals %d, unknowns %d", h.rel(time.Now()),
						h.LiveHolds.Load(), h.LiveRefusals.Load(), h.LiveUnknowns.Load())
				}
			}
		}()
	}

	// A stall monitor: a ticker in this process that notes when it could not
	// run for a while, i.e. when the machine starved the whole process
	// (clients, proxies and relays alike). Liveness is not judged in stalls;
	// a grant that arrived late by no more than a delay the ticker suffered
	// meanwhile (a hiccup) is not charged to the proxy either.
	var stalls, hiccups []Interval
	sctx, stopStalls := context.WithCancel(ctx)
	var swg sync.WaitGroup
	swg.Add(1)
	go func() {
		defer swg.Done()
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		last := time.Now()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				now := time.Now()
				if gap := now.Sub(last); gap > hiccupThreshold {
					iv := Interval{From: last, To: now, Why: "the harness process did not run"}
					hiccups = append(hiccups, iv)
					if gap > stallThreshold {
						stalls = append(stalls, iv)
					}
				}
				last = now
			}
		}
	}()

	// The faults, and the orchestrated part of a control.
	fctx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	env.Go(func() { sc.Faults(fctx, env) })
	var driveErr error
	if sc.Drive != nil {
		driveErr = sc.Drive(ctx, env)
		sleepCtx(ctx, 300*time.Millisecond)
	} else {
		sleepCtx(ctx, time.Until(h.Start.Add(opt.Duration)))
	}
	stopFaults()
	env.wg.Wait()
	stopWorkload()
	cwg.Wait()
	end := time.Now()
	stopProgress()
	pwg.Wait()
	stopStalls()
	swg.Wait()
	for _, cl := range clients {
		cl.Close()
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("safety: %s interrupted: %w", sc.Name, err)
	}
	env.Snapshot("end of the run")

	opt.progress("  checking %d operations", len(h.Ops()))
	checking := time.Now()
	rep, err = check(sc, opt, env, h, end, stalls, hiccups)
	opt.progress("  checked in %v", time.Since(checking).Round(time.Millisecond))
	if err != nil {
		return rep, err
	}
	if driveErr != nil {
		rep.Problems = append(rep.Problems, fmt.Sprintf("the orchestrated part did not run as planned: %v", driveErr))
	}
	return rep, nil
}

// groupsMaxTTL is the proxies' max_ttl over Sentinel groups: the probe
// round's lock (held that long) outlasts two failovers and the proxies
// following them.
const groupsMaxTTL = 2 * time.Second

// rollbackMaxTTL is the proxies' max_ttl in the rollback scenarios: A's
// lock (held that long) outlasts stopping the proxies, the swap and fresh
// proxies reaching the masters.
const rollbackMaxTTL = 3 * time.Second

// twoProxyHolders is how many holders extend through two proxies in the
// two-proxy scenarios.
const twoProxyHolders = 6

// Client ids of the scenarios' other clients (the contenders are 0 up).
const (
	extenderIDs   = 10000
	pipelinerIDs  = 20000
	freeLockerIDs = 30000
)

// undoWithin is how long after a nil answer (and after the fault that
// caused it heals) the ghost-lock check gives the proxy to undo a partial
// acquisition: a second for the undo to run, plus the time to reconnect to
// a master that came back.
// joinGrace is the proxies' shutdown_grace in the proxy-join scenarios,
// whose drive stops every proxy but the joiner while A's lock is held: a
// stop must not outlast A's validity.
const joinGrace = 100 * time.Millisecond

const undoWithin = time.Second + reconnectAllowance

// stallThreshold is how late the stall monitor's 10ms tick must be to
// count as a stall of the whole process, hiccupThreshold as a hiccup;
// slowOp is the latency from which an operation is listed among the
// slowest.
const (
	stallThreshold  = 200 * time.Millisecond
	hiccupThreshold = 15 * time.Millisecond
	slowOp          = 500 * time.Millisecond
)
