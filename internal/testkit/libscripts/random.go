package libscripts

import (
	"fmt"
	"math/rand"
	"strings"
)

// Random builds a script from the allowed commands: a read, one or
// two conditions, writes, and replies.
func Random(rng *rand.Rand) string {
	pick := func(xs ...string) string { return xs[rng.Intn(len(xs))] }
	cond := func() string {
		return pick(`v == ARGV[1]`, `v ~= ARGV[1]`, `not v`, `v`, `v == ARGV[2]`, `redis.call('PTTL', KEYS[1]) > tonumber(ARGV[2])`,
			`redis.call('PTTL', KEYS[1]) < 1000`, `redis.call('EXISTS', KEYS[1]) == 1`, `true`, `v and v ~= ARGV[1]`)
	}
	stmt := func() string {
		return pick(``, ``, `redis.call('DEL', KEYS[1])`, `redis.call('PEXPIRE', KEYS[1], ARGV[2])`, `redis.call('EXPIRE', KEYS[1], ARGV[2])`,
			`redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])`, `redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2])`,
			`redis.call('SET', KEYS[1], ARGV[1], 'XX', 'PX', ARGV[2])`, `redis.call('SET', KEYS[1], ARGV[1])`,
			`redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[2])`, `redis.call('PEXPIRE', KEYS[1], 5000)`)
	}
	ret := func() string {
		return pick(`0`, `1`, `-1`, `redis.call('PTTL', KEYS[1])`, `redis.call('TTL', KEYS[1])`, `v`, `ARGV[1]`,
			`{1, redis.call('PTTL', KEYS[1])}`, `redis.status_reply('OK')`, `redis.error_reply('ERROR')`, `false`, `nil`,
			`redis.call('GET', KEYS[1])`, `#KEYS`)
	}
	var b strings.Builder
	b.WriteString(pick(`local v = redis.call('GET', KEYS[1])`, `local v = redis.call('get', KEYS[1]) or false`) + "\n")
	fmt.Fprintf(&b, "if %s then\n  %s\n  return %s\n", cond(), stmt(), ret())
	if rng.Intn(2) == 0 {
		fmt.Fprintf(&b, "elseif %s then\n  %s\n  return %s\n", cond(), stmt(), ret())
	}
	fmt.Fprintf(&b, "end\n%s\nreturn %s", stmt(), ret())
	return b.String()
}
