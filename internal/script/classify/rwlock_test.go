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
	read, unlock, renew := RWLayout(2, 3), RWLayout(5, 4), RWLayout(4, 3)
	if read == nil || read.Role != RWReadAcquire || unlock == nil || unlock.Role != RWReadRelease || renew == nil || renew.Role != RWReadRenew {
		t.Fatalf("layouts: %v %v %v", read, unlock, renew)
	}
	if l := RWLayout(2, 2); l != renew {
		t.Fatalf("RWLayout(2, 2) = %v, want the renewal's", l)
	}
	for _, shape := range [][2]int{{1, 1}, {2, 4}, {3, 2}, {0, 1}} {
		if l := RWLayout(shape[0], shape[1]); l != nil {
			t.Errorf("RWLayout%v = %v, want none", shape, l)
		}
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

// rwWriteAcquireText is a write acquire of this test's own, in Redisson's
// layout (KEYS[1] the lock; ARGV the TTL and the writer), written
// otherwise than Redisson's; before is put at its start.
func rwWriteAcquireText(before string) string {
	return before + `
local lock, ttl, me = KEYS[1], tonumber(ARGV[1]), ARGV[2]
if redis.call('exists', lock) == 0 then
  redis.call('hset', lock, 'mode', 'write', me, 1)
  redis.call('pexpire', lock, ttl)
  return nil
end
local left = redis.call('pttl', lock)
if redis.call('hget', lock, 'mode') ~= 'write' or redis.call('hexists', lock, me) == 0 then
  return left
end
redis.call('hincrby', lock, me, 1)
redis.call('pexpire', lock, left + ttl)
return nil`
}

// A write acquire is recognized by what it does, whatever its text; one
// whose outcome hangs on HKEYS' order, or that lets a writer in beside
// another's read hold, is not, and the refusal names the probe.
func TestRWRecognizeByBehaviour(t *testing.T) {
	wa := RWLayout(1, 2)
	if why := RWRecognize([]byte(rwWriteAcquireText("")), wa); why != "" {
		t.Fatalf("a write acquire of its own: %s", why)
	}
	for _, c := range []struct{ name, text, probe string }{
		{"order", rwWriteAcquireText(`local first = redis.call('hkeys', KEYS[1])[1]
if first ~= nil and first ~= 'mode' then return redis.call('pttl', KEYS[1]) end`), "on the caller's write lock"},
		{"readers", strings.Replace(rwWriteAcquireText(""), "if redis.call('exists', lock) == 0 then", "if redis.call('exists', lock) == 0 or redis.call('hget', lock, 'mode') == 'read' then", 1), "on another's read hold"},
		{"not a read-write lock", "return redis.call('set', KEYS[1], ARGV[2], 'px', ARGV[1], 'nx')", "on a free lock"},
	} {
		why := RWRecognize([]byte(c.text), wa)
		if !strings.Contains(why, c.probe) {
			t.Errorf("%s: RWRecognize = %q, want a refusal %s", c.name, why, c.probe)
		}
	}
	if why := RWRecognize([]byte(rwWriteAcquireText("")), RWLayout(2, 3)); why == "" {
		t.Errorf("a write acquire is recognized as a read acquire")
	}
}
