package sandbox

import (
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// runText runs a script once on st (nil: no keys) with KEYS {"k"}.
func runText(t *testing.T, text string, argv []string, st *State) Result {
	t.Helper()
	p, ref := Compile([]byte(text))
	if ref != nil {
		t.Fatalf("Compile(%q): %v", text, ref)
	}
	if st == nil {
		st = &State{Now: now, Keys: map[string]Item{}}
	}
	return p.Run([]string{"k"}, argv, st, MaxSteps)
}

// Lua values become the replies Redis 7 sends.
func TestLuaToRESP(t *testing.T) {
	for _, c := range []struct {
		lua  string
		want string
	}{
		{"return 7", ":7"},
		{"return 3.99", ":3"},
		{"return -3.99", ":-3"},
		{"return 2^63", ":-9223372036854775808"},
		{"return 0/0", ":-9223372036854775808"},
		{"return 'x'", `"x"`},
		{"return true", ":1"},
		{"return false", "(nil)"},
		{"return nil", "(nil)"},
		{"return", "(nil)"},
		{"return {1, 'a', true, false, 2}", `[:1 "a" :1 (nil) :2]`},
		{"return {1, nil, 3}", "[:1]"},
		{"return {}", "[]"},
		{"return {{1}, {}}", "[[:1] []]"},
		{"return {ok = 'DONE'}", "+DONE"},
		{"return {err = 'BAD thing'}", "-BAD thing"},
		{"return {err = 'a\\r\\nb'}", "-a  b"},
		{"return {err = 1, 5}", "[:5]"},
		{"return redis.status_reply('OK')", "+OK"},
		{"return redis.error_reply('ERROR')", "-ERR ERROR"},
		{"return redis.error_reply('MYCODE went wrong')", "-MYCODE went wrong"},
		{"return redis.error_reply('-WRONG thing')", "-WRONG thing"},
		{"return redis.call('set', KEYS[1], 'v', 'PX', 10)", "+OK"},
		{"return redis.call('get', KEYS[1])", "(nil)"},
		{"return {redis.call('get', KEYS[1])}", "[(nil)]"},
		{"return redis.call('pttl', KEYS[1])", ":-2"},
		{"return redis.sha1hex('')", `"da39a3ee5e6b4b0d3255bfef95601890afd80709"`},
		{"return type(redis.call('set', KEYS[1], 'v', 'PX', 10))", `"table"`},
		{"return string.format('%d-%s', 42, 'x')", `"42-x"`},
		{"local t = {} for i = 1, 3 do t[#t + 1] = i * 2 end return t", "[:2 :4 :6]"},
		{"return tonumber(ARGV[1]) + 1", ":8"},
		{"return ARGV[1] + 1", ":8"},
	} {
		res := runText(t, c.lua, []string{"7"}, nil)
		if res.Ref != nil {
			t.Errorf("%s: refused: %s", c.lua, res.Ref.Reason)
			continue
		}
		if got := res.Reply.String(); got != c.want {
			t.Errorf("%s = %s; want %s", c.lua, got, c.want)
		}
	}
}

// Numbers given to redis.call are formatted as Redis formats them.
func TestRedisCallNumberArguments(t *testing.T) {
	res := runText(t, "redis.call('set', KEYS[1], 0.1, 'PX', 2000.0) return redis.call('get', KEYS[1])", nil, nil)
	if res.Ref != nil || string(res.Reply.Str) != "0.10000000000000001" {
		t.Fatalf("got %v, %v", res.Reply, res.Ref)
	}
	if it := res.State.Keys["k"]; it.At != now+2000 {
		t.Fatalf("PX 2000.0 set expiry %d", it.At-now)
	}
}

// The model answers the allowed commands as Redis 7.0 does.
func TestModelCommands(t *testing.T) {
	st := &State{Now: now, Keys: map[string]Item{"k": {Value: "hello", At: now + 1500}}}
	for _, c := range []struct{ lua, want string }{
		{"return redis.call('pttl', KEYS[1])", ":1500"},
		{"return redis.call('ttl', KEYS[1])", ":2"},
		{"return redis.call('strlen', KEYS[1])", ":5"},
		{"return redis.call('getrange', KEYS[1], 1, -2)", `"ell"`},
		{"return redis.call('getrange', KEYS[1], -100, 100)", `"hello"`},
		{"return redis.call('exists', KEYS[1], KEYS[1])", ":2"},
		{"return redis.call('set', KEYS[1], 'x', 'NX', 'PX', 5)", "(nil)"},
		{"return redis.call('set', KEYS[1], 'x', 'XX', 'GET', 'PX', 5)", `"hello"`},
		{"redis.call('set', KEYS[1], 'x', 'KEEPTTL') return redis.call('pttl', KEYS[1])", ":1500"},
		{"return redis.call('pexpire', KEYS[1], 100, 'GT')", ":0"},
		{"return redis.call('pexpire', KEYS[1], 100, 'LT')", ":1"},
		{"redis.call('pexpire', KEYS[1], 0) return redis.call('exists', KEYS[1])", ":0"},
		{"redis.call('expire', KEYS[1], 3) return redis.call('pttl', KEYS[1])", ":3000"},
		{"return redis.call('del', KEYS[1])", ":1"},
		{"return redis.call('unlink', KEYS[1])", ":1"},
		{"return redis.call('select', 0)", "+OK"},
		{"redis.call('set', KEYS[1], 'x', 'PXAT', " + itoa(now+10) + ") return redis.call('pttl', KEYS[1])", ":10"},
		// A deadline: SET keeps a key that expires this very millisecond
		// (it is gone once the clock moves), EXPIRE deletes it at once.
		{"redis.call('set', KEYS[1], 'x', 'PXAT', " + itoa(now) + ") return redis.call('exists', KEYS[1])", ":1"},
		{"redis.call('set', KEYS[1], 'x', 'PXAT', " + itoa(now-1) + ") return redis.call('exists', KEYS[1])", ":0"},
		{"return {redis.call('pexpireat', KEYS[1], " + itoa(now) + "), redis.call('exists', KEYS[1])}", "[:1 :0]"},
		{"return {redis.call('expireat', KEYS[1], " + itoa(now/1000+100) + "), redis.call('expiretime', KEYS[1]), redis.call('pexpiretime', KEYS[1])}",
			"[:1 :" + itoa(now/1000+100) + " :" + itoa((now/1000+100)*1000) + "]"},
		{"return redis.call('pexpiretime', KEYS[1])", ":" + itoa(now+1500)},
		{"local t = redis.call('time') return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)", ":" + itoa(now)},
		{"return redis.call('type', KEYS[1])", "+string"},
	} {
		res := runText(t, c.lua, nil, st)
		if res.Ref != nil {
			t.Errorf("%s: refused: %s", c.lua, res.Ref.Reason)
			continue
		}
		if got := res.Reply.String(); got != c.want {
			t.Errorf("%s = %s; want %s", c.lua, got, c.want)
		}
	}
	// An expired key does not exist; one expiring now still does (Redis
	// expires a key when now > its time).
	for at, want := range map[int64]string{now - 1: ":0", now: ":1"} {
		st := &State{Now: now, Keys: map[string]Item{"k": {Value: "v", At: at}}}
		if got := runText(t, "return redis.call('exists', KEYS[1])", nil, st).Reply.String(); got != want {
			t.Errorf("EXISTS of a key expiring at now%+d = %s; want %s", at-now, got, want)
		}
	}
}

// What the sandbox refuses, with the reason naming it.
func TestSandboxRefusals(t *testing.T) {
	long := strings.Repeat("x", 600<<10)
	for _, c := range []struct {
		lua  string
		argv []string
		want string
		kind StopKind
	}{
		{"return redis.call('lpush', KEYS[1], 'a')", nil, `calls "LPUSH"`, RefuseCommand},
		{"return redis.call('flushall')", nil, `calls "FLUSHALL"`, RefuseCommand},
		{"return redis.call('randomkey')", nil, `calls "RANDOMKEY"`, RefuseCommand},
		{"return redis.pcall('persist', KEYS[1])", nil, `calls "PERSIST"`, RefuseCommand},
		{"return redis.call('incr', KEYS[1])", nil, "without an expiry (it ran INCR on it)", RefuseNoTTL},
		{"return redis.pcall('hset', KEYS[1], 'a', 'b')", nil, "without an expiry (it ran HSET on it)", RefuseNoTTL},
		{"redis.call('zadd', KEYS[1], 1, 'a') redis.call('pexpire', KEYS[1], 10) return redis.call('set', KEYS[1], 'v', 'XX')", nil, "without an expiry (it ran SET on it)", RefuseNoTTL},
		{"return math.random(10)", nil, "math.random", RefuseCommand},
		{"return os.time()", nil, "os.time", RefuseCommand},
		{"return os.clock()", nil, "os.clock", RefuseCommand},
		{"return redis.call('get', 'elsewhere')", nil, "not in KEYS", RefuseOther},
		{"return redis.call('del', KEYS[1], 'x')", nil, "not in KEYS", RefuseOther},
		{"return redis.call('set', KEYS[1], 'v')", nil, "without an expiry", RefuseNoTTL},
		{"return redis.call('set', KEYS[1], 'v', 'KEEPTTL')", nil, "without an expiry", RefuseNoTTL},
		{"return redis.call('select', 1)", nil, "database 1", RefuseOther},
		{"return redis.call('pexpire', KEYS[1], 'soon')", nil, "not an integer", RefuseOther},
		{"return redis.call('get')", nil, "wrong number of arguments", RefuseOther},
		{"return redis.call('get', KEYS[1], nil)", nil, "passes a nil", RefuseOther},
		{"return redis.call('get', {})", nil, "passes a table", RefuseOther},
		{"return redis.call()", nil, "no command", RefuseOther},
		{"x = 1 return x", nil, "readonly table", RefuseOther},
		{"return undefined_global", nil, "nonexistent global variable 'undefined_global'", RefuseOther},
		{"return string.find('a', 'a')", nil, "string.find", RefuseOther},
		{"return string.gsub('a', 'a', 'b')", nil, "string.gsub", RefuseOther},
		{"return loadstring('return 1')", nil, "nonexistent global variable 'loadstring'", RefuseOther},
		{"return redis.setresp(3)", nil, "RESP3", RefuseOther},
		{"return {double = 1.5}", nil, "RESP3 double", RefuseOther},
		{"error('boom')", nil, "raises an error", RefuseOther},
		{"goto x ::x::", nil, "goto", RefuseOther},
		{"return (", nil, "does not compile", RefuseOther},
		// Bounds.
		{"while true do end", nil, "more than 100000 Lua instructions", RefuseBudget},
		{"local function f() return f() + 1 end return f()", nil, "stack overflow", RefuseOther},
		{"while true do pcall(function() while true do end end) end", nil, "Lua instructions", RefuseBudget},
		{"return string.rep('x', 2^30)", nil, "longer than", RefuseBudget},
		{"return unpack({}, 1, 1e8)", nil, "unpacks more than", RefuseBudget},
		{"return string.byte(ARGV[1], 1, -1)", []string{long}, "unpacks more than", RefuseBudget},
		{"return string.format('%999d', 1)", nil, "string.format", RefuseOther},
		{"local s = ARGV[1] .. ARGV[1] return #s", []string{long}, "longer than", RefuseBudget},
		{"local s = ARGV[1] for i = 1, 40 do s = s .. s end return #s", []string{"x"}, "inside a loop", RefuseOther},
		{"local function f(s) return s .. s end return f('x')", nil, "inside a loop or a function", RefuseOther},
		{"local t = {} t[1] = t return t", nil, "nested deeper", RefuseOther},
		{"return " + strings.Repeat("{", 300) + strings.Repeat("}", 300), nil, "nests deeper", RefuseOther},
		{"return 'a'" + strings.Repeat("..'a'", 9), nil, "more than 8 strings", RefuseOther},
	} {
		p, ref := Prepare([]byte(c.lua))
		var res Result
		if ref == nil {
			res = p.Run([]string{"k"}, c.argv, &State{Now: now, Keys: map[string]Item{}}, MaxSteps)
			ref = res.Ref
		}
		name := c.lua
		if len(name) > 60 {
			name = name[:60]
		}
		if ref == nil {
			t.Errorf("%s: ran, replied %v", name, res.Reply)
			continue
		}
		if !strings.Contains(ref.Reason, c.want) || ref.Kind != c.kind {
			t.Errorf("%s: refused (%d) %q; want (%d) %q", name, ref.Kind, ref.Reason, c.kind, c.want)
		}
	}
}

// A run cannot see what an earlier run of the same interpreter did.
func TestRunsAreIsolated(t *testing.T) {
	r := NewRunner()
	defer r.Close()
	p, _ := Prepare([]byte(`if string.sub == nil then return 'saw a change' end
string.sub = nil
getmetatable('').__index.len = nil
rawset(_G, 'leak', 1)
redis.call = nil
return 'changed'`))
	q, _ := Prepare([]byte(`if rawget(_G, 'leak') or string.len == nil or redis.call == nil or ('x'):len() ~= 1 then return 'leaked' end return 'clean'`))
	st := &State{Now: now, Keys: map[string]Item{}}
	for i := 0; i < 2; i++ {
		if res := p.RunOn(r, []string{"k"}, nil, st, MaxSteps); res.Ref != nil || string(res.Reply.Str) != "changed" {
			t.Fatalf("run %d: %v %v", i, res.Reply, res.Ref)
		}
		if res := q.RunOn(r, []string{"k"}, nil, st, MaxSteps); res.Ref != nil || string(res.Reply.Str) != "clean" {
			t.Fatalf("after run %d: %v %v", i, res.Reply, res.Ref)
		}
	}
}

// A run works on a copy: the probe state it was given is unchanged.
func TestRunLeavesItsStateAlone(t *testing.T) {
	st := &State{Now: now, Keys: map[string]Item{"k": {Value: "v", At: now + 10}}}
	res := runText(t, "return redis.call('del', KEYS[1])", nil, st)
	if res.Reply.Int != 1 || len(res.State.Keys) != 0 || len(st.Keys) != 1 {
		t.Fatalf("reply %v, after %v, before %v", res.Reply, res.State.Keys, st.Keys)
	}
}

func itoa(n int64) string { return resp.IntValue(n).String()[1:] }

// now is the model's clock in tests that build states by hand.
var now = time.Now().UnixMilli()
