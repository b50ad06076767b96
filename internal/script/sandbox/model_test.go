package sandbox

import (
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/respconn"
)

// The model answers every command of the allow-list as a real
// redis-server does: random commands over keys of every type, run on both,
// give the same replies (errors included) and leave the same keys.

// modelPools are the arguments the generator draws from.
type modelPools struct {
	now int64
	rng *rand.Rand
}

func (p *modelPools) pick(xs ...string) string { return xs[p.rng.Intn(len(xs))] }

func (p *modelPools) key() string    { return p.pick("a", "b") }
func (p *modelPools) member() string { return p.pick("m1", "m2", "m3", "__write__", "10") }
func (p *modelPools) value() string  { return p.pick("v", "10", "-3", "x y", "", "9223372036854775807") }
func (p *modelPools) integer() string {
	return p.pick("0", "1", "-1", "2", "5", "-7", "abc", "1.5", "100")
}
func (p *modelPools) score() string {
	return p.pick("1", "2.5", "-inf", "+inf", "inf", "abc", "1e3", "0.1", "-2", "7", strconv.FormatInt(p.now+5000, 10))
}
func (p *modelPools) bound() string {
	return p.pick("1", "(1", "-inf", "+inf", "(2.5", "abc", "5", "(0.1", strconv.FormatInt(p.now, 10))
}
func (p *modelPools) ms() string {
	return p.pick("50000", "1500", "-5", "0", "abc", "120000")
}
func (p *modelPools) at(unit int64) string {
	// Not the current millisecond: which side of it Redis runs a command
	// on is a race (TestModelCommands has the exact rule).
	d := []int64{50_000, 1_500, -3_000, -1_000_000, 90_000}[p.rng.Intn(5)]
	return strconv.FormatInt((p.now+d)/unit, 10)
}

// command draws one command of the allow-list with its arguments.
func (p *modelPools) command() []string {
	k := p.key()
	many := func(f func() string, n int) []string {
		out := make([]string, 1+p.rng.Intn(n))
		for i := range out {
			out[i] = f()
		}
		return out
	}
	pairs := func(a, b func() string) []string {
		var out []string
		for i := 0; i < 1+p.rng.Intn(3); i++ {
			out = append(out, a(), b())
		}
		return out
	}
	opt := func(xs ...string) []string {
		if p.rng.Intn(2) == 0 {
			return nil
		}
		return []string{p.pick(xs...)}
	}
	cat := func(parts ...[]string) []string {
		var out []string
		for _, x := range parts {
			out = append(out, x...)
		}
		return out
	}
	switch p.rng.Intn(40) {
	case 0:
		return []string{"GET", k}
	case 1:
		var o []string
		for _, w := range []string{"NX", "XX", "GET", "KEEPTTL"} {
			if p.rng.Intn(4) == 0 {
				o = append(o, w)
			}
		}
		switch p.rng.Intn(5) {
		case 0:
			o = append(o, "PX", p.ms())
		case 1:
			o = append(o, "EX", p.pick("1", "100", "0"))
		case 2:
			o = append(o, "PXAT", p.at(1))
		case 3:
			o = append(o, "EXAT", p.at(1000))
		}
		return cat([]string{"SET", k, p.value()}, o)
	case 2:
		return []string{p.pick("SETNX", "GETSET", "APPEND"), k, p.value()}
	case 3:
		return []string{p.pick("SETEX", "PSETEX"), k, p.pick("100", "0", "-1", "abc", "60"), p.value()}
	case 4:
		return cat([]string{"GETEX", k}, p.pickOpt())
	case 5:
		return cat([]string{"MGET"}, many(p.key, 3))
	case 6:
		return cat([]string{p.pick("MSET", "MSETNX")}, pairs(p.key, p.value))
	case 7:
		return []string{p.pick("SETRANGE"), k, p.pick("0", "2", "-1", "abc"), p.value()}
	case 8:
		return []string{p.pick("GETRANGE", "SUBSTR"), k, p.integer(), p.integer()}
	case 9:
		return []string{p.pick("STRLEN", "INCR", "DECR", "GETDEL", "TYPE", "PTTL", "TTL", "PEXPIRETIME", "EXPIRETIME", "HLEN", "SCARD", "ZCARD"), k}
	case 10:
		return []string{p.pick("INCRBY", "DECRBY"), k, p.integer()}
	case 11:
		return cat([]string{p.pick("DEL", "UNLINK", "EXISTS", "TOUCH")}, many(p.key, 3))
	case 12:
		c := p.pick("PEXPIRE", "EXPIRE", "PEXPIREAT", "EXPIREAT")
		var v string
		switch c {
		case "PEXPIRE":
			v = p.ms()
		case "EXPIRE":
			v = p.pick("100", "-1", "0", "abc", "30")
		case "PEXPIREAT":
			v = p.at(1)
		default:
			v = p.at(1000)
		}
		o := opt("NX", "XX", "GT", "LT", "FOO")
		if p.rng.Intn(4) == 0 {
			o = append(o, p.pick("NX", "XX", "GT", "LT"))
		}
		return cat([]string{c, k, v}, o)
	case 13, 14:
		return cat([]string{p.pick("HSET", "HMSET"), k}, pairs(p.member, p.value))
	case 15:
		return []string{"HSETNX", k, p.member(), p.value()}
	case 16:
		return []string{p.pick("HGET", "HEXISTS", "HSTRLEN"), k, p.member()}
	case 17:
		return cat([]string{p.pick("HMGET", "HDEL")}, []string{k}, many(p.member, 3))
	case 18:
		return []string{"HINCRBY", k, p.member(), p.integer()}
	case 19:
		return cat([]string{p.pick("SADD", "SREM", "SMISMEMBER"), k}, many(p.member, 3))
	case 20:
		return []string{"SISMEMBER", k, p.member()}
	case 21, 22, 23:
		var o []string
		for _, w := range []string{"NX", "XX", "GT", "LT", "CH", "INCR"} {
			if p.rng.Intn(5) == 0 {
				o = append(o, w)
			}
		}
		return cat([]string{"ZADD", k}, o, pairs(p.score, p.member))
	case 24:
		return []string{"ZINCRBY", k, p.score(), p.member()}
	case 25:
		return []string{p.pick("ZSCORE", "ZRANK", "ZREVRANK"), k, p.member()}
	case 26:
		return cat([]string{p.pick("ZMSCORE", "ZREM"), k}, many(p.member, 3))
	case 27:
		return []string{p.pick("ZCOUNT", "ZREMRANGEBYSCORE"), k, p.bound(), p.bound()}
	case 28:
		return []string{"ZREMRANGEBYRANK", k, p.integer(), p.integer()}
	case 29, 30:
		c := p.pick("ZRANGE", "ZREVRANGE")
		return cat([]string{c, k, p.pick("0", "1", "-1", "-2", "abc", "5"), p.pick("0", "-1", "1", "3")}, opt("WITHSCORES", "LIMIT", "FOO"))
	case 31, 32:
		c := p.pick("ZRANGEBYSCORE", "ZREVRANGEBYSCORE")
		o := opt("WITHSCORES")
		if p.rng.Intn(2) == 0 {
			o = append(o, "LIMIT", p.pick("0", "1", "-1"), p.pick("1", "-1", "0", "2"))
		}
		return cat([]string{c, k, p.bound(), p.bound()}, o)
	case 33:
		o := []string{"BYSCORE"}
		if p.rng.Intn(2) == 0 {
			o = append(o, "REV")
		}
		if p.rng.Intn(2) == 0 {
			o = append(o, "LIMIT", p.pick("0", "1"), p.pick("1", "-1"))
		}
		return cat([]string{"ZRANGE", k, p.bound(), p.bound()}, o, opt("WITHSCORES"))
	case 34:
		return []string{"ZRANGE", k, "0", "-1", "WITHSCORES"}
	}
	// Write something every type can be built from.
	switch p.rng.Intn(4) {
	case 0:
		return []string{"SET", k, p.value(), "PX", "60000"}
	case 1:
		return []string{"HSET", k, p.member(), p.value()}
	case 2:
		return []string{"SADD", k, p.member()}
	}
	return []string{"ZADD", k, p.score(), p.member()}
}

func (p *modelPools) pickOpt() []string {
	switch p.rng.Intn(7) {
	case 0:
		return nil
	case 1:
		return []string{"PERSIST"}
	case 2:
		return []string{"PX", p.ms()}
	case 3:
		return []string{"EX", p.pick("10", "0")}
	case 4:
		return []string{"PXAT", p.at(1)}
	case 5:
		return []string{"EXAT", p.at(1000)}
	}
	return []string{"PERSIST", "EX", "10"}
}

// redisKey is what Redis holds under a key, read back in a fixed order.
func redisItem(r *respconn.Conn, k string) (string, int64) {
	typ := string(r.Do("TYPE", k).Str)
	var v resp.Value
	switch typ {
	case "string":
		v = r.Do("GET", k)
	case "hash":
		v = r.Do("HGETALL", k)
	case "set":
		v = r.Do("SMEMBERS", k)
	case "zset":
		v = r.Do("ZRANGE", k, "0", "-1", "WITHSCORES")
	}
	return typ + " " + respconn.Canonical(typ, v), r.Do("PEXPIRETIME", k).Int
}

func modelItem(st *State, k string) (string, int64) {
	it, ok := st.Lookup(k)
	if !ok {
		return "none ", -2
	}
	var v resp.Value
	switch it.Type {
	case TypeString:
		v = resp.BulkValue([]byte(it.Value))
	case TypeHash:
		for f, x := range it.Hash {
			v.Elems = append(v.Elems, resp.BulkValue([]byte(f)), resp.BulkValue([]byte(x)))
		}
	case TypeSet:
		for m := range it.Set {
			v.Elems = append(v.Elems, resp.BulkValue([]byte(m)))
		}
	case TypeZset:
		v.Kind = resp.KindArray
		v.Elems = []resp.Value{}
		for _, m := range sorted(it.Zset) {
			v.Elems = append(v.Elems, resp.BulkValue([]byte(m.name)), resp.BulkValue([]byte(FormatScore(m.score))))
		}
	}
	at := it.At
	if at == 0 {
		at = -1
	}
	return it.Type.String() + " " + respconn.Canonical(it.Type.String(), v), at
}

// timed reports whether a command's reply shows a time, which may differ
// by the moments between the two runs.
func timed(cmd []string) bool {
	switch strings.ToUpper(cmd[0]) {
	case "PTTL", "TTL", "PEXPIRETIME", "EXPIRETIME":
		return true
	}
	return false
}

func Near(a, b, tol int64) bool { return a-b <= tol && b-a <= tol }

func TestModelMatchesRedis(t *testing.T) {
	r := respconn.Start(t)
	rng := rand.New(rand.NewSource(7))
	runs, cmds := 60, 40
	if testing.Short() {
		runs = 20
	}
	seen := map[string]bool{}
	for run := 0; run < runs; run++ {
		r.Do("FLUSHALL")
		tv := r.Do("TIME")
		sec, _ := strconv.ParseInt(string(tv.Elems[0].Str), 10, 64)
		usec, _ := strconv.ParseInt(string(tv.Elems[1].Str), 10, 64)
		st := &State{Now: sec*1000 + usec/1000, Keys: map[string]Item{}}
		p := &modelPools{now: st.Now, rng: rng}
		keys := map[string]bool{"a": true, "b": true}
		start := time.Now()
		var log []string
		for i := 0; i < cmds; i++ {
			// The model's clock follows Redis's, so that relative expiries
			// agree; times shown are compared within the run's length.
			st.Now = p.now + time.Since(start).Milliseconds()
			cmd := p.command()
			seen[strings.ToLower(cmd[0])] = true
			log = append(log, strings.Join(cmd, " "))
			want := r.Do(cmd...)
			got, ref := st.exec(cmd, keys, map[string]bool{}, map[string]string{})
			tol := time.Since(start).Milliseconds() + 5
			switch {
			case ref != nil && ref.redisErr == "":
				t.Fatalf("%s: the model refused: %s\n%s", cmd, ref.Reason, strings.Join(log, "\n"))
			case ref != nil:
				if want.Kind != resp.KindError || string(want.Str) != ref.redisErr {
					t.Fatalf("%s: Redis answered %v, the model fails with %q\n%s", cmd, want, ref.redisErr, strings.Join(log, "\n"))
				}
			case timed(cmd) && want.Kind == resp.KindInt && got.Kind == resp.KindInt && want.Int >= 0 && got.Int >= 0:
				unit := int64(1)
				if c := strings.ToUpper(cmd[0]); c == "TTL" || c == "EXPIRETIME" {
					unit = 1000
				}
				if !Near(want.Int*unit, got.Int*unit, tol+unit) {
					t.Fatalf("%s: Redis answered %v, the model %v\n%s", cmd, want, got, strings.Join(log, "\n"))
				}
			case !want.Equal(got):
				t.Fatalf("%s: Redis answered %v, the model %v\n%s", cmd, want, got, strings.Join(log, "\n"))
			}
			for k := range keys {
				rv, rat := redisItem(r, k)
				mv, mat := modelItem(st, k)
				if rv != mv || (rat < 0 || mat < 0) && rat != mat || !Near(rat, mat, tol) {
					t.Fatalf("after %s, %s: Redis holds %s (expiry %d), the model %s (expiry %d)\n%s", cmd, k, rv, rat, mv, mat, strings.Join(log, "\n"))
				}
			}
		}
	}
	for _, n := range CommandNames() {
		if !seen[n] && n != "time" && n != "select" {
			t.Errorf("the generator never sent %s", strings.ToUpper(n))
		}
	}
}
