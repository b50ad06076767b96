package safety

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// shortRuns is each fault scenario's workload time in CI: long enough for
// at least one full fault cycle (a restart's quarantine is max_ttl + drift,
// about 2s). The orchestrated scenarios last as long as their orchestration
// needs; those that repeat their rounds until the faults' deadline get 1s
// here, so that they run one round. The long run is `go run ./bench -mode
// safety` (60s per scenario).
var shortRuns = map[string]time.Duration{
	"none":           3 * time.Second,
	"kill9":          5 * time.Second,
	"kill9-restart":  4500 * time.Millisecond,
	"sigstop":        4 * time.Second,
	"blackhole":      4 * time.Second,
	"delay":          4 * time.Second,
	"mixed":          8 * time.Second,
	"majority-down":  10 * time.Second,
	"proxy-churn":    8 * time.Second,
	"failover":       10 * time.Second,
	"pipeline-slow":  4 * time.Second,
	"extend-partial": 6 * time.Second,
	"ghost-pause":    6 * time.Second,
	"ghost-cut":      6 * time.Second,
	"greedy":         4 * time.Second,
	// The fencing control runs the plain workload on local counters.
	"control-fence-local": 3 * time.Second,
	// Issue 19's data that goes back in time, extends through two
	// proxies, and undos: one round or cycle each.
	"sentinel-failback":           time.Second,
	"control-sentinel-off":        time.Second,
	"stale-aof":                   time.Second,
	"control-stale-aof-off":       time.Second,
	"eviction-toggle":             time.Second,
	"control-eviction-off":        time.Second,
	"clock-step":                  time.Second,
	"control-clock-off":           time.Second,
	"extend-two-proxies":          3 * time.Second,
	"control-extend-late-step":    3 * time.Second,
	"script-flush":                5 * time.Second,
	"control-undo-gives-up":       5 * time.Second,
	"shutdown-hang":               5 * time.Second,
	"control-shutdown-unreported": 5 * time.Second,
	// Issue 21's Sentinel groups: the first cycle is a probe round, the
	// second fails one group over; the control runs one probe round.
	"sentinel-groups":             15 * time.Second,
	"control-sentinel-groups-off": time.Second,
	// Issue 25's upgrade from a single Redis.
	"upgrade":                 7 * time.Second,
	"control-upgrade-unnamed": 2 * time.Second,
	// Issue 29's data that goes back within a run and the upgrade's old
	// Redis losing its data: two rounds each (the second of rollback
	// keeps the proxies and retires the copy's epoch; that of
	// upgrade-restart moves the address to another server); the controls
	// one.
	"rollback":                    18 * time.Second,
	"control-rollback-off":        time.Second,
	"upgrade-restart":             14 * time.Second,
	"control-upgrade-restart-off": time.Second,
	// Issue 30's mixed TTLs under a 10 minute max_ttl.
	"mixed-ttl":             15 * time.Second,
	"control-mixed-ttl-off": 8 * time.Second,
	// Issue 35's Sentinel and Cluster votes: one orchestrated round each.
	"sentinel-failback-undemoted":             time.Second,
	"control-sentinel-failback-undemoted-off": time.Second,
	"cluster-loss-follows":                    time.Second,
	"control-cluster-loss-follows-off":        time.Second,
	"cluster-partition":                       time.Second,
	"control-cluster-partition-off":           time.Second,
	// Redis Cluster backends: one orchestrated round each.
	"cluster-shards":             time.Second,
	"control-cluster-shards-off": time.Second,
}

// requireRedis fails (never skips) when redis-server or redis-sentinel is
// missing.
func requireRedis(t *testing.T) {
	t.Helper()
	if _, err := redisproc.Binary(); err != nil {
		t.Fatalf("%v\nthe safety harness needs real redis-server processes: run ./test.sh, which installs it", err)
	}
	if _, err := redisproc.SentinelBinary(); err != nil {
		t.Fatalf("%v\nthe safety harness needs real redis-sentinel processes: run ./test.sh, which installs it", err)
	}
}

// SAFETY_QUARANTINE, when set, is the proxies' restart_quarantine in every
// scenario that does not name one (to try a rule before it is the default).

// seed is SAFETY_SEED when set (to repeat a run), else the clock.
func seed(t *testing.T) uint64 {
	if s := os.Getenv("SAFETY_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("SAFETY_SEED: %v", err)
		}
		return n
	}
	return uint64(time.Now().UnixNano())
}

// syncBuffer keeps the proxies' warnings; they are shown when a run fails.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) tail(n int) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.b.Bytes()
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}

// runner runs scenarios one after the other with the CI settings, each
// on a cluster started while the previous one ran: a fresh cluster waits
// until its proxies count its masters (up to max_ttl + drift and a second),
// and that wait then overlaps the previous run instead of adding to it.
type runner struct {
	seed uint64
	dir  string
	next map[string]chan prepared // at most one, for the next scenario
	wg   sync.WaitGroup
}

type prepared struct {
	p   *Prepared
	err error
	log *syncBuffer
}

// newRunner returns a runner whose clusters live in t's temporary
// directory; a cluster prepared and never run is closed when t ends.
func newRunner(t *testing.T, seed uint64) *runner {
	r := &runner{seed: seed, dir: t.TempDir(), next: map[string]chan prepared{}}
	t.Cleanup(func() {
		r.wg.Wait()
		for _, ch := range r.next {
			if pr := <-ch; pr.p != nil {
				pr.p.Close()
			}
		}
	})
	return r
}

func (r *runner) options(sc Scenario, log *syncBuffer) Options {
	return Options{
		Duration:   shortRuns[sc.Name],
		Seed:       r.seed,
		Quarantine: os.Getenv("SAFETY_QUARANTINE"),
		Dir:        r.dir,
		LinTimeout: 30 * time.Second,
		ProxyLog:   log,
	}
}

// prepare starts sc's cluster in the background.
func (r *runner) prepare(sc Scenario) {
	ch := make(chan prepared, 1)
	r.next[sc.Name] = ch
	r.wg.Add(1)
	go func() { // ends once the cluster counts (or failed); the cleanup waits for it
		defer r.wg.Done()
		log := &syncBuffer{}
		p, err := Prepare(sc, r.options(sc, log))
		ch <- prepared{p, err, log}
	}()
}

// run runs sc on the cluster prepared for it (or a new one) after starting
// the cluster of then, the scenario to run next (if any), and logs the
// report. Run stops every process, relay, proxy and goroutine it started
// before it returns.
func (r *runner) run(t *testing.T, sc Scenario, then *Scenario) *Report {
	t.Helper()
	start := time.Now()
	if _, ok := r.next[sc.Name]; !ok {
		r.prepare(sc)
	}
	pr := <-r.next[sc.Name]
	delete(r.next, sc.Name)
	if pr.err != nil {
		t.Fatalf("%s: %v", sc.Name, pr.err)
	}
	if then != nil {
		r.prepare(*then)
	}
	opt := r.options(sc, pr.log)
	opt.Prepared = pr.p
	opt.Progress = func(line string) { t.Log(line) }
	proxyLog := pr.log
	rep, err := Run(context.Background(), sc, opt)
	if err != nil {
		t.Fatalf("%s: %v", sc.Name, err)
	}
	var details strings.Builder
	rep.WriteDetails(&details, true)
	t.Logf("took %v\n%s", time.Since(start).Round(time.Millisecond), details.String())
	if !rep.Passed() {
		t.Logf("the proxies' last warnings:\n%s", proxyLog.tail(8<<10))
	}
	return rep
}

// scenarios returns the controls, or every other scenario.
func scenarios(controls bool) []Scenario {
	var out []Scenario
	for _, sc := range Scenarios() {
		if sc.Control() == controls {
			out = append(out, sc)
		}
	}
	return out
}

// after is the scenario after scs[i], if any.
func after(scs []Scenario, i int) *Scenario {
	if i+1 < len(scs) {
		return &scs[i+1]
	}
	return nil
}

// TestFaultScenarios runs a short version of every fault scenario: each
// must show zero violations, and those that keep a majority up must keep
// granting locks in every second.
func TestFaultScenarios(t *testing.T) {
	requireRedis(t)
	s := seed(t)
	t.Logf("seed %d (set SAFETY_SEED to repeat)", s)
	scs := scenarios(false)
	r := newRunner(t, s)
	for i, sc := range scs {
		t.Run(sc.Name, func(t *testing.T) {
			rep := r.run(t, sc, after(scs, i))
			if v := rep.Violations(); v != 0 {
				t.Errorf("%s: %d violations (windows %d, lost updates %d, non-linearizable keys %d, grants without majority %d, late grants %d, ghost locks %d, fencing %d); see the examples above",
					sc.Name, v, rep.WindowViolations, rep.LostUpdates, rep.NonLinearizable, rep.NoMajorityGrants, rep.LateGrants, rep.GhostLocks, rep.FenceViolations)
			}
			if rep.Holds == 0 {
				t.Errorf("%s: no lock was granted", sc.Name)
			}
			if sc.MajorityUp && rep.EmptySeconds > 0 {
				t.Errorf("%s: %d seconds without a grant while a majority was up: %v", sc.Name, rep.EmptySeconds, rep.GrantsPerSecond)
			}
			if sc.Recovers && rep.GrantsAfterRecovery == 0 {
				t.Errorf("%s: no grant after the majority came back", sc.Name)
			}
			if sc.RefusesStale && rep.StaleWritesRefused == 0 {
				t.Errorf("%s: the fenced register refused no stale write", sc.Name)
			}
			for _, p := range rep.Problems {
				t.Errorf("%s: %s", sc.Name, p)
			}
		})
	}
}

// TestControls proves the checkers can see: each control breaks an
// assumption the proxy rests on, in an orchestrated interleaving, and its
// violation must be reported.
func TestControls(t *testing.T) {
	requireRedis(t)
	s := seed(t)
	t.Logf("seed %d (set SAFETY_SEED to repeat)", s)
	scs := scenarios(true)
	r := newRunner(t, s)
	for i, sc := range scs {
		t.Run(sc.Name, func(t *testing.T) {
			rep := r.run(t, sc, after(scs, i))
			if sc.DetectLock && (rep.WindowViolations == 0 || rep.NonLinearizable == 0) {
				t.Errorf("%s: a second holder inside the first one's validity went unseen: windows %d, non-linearizable keys %d",
					sc.Name, rep.WindowViolations, rep.NonLinearizable)
			}
			if sc.DetectLost && rep.LostUpdates == 0 {
				t.Errorf("%s: the paused holder's lost update went unseen", sc.Name)
			}
			if sc.DetectGhost && rep.GhostLocks == 0 {
				t.Errorf("%s: the ghost lock went unseen (%d snapshots)", sc.Name, rep.Snapshots)
			}
			if sc.DetectFence && rep.FenceViolations == 0 {
				t.Errorf("%s: fencing numbers out of grant order went unseen (%d numbers on %d grants)", sc.Name, rep.Fenced, rep.FencedGrants)
			}
			for _, p := range rep.Problems {
				t.Errorf("%s: %s", sc.Name, p)
			}
		})
	}
}
