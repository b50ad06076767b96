package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/faultnet"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// Counting semaphores through the proxy (proxy/kind_sem.go). The scripts
// are the project's own, with the behaviour of redis-semaphore's Semaphore;
// the library itself runs in node/semaphore.test.js.
const (
	semAcquire = libscripts.SemaphoreAcquire
	semRefresh = libscripts.SemaphoreRefresh
)

func nowMs() string { return strconv.FormatInt(time.Now().UnixMilli(), 10) }

// semDo runs a semaphore script through cl: 1 or 0.
func semDo(t *testing.T, cl *redis.Client, text, key string, limit int, token string, ttl time.Duration) int64 {
	t.Helper()
	n, err := cl.Eval(context.Background(), text, []string{key}, limit, token, ttl.Milliseconds(), nowMs()).Int64()
	if err != nil {
		t.Fatalf("%s of %s by %s: %v", strings.Fields(text)[0], key, token, err)
	}
	return n
}

// permit is one master's record of a holder: its slot and what is left.
type permit struct {
	slot int
	left time.Duration
}

// semPermits reads, on one master, the permits of the semaphore at key.
func semPermits(t *testing.T, d *redis.Client, key string) map[string]permit {
	t.Helper()
	h := string(keyslot.Companion(nil, "redlock-proxy:sem:", []byte(key)))
	all, err := d.HGetAll(context.Background(), h).Result()
	if err != nil {
		t.Fatalf("HGETALL %s on %s: %v", h, d.Options().Addr, err)
	}
	now := time.Now().UnixMilli()
	out := map[string]permit{}
	for tok, v := range all {
		parts := strings.SplitN(v, ":", 3)
		s, _ := strconv.Atoi(parts[0])
		dl, _ := strconv.ParseInt(parts[1], 10, 64)
		if dl > now {
			out[tok] = permit{s, time.Duration(dl-now) * time.Millisecond}
		}
	}
	return out
}

// semHolders reads every master and returns, per token, the slot a
// majority of them hold for it (tokens with no such slot are left out):
// the holders of the semaphore, whatever any client believes.
func semHolders(t *testing.T, direct []*redis.Client, key string) map[string]int {
	t.Helper()
	votes := map[string]map[int]int{}
	for _, d := range direct {
		for tok, p := range semPermits(t, d, key) {
			if votes[tok] == nil {
				votes[tok] = map[int]int{}
			}
			votes[tok][p.slot]++
		}
	}
	out := map[string]int{}
	for tok, bySlot := range votes {
		for s, n := range bySlot {
			if n >= len(direct)/2+1 {
				out[tok] = s
			}
		}
	}
	return out
}

// describeSem prints what each master holds, for failures and the log.
func describeSem(t *testing.T, direct []*redis.Client, key string) string {
	var b strings.Builder
	for i, d := range direct {
		fmt.Fprintf(&b, "master %d:", i)
		for tok, p := range semPermits(t, d, key) {
			fmt.Fprintf(&b, " %s@%d", tok, p.slot)
		}
		b.WriteString("; ")
	}
	return b.String()
}

func directClients(t *testing.T, addrs []string) []*redis.Client {
	var out []*redis.Client
	for _, a := range addrs {
		d := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
		t.Cleanup(func() { d.Close() })
		out = append(out, d)
	}
	return out
}

// relayEach puts a fault relay in front of each server, closed when the
// test ends, and returns the relays, the servers' own addresses and the
// relays' (in the servers' order).
func relayEach(t *testing.T, servers []*redisproc.Server) (relays []*faultnet.Relay, addrs, relayed []string) {
	t.Helper()
	for _, s := range servers {
		rl, err := faultnet.Listen(s.Addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rl.Close() })
		relays = append(relays, rl)
		addrs = append(addrs, s.Addr)
		relayed = append(relayed, rl.Addr())
	}
	return relays, addrs, relayed
}

// plainConns are one connection per master through its relay, as a
// client-side Redlock keeps them (the controls' plain majority), with
// short timeouts, closed when the test ends.
func plainConns(t *testing.T, relayed []string) []*redis.Client {
	var conns []*redis.Client
	for _, a := range relayed {
		c := redis.NewClient(&redis.Options{Addr: a, Protocol: 2, MaxRetries: -1, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
		t.Cleanup(func() { c.Close() })
		conns = append(conns, c)
	}
	return conns
}

// requireThreePlainHolders is the plain-majority controls' verdict: three
// clients (client-1..3, told got) each hold a permit of a limit-2
// semaphore, a member of zkey on at least 2 of the 3 masters.
func requireThreePlainHolders(t *testing.T, direct []*redis.Client, zkey string, got []bool) {
	t.Helper()
	holders := 0
	for i, id := range []string{"client-1", "client-2", "client-3"} {
		n := 0
		for _, d := range direct {
			if _, err := d.ZScore(context.Background(), zkey, id).Result(); err == nil {
				n++
			}
		}
		if n >= 2 {
			holders++
		}
		t.Logf("plain majority: %s told %v, held on %d of 3 masters", id, got[i], n)
	}
	if holders != 3 || !got[2] {
		t.Fatalf("the plain majority gave %d holders of a limit-2 semaphore (third told %v); the control must show the third holder", holders, got[2])
	}
}

// cutOffUntilBack cuts master m off through its relay rl while fn runs
// (cutOff), then waits until proxy a is connected to it again.
func cutOffUntilBack(t *testing.T, a *app.App, rl *faultnet.Relay, m int, fn func()) {
	t.Helper()
	before := a.Pool().Health()[m].Connects
	cutOff(rl, fn)
	waitFor(t, 10*time.Second, fmt.Sprintf("master %d to reconnect", m), func() error {
		if h := a.Pool().Health()[m]; h.Connects == before || !h.Up {
			return fmt.Errorf("%+v", h)
		}
		return nil
	})
}

// cutOff makes relay rl a partition while fn runs, then drops whatever
// it held (the master never sees it) and heals the link.
func cutOff(rl *faultnet.Relay, fn func()) {
	rl.BlackHole(true)
	fn()
	rl.Cut()
	rl.BlackHole(false)
}

// The case a plain majority gets wrong: three masters, a limit of 2, and
// three clients each refused by a different master (the first cannot reach
// master 2, the second master 0, and the third finds master 1 full). A
// plain majority (each master admits while it has fewer than 2 holders;
// a client holds when 2 of 3 admitted it) gives all three a "majority".
// Through the proxy the first two hold permits and the third is refused,
// and no master is left holding anything of its attempt. The control runs
// the same faults against the same masters with the plain rule, from a
// client of its own, and shows the third holder.
func TestSemaphoreThreeClientsEachRefusedByOneMaster(t *testing.T) {
	relays, addrs, relayed := relayEach(t, startRedis(t, 3))
	direct := directClients(t, addrs)
	const ttl = 20 * time.Second

	t.Run("control: a plain majority", func(t *testing.T) {
		key := uniqueKey("sem-plain")
		conns := plainConns(t, relayed)
		plain := func(token string) bool {
			granted := 0
			for _, c := range conns {
				if n, err := c.Eval(context.Background(), semAcquire, []string{key}, 2, token, ttl.Milliseconds(), nowMs()).Int(); err == nil && n == 1 {
					granted++
				}
			}
			return granted >= 2
		}
		var got []bool
		cutOff(relays[2], func() { got = append(got, plain("client-1")) })
		cutOff(relays[0], func() { got = append(got, plain("client-2")) })
		got = append(got, plain("client-3"))
		requireThreePlainHolders(t, direct, key, got)
	})

	t.Run("through the proxy", func(t *testing.T) {
		a, _ := startApp(t, relayed, func(c *config.Config) { c.BackendTimeout = 300 * time.Millisecond })
		cl := proxyClient(t, a.Addr(), 2)
		key := uniqueKey("sem-slots")
		partition := func(m int, fn func()) { cutOffUntilBack(t, a, relays[m], m, fn) }
		var got []int64
		partition(2, func() { got = append(got, semDo(t, cl, semAcquire, key, 2, "client-1", ttl)) })
		t.Logf("after client-1: %s", describeSem(t, direct, key))
		partition(0, func() { got = append(got, semDo(t, cl, semAcquire, key, 2, "client-2", ttl)) })
		t.Logf("after client-2: %s", describeSem(t, direct, key))
		got = append(got, semDo(t, cl, semAcquire, key, 2, "client-3", ttl))
		t.Logf("after client-3: %s", describeSem(t, direct, key))
		if got[0] != 1 || got[1] != 1 {
			t.Fatalf("the first two clients got %v; want both admitted (each lost one master of three)", got[:2])
		}
		if got[2] != 0 {
			t.Fatalf("client-3 was admitted: %s", describeSem(t, direct, key))
		}
		holders := semHolders(t, direct, key)
		if len(holders) != 2 || holders["client-1"] == holders["client-2"] {
			t.Fatalf("holders %v; want client-1 and client-2 on two slots: %s", holders, describeSem(t, direct, key))
		}
		// The third attempt is undone on the masters that gave it a slot.
		waitFor(t, 5*time.Second, "client-3's failed attempt to be undone", func() error {
			left := 0
			for _, d := range direct {
				if _, ok := semPermits(t, d, key)["client-3"]; ok {
					left++
				}
			}
			if left > 0 {
				return fmt.Errorf("it still holds a slot on %d masters: %s", left, describeSem(t, direct, key))
			}
			return nil
		})
		// A release frees a slot on every master, and the third client is
		// then admitted into it.
		mustDo(t, cl, 1, "ZREM", key, "client-1")
		for i, d := range direct {
			if _, ok := semPermits(t, d, key)["client-1"]; ok {
				t.Fatalf("master %d still holds client-1 after its release", i)
			}
		}
		if n := semDo(t, cl, semAcquire, key, 2, "client-3", ttl); n != 1 {
			t.Fatalf("client-3 after a release: %d; want admitted: %s", n, describeSem(t, direct, key))
		}
		if h := semHolders(t, direct, key); len(h) != 2 {
			t.Fatalf("holders %v after the release and a new admission; want 2", h)
		}
	})
}

// The operations one after another over five masters, every master read
// after each step, then with two of the five down: a minority down costs
// nothing.
func TestSemaphoreOverFiveMasters(t *testing.T) {
	c := newCluster(t, 5)
	cl := c.client(2)
	key := uniqueKey("sem-five")
	const ttl = 10 * time.Second
	held := func(step string, want ...string) {
		t.Helper()
		h := semHolders(t, c.direct, key)
		if len(h) != len(want) {
			t.Fatalf("%s: holders %v; want %v: %s", step, h, want, describeSem(t, c.direct, key))
		}
		for _, w := range want {
			if _, ok := h[w]; !ok {
				t.Fatalf("%s: %s holds no permit: %s", step, w, describeSem(t, c.direct, key))
			}
		}
	}
	if n := semDo(t, cl, semAcquire, key, 2, "a", ttl); n != 1 {
		t.Fatalf("first acquire: %d", n)
	}
	held("after a's acquire", "a")
	for i, d := range c.direct {
		p, ok := semPermits(t, d, key)["a"]
		if !ok || p.left > ttl || p.left < ttl-2*time.Second {
			t.Fatalf("master %d: a's permit %v (held %v); want one with about %v left", i, p, ok, ttl)
		}
	}
	if n := semDo(t, cl, semAcquire, key, 2, "b", ttl); n != 1 {
		t.Fatalf("second acquire: %d", n)
	}
	held("after b's acquire", "a", "b")
	if n := semDo(t, cl, semAcquire, key, 2, "c", ttl); n != 0 {
		t.Fatalf("third acquire of a limit-2 semaphore: %d", n)
	}
	held("after c was refused", "a", "b")
	// Re-entry while full is refused, as one Redis refuses it, and leaves
	// the caller's permit.
	if n := semDo(t, cl, semAcquire, key, 2, "a", ttl); n != 0 {
		t.Fatalf("a again while full: %d; want 0 as on one Redis", n)
	}
	held("after a's refused re-entry", "a", "b")
	if n := semDo(t, cl, semRefresh, key, 2, "a", ttl); n != 1 {
		t.Fatalf("a's refresh: %d", n)
	}
	if n := semDo(t, cl, semRefresh, key, 2, "c", ttl); n != 0 {
		t.Fatalf("c's refresh without a permit: %d", n)
	}
	held("after the refreshes", "a", "b")
	mustDo(t, cl, 1, "ZREM", key, "b")
	mustDo(t, cl, 0, "ZREM", key, "b")
	held("after b's release", "a")
	mustDo(t, cl, errorPrefix("ERR redlock-proxy: a semaphore's limit"), "EVAL", semAcquire, 1, key, 0, "d", 1000, nowMs())
	mustDo(t, cl, errorPrefix("ERR redlock-proxy: TTL of 600000 ms exceeds max_ttl"), "EVAL", semAcquire, 1, key, 2, "d", 600000, nowMs())

	// Two of five masters down: still two holders, never three.
	c.servers[3].Stop()
	c.servers[4].Stop()
	alive := c.direct[:3]
	if n := semDo(t, cl, semAcquire, key, 2, "c", ttl); n != 1 {
		t.Fatalf("c with two masters down: %d; want admitted", n)
	}
	if n := semDo(t, cl, semAcquire, key, 2, "d", ttl); n != 0 {
		t.Fatalf("d with two masters down and two holders: %d", n)
	}
	votes := 0
	for _, d := range alive {
		if _, ok := semPermits(t, d, key)["c"]; ok {
			votes++
		}
	}
	if votes != 3 {
		t.Fatalf("c holds a permit on %d of the 3 masters up; want all 3", votes)
	}
	mustDo(t, cl, 2, "ZREM", key, "a", "c", "nobody")
	for i, d := range alive {
		if p := semPermits(t, d, key); len(p) != 0 {
			t.Fatalf("master %d still holds %v after the releases", i, p)
		}
	}
	// DEL is the operator's force-unlock of a semaphore too.
	if n := semDo(t, cl, semAcquire, key, 2, "e", ttl); n != 1 {
		t.Fatalf("e: %d", n)
	}
	mustDo(t, cl, 1, "DEL", key)
	for i, d := range alive {
		if p := semPermits(t, d, key); len(p) != 0 {
			t.Fatalf("master %d still holds %v after DEL", i, p)
		}
	}
}

// A semaphore kept as a bare count of free permits (Redisson's RSemaphore
// keeps its permits so; this script is in its style) is refused with why,
// and nothing is written anywhere; so is one with a limit the proxy does
// not serve.
func TestCounterSemaphoreIsRefusedWithWhy(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(2)
	key := uniqueKey("sem-counter")
	for i, d := range c.direct {
		if err := d.Set(context.Background(), key, "3", 0).Err(); err != nil {
			t.Fatalf("master %d: %v", i, err)
		}
	}
	take := `local v = redis.call('get', KEYS[1])
if v and tonumber(v) >= tonumber(ARGV[1]) then redis.call('decrby', KEYS[1], ARGV[1]) return 1 end
return 0`
	mustDo(t, cl, errorPrefix("ERR redlock-proxy: unknown script"), "EVAL", take, 1, key, 1)
	_, err := cl.Eval(context.Background(), take, []string{key}, 1).Result()
	if err == nil || !strings.Contains(err.Error(), "count of free permits") || !strings.Contains(err.Error(), "no holder and no expiry") {
		t.Fatalf("a counter semaphore: %v; want the refusal saying why", err)
	}
	for i, d := range c.direct {
		if v, _ := d.Get(context.Background(), key).Result(); v != "3" {
			t.Fatalf("master %d: the count is %q after the refusals; want it untouched", i, v)
		}
	}
	big := uniqueKey("sem-big")
	mustDo(t, cl, errorPrefix("ERR redlock-proxy: unknown script"), "EVAL", semAcquire, 1, big, 5000, "a", 1000, nowMs())
	_, err = cl.Eval(context.Background(), semAcquire, []string{big}, 5000, "a", 1000, nowMs()).Result()
	if err == nil || !strings.Contains(err.Error(), "at most 1024") {
		t.Fatalf("a limit of 5000: %v; want the refusal naming the largest limit", err)
	}
}

// redis-semaphore's own Semaphore scripts, their exact text from the npm
// package, classify as the semaphore operations (SCRIPT EXPLAIN through the
// proxy), and a first EVAL of each works.
func TestRedisSemaphoreScriptsClassify(t *testing.T) {
	requireNode(t)
	dir, _ := filepath.Abs("node")
	texts, err := libscripts.NodeSemaphore(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := newCluster(t, 3)
	cl := c.client(2)
	key := uniqueKey("semaphore:lib")
	for _, tc := range []struct{ op, want string }{
		{"acquire", "semaphore-acquire keys=1 args=4 token=2 limit=1 ttl=3ms clock=4; success: :1; failure: :0"},
		{"refresh", "semaphore-refresh keys=1 args=4 token=2 ttl=3ms clock=4; success: :1; failure: :0"},
	} {
		lines, err := cl.Do(context.Background(), "SCRIPT", "EXPLAIN", texts[tc.op], 1, key, 2, "id-1", 10000, nowMs()).StringSlice()
		if err != nil || len(lines) != 2 || lines[1] != tc.want {
			t.Fatalf("SCRIPT EXPLAIN of the %s script = %q, %v; want %q", tc.op, lines, err, tc.want)
		}
	}
	if n := semDo(t, cl, texts["acquire"], key, 2, "id-1", 10*time.Second); n != 1 {
		t.Fatalf("acquire: %d", n)
	}
	if n := semDo(t, cl, texts["refresh"], key, 2, "id-1", 10*time.Second); n != 1 {
		t.Fatalf("refresh: %d", n)
	}
	if h := semHolders(t, c.direct, key); len(h) != 1 {
		t.Fatalf("holders %v; want id-1", h)
	}
}

// cappedSemAcquire is an acquire whose limit argument is capped in its
// text: it never admits more than three, whatever limit the caller passes.
const cappedSemAcquire = `local set, cap, me, ms, t = KEYS[1], math.min(tonumber(ARGV[1]), 3), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('zremrangebyscore', set, 0, t - ms)
if redis.call('zcard', set) >= cap then return 0 end
redis.call('zadd', set, t, me)
redis.call('pexpire', set, ms)
return 1`

// A semaphore script is read on its first call, with that call's limit;
// a later call with another limit must be held to what the script does
// with that one. The script here caps its limit at three: read with a
// limit of 2 it behaves as any acquire, but one Redis admits three callers
// that pass 5, never five. Through the proxy, a call with a limit the
// script does not follow is refused, and at most three hold.
func TestSemaphoreLimitIsCheckedForEachValue(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	acquire := func(cl *redis.Client, key string, limit int, token string) bool {
		n, err := cl.Eval(ctx, cappedSemAcquire, []string{key}, limit, token, 10000, nowMs()).Int64()
		if err != nil {
			t.Logf("acquire of %s with limit %d by %s: %v", key, limit, token, err)
		}
		return err == nil && n == 1
	}
	count := func(cl *redis.Client, key string) (admitted []string) {
		if acquire(cl, key, 2, "first") {
			admitted = append(admitted, "first")
		}
		for i := 0; i < 5; i++ {
			if tok := fmt.Sprintf("client-%d", i); acquire(cl, key, 5, tok) {
				admitted = append(admitted, tok)
			}
		}
		return admitted
	}
	if got := count(c.direct[0], uniqueKey("sem-capped-one")); len(got) != 3 {
		t.Fatalf("one Redis admitted %v; want three", got)
	}
	key := uniqueKey("sem-capped")
	cl := c.client(2)
	if got := count(cl, key); len(got) > 3 {
		t.Fatalf("the proxy admitted %v where one Redis admits three: %s", got, describeSem(t, c.direct, key))
	}
	// A limit the script follows is served: a limit of 1 admits one.
	solo := uniqueKey("sem-capped-solo")
	for i, want := range []int64{1, 0} {
		if n, err := cl.Eval(ctx, cappedSemAcquire, []string{solo}, 1, fmt.Sprint("solo-", i), 10000, nowMs()).Int64(); err != nil || n != want {
			t.Fatalf("acquire %d with a limit of 1 = %d, %v; want %d", i, n, err, want)
		}
	}
}
