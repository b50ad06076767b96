package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// Redisson's RLock and RFencedLock in scripts of their behaviour (written
// for the tests, internal/testkit/libscripts), over five real masters:
// the unlock's latch for retries, the reads of a hash lock, and grants
// numbered by FENCE. TestJavaRedissonThroughProxy runs Redisson itself.

// A retried unlock (the same latch key) takes off one hold however often
// it is sent, through any proxy: a master that ran it answers the retry
// from its latch. With two masters hung during the first attempt, the
// retry acts on them and answers from the latch on the others. The control
// (the same retry under a new latch key, as a script without one would
// act) takes off a second hold and frees the lock: what the latch
// prevents.
func TestRetriedUnlockTakesOffOneHold(t *testing.T) {
	enter := counted(t, "take or enter again").Text
	exit := counted(t, "leave once, answering a retry from its latch").Text
	c := newCluster(t, 5, fastTimeout)
	other, _ := startApp(t, c.addrs(), fastTimeout)
	ctx := context.Background()
	via := []*redis.Client{c.client(2), proxyClient(t, other.Addr(), 2)}
	const owner = "6f1c2e7a-52b8-4a42:41"
	key := uniqueKey("latch")
	keys := func(latch string) []string { return []string{key, "redlock-channel:{" + key + "}", latch} }
	unlock := func(cl *redis.Client, latch string) string {
		return replyOf(cl.Eval(ctx, exit, keys(latch), 0, 30000, owner, "publish", 20000).Result())
	}
	take := func() {
		if got := replyOf(via[0].Eval(ctx, enter, []string{key}, 30000, owner).Result()); got != "nil" {
			t.Fatalf("take: %s", got)
		}
	}
	expect := func(step string, want []int64) {
		t.Helper()
		if h := c.eventuallyHolds(key, owner, want); fmt.Sprint(h) != fmt.Sprint(want) {
			t.Fatalf("%s: the masters count %v, want %v", step, h, want)
		}
	}
	take()
	take()
	take()
	expect("three holds", []int64{3, 3, 3, 3, 3})
	if got := unlock(via[0], "latch:1"); got != "0" {
		t.Fatalf("unlock: %s, want 0 (still held)", got)
	}
	expect("one unlock", []int64{2, 2, 2, 2, 2})
	for i := range 3 {
		if got := unlock(via[i%2], "latch:1"); got != "0" {
			t.Fatalf("retry %d: %s, want the first call's 0", i, got)
		}
		expect(fmt.Sprintf("retry %d", i), []int64{2, 2, 2, 2, 2})
	}

	// Two masters hang through the first attempt: decided by the other
	// three, which record it; the retry acts on the two.
	for _, i := range []int{3, 4} {
		if err := c.servers[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	first := unlock(via[0], "latch:2")
	for _, i := range []int{3, 4} {
		c.servers[i].Resume()
	}
	if first != "0" {
		t.Fatalf("unlock with two masters hung: %s, want 0", first)
	}
	if got := unlock(via[1], "latch:2"); got != "0" {
		t.Fatalf("the retry through the other proxy: %s, want 0", got)
	}
	expect("an unlock retried after a partial first attempt", []int64{1, 1, 1, 1, 1})

	// The control: a second unlock (a new latch) takes off the last hold.
	if got := unlock(via[1], "latch:3"); got != "1" {
		t.Fatalf("the control, a new unlock: %s, want 1 (released)", got)
	}
	expect("the control", []int64{0, 0, 0, 0, 0})
	// And its retry answers 1 again, changing nothing.
	take()
	if got := unlock(via[0], "latch:3"); got != "1" {
		t.Fatalf("the control's retry: %s, want the first call's 1", got)
	}
	expect("the control's retry leaves a new hold alone", []int64{1, 1, 1, 1, 1})

	// A latch kept longer than max_ttl is refused: kept shorter, a late
	// retry would act again.
	_, err := via[0].Eval(ctx, exit, keys("latch:4"), 0, 30000, owner, "publish", (time.Hour).Milliseconds()).Result()
	if err == nil || !strings.Contains(err.Error(), "records its result for a retry") {
		t.Fatalf("a latch of an hour: %v, want the refusal", err)
	}
}

// addrs lists the masters' addresses.
func (c *cluster) addrs() []string {
	var out []string
	for _, s := range c.servers {
		out = append(out, s.Addr)
	}
	return out
}

// Reads of a hash lock, as Redisson's isLocked (EXISTS),
// remainTimeToLive (PTTL), getHoldCount (HGET) and isHeldByCurrentThread
// (HEXISTS) send them, with the masters' counts made to differ: a key a
// majority hold exists whoever holds it, and a count is the one a majority
// hold at least, as the reentrant lock's own rule gives it.
func TestHashLockReads(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)
	const owner = "6f1c2e7a-52b8-4a42:41"
	for _, tc := range []struct {
		counts      []int64
		exists      int64
		count       string // HGET
		held        bool   // HEXISTS
		typ         string
		withTTLLeft bool
	}{
		{[]int64{2, 2, 2, 2, 2}, 1, "2", true, "hash", true},
		{[]int64{3, 3, 2, 2, 1}, 1, "2", true, "hash", true},
		{[]int64{3, 3, 1, 0, 0}, 1, "1", true, "hash", true},
		{[]int64{3, 3, 0, 0, 0}, 0, "nil", false, "none", false},
	} {
		t.Run(fmt.Sprint(tc.counts), func(t *testing.T) {
			key := uniqueKey("hashread")
			c.setHolds(t, key, owner, tc.counts, 20*time.Second)
			if n := cl.Exists(ctx, key).Val(); n != tc.exists {
				t.Errorf("EXISTS = %d, want %d", n, tc.exists)
			}
			if typ := cl.Type(ctx, key).Val(); typ != tc.typ {
				t.Errorf("TYPE = %q, want %q", typ, tc.typ)
			}
			if got := replyOf(cl.HGet(ctx, key, owner).Result()); got != tc.count {
				t.Errorf("HGET = %s, want %s", got, tc.count)
			}
			if held := cl.HExists(ctx, key, owner).Val(); held != tc.held {
				t.Errorf("HEXISTS = %v, want %v", held, tc.held)
			}
			if got := replyOf(cl.HGet(ctx, key, "another:7").Result()); got != "nil" {
				t.Errorf("HGET of another owner = %s, want nil", got)
			}
			p := cl.PTTL(ctx, key).Val()
			if tc.withTTLLeft && (p < 15*time.Second || p > 20*time.Second) || !tc.withTTLLeft && p != -2*time.Nanosecond && p != -2*time.Millisecond {
				t.Errorf("PTTL = %v", p)
			}
		})
	}
	// A string lock has no fields: WRONGTYPE, as Redis answers.
	key := uniqueKey("stringlock")
	if ok := cl.SetNX(ctx, key, "tok", 10*time.Second).Val(); !ok {
		t.Fatal("SET NX refused")
	}
	if _, err := cl.HGet(ctx, key, "tok").Result(); err == nil || !strings.HasPrefix(err.Error(), "WRONGTYPE") {
		t.Fatalf("HGET of a string lock: %v, want WRONGTYPE", err)
	}
	if typ := cl.Type(ctx, key).Val(); typ != "string" {
		t.Fatalf("TYPE of a string lock = %q", typ)
	}
}

// Grants whose reply shows a counter's count (RFencedLock's token) get
// their FENCE number, through two proxies, with a minority of masters hung
// for some of them: every grant's number is above every earlier grant's,
// a retaking of the held lock keeps its number, GET of the counter's name
// answers the holder's number through either proxy, and no master ever
// holds the counter. A naive count (the largest a majority report) would
// go back when the grants reach different majorities.
func TestCountedGrantsAnswerFenceNumbers(t *testing.T) {
	take := counted(t, "take or enter again, numbering the grant").Text
	exit := counted(t, "leave once").Text
	c := newCluster(t, 5, fastTimeout, func(cfg *config.Config) { cfg.MaxTTL = time.Minute })
	other, _ := startApp(t, c.addrs(), fastTimeout, func(cfg *config.Config) { cfg.MaxTTL = time.Minute })
	ctx := context.Background()
	via := []*redis.Client{c.client(2), proxyClient(t, other.Addr(), 2)}
	key := uniqueKey("fenced")
	counter := "redlock-number:{" + key + "}"
	var last int64
	for i := range 8 {
		owner := "owner-" + strconv.Itoa(i) + ":1"
		// Grants 2, 3, 6 and 7 reach three masters only.
		hung := []int{}
		if i%4 >= 2 {
			hung = []int{(i + 1) % 5, (i + 3) % 5}
		}
		for _, h := range hung {
			if err := c.servers[h].Pause(); err != nil {
				t.Fatal(err)
			}
		}
		cl := via[i%2]
		v, err := cl.Eval(ctx, take, []string{key, counter}, 30000, owner).Slice()
		if err != nil || len(v) != 2 || v[0] != int64(-1) {
			t.Fatalf("grant %d: %v, %v", i, v, err)
		}
		n := v[1].(int64)
		if n <= last {
			t.Fatalf("grant %d: number %d after %d", i, n, last)
		}
		last = n
		// Held: another owner is refused, with the lock's PTTL and no number.
		if v, err := via[(i+1)%2].Eval(ctx, take, []string{key, counter}, 30000, "intruder:9").Slice(); err != nil || len(v) != 2 || v[1] != int64(-1) {
			t.Fatalf("grant %d: another owner got %v, %v", i, v, err)
		}
		// Retaken by its holder: the same grant, the same number.
		if v, err := cl.Eval(ctx, take, []string{key, counter}, 30000, owner).Slice(); err != nil || v[1] != n {
			t.Fatalf("grant %d: retaken %v, %v; want its number %d", i, v, err, n)
		}
		for _, h := range hung {
			c.servers[h].Resume()
		}
		for j, p := range via {
			if got := p.Get(ctx, counter).Val(); got != strconv.FormatInt(n, 10) {
				t.Fatalf("grant %d: GET of the counter through proxy %d = %q, want %d", i, j, got, n)
			}
		}
		for j, d := range c.direct {
			if d.Exists(ctx, counter).Val() != 0 {
				t.Fatalf("grant %d: master %d holds the counter", i, j)
			}
		}
		for range 2 {
			if got := replyOf(cl.Eval(ctx, exit, []string{key}, 30000, owner).Result()); got != "0" && got != "1" {
				t.Fatalf("grant %d: release %s", i, got)
			}
		}
		c.eventuallyHolds(key, owner, []int64{0, 0, 0, 0, 0})
		if got := replyOf(via[0].Get(ctx, counter).Result()); got != "nil" {
			t.Fatalf("grant %d: GET of the counter of a free lock = %s, want nil", i, got)
		}
		t.Logf("grant %d through proxy %d, masters %v hung: number %d", i, i%2, hung, n)
	}

	// A grant whose reply does not show its count, through a proxy that
	// has seen no other call: a GET of the counter there reads the
	// holder's number.
	third, _ := startApp(t, c.addrs(), func(cfg *config.Config) { cfg.MaxTTL = time.Minute })
	p3 := proxyClient(t, third.Addr(), 2)
	quiet := counted(t, "take or enter again, counting the grant").Text
	if got := replyOf(p3.Eval(ctx, quiet, []string{key, counter}, 30000, "owner-9:1").Result()); got != "nil" {
		t.Fatalf("a grant that shows no number: %s", got)
	}
	n, err := strconv.ParseInt(p3.Get(ctx, counter).Val(), 10, 64)
	if err != nil || n <= last {
		t.Fatalf("GET of the counter after a grant that shows no number: %d, %v; want above %d", n, err, last)
	}
	if v := c.direct[0].Exists(ctx, counter).Val(); v != 0 {
		t.Fatal("a master holds the counter")
	}
}

// One renewal of every lock a client holds (Redisson's watchdog renews
// them in one call, a key and an owner each): each key is its own lock
// operation, and the reply has one element per key. Locks the owner holds
// on a majority are re-armed, another owner's is left alone, and one the
// owner holds on two masters only is not renewed.
func TestRenewalOfEveryLockHeld(t *testing.T) {
	enter := counted(t, "take or enter again").Text
	renew := counted(t, "renew every lock held, each on its own").Text
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)
	const me1, me2, other = "6f1c2e7a-52b8-4a42:41", "6f1c2e7a-52b8-4a42:42", "9d0b7c11-0e4f-4c55:7"
	base := uniqueKey("renew")
	a, b, o := "{"+base+"}:a", "{"+base+"}:b", "{"+base+"}:o"
	for _, kv := range [][2]string{{a, me1}, {b, me2}, {o, other}} {
		if got := replyOf(cl.Eval(ctx, enter, []string{kv[0]}, 5000, kv[1]).Result()); got != "nil" {
			t.Fatalf("take %s: %s", kv[0], got)
		}
	}
	got, err := cl.Eval(ctx, renew, []string{a, b, o}, 30000, me1, me2, me1).Slice()
	if err != nil || fmt.Sprint(got) != "[1 1 0]" {
		t.Fatalf("renewal of three locks: %v, %v; want [1 1 0]", got, err)
	}
	for _, k := range []string{a, b} {
		for i, p := range c.pttls(k) {
			if p < 25*time.Second || p > 30*time.Second {
				t.Fatalf("%s on master %d: PTTL %v after the renewal", k, i, p)
			}
		}
	}
	for i, p := range c.pttls(o) {
		if p > 5*time.Second {
			t.Fatalf("another owner's lock on master %d: PTTL %v, renewed", i, p)
		}
	}
	if h := c.holds(o, other); fmt.Sprint(h) != "[1 1 1 1 1]" {
		t.Fatalf("another owner's lock: counts %v", h)
	}

	// A lock two masters hold for the owner: not renewed (the others'
	// answer is that the owner does not hold it there).
	d := "{" + base + "}:d"
	c.setHolds(t, d, me1, []int64{1, 1, 0, 0, 0}, 5*time.Second)
	got, err = cl.Eval(ctx, renew, []string{a, d}, 30000, me1, me1).Slice()
	if err != nil || fmt.Sprint(got) != "[1 0]" {
		t.Fatalf("renewal of a held lock and one two masters hold: %v, %v; want [1 0]", got, err)
	}
	// The same call shape with a TTL above max_ttl is refused as a whole.
	if _, err := cl.Eval(ctx, renew, []string{a, b}, (time.Hour).Milliseconds(), me1, me2).Result(); err == nil || !strings.Contains(err.Error(), "exceeds max_ttl") {
		t.Fatalf("a renewal of an hour: %v", err)
	}
}

// A GET of a counter of grants runs a FENCE of its lock: a user whose
// rules deny FENCE is refused it, in FENCE's words, and one allowed reads
// the number.
func TestCounterReadNeedsFencePermission(t *testing.T) {
	users := []config.UserConfig{
		{Name: "all", Password: "a-pass", Rules: "on ~* +@all"},
		{Name: "nofence", Password: "n-pass", Rules: "on ~* +@all -fence"},
	}
	c := newCluster(t, 3, func(cfg *config.Config) { cfg.Users = users })
	ctx := context.Background()
	as := func(user, pass string) *redis.Client {
		cl := redis.NewClient(&redis.Options{Addr: c.app.Addr(), Username: user, Password: pass, Protocol: 2, MaxRetries: -1, DisableIdentity: true})
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	all, nofence := as("all", "a-pass"), as("nofence", "n-pass")
	key := uniqueKey("fenced")
	counter := "redlock-number:{" + key + "}"
	v, err := all.Eval(ctx, counted(t, "take or enter again, numbering the grant").Text, []string{key, counter}, 30000, "owner:1").Slice()
	if err != nil || len(v) != 2 {
		t.Fatalf("grant: %v, %v", v, err)
	}
	if got := all.Get(ctx, counter).Val(); got != fmt.Sprint(v[1]) {
		t.Fatalf("GET of the counter: %q, want the grant's %v", got, v[1])
	}
	if _, err := nofence.Get(ctx, counter).Result(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") || !strings.Contains(err.Error(), "fence") {
		t.Fatalf("GET of the counter by a user without FENCE: %v, want NOPERM naming fence", err)
	}
}
