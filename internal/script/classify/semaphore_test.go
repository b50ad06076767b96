package classify

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// Semaphore scripts in the project's own words: the behaviours of
// redis-semaphore's Semaphore (holders scored with when they joined, the
// caller's clock in the arguments; libscripts) and of a semaphore whose
// holders are scored with their deadlines on the server's clock, with a
// TTL in seconds.
const (
	semAcquireJoined   = libscripts.SemaphoreAcquire
	semRefreshJoined   = libscripts.SemaphoreRefresh
	semAcquireDeadline = `local t = redis.call('time')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
redis.call('zremrangebyscore', KEYS[1], '-inf', now)
if redis.call('zcard', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('zadd', KEYS[1], now + tonumber(ARGV[2]) * 1000, ARGV[1])
  redis.call('expire', KEYS[1], ARGV[2])
  return redis.status_reply('OK')
end
return false`
	semReleaseScript = `return redis.call('zrem', KEYS[1], ARGV[1])`
)

func classifySem(t *testing.T, text string, argv ...string) (*Semaphore, string) {
	t.Helper()
	p, ref := sandbox.Compile([]byte(text))
	if ref != nil {
		t.Fatalf("compile: %v", ref)
	}
	return SemaphoreScript(p, []string{"semaphore:jobs"}, argv)
}

func TestSemaphoreScriptsClassify(t *testing.T) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, tc := range []struct {
		name, text string
		argv       []string
		want       string
	}{
		{"acquire, joined-at scores", semAcquireJoined, []string{"2", "id-1", "10000", now},
			"semaphore-acquire keys=1 args=4 token=2 limit=1 ttl=3ms clock=4; success: :1; failure: :0"},
		{"acquire, limit 1", semAcquireJoined, []string{"1", "id-1", "10000", now},
			"semaphore-acquire keys=1 args=4 token=2 limit=1 ttl=3ms clock=4; success: :1; failure: :0"},
		{"acquire, limit 5", semAcquireJoined, []string{"5", "id-1", "3000", now},
			"semaphore-acquire keys=1 args=4 token=2 limit=1 ttl=3ms clock=4; success: :1; failure: :0"},
		{"refresh, joined-at scores", semRefreshJoined, []string{"2", "id-1", "10000", now},
			"semaphore-refresh keys=1 args=4 token=2 ttl=3ms clock=4; success: :1; failure: :0"},
		{"acquire, deadline scores, seconds", semAcquireDeadline, []string{"id-1", "30", "3"},
			"semaphore-acquire keys=1 args=3 token=1 limit=3 ttl=2s; success: +OK; failure: (nil)"},
		{"release", semReleaseScript, []string{"id-1"},
			"semaphore-release keys=1 args=1 token=1; success: :1; failure: :0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, why := classifySem(t, tc.text, tc.argv...)
			if s == nil {
				t.Fatalf("refused: %s", why)
			}
			if got := s.String(); got != tc.want {
				t.Fatalf("classified as\n  %s\nwant\n  %s", got, tc.want)
			}
			if !s.Matches([][]byte{[]byte("k")}, toBytes(tc.argv)) {
				t.Fatal("the classification does not cover its own call")
			}
		})
	}
}

func toBytes(ss []string) [][]byte {
	out := make([][]byte, len(ss))
	for i, s := range ss {
		out[i] = []byte(s)
	}
	return out
}

// Scripts that look like a semaphore and are not one are refused, each
// with the probe that showed it.
func TestSemaphoreLookalikesAreRefused(t *testing.T) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	for _, tc := range []struct {
		name, text string
		argv       []string
		want       string
	}{
		{"a limit written in the script", strings.Replace(semAcquireJoined, "tonumber(ARGV[1])", "3", 1),
			[]string{"2", "id-1", "10000", now}, "follows no limit argument"},
		{"evicts the oldest holder when full", `local t = tonumber(ARGV[4])
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[1]) then redis.call('zpopmin', KEYS[1]) end
redis.call('zadd', KEYS[1], t, ARGV[2])
redis.call('pexpire', KEYS[1], ARGV[3])
return 1`, []string{"2", "id-1", "10000", now}, "ZPOPMIN"},
		{"evicts with zremrangebyrank", `local t = tonumber(ARGV[4])
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[1]) then redis.call('zremrangebyrank', KEYS[1], 0, 0) end
redis.call('zadd', KEYS[1], t, ARGV[2])
redis.call('pexpire', KEYS[1], ARGV[3])
return 1`, []string{"2", "id-1", "10000", now}, "follows no limit argument"},
		{"renews every holder when one joins", `local t = tonumber(ARGV[4])
redis.call('zremrangebyscore', KEYS[1], 0, t - tonumber(ARGV[3]))
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
for _, m in ipairs(redis.call('zrange', KEYS[1], 0, -1)) do redis.call('zadd', KEYS[1], t + 1, m) end
redis.call('zadd', KEYS[1], t, ARGV[2])
redis.call('pexpire', KEYS[1], ARGV[3])
return 1`, []string{"2", "id-1", "10000", now}, "another live holder"},
		{"never expires", `if redis.call('zcard', KEYS[1]) < tonumber(ARGV[1]) then redis.call('zadd', KEYS[1], ARGV[3], ARGV[2]) return 1 end return 0`,
			[]string{"2", "id-1", now}, "without an expiry"},
		{"counts only others", `local t = tonumber(ARGV[4])
redis.call('zremrangebyscore', KEYS[1], 0, t - tonumber(ARGV[3]))
redis.call('zrem', KEYS[1], ARGV[2])
if redis.call('zcard', KEYS[1]) >= tonumber(ARGV[1]) then return 0 end
redis.call('zadd', KEYS[1], t, ARGV[2])
redis.call('pexpire', KEYS[1], ARGV[3])
return 1`, []string{"2", "id-1", "10000", now}, "with the caller holding, it replied :1 where it replied :0"},
		{"same reply either way", strings.Replace(semAcquireJoined, "then return 0", "then return 1", 1),
			[]string{"2", "id-1", "10000", now}, "whether it admits the caller or not"},
		{"a limit above the proxy's", semAcquireJoined, []string{"5000", "id-1", "10000", now}, "at most 1024"},
		{"a string lock", `if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0`,
			[]string{"id-1", "10000"}, `left KEYS[1] "id-1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, why := classifySem(t, tc.text, tc.argv...)
			if s != nil && s.Role != SemUnknown {
				t.Fatalf("classified as %s; want it refused", s)
			}
			if !strings.Contains(why, tc.want) {
				t.Fatalf("refused with %q; want it to say %q", why, tc.want)
			}
		})
	}
}

// The classification's replies are the script's own on one Redis: run the
// classified script in the sandbox on the cases its role meets.
func TestSemaphoreRepliesAreTheScripts(t *testing.T) {
	now := time.Now().UnixMilli()
	s, why := classifySem(t, semAcquireJoined, "2", "id-1", "10000", strconv.FormatInt(now, 10))
	if s == nil {
		t.Fatal(why)
	}
	for _, tc := range []struct {
		others int
		want   resp.Value
	}{{0, s.Success}, {1, s.Success}, {2, s.Failure}} {
		st := &sandbox.State{Now: now, Keys: map[string]sandbox.Item{}}
		if tc.others > 0 {
			z := map[string]float64{}
			for i := 0; i < tc.others; i++ {
				z["other-"+strconv.Itoa(i)] = float64(now)
			}
			st.Keys["k"] = sandbox.Item{Type: sandbox.TypeZset, Zset: z, At: now + 10000}
		}
		got, _, err := sandbox.Eval([]byte(semAcquireJoined), []string{"k"}, []string{"2", "id-1", "10000", strconv.FormatInt(now, 10)}, st)
		if err != nil || !got.Equal(tc.want) {
			t.Errorf("with %d holders: %v, %v; want %v", tc.others, got, err, tc.want)
		}
	}
}

// A script whose text caps its limit reads as an acquire around the limit
// of its first call, and is refused for a limit it does not follow.
func TestSemaphoresReadEachLimit(t *testing.T) {
	r := NewRegistry()
	e := r.Load([]byte(`local set, cap, me, ms, t = KEYS[1], math.min(tonumber(ARGV[1]), 3), ARGV[2], tonumber(ARGV[3]), tonumber(ARGV[4])
redis.call('zremrangebyscore', set, 0, t - ms)
if redis.call('zcard', set) >= cap then return 0 end
redis.call('zadd', set, t, me)
redis.call('pexpire', set, ms)
return 1`), true)
	c := NewSemaphores()
	keys := [][]byte{[]byte("semaphore:a")}
	call := func(limit string) [][]byte {
		return toBytes([]string{limit, "id-1", "10000", strconv.FormatInt(time.Now().UnixMilli(), 10)})
	}
	s, why := c.Classify(e, keys, call("2"))
	if s == nil || s.Role != SemAcquire {
		t.Fatalf("read as %v: %s", s, why)
	}
	for _, limit := range []string{"5", "5"} {
		if got, why := c.Classify(e, keys, call(limit)); got == nil || got.Role != SemUnknown || !strings.Contains(why, "ARGV[1] = 5") {
			t.Fatalf("a call with a limit of 5, which the text caps at 3: %v, %q; want refused", got, why)
		}
	}
	if got, _ := c.Classify(e, keys, call("1")); got != s {
		t.Fatalf("a call with a limit of 1, which the text follows: %v", got)
	}
}

func TestSemaphoresCache(t *testing.T) {
	r := NewRegistry()
	e := r.Load([]byte(semAcquireJoined), true)
	c := NewSemaphores()
	keys := [][]byte{[]byte("semaphore:a")}
	argv := toBytes([]string{"2", "id-1", "10000", strconv.FormatInt(time.Now().UnixMilli(), 10)})
	if c.Lookup(e.Sha, keys, argv) != nil {
		t.Fatal("known before it was classified")
	}
	s, why := c.Classify(e, keys, argv)
	if s == nil {
		t.Fatal(why)
	}
	// Another call (another token, clock and limit) is the same operation,
	// once read with its limit: the probes read an acquire around one.
	later := toBytes([]string{"3", "id-2", "5000", strconv.FormatInt(time.Now().UnixMilli()+5, 10)})
	if c.Lookup(e.Sha, keys, later) != nil {
		t.Fatal("a call with a limit the acquire was not read with is covered without reading it")
	}
	if got, why := c.Classify(e, keys, later); got != s {
		t.Fatalf("a later call is not covered: %v %s", got, why)
	}
	if c.Lookup(e.Sha, keys, later) != s {
		t.Fatal("a later call is not covered once its limit was read")
	}
	if n, ok := s.LimitOf(later); !ok || n != 3 {
		t.Fatalf("LimitOf = %d, %v", n, ok)
	}
	if d, ok := s.TTLOf(later); !ok || d != 5*time.Second {
		t.Fatalf("TTLOf = %v, %v", d, ok)
	}
	// A script that is not a semaphore is remembered as such.
	m := r.Load([]byte(`return redis.call('get', KEYS[1])`), true)
	if s, _ := c.Classify(m, keys, argv[:1]); s != nil {
		t.Fatal("GET recognized as a semaphore")
	}
	if _, why := c.Classify(m, keys, argv[:1]); why == "" {
		t.Fatal("no reason remembered")
	}
}

// Semaphores kept as a bare count of free permits are recognized and
// refused with why, in the style of Redisson's RSemaphore (take permits
// while enough are free, give them back and announce it, set the count
// up once) and an acquire of expiring ids with no clock to read a lease from.
func TestCounterSemaphoresAreRefusedWithWhy(t *testing.T) {
	for _, tc := range []struct {
		name, text string
		keys, argv []string
	}{
		{"take", `local v = redis.call('get', KEYS[1])
if v and tonumber(v) >= tonumber(ARGV[1]) then redis.call('decrby', KEYS[1], ARGV[1]) return 1 end
return 0`, []string{"permits"}, []string{"1"}},
		{"give back and announce", `local v = redis.call('incrby', KEYS[1], ARGV[1])
redis.call('publish', KEYS[2], v)`, []string{"permits", "permits:channel"}, []string{"2"}},
		{"set up once", `if redis.call('get', KEYS[1]) == false then redis.call('set', KEYS[1], ARGV[1]) return 1 end return 0`,
			[]string{"permits"}, []string{"3"}},
		{"take with expiring ids", `local v = redis.call('get', KEYS[1])
if v and tonumber(v) >= tonumber(ARGV[1]) then
  redis.call('decrby', KEYS[1], ARGV[1])
  for i = 3, #ARGV do redis.call('zadd', KEYS[2], ARGV[2], ARGV[i]) end
  return 'OK'
end
return nil`, []string{"permits", "permits:timeout"}, []string{"1", "99999999999999", "id-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ref := sandbox.Compile([]byte(tc.text))
			if ref != nil {
				t.Fatal(ref)
			}
			s, why := SemaphoreScript(p, tc.keys, tc.argv)
			if s == nil || s.Role != SemUnknown || why != CounterRefusal {
				t.Fatalf("= %v, %q; want the counter refusal", s, why)
			}
		})
	}
	// A string lock whose token is a number is not a count.
	p, _ := sandbox.Compile([]byte(`if redis.call('set', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end return 0`))
	if s, _ := SemaphoreScript(p, []string{"lock"}, []string{"12345", "10000"}); s != nil {
		t.Fatalf("a string lock with a numeric token: %v", s)
	}
}

func TestSemaphoresCacheRemembersARefusedSemaphore(t *testing.T) {
	r := NewRegistry()
	e := r.Load([]byte(`local v = redis.call('incrby', KEYS[1], ARGV[1]) return v`), true)
	c := NewSemaphores()
	for i := 0; i < 2; i++ {
		s, why := c.Classify(e, [][]byte{[]byte("permits")}, [][]byte{[]byte("1")})
		if s == nil || s.Role != SemUnknown || why != CounterRefusal {
			t.Fatalf("call %d: %v, %q; want the counter refusal", i, s, why)
		}
	}
}
