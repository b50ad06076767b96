package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// seedRelease is the usual compare-and-delete release, as countless
// hand-written single-instance locks send it.
const seedRelease = `if redis.call("get", KEYS[1]) == ARGV[1] then
  return redis.call("del", KEYS[1])
end
return 0`

const oneLineExtend = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[2]) else return 0 end`

// spacedExtend is the same compare-and-pexpire written with spaces.
const spacedExtend = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`

// The single-instance lock pattern, unchanged, through the proxy over five
// real masters.
func TestSingleInstancePatternOverFiveMasters(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		cl := c.client(proto)
		key := uniqueKey("lock")

		ok, err := cl.SetNX(ctx, key, "token-A", 30*time.Second).Result()
		if err != nil || !ok {
			t.Fatalf("RESP%d: SET NX = %v, %v; want true", proto, ok, err)
		}
		if h := c.holders(key, "token-A"); len(h) < 3 {
			t.Fatalf("RESP%d: after SET NX, token on backends %v; want a majority (>= 3 of 5)", proto, h)
		}

		ok, err = cl.SetNX(ctx, key, "token-B", 30*time.Second).Result()
		if err != nil || ok {
			t.Fatalf("RESP%d: second SET NX = %v, %v; want false", proto, ok, err)
		}
		if h := c.holders(key, "token-B"); len(h) != 0 {
			t.Fatalf("RESP%d: refused SET NX left token-B on backends %v", proto, h)
		}
		if h := c.eventuallyHolders(key, "token-A", 5); len(h) != 5 {
			t.Fatalf("RESP%d: refused SET NX disturbed the holder: token-A on %v", proto, h)
		}

		if v, err := cl.Get(ctx, key).Result(); err != nil || v != "token-A" {
			t.Fatalf("RESP%d: GET = %q, %v; want token-A", proto, v, err)
		}
		pttl, err := cl.PTTL(ctx, key).Result()
		if err != nil || pttl <= 25*time.Second || pttl > 30*time.Second {
			t.Fatalf("RESP%d: PTTL = %v, %v; want a validity in (25s, 30s]", proto, pttl, err)
		}
		ttl, err := cl.TTL(ctx, key).Result()
		if err != nil || ttl < 29*time.Second || ttl > 30*time.Second {
			t.Fatalf("RESP%d: TTL = %v, %v; want about 30s", proto, ttl, err)
		}

		n, err := cl.Eval(ctx, seedRelease, []string{key}, "wrong-token").Int()
		if err != nil || n != 0 {
			t.Fatalf("RESP%d: release with a wrong token = %d, %v; want 0", proto, n, err)
		}
		if h := c.eventuallyHolders(key, "token-A", 5); len(h) != 5 {
			t.Fatalf("RESP%d: release with a wrong token removed the lock from some backends: left on %v", proto, h)
		}

		n, err = cl.Eval(ctx, seedRelease, []string{key}, "token-A").Int()
		if err != nil || n != 1 {
			t.Fatalf("RESP%d: release = %d, %v; want 1", proto, n, err)
		}
		if h := c.eventuallyHolders(key, "token-A", 0); len(h) != 0 {
			t.Fatalf("RESP%d: release left the token on backends %v", proto, h)
		}
		if _, err := cl.Get(ctx, key).Result(); !errors.Is(err, redis.Nil) {
			t.Fatalf("RESP%d: GET after release = %v; want nil", proto, err)
		}
		if p, err := cl.PTTL(ctx, key).Result(); err != nil || p != -2*time.Nanosecond && p != -2 {
			// go-redis maps -2 to -2ns
			t.Fatalf("RESP%d: PTTL after release = %v, %v; want -2", proto, p, err)
		}
	}
}

func TestExtendAndExpiryForms(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("ext")
	if ok, err := cl.SetNX(ctx, key, "tok", 2*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	n, err := cl.Eval(ctx, oneLineExtend, []string{key}, "tok", "20000").Int()
	if err != nil || n != 1 {
		t.Fatalf("extend = %d, %v; want 1", n, err)
	}
	if p, _ := cl.PTTL(ctx, key).Result(); p < 15*time.Second {
		t.Fatalf("after extend PTTL = %v; want about 20s", p)
	}
	for i := range c.direct {
		waitFor(t, 2*time.Second, fmt.Sprintf("backend %d's PTTL after the extend to be about 20s", i), func() error {
			if p, _ := c.direct[i].PTTL(ctx, key).Result(); p < 19*time.Second {
				return fmt.Errorf("PTTL %v", p)
			}
			return nil
		})
	}
	if n, err := cl.Eval(ctx, oneLineExtend, []string{key}, "other", "20000").Int(); err != nil || n != 0 {
		t.Fatalf("extend with another token = %d, %v; want 0", n, err)
	}

	// EX, PXAT and EXAT are turned into PX on every backend.
	for _, args := range [][]any{
		{"SET", "", "tok", "ex", "30", "nx"},
		{"set", "", "tok", "NX", "PXAT", time.Now().Add(30 * time.Second).UnixMilli()},
		{"SET", "", "tok", "exat", time.Now().Add(31 * time.Second).Unix(), "Nx"},
	} {
		k := uniqueKey("form")
		args[1] = k
		if v, err := cl.Do(ctx, args...).Result(); err != nil || v != "OK" {
			t.Fatalf("%v = %v, %v; want OK", args, v, err)
		}
		for i := range c.direct {
			p := c.eventuallyPTTL(i, k)
			if p < 25*time.Second || p > 31*time.Second {
				t.Fatalf("%v: backend %d PTTL = %v; want about 30s", args, i, p)
			}
		}
	}
}

func TestRefusesLocksThatCannotExpire(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	for _, args := range [][]any{
		{"SET", "k", "v"},
		{"SET", "k", "v", "NX"},
		{"SET", "k", "v", "PX", "1000"},
		{"SET", "k", "v", "XX", "PX", "1000"},
		{"SET", "k", "v", "NX", "KEEPTTL"},
		{"SET", "k", "v", "NX", "PX", "1000", "GET"},
	} {
		err := cl.Do(ctx, args...).Err()
		if err == nil || !strings.Contains(err.Error(), "redlock-proxy") {
			t.Errorf("%v: err = %v; want the proxy's refusal", args, err)
		}
	}
	if err := cl.Do(ctx, "SET", "k", "v", "NX", "PX", "999999999").Err(); err == nil || !strings.Contains(err.Error(), "max_ttl") {
		t.Errorf("TTL above max_ttl: err = %v; want a refusal naming max_ttl", err)
	}
	for i, d := range c.direct {
		if n, _ := d.Exists(ctx, "k").Result(); n != 0 {
			t.Errorf("a refused SET reached backend %d", i)
		}
	}
}

// With two of five masters down everything still works; with three down,
// SET NX never says OK and leaves no token behind.
func TestMinorityAndMajorityDown(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)

	c.servers[0].Kill()
	c.servers[3].Kill()
	c.waitDown(0)
	c.waitDown(3)
	for i := 0; i < 20; i++ {
		key := uniqueKey("minority")
		ok, err := cl.SetNX(ctx, key, "tok", 10*time.Second).Result()
		if err != nil || !ok {
			t.Fatalf("with 2 of 5 down: SET NX = %v, %v; want true", ok, err)
		}
		if h := c.holders(key, "tok"); len(h) != 3 {
			t.Fatalf("with 2 of 5 down: token on %v; want the 3 running backends", h)
		}
		if ok, _ := cl.SetNX(ctx, key, "other", 10*time.Second).Result(); ok {
			t.Fatalf("with 2 of 5 down: a second SET NX succeeded")
		}
		if n, err := cl.Eval(ctx, seedRelease, []string{key}, "tok").Int(); err != nil || n != 1 {
			t.Fatalf("with 2 of 5 down: release = %d, %v; want 1", n, err)
		}
		if h := c.eventuallyHolders(key, "tok", 0); len(h) != 0 {
			t.Fatalf("with 2 of 5 down: release left the token on %v", h)
		}
	}

	c.servers[4].Kill()
	c.waitDown(4)
	for i := 0; i < 20; i++ {
		key := uniqueKey("majority")
		ok, err := cl.SetNX(ctx, key, "tok", 10*time.Second).Result()
		if ok {
			t.Fatalf("with 3 of 5 down: SET NX said OK")
		}
		if err != nil {
			t.Fatalf("with 3 of 5 down: SET NX error %v; want a plain nil (not acquired)", err)
		}
		if h := c.eventuallyHolders(key, "tok", 0); len(h) != 0 {
			t.Fatalf("with 3 of 5 down: the failed SET NX left its token on %v", h)
		}
	}
}

// A lock whose TTL is used up by the drift allowance is never granted, and
// its partial acquisitions are undone.
func TestNoValidityNoLock(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("short")
	v, err := cl.Do(ctx, "SET", key, "tok", "NX", "PX", "2").Result()
	if !errors.Is(err, redis.Nil) {
		t.Fatalf("SET NX PX 2 = %v, %v; want nil: 2ms cannot outlast the 2ms drift floor", v, err)
	}
	if h := c.eventuallyHolders(key, "tok", 0); len(h) != 0 {
		t.Fatalf("an acquisition without validity was not undone: token on %v", h)
	}
	if _, err := cl.Do(ctx, "SET", key, "tok", "NX", "PX", "50").Result(); err != nil {
		t.Fatalf("SET NX PX 50 after the undo: %v; want OK", err)
	}
}

func TestDelIsForceUnlock(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)
	k1, k2 := uniqueKey("del"), uniqueKey("del")
	cl.SetNX(ctx, k1, "a", time.Minute)
	cl.SetNX(ctx, k2, "b", time.Minute)
	n, err := cl.Del(ctx, k1, k2, uniqueKey("missing")).Result()
	if err != nil || n != 2 {
		t.Fatalf("DEL = %d, %v; want 2", n, err)
	}
	if len(c.eventuallyHolders(k1, "a", 0))+len(c.eventuallyHolders(k2, "b", 0)) != 0 {
		t.Fatalf("DEL left keys behind")
	}
}

// Plain Redis clients must be able to connect and talk.
func TestConnectionCommands(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := redis.NewClient(&redis.Options{Addr: c.app.Addr(), ClientName: "conn-test", Protocol: 3})
	defer cl.Close()
	mustDo(t, cl, "PONG", "PING")
	mustDo(t, cl, "hi", "ECHO", "hi")
	mustDo(t, cl, "conn-test", "CLIENT", "GETNAME")
	if id, err := cl.ClientID(ctx).Result(); err != nil || id <= 0 {
		t.Fatalf("CLIENT ID = %d, %v", id, err)
	}
	info, err := cl.Info(ctx).Result()
	if err != nil {
		t.Fatalf("INFO: %v", err)
	}
	for _, want := range []string{"role:master", "redis_version:", "loading:0", "backends:3", "majority:2",
		"backend0:addr=" + c.servers[0].Addr, "backend2:addr=" + c.servers[2].Addr, "state=up"} {
		if !strings.Contains(info, want) {
			t.Errorf("INFO lacks %q:\n%s", want, info)
		}
	}
	mustDo(t, cl, "OK", "SELECT", "0")
	mustDo(t, cl, errorPrefix("ERR redlock-proxy: only database 0 is served"), "SELECT", "1")
	mustDo(t, cl, errorPrefix("ERR unknown command 'FLUSHALL', with args beginning with:"), "FLUSHALL")
	if n, err := cl.Do(ctx, "COMMAND", "COUNT").Int(); err != nil || n < 10 {
		t.Errorf("COMMAND COUNT = %d, %v", n, err)
	}
	// COMMAND DOCS documents what is served (TestHelpForPeopleAtAPrompt).
	if err := cl.Do(ctx, "COMMAND", "DOCS").Err(); err != nil {
		t.Errorf("COMMAND DOCS: %v", err)
	}
	if got := rawDo(t, c.app.Addr(), "PING\r\nQUIT\r\nPING\r\n"); got != "+PONG\r\n+OK\r\n" {
		t.Errorf("inline PING, QUIT = %q; want PONG, OK, then close", got)
	}
}

// redis-cli, as a user would type it: the session of the README's "Run
// it", every step checked on the five masters.
func TestRedisCLISession(t *testing.T) {
	c := newCluster(t, 5)
	_, port, _ := net.SplitHostPort(c.app.Addr())
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		t.Fatalf("redis-cli not found (it comes with redis-server; run ./test.sh): %v", err)
	}
	run := func(args ...string) string {
		out, err := exec.Command(cli, append([]string{"-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := run("SET", "cli-k", "v", "NX", "PX", "30000"); got != "OK" {
		t.Fatalf("redis-cli SET NX PX = %q", got)
	}
	c.checkHeld(t, "after SET NX", "cli-k", "v")
	if got := run("SET", "cli-k", "w", "NX", "PX", "30000"); got != "" {
		t.Fatalf("second SET NX = %q; want (nil), printed as nothing", got)
	}
	c.checkGone(t, "after the refused SET NX", "cli-k", "w")
	if got := run("PTTL", "cli-k"); got < "29000" || got > "30000" || len(got) != 5 {
		t.Fatalf("PTTL = %q; want the validity left, just under 30000", got)
	}
	if got := run("GET", "cli-k"); got != "v" {
		t.Fatalf("GET = %q", got)
	}
	// FENCE, as the README shows it: the grant's number, the same when
	// asked again; nothing for a token that does not hold the lock.
	fence := run("FENCE", "cli-k", "v")
	if n, err := strconv.ParseInt(fence, 10, 64); err != nil || n <= 0 {
		t.Fatalf("FENCE = %q; want the grant's fencing number", fence)
	}
	if again := run("FENCE", "cli-k", "v"); again != fence {
		t.Fatalf("FENCE again = %q; want the same number %s", again, fence)
	}
	if got := run("FENCE", "cli-k", "w"); got != "" {
		t.Fatalf("FENCE with another token = %q; want (nil), printed as nothing", got)
	}
	if got := run("EVAL", seedRelease, "1", "cli-k", "v"); got != "1" {
		t.Fatalf("EVAL release = %q", got)
	}
	c.checkGone(t, "after the release", "cli-k", "v")
	if got := run("SET", "cli-k", "w"); !strings.Contains(got, "needs NX") {
		t.Fatalf("SET without NX = %q; want the proxy's refusal", got)
	}
	if got := run("INFO", "proxy"); !strings.Contains(got, "backends:5") || !strings.Contains(got, "majority:3") || !strings.Contains(got, "backends_counting:5") {
		t.Fatalf("INFO proxy = %q", got)
	}
	// Commands piped on stdin, as in scripts.
	cmd := exec.Command(cli, "-p", port)
	cmd.Stdin = strings.NewReader("PING\nSET cli-2 t NX EX 10\nTTL cli-2\nDEL cli-2\n")
	out, err := cmd.CombinedOutput()
	if err != nil || strings.Fields(string(out))[0] != "PONG" || !strings.Contains(string(out), "OK") {
		t.Fatalf("piped session: %v\n%s", err, out)
	}
}

// With no configuration at all the proxy runs on embedded backends and the
// same lock cycle works.
func TestEmbeddedDefault(t *testing.T) {
	a, _ := startApp(t, nil)
	cl := proxyClient(t, a.Addr(), 2)
	ctx := context.Background()
	key := uniqueKey("embedded")
	if ok, err := cl.SetNX(ctx, key, "tok", 30*time.Second).Result(); err != nil || !ok {
		t.Fatalf("SET NX on the embedded default = %v, %v", ok, err)
	}
	hs := a.Pool().Health()
	direct := 0
	for _, h := range hs {
		d := redis.NewClient(&redis.Options{Addr: h.Addr})
		if v, _ := d.Get(ctx, key).Result(); v == "tok" {
			direct++
		}
		d.Close()
	}
	if direct < quorum.Majority(len(hs)) {
		t.Fatalf("token on %d of %d embedded backends; want a majority", direct, len(hs))
	}
	if ok, _ := cl.SetNX(ctx, key, "other", 30*time.Second).Result(); ok {
		t.Fatalf("second SET NX succeeded on the embedded default")
	}
	if n, err := cl.Eval(ctx, seedRelease, []string{key}, "tok").Int(); err != nil || n != 1 {
		t.Fatalf("release on the embedded default = %d, %v", n, err)
	}
	// The release answers once a majority deleted; the rest follow within
	// the backend timeout.
	waitFor(t, 2*time.Second, "the release to reach every embedded backend", func() error {
		for _, h := range hs {
			d := redis.NewClient(&redis.Options{Addr: h.Addr})
			n, _ := d.Exists(ctx, key).Result()
			d.Close()
			if n != 0 {
				return fmt.Errorf("the key is still on %s", h.Addr)
			}
		}
		return nil
	})
	// Keys expire in real time on the embedded backends.
	k2 := uniqueKey("expire")
	cl.SetNX(ctx, k2, "t", 100*time.Millisecond)
	time.Sleep(300 * time.Millisecond)
	if ok, _ := cl.SetNX(ctx, k2, "u", time.Second).Result(); !ok {
		t.Fatalf("an expired lock on the embedded backends could not be taken again")
	}
}

// An extend answered as failed must leave the caller's lock as it was
// (docs/contract.md: "A failed extend never removes the caller's lock
// anywhere"): the caller, told the extend failed, keeps relying on the
// validity its acquire gave it. Here the extend asks for a TTL too short
// to leave any validity (a min_validity above the new TTL does the same):
// it is answered nil, and a second client must still be refused while the
// first acquire's validity lasts.
func TestFailedShortExtendLeavesTheLockAsItWas(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("short-extend")
	if ok, err := cl.SetNX(ctx, key, "tok", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	heldUntil := time.Now().Add(9 * time.Second)
	v, err := cl.Do(ctx, "SET", key, "tok", "IFEQ", "tok", "PX", "1").Result()
	if !errors.Is(err, redis.Nil) {
		t.Fatalf("SET IFEQ PX 1 = %v, %v; want nil: 1 ms leaves no validity", v, err)
	}
	// The same through an extend script (the compare-and-pexpire most
	// libraries send): 0, and the lock left alone.
	if n, err := cl.Eval(ctx, spacedExtend, []string{key}, "tok", "1").Int(); n != 0 || err != nil {
		t.Fatalf("extend script with a 1 ms TTL = %v, %v; want 0: 1 ms leaves no validity", n, err)
	}
	for i, d := range c.pttls(key) {
		if d < 9*time.Second {
			t.Fatalf("master %d: PTTL %v after two extends answered as failed; want the 10 s lock as it was", i, d)
		}
	}
	time.Sleep(20 * time.Millisecond)
	ok, err := c.client(2).SetNX(ctx, key, "second", 10*time.Second).Result()
	if !time.Now().Before(heldUntil) {
		t.Fatalf("the machine was too slow: the first lock ran out before the second client tried")
	}
	if ok || err != nil {
		t.Fatalf("a second client got %v, %v after the holder's extend was answered as failed (holders of the first token: %v)", ok, err, c.holders(key, "tok"))
	}
}

// An extend to a shorter TTL that fails because too few masters answered
// in time must not shorten the lock anywhere: the hung masters run it when
// they resume, and the caller, told the extend failed, keeps relying on the
// validity its acquire gave it. The extend only lengthens on its first step;
// the TTL as asked is set once the success leaves.
func TestFailedShorteningExtendLeavesTheLockAsItWas(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("shorten-fails")
	if ok, err := cl.SetNX(ctx, key, "tok", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	for _, i := range []int{1, 2} {
		if err := c.servers[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := cl.Eval(ctx, spacedExtend, []string{key}, "tok", "2000").Int()
	for _, i := range []int{1, 2} {
		if err := c.servers[i].Resume(); err != nil {
			t.Fatal(err)
		}
	}
	if n != 0 || err != nil {
		t.Fatalf("extend with two of three masters hung = %v, %v; want 0", n, err)
	}
	// The resumed masters run the queued extend; then every master must
	// still hold the 10 s lock.
	time.Sleep(200 * time.Millisecond)
	for i, d := range c.pttls(key) {
		if d < 8*time.Second {
			t.Fatalf("master %d: PTTL %v after a shortening extend answered as failed; want the 10 s lock as it was", i, d)
		}
	}
	// A successful shortening extend sets the TTL as asked on every master.
	if n, err := cl.Eval(ctx, spacedExtend, []string{key}, "tok", "3000").Int(); n != 1 || err != nil {
		t.Fatalf("extend = %v, %v; want 1", n, err)
	}
	c.checkPTTLs(t, "after a successful shortening extend", key, "tok", 2500*time.Millisecond, 3*time.Second)
}
