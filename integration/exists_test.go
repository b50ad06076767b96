package integration

import (
	"context"
	"testing"
	"time"
)

// EXISTS of a lock is read as GET reads it (redlock-rb asks EXISTS, then
// GET, whether a lock is held): 1 only where a majority of the masters
// hold a value; several keys are counted as Redis counts them.
func TestExistsReadsTheMajority(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(0)
	key := uniqueKey("exists")
	exists := func(when string, want int64) {
		t.Helper()
		if got, err := cl.Exists(ctx, key).Result(); err != nil || got != want {
			t.Fatalf("%s: EXISTS = %v, %v; want %d", when, got, err, want)
		}
	}
	exists("free", 0)
	for _, m := range c.direct[:2] {
		m.Set(ctx, key, "minority", 10*time.Second)
	}
	exists("held by two of five masters", 0)
	c.direct[2].Set(ctx, key, "minority", 10*time.Second)
	exists("held by three of five masters", 1)
	for _, m := range c.direct {
		m.Del(ctx, key)
	}
	mustDo(t, cl, "OK", "SET", key, "tok", "NX", "PX", 10000)
	exists("after SET NX PX", 1)
	mustDo(t, cl, 1, "DELIFEQ", key, "tok")
	exists("after the release", 0)
	// Several keys, as in Redis: each read on its own, those held counted
	// (a key named twice counts twice).
	mustDo(t, cl, "OK", "SET", key, "tok", "NX", "PX", 10000)
	mustDo(t, cl, 2, "EXISTS", key, key, key+"-2")
}
