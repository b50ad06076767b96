package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// extendOrAcquire extends the lock when it holds the caller's token and
// takes it when it is free: the shape of redsync's WithSetNXOnExtend,
// RedLock.net's extend and aioredlock's acquire.
const extendOrAcquire = `if redis.call("GET", KEYS[1]) == ARGV[1] then
  return redis.call("PEXPIRE", KEYS[1], ARGV[2])
elseif redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2], "NX") then
  return 1
else
  return 0
end`

func backendTimeout(d time.Duration) func(*config.Config) {
	return func(cfg *config.Config) { cfg.BackendTimeout = d }
}

// A failed extend-or-acquire leaves the holder's lock alone: with one of
// three masters down and another hung, the extend loses the round, and
// nothing may delete the holder's still-valid token afterwards.
func TestFailedExtendOrAcquireKeepsTheHoldersLock(t *testing.T) {
	c := newCluster(t, 3, backendTimeout(50*time.Millisecond))
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("eoa")
	if ok, err := cl.SetNX(ctx, key, "A", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	c.eventuallyHolders(key, "A", 3)
	c.servers[2].Kill()
	if err := c.servers[1].Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			c.servers[1].Resume()
		}
	}()
	got, err := cl.Eval(ctx, extendOrAcquire, []string{key}, "A", 10000).Result()
	if err != nil {
		t.Fatalf("extend-or-acquire: %v", err)
	}
	if got != int64(0) {
		t.Fatalf("extend-or-acquire with one master down and one hung = %v, want 0 (lost)", got)
	}
	time.Sleep(200 * time.Millisecond)
	c.servers[1].Resume()
	resumed = true
	if h := c.eventuallyHolders(key, "A", 2); len(h) != 2 {
		t.Fatalf("after the failed extend, masters %v hold A's token; want masters 0 and 1 (its lock has 9 s left)", h)
	}
	time.Sleep(300 * time.Millisecond) // let anything queued behind the extend run
	if h := c.holders(key, "A"); len(h) != 2 {
		t.Fatalf("after the failed extend, masters %v hold A's token; want masters 0 and 1", h)
	}
	if ok, err := c.client(2).SetNX(ctx, key, "C", 10*time.Second).Result(); ok || err != nil {
		t.Fatalf("a second client's SET NX = %v, %v while A's lock is valid; want nil", ok, err)
	}
}

// A grant is judged when its reply leaves the proxy: an OK that waits in a
// pipeline behind a slower command until its validity ran out is answered
// nil and undone, so the client is never told it holds a lock that another
// client may already hold.
func TestPipelinedGrantIsJudgedWhenItsReplyLeaves(t *testing.T) {
	c := newCluster(t, 3, backendTimeout(80*time.Millisecond))
	if err := c.servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	defer c.servers[2].Resume()
	key, other := uniqueKey("pipelined"), uniqueKey("slow")
	// PTTL waits for every backend, so for the hung one's timeout; the SET
	// before it is decided at once but its 30 ms are over by then.
	payload := "*6\r\n$3\r\nSET\r\n$" + itoa(len(key)) + "\r\n" + key + "\r\n$1\r\nA\r\n$2\r\nNX\r\n$2\r\nPX\r\n$2\r\n30\r\n" +
		"*2\r\n$4\r\nPTTL\r\n$" + itoa(len(other)) + "\r\n" + other + "\r\n"
	start := time.Now()
	reply, _ := exchange(t, c.app.Addr(), payload, time.Second)
	elapsed := time.Since(start)
	if elapsed < 30*time.Millisecond {
		t.Fatalf("the pipeline was answered in %v: the hung master did not hold it up, the test proves nothing", elapsed)
	}
	if !strings.HasPrefix(reply, "$-1\r\n") {
		t.Fatalf("pipelined SET NX PX 30 answered %q after %v: a grant whose validity ended before its reply left must be nil", reply, elapsed)
	}
	if h := c.eventuallyHolders(key, "A", 0); len(h) != 0 {
		t.Fatalf("the revoked grant was not undone: masters %v hold its token", h)
	}
}

// TTL never reports more validity than remains: it rounds down.
func TestTTLNeverReportsMoreThanRemains(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("ttl")
	if ok, err := cl.SetNX(ctx, key, "A", 1800*time.Millisecond).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	pttl, err := cl.PTTL(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	ttl, err := cl.Do(ctx, "TTL", key).Int64()
	if err != nil {
		t.Fatal(err)
	}
	if time.Duration(ttl)*time.Second > pttl {
		t.Fatalf("TTL = %d s while PTTL = %v: TTL reports more validity than remains", ttl, pttl)
	}
	if ttl != 1 {
		t.Fatalf("TTL = %d, want 1 (1.8 s less drift and elapsed, rounded down)", ttl)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A failed acquire leaves no ghost: two of three masters hang while the SET
// is on its way to them, the proxy answers nil, drops the hung connections,
// and when the masters resume and run that SET, the undo still follows it.
// Nothing holds the token afterwards, and another client gets the lock.
func TestNoGhostLockAfterHungMastersResume(t *testing.T) {
	c := newCluster(t, 3, backendTimeout(50*time.Millisecond))
	ctx := context.Background()
	key := uniqueKey("ghost")
	// Long enough for the proxy to give up on the hung connections.
	failWhileHung(t, c, key, 1500*time.Millisecond)
	waitFor(t, 5*time.Second, "another client to take the lock after the failed attempt", func() error {
		ok, err := c.client(2).SetNX(ctx, key, "B", 10*time.Second).Result()
		if !ok {
			return fmt.Errorf("refused (%v)", err)
		}
		return nil
	})
	time.Sleep(300 * time.Millisecond)
	if h := c.holders(key, "A"); len(h) != 0 {
		t.Fatalf("the failed attempt's token reappeared on masters %v", h)
	}
}

// The same after the masters were down a while: their links' redial
// backoff grew while every dial was refused, and the connections since were
// short. A link that gives up on a hung master's connection must still
// have a new one waiting at once, so that when the master resumes the undo
// runs right after the late SET; after a backoff's wait it would come too
// late to tell the late SET from a retry, and the failed attempt's token
// would stay for its TTL.
func TestNoGhostLockAfterHungMastersResumeWhileTheRedialBackoffIsLong(t *testing.T) {
	c := newCluster(t, 3, backendTimeout(50*time.Millisecond))
	for _, i := range []int{1, 2} {
		c.servers[i].Kill()
	}
	time.Sleep(1500 * time.Millisecond) // refused dials: the backoff reaches its second
	for _, i := range []int{1, 2} {
		if err := c.servers[i].Restart(); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, 10*time.Second, "the masters to come back", func() error {
		for _, h := range c.app.Pool().Health() {
			if !h.Up {
				return fmt.Errorf("%+v", c.app.Pool().Health())
			}
		}
		return nil
	})
	key := uniqueKey("ghost-backoff")
	// The proxy gives up on the hung connections after its dead-backend
	// delay (1 s); the masters resume well inside the backoff's second.
	failWhileHung(t, c, key, 1300*time.Millisecond)
}

// failWhileHung hangs masters 1 and 2, has an acquire of key answered nil,
// resumes them after hang, and fails the test if the attempt's token is
// left on any master: the undo must have followed the late SET.
func failWhileHung(t *testing.T, c *cluster, key string, hang time.Duration) {
	t.Helper()
	for _, i := range []int{1, 2} {
		if err := c.servers[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	resumed := false
	defer func() {
		if !resumed {
			c.servers[1].Resume()
			c.servers[2].Resume()
		}
	}()
	if ok, err := c.client(2).SetNX(context.Background(), key, "A", 30*time.Second).Result(); ok || err != nil {
		t.Fatalf("SET NX with two of three masters hung = %v, %v; want nil", ok, err)
	}
	time.Sleep(hang)
	c.servers[1].Resume()
	c.servers[2].Resume()
	resumed = true
	if h := c.eventuallyHolders(key, "A", 0); len(h) != 0 {
		t.Fatalf("masters %v still hold the failed attempt's token: a ghost lock for its 30 s", h)
	}
}

// Under the default rule a proxy that starts after a master restarted does
// not count it: every proxy decides from what the master reports. With
// the opt-in run-id rule (the control) the new proxy trusts the masters it
// sees for the first time and hands out a lock that is still held. No
// other record may tell the new proxy what the restarted masters lost, so
// that the rule alone decides: the first proxy stops before the restarts
// (running, it would record them on the masters it reaches), and the one
// master that kept the lock hangs while the new proxy starts.
func TestProxyStartedAfterAMasterRestartDoesNotCountIt(t *testing.T) {
	waits(t)
	for _, rule := range []string{"default", "run-id"} {
		t.Run(rule, func(t *testing.T) {
			// Long enough for the restarts, the new proxy's start and its
			// vetting of the masters (up to 2 s with one of them hung) to
			// fit inside A's lock under the race detector.
			const maxTTL = 10 * time.Second
			set := func(cfg *config.Config) {
				cfg.MaxTTL = maxTTL
				cfg.BackendTimeout = 100 * time.Millisecond
				if rule != "default" {
					cfg.RestartQuarantine = rule
				}
			}
			servers := startRedis(t, 3)
			servers[2].Kill() // M3 is down while P1 runs
			addrs := []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}
			p1, stopP1 := startAppUp(t, addrs, 2, set)
			a := proxyClient(t, p1.Addr(), 2)
			ctx := context.Background()
			key := uniqueKey("join")
			// Under the strict rule the fresh masters count once max_ttl +
			// drift has passed since they started.
			waitGrant(t, a, key, "A", maxTTL, 20*time.Second)
			heldUntil := time.Now().Add(maxTTL)
			stopP1()
			if err := servers[2].Restart(); err != nil { // M3 starts, empty
				t.Fatal(err)
			}
			if err := servers[1].Restart(); err != nil { // M2 crashes and comes back empty
				t.Fatal(err)
			}
			if err := servers[0].Pause(); err != nil { // M1, A's other vote, hangs
				t.Fatal(err)
			}
			defer servers[0].Resume()
			p2, _ := startAppUp(t, addrs, 2, set)
			c := proxyClient(t, p2.Addr(), 2)
			granted := false
			for !granted && time.Until(heldUntil) > 200*time.Millisecond {
				ok, err := c.SetNX(ctx, key, "C", maxTTL).Result()
				granted = ok && err == nil
				time.Sleep(50 * time.Millisecond)
			}
			switch rule {
			case "default":
				if granted {
					t.Fatalf("C got the lock through a new proxy while A holds it: the restarted and fresh masters counted")
				}
			case "run-id":
				if !granted {
					t.Fatalf("control: under the run-id rule a new proxy should (unsafely) hand C the lock while A holds it")
				}
			}
		})
	}
}

// startAppUp runs a proxy over addrs and waits until want backends are up
// (those that run; some may be down on purpose).
func startAppUp(t *testing.T, addrs []string, want int, mutate ...func(*config.Config)) (*app.App, func()) {
	t.Helper()
	defaults := func(cfg *config.Config) {
		d := config.Default()
		cfg.BackendTimeout, cfg.RestartQuarantine = d.BackendTimeout, d.RestartQuarantine
	}
	return startAppOver(t, addrs, want, append([]func(*config.Config){defaults}, mutate...)...)
}

// waitGrant retries SET NX until it is granted or within is over.
func waitGrant(t *testing.T, cl *redis.Client, key, token string, ttl, within time.Duration) {
	t.Helper()
	waitFor(t, within, "a grant of "+key, func() error {
		ok, err := cl.SetNX(context.Background(), key, token, ttl).Result()
		if !ok {
			return fmt.Errorf("refused (%v)", err)
		}
		return nil
	})
}

// One greedy client cannot take locks away from the others: lock tokens are
// bounded by max_token, reads never bring back more than that, and four
// connections pipelining large reads leave the shared backend links alone.
func TestGreedyClientDoesNotStarveLocks(t *testing.T) {
	c := newCluster(t, 3) // the default backend timeout of the tests (1 s): a loaded CI machine is not a greedy client
	ctx := context.Background()
	big := strings.Repeat("x", 512<<10)
	for i, d := range c.direct { // planted behind the proxy's back
		for k := 0; k < 4; k++ {
			if err := d.Set(ctx, "greedy:"+itoa(k), big, time.Minute).Err(); err != nil {
				t.Fatalf("master %d: %v", i, err)
			}
		}
	}
	if err := c.client(2).SetNX(ctx, uniqueKey("big"), strings.Repeat("t", 2048), time.Second).Err(); err == nil || !strings.Contains(err.Error(), "max_token") {
		t.Fatalf("SET NX with a 2 KiB token: %v; want a max_token error", err)
	}
	if err := c.client(2).Get(ctx, "greedy:0").Err(); err == nil || !strings.Contains(err.Error(), "max_token") {
		t.Fatalf("GET of a 512 KiB value: %v; want a max_token error", err)
	}
	connects := 0
	for _, h := range c.app.Pool().Health() {
		connects += int(h.Connects)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			cl := c.client(2)
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := cl.Pipeline()
				for i := 0; i < 256; i++ {
					p.Get(ctx, "greedy:"+itoa(g))
				}
				p.Exec(ctx)
			}
		}(g)
	}
	lock := c.client(2)
	refused := 0
	for i := 0; i < 300; i++ {
		key := uniqueKey("starved")
		ok, err := lock.SetNX(ctx, key, "tok", 10*time.Second).Result()
		if !ok || err != nil {
			refused++
			continue
		}
		lock.Eval(ctx, `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, []string{key}, "tok")
	}
	close(stop)
	wg.Wait()
	if refused > 0 {
		t.Errorf("%d of 300 locks on free keys refused while a greedy client pipelined large reads", refused)
	}
	after := 0
	for _, h := range c.app.Pool().Health() {
		after += int(h.Connects)
	}
	if after != connects {
		t.Errorf("backend connections went from %d to %d: the greedy reads got shared links dropped", connects, after)
	}
}

// A master that refuses the identity check (here: it needs a password the
// proxy lacks) does not count: /readyz turns 503 when a majority refuses,
// INFO says why in the master's own words, and no lock is granted.
func TestMasterRefusingTheIdentityCheckDoesNotCount(t *testing.T) {
	open := startRedis(t, 1)
	locked := startRedis(t, 2, "--requirepass", "not-the-proxys")
	addrs := []string{open[0].Addr, locked[0].Addr, locked[1].Addr}
	a, _ := startAppUp(t, addrs, 1, func(cfg *config.Config) { cfg.RestartQuarantine = "run-id" })
	base := "http://" + a.AdminAddr()
	code, body := httpGet(t, base+"/readyz")
	if code != 503 || !strings.Contains(body, "NOAUTH") || !strings.Contains(body, "set backend_password") {
		t.Fatalf("/readyz = %d %q; want 503 naming the masters' NOAUTH and backend_password", code, body)
	}
	cl := proxyClient(t, a.Addr(), 2)
	ctx := context.Background()
	info, err := cl.Info(ctx, "proxy").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "backends_counting:1") || strings.Count(info, "state=down") != 2 || !strings.Contains(info, "NOAUTH") {
		t.Fatalf("INFO proxy does not show two masters down for NOAUTH:\n%s", info)
	}
	if ok, err := cl.SetNX(ctx, uniqueKey("noauth"), "t", time.Second).Result(); ok || err != nil {
		t.Fatalf("SET NX with one of three masters usable = %v, %v; want nil", ok, err)
	}
}

// After a fresh deployment of masters the default rule's wait is visible:
// /readyz says how many are quarantined and for how long, and so does INFO.
func TestQuarantineAfterAFreshDeploymentIsVisible(t *testing.T) {
	servers := startRedis(t, 3)
	addrs := []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}
	a, _ := startAppUp(t, addrs, 3, func(cfg *config.Config) { cfg.MaxTTL = 30 * time.Second })
	code, body := httpGet(t, "http://"+a.AdminAddr()+"/readyz")
	if code != 503 || !strings.Contains(body, "3 quarantined") || !strings.Contains(body, "counts in") {
		t.Fatalf("/readyz = %d %q; want 503 saying 3 quarantined and when they count", code, body)
	}
	info, err := proxyClient(t, a.Addr(), 2).Info(context.Background(), "proxy").Result()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(info, "backends_quarantined:3") || !strings.Contains(info, "backend0_quarantine_reason:") {
		t.Fatalf("INFO proxy does not show the quarantine:\n%s", info)
	}
}
