package integration

import (
	"context"
	"strings"
	"testing"
)

// A lock script given a TTL of 0 (or less) asks for a lock that never
// expires; the proxy refuses the call as it refuses SET without an expiry,
// saying which argument, and writes nothing.
func TestScriptWithTTLZeroIsRefusedAsNoExpiry(t *testing.T) {
	c := newCluster(t, 5)
	cl := c.client(0)
	acquire := "return redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])"
	key := uniqueKey("ttl0")
	mustDo(t, cl, "OK", "EVAL", acquire, 1, key, "tok", 5000) // classified as an acquire
	mustDo(t, cl, 1, "DELIFEQ", key, "tok")
	for _, ttl := range []any{0, -5} {
		_, err := do(cl, "EVAL", acquire, 1, key, "tok", ttl)
		if err == nil || !strings.Contains(err.Error(), "ARGV[2]") || !strings.Contains(err.Error(), "never writes a lock that cannot expire") {
			t.Fatalf("acquire with TTL %v: %v; want the no-expiry refusal naming ARGV[2]", ttl, err)
		}
		for i, m := range c.direct {
			if n, err := m.Exists(context.Background(), key).Result(); err != nil || n != 0 {
				t.Fatalf("TTL %v: master %d holds %s (%v)", ttl, i, key, err)
			}
		}
	}
	if _, err := do(cl, "EVAL", acquire, 1, key, "tok", "soon"); err == nil || err.Error() != "ERR value is not an integer or out of range" {
		t.Fatalf("acquire with TTL soon: %v; want Redis's not-an-integer error", err)
	}
}
