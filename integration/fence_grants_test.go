package integration

import (
	"context"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
)

// One grant has one number, on every call and after any extend
// (docs/fencing.md): here the extend is redsync's own Extend, which carries
// the lock past the TTL it had when FENCE first numbered it.
func TestFenceNumberSurvivesALibraryExtend(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(2)
	key := uniqueKey("fence-extend")
	rs := redsync.New(goredis.NewPool(c.client(2)))
	m := rs.NewMutex(key, redsync.WithExpiry(time.Second), redsync.WithTries(1))
	if err := m.Lock(); err != nil {
		t.Fatalf("redsync Lock: %v", err)
	}
	first := fence(t, cl, key, m.Value())
	if first == 0 {
		t.Fatal("FENCE of a fresh redsync lock = nil")
	}
	time.Sleep(500 * time.Millisecond)
	if ok, err := m.Extend(); !ok || err != nil {
		t.Fatalf("redsync Extend: %v, %v", ok, err)
	}
	time.Sleep(700 * time.Millisecond) // past the first TTL, within the extended one
	again := fence(t, cl, key, m.Value())
	if again != first {
		t.Fatalf("FENCE of the same grant after redsync's Extend = %d, want %d", again, first)
	}
}

// A grant made after an earlier one ended gets a larger number
// (docs/fencing.md), also when it carries the same token: bsm/redislock
// re-obtains a lock by a token the caller chooses, and the README lists
// that among what works through the proxy.
func TestFenceNumberRisesForANewGrantWithTheSameToken(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("fence-token")
	locker := redislock.New(c.client(2))
	opt := &redislock.Options{Token: "worker-7"}
	l, err := locker.Obtain(ctx, key, 5*time.Second, opt)
	if err != nil {
		t.Fatalf("redislock Obtain: %v", err)
	}
	first := fence(t, cl, key, l.Token())
	if err := l.Release(ctx); err != nil {
		t.Fatalf("redislock Release: %v", err)
	}
	if n := fence(t, cl, key, l.Token()); n != 0 {
		t.Fatalf("FENCE after the release = %d, want nil", n)
	}
	l, err = locker.Obtain(ctx, key, 5*time.Second, opt)
	if err != nil {
		t.Fatalf("redislock Obtain again: %v", err)
	}
	defer l.Release(ctx)
	if second := fence(t, cl, key, l.Token()); second <= first {
		t.Fatalf("the number of a grant made after the first was released is %d, not above the first's %d", second, first)
	}
}

// A lock removed by force (DEL) takes its fencing state with it, as a
// release does: a new grant with the same token gets a larger number.
func TestFenceNumberRisesAfterAForcedDelete(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("fence-del")
	if ok, err := cl.SetNX(ctx, key, "tok", 5*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	first := fence(t, cl, key, "tok")
	if n, err := cl.Del(ctx, key).Result(); n != 1 || err != nil {
		t.Fatalf("DEL = %v, %v; want 1", n, err)
	}
	if ok, err := cl.SetNX(ctx, key, "tok", 5*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX again = %v, %v", ok, err)
	}
	if second := fence(t, cl, key, "tok"); second <= first {
		t.Fatalf("the number of a grant made after a forced DEL is %d, not above the first's %d", second, first)
	}
}
