package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// A lock script whose role depends on an argument's value (an anonymous
// owner, a reserved token, a numeric threshold): its role is classified
// from an ordinary owner's call, then two clients call it as the special
// owner, who may not re-enter. On one Redis the second is refused; through
// the proxy over five masters it must be too, and every step answers as
// on one Redis.
func TestRoleThatDependsOnItsArguments(t *testing.T) {
	c := newCluster(t, 5)
	lone := loneRedis(t)
	ctx := context.Background()
	for _, sw := range libscripts.Switches() {
		t.Run(sw.Name, func(t *testing.T) {
			ordinaryKey, specialKey := uniqueKey("switch"), uniqueKey("switch")
			a, b, cc := c.client(2), c.client(2), c.client(2)
			steps := []struct {
				name string
				cl   *redis.Client
				key  string
				argv []string
			}{
				{"an ordinary owner takes its lock", a, ordinaryKey, sw.Ordinary},
				{"and re-enters it", a, ordinaryKey, sw.Ordinary},
				{"a first special owner takes another lock", b, specialKey, sw.Special},
				{"a second special owner asks for it", cc, specialKey, sw.Special},
			}
			var lease time.Duration
			fmt.Sscan(sw.Special[1], &lease)
			lease *= time.Millisecond
			for i, s := range steps {
				if i == 3 {
					time.Sleep(300 * time.Millisecond) // a re-arm would show in the PTTL
				}
				argv := make([]any, len(s.argv))
				for j, x := range s.argv {
					argv[j] = x
				}
				want := replyOf(lone.Eval(ctx, sw.Text, []string{s.key}, argv...).Result())
				got := replyOf(s.cl.Eval(ctx, sw.Text, []string{s.key}, argv...).Result())
				if got != want {
					t.Fatalf("%s: the proxy answered %s, one Redis %s", s.name, got, want)
				}
				if h := c.eventuallyHolders(s.key, s.argv[0], 5); len(h) != 5 {
					t.Fatalf("%s: masters %v hold %q", s.name, h, s.argv[0])
				}
				if i == 3 {
					// Refused, and the lock was not re-armed for the second
					// holder: on every master its PTTL is what is left of
					// the first's lease.
					for m, p := range c.pttls(s.key) {
						if p <= 0 || p > lease-300*time.Millisecond {
							t.Fatalf("master %d: PTTL %v after the refusal (lease %v)", m, p, lease)
						}
					}
				}
				t.Logf("%s: %s", s.name, got)
			}
		})
	}
}

// secondsBelow1024 takes a lock for ARGV[2] seconds when it is below 1024,
// for ARGV[2] ms otherwise: a threshold the script computes, which no
// relation of its arguments shows.
const secondsBelow1024 = `if tonumber(ARGV[2]) < 2^10 then
  return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'EX', ARGV[2])
end
return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`

// A lock script that treats some values otherwise for a reason the
// relations of its arguments do not show: classified on a call of 30000
// (ms), it takes a lock for 60 s when called with 60. Through the proxy
// that call must not be served by the first call's classification (a
// lock of 60 ms, which a third client would take while the second holds
// it): each step answers as on one Redis, and the masters keep the lock
// for a minute.
func TestRoleThatDependsOnComputedValues(t *testing.T) {
	c := newCluster(t, 5)
	lone := loneRedis(t)
	ctx := context.Background()
	first, second := uniqueKey("computed"), uniqueKey("computed")
	a, b, cc := c.client(2), c.client(2), c.client(2)
	for i, s := range []struct {
		name string
		cl   *redis.Client
		key  string
		argv []any
	}{
		{"a first owner takes a lock for 30000 ms", a, first, []any{"owner-a", 30000}},
		{"a second takes another for 60 s", b, second, []any{"owner-b", 60}},
		{"a third asks for the second's lock", cc, second, []any{"owner-c", 60}},
	} {
		if i == 2 {
			time.Sleep(300 * time.Millisecond) // a lock of 60 ms would be gone
		}
		want := replyOf(lone.Eval(ctx, secondsBelow1024, []string{s.key}, s.argv...).Result())
		got := replyOf(s.cl.Eval(ctx, secondsBelow1024, []string{s.key}, s.argv...).Result())
		if got != want {
			t.Fatalf("%s: the proxy answered %s, one Redis %s (masters' PTTL %v)", s.name, got, want, c.pttls(s.key))
		}
		t.Logf("%s: %s", s.name, got)
	}
	if h := c.eventuallyHolders(second, "owner-b", 5); len(h) != 5 {
		t.Fatalf("masters %v hold the second's lock", h)
	}
	for m, p := range c.pttls(second) {
		if p < 50*time.Second || p > 60*time.Second {
			t.Fatalf("master %d: PTTL %v of a lock taken for 60 s", m, p)
		}
	}
}
