package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// upgrade is an old single Redis, three new masters, and a proxy over the
// masters, with the old Redis named as upgrade_from or not.
type upgrade struct {
	old    *redisproc.Server
	c      *cluster
	direct *redis.Client // a client still locking on the old Redis directly
}

func newUpgrade(t *testing.T, named bool, mutate ...func(*config.Config)) *upgrade {
	t.Helper()
	old := startRedis(t, 1)[0]
	u := &upgrade{old: old}
	u.c = newCluster(t, 3, append([]func(*config.Config){func(cfg *config.Config) {
		if named {
			cfg.UpgradeFrom = old.Addr
		}
	}}, mutate...)...)
	u.direct = redis.NewClient(&redis.Options{Addr: old.Addr, MaxRetries: -1})
	t.Cleanup(func() { u.direct.Close() })
	return u
}

// locker takes and releases one lock by name, the way a group of clients
// does it.
type locker interface {
	lock(ctx context.Context, key string) (release func(), ok bool)
}

// handLocker is go-redis by hand: SET NX PX and the release script.
type handLocker struct {
	cl  *redis.Client
	seq *atomic.Int64
	tag string
}

func (h handLocker) lock(ctx context.Context, key string) (func(), bool) {
	tok := fmt.Sprintf("%s-%d", h.tag, h.seq.Add(1))
	if ok, err := h.cl.SetNX(ctx, key, tok, time.Second).Result(); !ok || err != nil {
		return nil, false
	}
	return func() { h.cl.Eval(ctx, seedRelease, []string{key}, tok) }, true
}

// redsyncLocker is redsync with one pool (the old Redis, as a single-node
// Redlock).
type redsyncLocker struct{ rs *redsync.Redsync }

func (r redsyncLocker) lock(ctx context.Context, key string) (func(), bool) {
	m := r.rs.NewMutex(key, redsync.WithExpiry(time.Second), redsync.WithTries(1))
	if err := m.LockContext(ctx); err != nil {
		return nil, false
	}
	return func() { m.UnlockContext(ctx) }, true
}

// contend runs old-Redis clients and proxy clients on the same keys for d
// and counts the times two of them held one key at once (each holder
// marks the key as its own, checks no one else marked it, and clears it
// before releasing), and the lost updates of a register each holder
// increments with a read, a pause and a write.
func contend(t *testing.T, old, via []locker, d time.Duration) (overlaps, lost, grants int64) {
	t.Helper()
	const keys = 3
	var mu sync.Mutex
	owner := map[string]int{}
	reg := make([]int64, keys)
	var inc [keys]atomic.Int64
	var over, total atomic.Int64
	ctx := context.Background()
	deadline := time.Now().Add(d)
	var wg sync.WaitGroup
	all := append(append([]locker(nil), old...), via...)
	for w, l := range all {
		wg.Add(1)
		go func(w int, l locker) {
			defer wg.Done()
			for i := 0; time.Now().Before(deadline); i++ {
				k := i % keys
				key := fmt.Sprintf("upgrade:%d", k)
				release, ok := l.lock(ctx, key)
				if !ok {
					time.Sleep(time.Millisecond)
					continue
				}
				total.Add(1)
				mu.Lock()
				if _, held := owner[key]; held {
					over.Add(1)
				}
				owner[key] = w
				v := reg[k]
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				mu.Lock()
				reg[k] = v + 1
				inc[k].Add(1)
				if owner[key] == w {
					delete(owner, key)
				}
				mu.Unlock()
				release()
			}
		}(w, l)
	}
	wg.Wait()
	for k := range reg {
		lost += inc[k].Load() - reg[k]
	}
	return over.Load(), lost, total.Load()
}

func (u *upgrade) groups(t *testing.T, oldGroup string) (old, via []locker) {
	var seq atomic.Int64
	for i := 0; i < 3; i++ {
		switch oldGroup {
		case "redsync":
			old = append(old, redsyncLocker{redsync.New(goredis.NewPool(u.direct))})
		default:
			old = append(old, handLocker{cl: u.direct, seq: &seq, tag: fmt.Sprintf("old%d", i)})
		}
		via = append(via, handLocker{cl: u.c.client(2), seq: &seq, tag: fmt.Sprintf("new%d", i)})
	}
	return old, via
}

// While some clients lock on the old Redis and others through the proxy,
// without upgrade_from the two groups hold the same keys at once (the
// control); with it, never, and no update is lost. The old group is
// go-redis by hand, then redsync with one pool.
func TestUpgradeFromExcludesClientsStillOnTheOldRedis(t *testing.T) {
	waits(t)
	for _, oldGroup := range []string{"go-redis", "redsync"} {
		t.Run(oldGroup, func(t *testing.T) {
			control := newUpgrade(t, false)
			old, via := control.groups(t, oldGroup)
			overlaps, lost, grants := contend(t, old, via, 1500*time.Millisecond)
			if overlaps == 0 && lost == 0 {
				t.Fatalf("control: without upgrade_from, %d grants and no overlap: the check cannot see the failure it is for", grants)
			}
			u := newUpgrade(t, true)
			old, via = u.groups(t, oldGroup)
			overlaps, lost, grants = contend(t, old, via, 3*time.Second)
			if overlaps != 0 || lost != 0 {
				t.Fatalf("with upgrade_from: %d overlaps and %d lost updates in %d grants", overlaps, lost, grants)
			}
			if grants < 20 {
				t.Fatalf("with upgrade_from only %d grants: the test shows little", grants)
			}
		})
	}
}

// A lock taken on the old Redis before the proxy started is respected, and
// the proxy's reads show it; the proxy's lock shows on the old Redis as
// an ordinary key, and its release reaches it.
func TestUpgradeFromSeesLocksOnBothSides(t *testing.T) {
	old := startRedis(t, 1)[0]
	direct := redis.NewClient(&redis.Options{Addr: old.Addr})
	t.Cleanup(func() { direct.Close() })
	ctx := context.Background()
	if err := direct.Set(ctx, "held:before", "old-client", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 3, func(cfg *config.Config) { cfg.UpgradeFrom = old.Addr })
	cl := c.client(2)
	mustDo(t, cl, nil, "SET", "held:before", "new-client", "NX", "PX", "10000")
	// Nothing of the refused attempt is left on the masters (a master that
	// answered late is undone when its reply comes).
	if h := c.eventuallyHolders("held:before", "new-client", 0); len(h) != 0 {
		t.Fatalf("the refused attempt is left on masters %v", h)
	}
	mustDo(t, cl, "old-client", "GET", "held:before")
	if p, err := cl.PTTL(ctx, "held:before").Result(); err != nil || p < 8*time.Second {
		t.Fatalf("PTTL through the proxy of a lock held on the old Redis = %v, %v", p, err)
	}
	// The proxy's lock is an ordinary key on the old Redis.
	mustDo(t, cl, "OK", "SET", "held:proxy", "tok", "NX", "PX", "10000")
	if v, err := direct.Get(ctx, "held:proxy").Result(); err != nil || v != "tok" {
		t.Fatalf("the old Redis holds %q, %v; want the proxy's lock", v, err)
	}
	if ok, _ := direct.SetNX(ctx, "held:proxy", "old-client", 10*time.Second).Result(); ok {
		t.Fatal("an old client took a lock held through the proxy")
	}
	// An extend reaches it too, and so does the release.
	mustDo(t, cl, 1, "EVAL", spacedExtend, "1", "held:proxy", "tok", "20000")
	if p, _ := direct.PTTL(ctx, "held:proxy").Result(); p < 15*time.Second {
		t.Fatalf("the old Redis's copy has %v left after an extend to 20 s", p)
	}
	mustDo(t, cl, 1, "EVAL", seedRelease, "1", "held:proxy", "tok")
	if n, _ := direct.Exists(ctx, "held:proxy").Result(); n != 0 {
		t.Fatal("the release did not reach the old Redis")
	}
	// FENCE gives no number for a token the old Redis does not hold.
	mustDo(t, cl, "OK", "SET", "held:fence", "tok", "NX", "PX", "10000")
	if n, err := cl.Do(ctx, "FENCE", "held:fence", "tok").Int64(); err != nil || n <= 0 {
		t.Fatalf("FENCE = %v, %v", n, err)
	}
	direct.Del(ctx, "held:fence")
	direct.Set(ctx, "held:fence", "old-client", 10*time.Second)
	mustDo(t, cl, nil, "FENCE", "held:fence", "tok")
}

// When the old Redis hangs or is down, the clients still on it may hold
// any lock: the proxy refuses every lock, leaves nothing behind on the
// masters, and grants again once it answers: at once after a hang (its
// data is as it was), only after the hold after a restart (its data, and
// an old client's lock with it, may be gone).
func TestUpgradeFromDownRefusesLocks(t *testing.T) {
	const maxTTL = 2 * time.Second
	u := newUpgrade(t, true, backendTimeout(100*time.Millisecond), func(cfg *config.Config) { cfg.MaxTTL = maxTTL })
	cl := u.c.client(2)
	ctx := context.Background()
	for _, fault := range []string{"hung", "down"} {
		switch fault {
		case "hung":
			if err := u.old.Pause(); err != nil {
				t.Fatal(err)
			}
		case "down":
			u.old.Kill()
		}
		key := uniqueKey("upgrade-" + fault)
		if ok, err := cl.SetNX(ctx, key, "tok", time.Second).Result(); ok || (err != nil && !errors.Is(err, redis.Nil)) {
			t.Fatalf("old Redis %s: SET NX = %v, %v; want nil", fault, ok, err)
		}
		if h := u.c.eventuallyHolders(key, "tok", 0); len(h) != 0 {
			t.Fatalf("old Redis %s: the refused attempt is left on masters %v", fault, h)
		}
		switch fault {
		case "hung":
			u.old.Resume()
		case "down":
			if err := u.old.Restart(); err != nil {
				t.Fatal(err)
			}
		}
		back := time.Now()
		deadline := back.Add(10 * time.Second)
		for {
			if ok, _ := cl.SetNX(ctx, uniqueKey("upgrade-back"), "tok", time.Second).Result(); ok {
				if fault == "down" && time.Since(back) < maxTTL-200*time.Millisecond {
					t.Fatalf("a lock granted %v after the old Redis restarted empty; want none for max_ttl + drift", time.Since(back))
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("no lock granted after the old Redis came back (%s)", fault)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// The proxy says when upgrade_from can go: only once the old Redis has had
// no client but the proxies for max_ttl + drift, counted from the last
// direct client, and again "keep it" when one comes back.
func TestUpgradeFromSaysWhenItCanBeDropped(t *testing.T) {
	waits(t)
	u := newUpgrade(t, true, func(cfg *config.Config) { cfg.MaxTTL = 2 * time.Second })
	cl := u.c.client(2)
	ctx := context.Background()
	info := func() string {
		s, err := cl.Info(ctx, "proxy").Result()
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := u.direct.Ping(ctx).Err(); err != nil { // a direct client, connected
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if s := info(); !strings.Contains(s, "upgrade_from_can_drop:0") || !strings.Contains(s, "upgrade_from_direct_clients:1") {
		t.Fatalf("with a direct client connected, INFO proxy says:\n%s", s)
	}
	u.direct.Close()
	gone := time.Now()
	time.Sleep(time.Second)
	if s := info(); !strings.Contains(s, "upgrade_from_can_drop:0") {
		t.Fatalf("a second after the last direct client left, INFO proxy says it can be dropped:\n%s", s)
	}
	waitFor(t, 10*time.Second, "INFO to say the old Redis can be dropped", func() error {
		if s := info(); !strings.Contains(s, "upgrade_from_can_drop:1") {
			return fmt.Errorf("INFO:\n%s", s)
		}
		return nil
	})
	if since := time.Since(gone); since < 2*time.Second {
		t.Fatalf("said it can be dropped %v after the last direct client left; want at least max_ttl + drift", since)
	}
	// A direct client that comes and goes between two looks still counts.
	for i := 0; i < 5; i++ {
		c := redis.NewClient(&redis.Options{Addr: u.old.Addr})
		c.Ping(ctx)
		c.Close()
	}
	time.Sleep(1500 * time.Millisecond)
	if s := info(); !strings.Contains(s, "upgrade_from_can_drop:0") {
		t.Fatalf("after direct clients came and went, INFO proxy says:\n%s", s)
	}
}

// The same with redis-py's Lock on the old Redis (Debian's python3-redis,
// unchanged): its holds, reported in wall-clock time, never overlap the
// proxy clients' holds of the same key with upgrade_from, and do without
// it (the control).
func TestUpgradeFromExcludesRedisPyOnTheOldRedis(t *testing.T) {
	waits(t)
	argv, _ := requireRedisPy(t)
	for _, named := range []bool{false, true} {
		u := newUpgrade(t, named)
		key := uniqueKey("upgrade-redispy")
		py := exec.Command(argv[0], append(argv[1:], "--addr", u.old.Addr, "--scenario", "holds", "--key", key,
			"--threads", "3", "--seconds", "2.5")...)
		var out strings.Builder
		py.Stdout = &out
		var errOut strings.Builder
		py.Stderr = &errOut
		if err := py.Start(); err != nil {
			t.Fatal(err)
		}
		var mu sync.Mutex
		var ours [][2]float64
		var wg sync.WaitGroup
		var seq atomic.Int64
		deadline := time.Now().Add(2500 * time.Millisecond)
		for w := 0; w < 3; w++ {
			wg.Add(1)
			go func(w int) {
				defer wg.Done()
				l := handLocker{cl: u.c.client(2), seq: &seq, tag: fmt.Sprintf("new%d", w)}
				for time.Now().Before(deadline) {
					release, ok := l.lock(context.Background(), key)
					if !ok {
						time.Sleep(time.Millisecond)
						continue
					}
					from := float64(time.Now().UnixNano()) / 1e9
					time.Sleep(2 * time.Millisecond)
					to := float64(time.Now().UnixNano()) / 1e9
					mu.Lock()
					ours = append(ours, [2]float64{from, to})
					mu.Unlock()
					release()
				}
			}(w)
		}
		wg.Wait()
		if err := py.Wait(); err != nil {
			t.Fatalf("redis-py: %v\n%s\n%s", err, out.String(), errOut.String())
		}
		var theirs [][2]float64
		for _, line := range strings.Split(out.String(), "\n") {
			var h struct {
				Step     string
				From, To float64
			}
			if json.Unmarshal([]byte(line), &h) == nil && h.Step == "hold" {
				theirs = append(theirs, [2]float64{h.From, h.To})
			}
		}
		overlaps := 0
		for _, a := range ours {
			for _, b := range theirs {
				if a[0] < b[1] && b[0] < a[1] {
					overlaps++
				}
			}
		}
		switch {
		case len(ours) == 0 || len(theirs) == 0:
			t.Fatalf("upgrade_from %v: %d holds through the proxy, %d by redis-py: no contention to judge", named, len(ours), len(theirs))
		case !named && overlaps == 0:
			t.Fatalf("control: without upgrade_from, %d and %d holds never overlapped: the check cannot see the failure it is for", len(ours), len(theirs))
		case named && overlaps != 0:
			t.Fatalf("with upgrade_from: %d overlaps between %d holds through the proxy and %d by redis-py on the old Redis", overlaps, len(ours), len(theirs))
		}
	}
}

// An old client holds L on the old Redis, which then restarts empty
// (kill -9, no persistence): the old client still believes it holds L, so
// the proxy refuses L for max_ttl + drift after the restart, as it would
// count no master that lost its data. The control, with the restart rule
// off, grants L at once: the check can fail.
func TestUpgradeFromOldRedisRestartedEmptyStillVetoes(t *testing.T) {
	waits(t)
	for _, rule := range []string{"strict", "off"} {
		t.Run(rule, func(t *testing.T) {
			// "strict" runs the run-id rule, which the strict rule
			// includes: the old Redis's restart is seen by this proxy.
			const maxTTL, ttl = 8 * time.Second, 6 * time.Second
			mode := map[string]string{"strict": "run-id", "off": "off"}[rule]
			u := newUpgrade(t, true, func(cfg *config.Config) { cfg.MaxTTL, cfg.RestartQuarantine = maxTTL, mode })
			ctx := context.Background()
			key := uniqueKey("upgrade-restart")
			if ok, err := u.direct.SetNX(ctx, key, "old-client", ttl).Result(); !ok || err != nil {
				t.Fatalf("the old client's SET NX = %v, %v", ok, err)
			}
			held := time.Now().Add(ttl - 500*time.Millisecond)
			u.old.Kill()
			if err := u.old.Restart(); err != nil {
				t.Fatal(err)
			}
			cl := u.c.client(2)
			granted := false
			for time.Now().Before(held) {
				if ok, _ := cl.SetNX(ctx, key, "proxy-client", ttl).Result(); ok {
					granted = true
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			switch {
			case rule == "strict" && granted:
				t.Fatal("the proxy granted L while the old client's lock, forgotten by the restarted old Redis, was still valid")
			case rule == "off" && !granted:
				t.Fatal("control: with no restart rule the proxy never granted L; the test shows nothing")
			}
		})
	}
}

// Old clients that lock in another database than 0 (their SELECT 2): the
// proxy serves database 0 only, so the clients that move use the same
// names in database 0 of the masters, and the veto must read them in
// database 2 of the old Redis. Without upgrade_from_db the proxy grants a
// lock an old client holds there, and says why; with it, the lock is
// refused, reads see it, and a lock taken through the proxy is a key of
// database 2 there, which the old clients respect.
func TestUpgradeFromReadsTheOldClientsDatabase(t *testing.T) {
	old := startRedis(t, 1)[0]
	direct := redis.NewClient(&redis.Options{Addr: old.Addr, DB: 2})
	t.Cleanup(func() { direct.Close() })
	ctx := context.Background()
	if err := direct.Set(ctx, "held:db2", "old-client", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	masters := addrsOf(startRedis(t, 3))

	t.Run("control without upgrade_from_db", func(t *testing.T) {
		var logs syncBuffer
		a := startLogged(t, masters, &logs, func(cfg *config.Config) { cfg.UpgradeFrom = old.Addr })
		cl := proxyClient(t, a.Addr(), 2)
		waitGrants(t, cl)
		mustDo(t, cl, "OK", "SET", "held:db2", "new-client", "NX", "PX", "10000")
		waitLog(t, &logs, "direct clients use another database", 5*time.Second)
		mustDo(t, cl, 1, "EVAL", seedRelease, "1", "held:db2", "new-client")
	})

	var logs syncBuffer
	a := startLogged(t, masters, &logs, func(cfg *config.Config) {
		cfg.UpgradeFrom = old.Addr
		cfg.UpgradeFromDB = 2
	})
	cl := proxyClient(t, a.Addr(), 2)
	waitGrants(t, cl)
	mustDo(t, cl, nil, "SET", "held:db2", "new-client", "NX", "PX", "10000")
	mustDo(t, cl, "old-client", "GET", "held:db2")
	mustDo(t, cl, "OK", "SET", "held:proxy", "tok", "NX", "PX", "10000")
	if v, err := direct.Get(ctx, "held:proxy").Result(); err != nil || v != "tok" {
		t.Fatalf("database 2 of the old Redis holds %q, %v; want the proxy's lock", v, err)
	}
	if ok, _ := direct.SetNX(ctx, "held:proxy", "old-client", 10*time.Second).Result(); ok {
		t.Fatal("an old client took a lock held through the proxy")
	}
	time.Sleep(1500 * time.Millisecond) // a look at the direct clients or more
	if n := countLines(&logs, "another database"); n != 0 {
		t.Fatalf("warned of direct clients in another database while it reads theirs:\n%s", logs.String())
	}
}

// waitGrants waits until a lock nobody holds is granted through cl.
func waitGrants(t *testing.T, cl *redis.Client) {
	t.Helper()
	waitFor(t, 10*time.Second, "a grant through the proxy", func() error {
		k := uniqueKey("ready")
		ok, err := cl.SetNX(context.Background(), k, "t", time.Second).Result()
		if !ok {
			return fmt.Errorf("SET NX %s = %v, %v", k, ok, err)
		}
		return nil
	})
}
