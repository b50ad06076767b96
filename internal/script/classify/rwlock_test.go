package classify

import (
	"strings"
	"testing"
)

func bs(ss ...string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// A call fits a read-write lock layout only with Redisson's lease names,
// derived from the lock's name.
func TestRWLockCallsFitTheirLayout(t *testing.T) {
	read := RWLockFact("95553A6FF11176C18E71344E89D116B06FD6F753")
	unlock := RWLockFact("6e1b10e11ac0a3ed8e902562ecd32ce01b553039")
	renew := RWLockFact("1affef780a01e1406cb1968c62918f618d10d6a3")
	if read == nil || read.Role != RWReadAcquire || unlock == nil || unlock.Role != RWReadRelease || renew == nil || renew.Role != RWReadRenew {
		t.Fatalf("facts: %v %v %v", read, unlock, renew)
	}
	cases := []struct {
		l          *RWLock
		keys, argv [][]byte
		bad        string // part of the reason, "" when it fits
	}{
		{read, bs("rw", "{rw}:id:1:rwlock_timeout"), bs("30000", "id:1", "id:1:write"), ""},
		{read, bs("a{t}b", "a{t}b:id:1:rwlock_timeout"), bs("30000", "id:1", "id:1:write"), ""},
		{read, bs("rw", "{rw}:id:2:rwlock_timeout"), bs("30000", "id:1", "id:1:write"), "caller's lease prefix"},
		{read, bs("rw", "{other}:id:1:rwlock_timeout"), bs("30000", "id:1", "id:1:write"), "caller's lease prefix"},
		{read, bs("rw"), bs("30000", "id:1", "id:1:write"), "takes 2 keys"},
		{unlock, bs("rw", "redisson_rwlock:{rw}", "{rw}:id:1:rwlock_timeout", "{rw}", "{rw}:latch"), bs("0", "id:1", "PUBLISH", "20000"), ""},
		{unlock, bs("rw", "redisson_rwlock:{rw}", "{rw}:id:1:rwlock_timeout", "{x}", "{rw}:latch"), bs("0", "id:1", "PUBLISH", "20000"), "the lock's lease prefix"},
		{renew, bs("a", "{a}", "b{t}", "b{t}"), bs("30000", "id:1", "id:2"), ""},
		{renew, bs("a", "{b}"), bs("30000", "id:1"), "not the lease prefix"},
		{renew, bs("a", "{a}"), bs("30000"), "pairs of keys"},
	}
	for i, c := range cases {
		got := c.l.Fits(c.keys, c.argv)
		if (c.bad == "") != (got == "") || !strings.Contains(got, c.bad) {
			t.Errorf("case %d (%s): Fits = %q, want %q", i, c.l.Role, got, c.bad)
		}
	}
}

// On a Redis Cluster a lease must hash to its lock's slot: a name without
// '{', or with a complete hash tag.
func TestRWLeasesInSlot(t *testing.T) {
	for key, want := range map[string]bool{"rw": true, "lock:7": true, "a{t}b": true, "{t}": true, "a{b": false, "a{}b": false} {
		if got := RWLeasesInSlot([]byte(key)); got != want {
			t.Errorf("RWLeasesInSlot(%q) = %v, want %v", key, got, want)
		}
	}
}
