package integration

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"
)

// fence calls FENCE and returns the number, or 0 for nil.
func fence(t *testing.T, cl *redis.Client, key, token string) int64 {
	t.Helper()
	n, err := cl.Do(context.Background(), "FENCE", key, token).Int64()
	if err == redis.Nil {
		return 0
	}
	if err != nil {
		t.Fatalf("FENCE %s %s: %v", key, token, err)
	}
	if n <= 0 {
		t.Fatalf("FENCE %s %s = %d, want a positive number", key, token, n)
	}
	return n
}

// FENCE gives a grant one number, the same on every call, through any
// proxy and after extends; nil to anyone else; a later grant a larger one.
func TestFenceNumbers(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	other := proxyClient(t, startSecondProxy(t, c), 3)
	key := uniqueKey("fence")
	if ok, _ := cl.SetNX(ctx, key, "A", 5*time.Second).Result(); !ok {
		t.Fatal("SET NX A")
	}
	a := fence(t, cl, key, "A")
	if again := fence(t, cl, key, "A"); again != a {
		t.Fatalf("FENCE of the same grant: %d then %d", a, again)
	}
	if via := fence(t, other, key, "A"); via != a {
		t.Fatalf("FENCE through another proxy: %d, want %d", via, a)
	}
	if n := fence(t, cl, key, "not-the-holder"); n != 0 {
		t.Fatalf("FENCE with another token = %d, want nil", n)
	}
	if n := fence(t, cl, uniqueKey("free"), "A"); n != 0 {
		t.Fatalf("FENCE of a free key = %d, want nil", n)
	}
	// Extends keep the number: SET IFEQ past the first TTL.
	for i := 0; i < 3; i++ {
		if err := cl.Do(ctx, "SET", key, "A", "IFEQ", "A", "PX", "2000").Err(); err != nil {
			t.Fatalf("SET IFEQ: %v", err)
		}
		time.Sleep(1500 * time.Millisecond)
	}
	if n := fence(t, other, key, "A"); n != a {
		t.Fatalf("FENCE after extends past the first TTL = %d, want %d", n, a)
	}
	cl.Do(ctx, "DELIFEQ", key, "A")
	if ok, _ := cl.SetNX(ctx, key, "B", 5*time.Second).Result(); !ok {
		t.Fatal("SET NX B")
	}
	if b := fence(t, other, key, "B"); b <= a {
		t.Fatalf("the next grant's number %d is not above the previous %d", b, a)
	}
	// A lock whose validity is over has no number.
	short := uniqueKey("short")
	if ok, _ := cl.SetNX(ctx, short, "C", 200*time.Millisecond).Result(); !ok {
		t.Fatal("SET NX C")
	}
	time.Sleep(300 * time.Millisecond)
	if n := fence(t, cl, short, "C"); n != 0 {
		t.Fatalf("FENCE after the lock expired = %d, want nil", n)
	}
}

// With one master of three down, FENCE still answers; with two down it
// answers nil.
func TestFenceWithMastersDown(t *testing.T) {
	c := newCluster(t, 3, backendTimeout(100*time.Millisecond))
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("fence-down")
	if ok, _ := cl.SetNX(ctx, key, "A", 10*time.Second).Result(); !ok {
		t.Fatal("SET NX A")
	}
	c.servers[2].Kill()
	a := fence(t, cl, key, "A")
	if a == 0 {
		t.Fatal("FENCE with one master of three down = nil")
	}
	c.servers[1].Kill()
	if n := fence(t, cl, key, "A"); n != 0 {
		t.Fatalf("FENCE with two masters of three down = %d, want nil", n)
	}
}

// Locks taken by real libraries: FENCE with the library's own token gives
// successive holders increasing numbers.
func TestFenceWithLibraries(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("fence-libs")
	var last int64

	rs := redsync.New(goredis.NewPool(c.client(2)))
	for i := 0; i < 2; i++ {
		m := rs.NewMutex(key, redsync.WithExpiry(5*time.Second), redsync.WithTries(1))
		if err := m.Lock(); err != nil {
			t.Fatalf("redsync Lock: %v", err)
		}
		n := fence(t, cl, key, m.Value())
		if n <= last {
			t.Fatalf("redsync holder %d: number %d not above %d", i, n, last)
		}
		last = n
		if ok, err := m.Unlock(); !ok || err != nil {
			t.Fatalf("redsync Unlock: %v %v", ok, err)
		}
	}
	locker := redislock.New(c.client(2))
	for i := 0; i < 2; i++ {
		l, err := locker.Obtain(ctx, key, 5*time.Second, nil)
		if err != nil {
			t.Fatalf("redislock Obtain: %v", err)
		}
		n := fence(t, cl, key, l.Token()+l.Metadata())
		if n <= last {
			t.Fatalf("redislock holder %d: number %d not above %d", i, n, last)
		}
		last = n
		l.Release(ctx)
	}
}
