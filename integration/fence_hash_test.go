package integration

import (
	"context"
	"testing"
	"time"
)

// FENCE of a lock kept in a hash whose one field is its owner, as
// Redisson keeps its RLock and RFencedLock (the field counts re-entries):
// the grant's number through either proxy, nil for another owner or a hash
// of other fields, and a larger number for the same owner's next grant
// (Redisson's owner, "client id:thread id", is the same for every grant to
// one thread, so only the grant's own state tells grants apart).
func TestFenceOnHashLocks(t *testing.T) {
	const owner = "6a0c5f18-8c2a-4e6b-a5f2-5c1e6d3b2f10:1"
	c := newCluster(t, 5)
	ctx := context.Background()
	a := c.client(2)
	b := proxyClient(t, startSecondProxy(t, c), 3)
	key := uniqueKey("fencehash")
	var prev int64
	for i := 0; i < 3; i++ {
		if got := replyText(a.Eval(ctx, hashAcquire, []string{key}, owner, 10000).Result()); got != "1" {
			t.Fatalf("grant %d: acquire = %s, want 1", i, got)
		}
		n := fence(t, a, key, owner)
		if via := fence(t, b, key, owner); via != n {
			t.Fatalf("grant %d: FENCE through the other proxy = %d, want %d", i, via, n)
		}
		if n <= prev {
			t.Fatalf("grant %d: FENCE = %d after %d: not larger", i, n, prev)
		}
		if other := fence(t, b, key, "another-client:1"); other != 0 {
			t.Fatalf("grant %d: FENCE of another owner = %d, want nil", i, other)
		}
		if got := replyText(b.Eval(ctx, hashRelease, []string{key}, owner).Result()); got != "1" {
			t.Fatalf("grant %d: release = %s, want 1", i, got)
		}
		if n := fence(t, a, key, owner); n != 0 {
			t.Fatalf("grant %d: FENCE after the release = %d, want nil", i, n)
		}
		prev = n
	}

	// A re-entered lock (its field counts 2) has a number; a hash of two
	// fields (a read-write lock's mode beside its owner) is not a lock of
	// one owner and has none. Written on the masters directly: the states
	// a reentrant lock script leaves.
	reentered, twoFields := uniqueKey("fencehash"), uniqueKey("fencehash")
	for _, d := range c.direct {
		d.HSet(ctx, reentered, owner, 2)
		d.PExpire(ctx, reentered, 10*time.Second)
		d.HSet(ctx, twoFields, owner, 1, "mode", "write")
		d.PExpire(ctx, twoFields, 10*time.Second)
	}
	if n := fence(t, a, reentered, owner); n <= prev {
		t.Fatalf("FENCE of a re-entered hash lock = %d, want a number above %d", n, prev)
	}
	if n := fence(t, a, twoFields, owner); n != 0 {
		t.Fatalf("FENCE of a hash of two fields = %d, want nil", n)
	}
}
