package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
)

// The hold of a lost master ends once the other masters' records show every
// lock it may have held has expired. Each test here holds a lock A on
// masters 0 and 1 only (master 2 holds a stray key at A's grant, which
// expires soon after), restarts master 0 empty, and then tries a second
// holder B while A's lock is valid: B would hold master 0 (empty, counting
// again) and master 2, a majority. B must never get the lock while A's is
// valid.

// stray puts on master i a key another client set, for ttl: master i
// refuses A's grant, and is free again for B once it expires.
func (c *cluster) stray(i int, key string, ttl time.Duration) {
	c.t.Helper()
	if err := c.direct[i].Set(context.Background(), key, "stray", ttl).Err(); err != nil {
		c.t.Fatal(err)
	}
}

// guardedLockScript takes KEYS[1] for ARGV[1] with a TTL of ARGV[2] ms if it
// is free, and counts the grants in KEYS[2]: no classified role, so only
// unknown_scripts: vote runs it (through the guard, which lets it write its
// own keys with an expiry of at most max_ttl).
const guardedLockScript = `local ok = redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])
if ok then
  redis.call('incr', KEYS[2])
  redis.call('pexpire', KEYS[2], ARGV[2])
end
return ok`

// A lock taken by a script run under unknown_scripts: vote is a grant like
// any other: its votes are checked for continuity, and a master that loses
// it must stay out of the count until it expired. With SET NX PX the other
// masters' records bound the hold; with the voted script they must too
// (the script's keys live up to max_ttl, the TTL the guard allows). The
// control, restart_quarantine off, shows the sequence yields a second
// holder when nothing holds the restarted master out.
func TestVotedScriptLockOutlivesAMasterRestartedEmpty(t *testing.T) {
	waits(t)
	const ttl = 8 * time.Second
	for _, tc := range []struct {
		name, rule string
		voted      bool
	}{
		{"set-nx", "strict", false},
		{"voted-script", "strict", true},
		{"voted-script-control", "off", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := vouched(t, startRedis(t, 3), 10*time.Minute, tc.rule, func(cfg *config.Config) { cfg.UnknownScripts = "vote" })
			ctx := context.Background()
			cl := c.client(2)
			key := uniqueKey("voted-lock")
			take := func(token string, ttl time.Duration) (bool, error) {
				if !tc.voted {
					return cl.SetNX(ctx, key, token, ttl).Result()
				}
				v, err := cl.Eval(ctx, guardedLockScript, []string{key, key + ":grants"}, token, ttl.Milliseconds()).Result()
				if err == redis.Nil || err != nil && strings.Contains(err.Error(), "no majority") {
					return false, nil // refused, or no majority agreed
				}
				return v == "OK", err
			}
			c.stray(2, key, 1500*time.Millisecond)
			if ok, err := take("A", ttl); !ok || err != nil {
				t.Fatalf("A's grant = %v, %v", ok, err)
			}
			validUntil := time.Now().Add(ttl - 300*time.Millisecond)
			if h := c.holders(key, "A"); len(h) != 2 || h[0] != 0 || h[1] != 1 {
				t.Fatalf("A's lock is held on masters %v; want [0 1]", h)
			}
			c.restartEmpty(0)
			// B's attempts are short-lived, each with its own token: a voted
			// script has no undo, so what a failed attempt left on a master
			// is gone before the next.
			for i := 0; time.Now().Before(validUntil); i++ {
				b := fmt.Sprintf("B%d", i)
				ok, err := take(b, 300*time.Millisecond)
				if err != nil {
					t.Fatalf("B's attempt: %v", err)
				}
				if ok && time.Now().Before(validUntil) {
					if tc.rule == "off" {
						return // the control saw the second holder
					}
					t.Fatalf("B got the lock %v before A's expired (held on %v, A's on %v; master 0 restarted empty)",
						time.Until(validUntil).Round(time.Millisecond), c.holders(key, b), c.holders(key, "A"))
				}
				time.Sleep(400 * time.Millisecond)
			}
			if tc.rule == "off" {
				t.Fatal("control: with no hold B never got the lock while A held it; the test shows nothing")
			}
		})
	}
}

// A reentrant lock's release that leaves holds re-arms the lock to its TTL
// argument and answers "still held": the lock's deadline moves on as an
// extend's does, so the other masters' records must show it. A takes the
// lock twice for 2 s (on masters 0 and 1), leaves once re-arming it for
// 10 s, and master 0 restarts empty: B, another owner, must not take it
// while A's re-armed lock is valid. The control (restart_quarantine off)
// shows the second owner.
func TestReentrantReleaseReArmBoundsARestartedMastersHold(t *testing.T) {
	waits(t)
	enter, exit := reentrant(t)
	const first, rearmed = 2 * time.Second, 10 * time.Second
	const owner, other = "6f1c2e7a-52b8-4a42:41", "9d0b7c11-0e4f-4c55:7"
	for _, rule := range []string{"strict", "off"} {
		t.Run(rule, func(t *testing.T) {
			c := vouched(t, startRedis(t, 3), 10*time.Minute, rule)
			ctx := context.Background()
			cl := c.client(2)
			key := uniqueKey("reentrant-rearm")
			c.stray(2, key, 500*time.Millisecond)
			for _, step := range []string{"take", "enter again"} {
				if err := cl.Eval(ctx, enter, []string{key}, first.Milliseconds(), owner).Err(); err != redis.Nil {
					t.Fatalf("A's %s = %v; want nil (held)", step, err)
				}
			}
			if h := c.holds(key, owner); h[0] != 2 || h[1] != 2 {
				t.Fatalf("A's holds on the masters: %v; want 2 on masters 0 and 1", h)
			}
			waitFor(t, 2*time.Second, "the stray key on master 2 to expire", func() error {
				return holds(c.direct[2].Exists(ctx, key).Val() == 0)
			})
			if v, err := cl.Eval(ctx, exit, []string{key}, rearmed.Milliseconds(), owner).Result(); err != nil || v != int64(0) {
				t.Fatalf("A leaves once = %v, %v; want 0 (still held)", v, err)
			}
			validUntil := time.Now().Add(rearmed - 300*time.Millisecond)
			c.restartEmpty(0)
			for time.Now().Before(validUntil) {
				err := cl.Eval(ctx, enter, []string{key}, 300, other).Err()
				if err != nil && err != redis.Nil {
					t.Fatalf("B's take: %v", err)
				}
				if err == redis.Nil && time.Now().Before(validUntil) {
					if rule == "off" {
						return // the control saw the second owner
					}
					t.Fatalf("B took the lock %v before A's re-armed lock expired (B's holds %v, A's %v; master 0 restarted empty)",
						time.Until(validUntil).Round(time.Millisecond), c.holds(key, other), c.holds(key, owner))
				}
				time.Sleep(400 * time.Millisecond)
			}
			if rule == "off" {
				t.Fatal("control: with no hold B never took the lock while A held it; the test shows nothing")
			}
		})
	}
}

// A read-write lock's write release that leaves write holds re-arms the
// lock to its lease (Redisson's unlock, ARGV[2]), never shorter: its
// deadline must reach the other masters' records too. A write grant
// records max_ttl (a re-entry adds to what is left), so the re-arm passes
// that record only when it comes late in the lock's life: with max_ttl
// 4 s, A takes the write lock twice for 2 s (on masters 0 and 1; the lock
// lives 4 s), leaves once 2.5 s later re-arming it for 4 s, and master 0
// restarts empty. B then asks for a read lock for 300 ms (a read grant
// records its own TTL, not max_ttl, so B's tries move no record past
// A's): it must not get it while A's re-armed write lock is valid. The
// control (restart_quarantine off) shows B's read beside A's write.
func TestRWWriteReleaseReArmBoundsARestartedMastersHold(t *testing.T) {
	waits(t)
	scripts := redissonRW(t)
	const maxTTL, first = 4 * time.Second, 2 * time.Second
	const writer, reader = "6f1c2e7a-52b8-4a42:41:write", "9d0b7c11-0e4f-4c55:7"
	for _, rule := range []string{"strict", "off"} {
		t.Run(rule, func(t *testing.T) {
			c := vouched(t, startRedis(t, 3), maxTTL, rule)
			ctx := context.Background()
			cl := c.client(2)
			key := uniqueKey("rw-rearm")
			// Another writer's lock on master 2 refuses A's grants there.
			if err := c.direct[2].HSet(ctx, key, "mode", "write", "stray:write", 1).Err(); err != nil {
				t.Fatal(err)
			}
			c.direct[2].PExpire(ctx, key, 500*time.Millisecond)
			taken := time.Now()
			for _, step := range []string{"take", "enter again"} {
				got := replyOf(cl.Eval(ctx, scripts[classify.RWWriteAcquire], []string{key}, first.Milliseconds(), writer).Result())
				if got != "nil" {
					t.Fatalf("A's %s = %s; want nil (held)", step, got)
				}
			}
			for i := 0; i < 2; i++ {
				if got := c.direct[i].HGet(ctx, key, writer).Val(); got != "2" {
					t.Fatalf("A's holds on master %d: %q; want 2", i, got)
				}
			}
			waitFor(t, 2*time.Second, "the stray lock on master 2 to expire", func() error {
				return holds(c.direct[2].Exists(ctx, key).Val() == 0)
			})
			time.Sleep(time.Until(taken.Add(maxTTL - 1500*time.Millisecond)))
			unlock := replyOf(cl.Eval(ctx, scripts[classify.RWWriteRelease],
				[]string{key, "redisson_rwlock:{" + key + "}", "{" + key + "}:unlock_latch"},
				0, maxTTL.Milliseconds(), writer, "publish", 3000).Result())
			if unlock != "0" {
				t.Fatalf("A leaves once = %s; want 0 (still held)", unlock)
			}
			validUntil := time.Now().Add(maxTTL - 300*time.Millisecond)
			c.restartEmpty(0)
			for time.Now().Before(validUntil) {
				got := replyOf(cl.Eval(ctx, scripts[classify.RWReadAcquire],
					[]string{key, "{" + key + "}:" + reader + ":rwlock_timeout"}, 300, reader, reader+":write").Result())
				if strings.HasPrefix(got, "error") {
					t.Fatalf("B's read: %s", got)
				}
				if got == "nil" && time.Now().Before(validUntil) {
					if rule == "off" {
						return // the control saw B's read beside A's write
					}
					t.Fatalf("B got a read lock %v before A's re-armed write lock expired (masters hold %v, %v, %v; master 0 restarted empty)",
						time.Until(validUntil).Round(time.Millisecond), c.direct[0].HGetAll(ctx, key).Val(), c.direct[1].HGetAll(ctx, key).Val(), c.direct[2].HGetAll(ctx, key).Val())
				}
				time.Sleep(400 * time.Millisecond)
			}
			if rule == "off" {
				t.Fatal("control: B never got a read lock while A held the write lock; the test shows nothing")
			}
		})
	}
}

// The records read to end a lost master's hold must be read at least the
// longest backend_timeout of any proxy after the loss: until then a grant
// counted on the lost master may still be on its way to the others. Proxy
// P1 (backend_timeout 10 s) grants A's lock: master 0 at once, master 1
// over a link that takes 4 s each way; master 2 is cut off from P1 (its
// record never learns of A's grant). Master 0 is then cut off from P1 too
// and restarted empty, so its new marker learns only the settle time of
// proxy P2 (backend_timeout 200 ms), which reads the other masters'
// records well before A's grant reached master 1. P2 must not let master 0
// count while A's lock is valid: the other masters' markers keep P1's
// settle time. Once A is answered, B tries through P2: its grant would
// hold master 0 and master 2, a majority.
func TestSlowProxysGrantBoundsALostMastersHoldInAFastProxy(t *testing.T) {
	waits(t)
	const ttl, slowTimeout, oneWay = 20 * time.Second, 10 * time.Second, 4 * time.Second
	servers := startRedis(t, 3)
	relays, _, relayed := relayEach(t, servers)
	strict := func(timeout time.Duration) func(*config.Config) {
		return func(cfg *config.Config) {
			cfg.MaxTTL = 10 * time.Minute
			cfg.BackendTimeout = timeout
			cfg.RestartQuarantine = "strict"
		}
	}
	fast := clusterOver(t, servers, strict(200*time.Millisecond))
	ctx := context.Background()
	if err := fast.client(2).Do(ctx, "VOUCH").Err(); err != nil {
		t.Fatalf("VOUCH over brand-new masters: %v", err)
	}
	waitAllCount(t, fast)
	slow, _ := startApp(t, relayed, strict(slowTimeout))
	waitAppCounts(t, slow)

	key := uniqueKey("slow-grant")
	relays[2].BlackHole(true)
	relays[1].Delay(oneWay)
	type result struct {
		ok  bool
		err error
	}
	done := make(chan result, 1)
	t1 := time.Now()
	// A's client waits as long as P1 may.
	a := redis.NewClient(&redis.Options{Addr: slow.Addr(), Protocol: 2, MaxRetries: -1, ReadTimeout: 2 * slowTimeout})
	t.Cleanup(func() { a.Close() })
	go func() {
		ok, err := a.SetNX(ctx, key, "A", ttl).Result()
		done <- result{ok, err}
	}()
	waitFor(t, 5*time.Second, "A's grant on master 0", func() error {
		return holds(len(fast.holders(key, "A")) == 1)
	})
	time.Sleep(100 * time.Millisecond) // its continuity check answered P1
	relays[0].BlackHole(true)
	fast.restartEmpty(0)

	if r := <-done; !r.ok || r.err != nil {
		t.Fatalf("A's grant through P1 = %v, %v; want it granted by masters 0 and 1", r.ok, r.err)
	}
	answered := time.Since(t1)
	validUntil := t1.Add(ttl - 300*time.Millisecond)
	t.Logf("A granted %v after its SET NX, on masters %v; master 0 counts in P2: %v", answered.Round(time.Millisecond), fast.holders(key, "A"), fast.counting(0))
	for i := 0; time.Now().Before(validUntil); i++ {
		b := fmt.Sprintf("B%d", i)
		ok, err := fast.client(2).SetNX(ctx, key, b, 300*time.Millisecond).Result()
		if err != nil && err != redis.Nil {
			t.Fatalf("B's attempt: %v", err)
		}
		if ok && time.Now().Before(validUntil) {
			t.Fatalf("B got the lock through P2 %v after A's SET NX (answered after %v, valid %v more; B's on %v, A's on %v)",
				time.Since(t1).Round(time.Millisecond), answered.Round(time.Millisecond), time.Until(validUntil).Round(time.Millisecond),
				fast.holders(key, b), fast.holders(key, "A"))
		}
		time.Sleep(400 * time.Millisecond)
	}
}
