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
