package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// A lock of several owners (Symfony's RedisStore scripts, their exact
// text from php-symfony-lock) over five masters where the majority says
// no: what the attempt took on the others is undone, and what the caller
// already held there is not.
func TestOwnersAcquireFailureIsUndoneWhereItTookTheLock(t *testing.T) {
	scripts, err := libscripts.Symfony()
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]libscripts.Script{}
	for _, s := range scripts {
		byName[strings.TrimPrefix(s.Name, "RedisStore::")] = s
	}
	c := newCluster(t, 5)
	cl := c.client(2)
	ctx := context.Background()
	lt := lockTarget{addr: c.app.Addr(), masters: c.direct, settle: 2 * time.Second}
	// own puts members on some masters, each with a deadline 20 s ahead.
	own := func(key string, masters []int, members ...string) {
		for _, i := range masters {
			now := time.Now()
			for _, m := range members {
				c.direct[i].ZAdd(ctx, key, redis.Z{Score: float64(now.Add(20 * time.Second).UnixMilli()), Member: m})
			}
			c.direct[i].PExpire(ctx, key, 20*time.Second)
		}
	}
	// eval runs save or saveRead (ARGV: the client's clock, the token, the
	// TTL) for token.
	eval := func(name, key, token string) string {
		s := byName[name]
		v, err := cl.Eval(ctx, s.Text, []string{key}, s.Argv[0], token, s.Argv[2]).Result()
		return replyText(v, err)
	}
	held := func(key, token string, masters ...int) error {
		os := lt.owners(key, token)
		for i, o := range os {
			want := false
			for _, m := range masters {
				want = want || m == i
			}
			if (o.left > 0) != want {
				return fmt.Errorf("master %d: %q an owner: %v; want %v", i, token, o.left > 0, want)
			}
		}
		return nil
	}

	// An exclusive acquire refused by three masters (another's write lock
	// there) is undone on the two that granted it.
	key := uniqueKey("owners")
	own(key, []int{0, 1, 2}, "other", ownersMarker)
	if got := eval("save", key, "tok"); got != "nil" {
		t.Fatalf("save against a majority's write lock = %s; want nil", got)
	}
	if err := lt.eventually(func() error { return held(key, "tok") }); err != nil {
		t.Fatalf("after the failed save: %v", err)
	}
	for _, i := range []int{3, 4} {
		if n := c.direct[i].Exists(ctx, key).Val(); n != 0 {
			t.Fatalf("master %d still holds the key the failed save made (%v)", i, c.direct[i].ZRangeWithScores(ctx, key, 0, -1).Val())
		}
	}

	// A shared acquire refused by three masters is undone where it joined
	// other readers.
	key = uniqueKey("owners")
	own(key, []int{0, 1, 2}, "other", ownersMarker)
	own(key, []int{3, 4}, "reader")
	if got := eval("saveRead", key, "tok"); got != "nil" {
		t.Fatalf("saveRead against a majority's write lock = %s; want nil", got)
	}
	if err := lt.eventually(func() error { return held(key, "tok") }); err != nil {
		t.Fatalf("after the failed saveRead: %v", err)
	}
	if err := held(key, "reader", 3, 4); err != nil {
		t.Fatalf("the other reader: %v", err)
	}

	// A promotion refused by three masters (another reader there) is not
	// undone: the caller's own lock stays on every master.
	key = uniqueKey("owners")
	own(key, []int{0, 1, 2, 3, 4}, "tok")
	own(key, []int{0, 1, 2}, "reader")
	if got := eval("save", key, "tok"); got != "nil" {
		t.Fatalf("promotion beside a majority's other reader = %s; want nil", got)
	}
	time.Sleep(100 * time.Millisecond)
	if err := held(key, "tok", 0, 1, 2, 3, 4); err != nil {
		t.Fatalf("after the failed promotion: %v", err)
	}
}

// A hash lock's scripts: the lock is a hash whose one field is its owner.
const (
	hashAcquire = `if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0`
	hashRelease = `if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return redis.call('hdel', KEYS[1], ARGV[1]) end return 0`
)

// A lock kept as a hash whose one field is its owner's token (scripts in
// that style, written for this test), over five masters: acquired,
// refused while held, extended, released, and, refused by a majority,
// undone where it took the key.
func TestHashLockThroughProxy(t *testing.T) {
	const (
		acquire = hashAcquire
		extend  = `if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0`
		release = hashRelease
	)
	c := newCluster(t, 5)
	cl := c.client(2)
	ctx := context.Background()
	lt := lockTarget{addr: c.app.Addr(), masters: c.direct, settle: 2 * time.Second}
	// owned reports on how many masters key is a hash whose one field is
	// token, with a PTTL in (lo, hi].
	owned := func(key, token string, lo, hi time.Duration) int {
		n := 0
		for _, d := range c.direct {
			f, _ := d.HKeys(ctx, key).Result()
			if p := d.PTTL(ctx, key).Val(); len(f) == 1 && f[0] == token && p > lo && p <= hi {
				n++
			}
		}
		return n
	}
	want := func(step, key, token string, n int, lo, hi time.Duration) {
		t.Helper()
		if err := lt.eventually(func() error {
			if got := owned(key, token, lo, hi); got != n {
				return fmt.Errorf("%q owns %q on %d masters (PTTL in (%v, %v]); want %d", token, key, got, lo, hi, n)
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", step, err)
		}
	}
	do := func(text, key string, args ...any) string {
		v, err := cl.Eval(ctx, text, []string{key}, args...).Result()
		return replyText(v, err)
	}
	key := uniqueKey("hashlock")
	if got := do(acquire, key, "tok", 8000); got != "1" {
		t.Fatalf("acquire = %s; want 1", got)
	}
	want("after acquire", key, "tok", 5, 7*time.Second, 8*time.Second)
	if got := do(acquire, key, "other", 8000); got != "0" {
		t.Fatalf("acquire of a held lock = %s; want 0", got)
	}
	want("after the refused acquire", key, "other", 0, 0, time.Minute)
	if got := do(extend, key, "tok", 20000); got != "1" {
		t.Fatalf("extend = %s; want 1", got)
	}
	want("after extend", key, "tok", 5, 19*time.Second, 20*time.Second)
	if got := do(extend, key, "other", 30000); got != "0" {
		t.Fatalf("extend by another = %s; want 0", got)
	}
	if got := do(release, key, "tok"); got != "1" {
		t.Fatalf("release = %s; want 1", got)
	}
	want("after release", key, "tok", 0, -time.Hour, time.Hour)

	// Held by another on three masters: refused, and undone on the two
	// that granted it.
	key = uniqueKey("hashlock")
	for _, d := range c.direct[:3] {
		d.HSet(ctx, key, "someone", 1)
		d.PExpire(ctx, key, 20*time.Second)
	}
	if got := do(acquire, key, "tok", 8000); got != "0" {
		t.Fatalf("acquire against a majority's lock = %s; want 0", got)
	}
	want("after the failed acquire", key, "tok", 0, -time.Hour, time.Hour)
	want("the other's lock", key, "someone", 3, 19*time.Second, 20*time.Second)
}
