package integration

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
)

// A read-write lock script is recognized by what it does, not by its
// text: Redisson's scripts, their exact text from the jar, each as its own
// operation only; the same scripts laid out and named otherwise (made
// here from the jar's text) as well; and variants that break the rule
// refused, with the probe that told them apart.

// reworded lays a script out anew: a statement a line, other local names,
// a space before each call's arguments.
func reworded(s string) string {
	s = strings.ReplaceAll(s, "; ", ";\n    ")
	s = strings.ReplaceAll(s, "redis.call(", "redis.call (")
	for _, r := range [][2]string{
		{"maxRemainTime", "longestMs"}, {"remainTime", "leftMs"}, {"mode", "lockMode"}, {"counter", "holds"},
		{"lockExists", "present"}, {"currentExpire", "pttlNow"}, {"ind", "idx"}, {"val", "latched"},
		{"keys", "fields"}, {"key", "field"}, {"result", "answers"},
	} {
		s = regexp.MustCompile(`\b`+r[0]+`\b`).ReplaceAllString(s, r[1])
	}
	return strings.ReplaceAll(s, "'lockMode'", "'mode'")
}

// broken replaces old with new in text, which must hold it.
func broken(t *testing.T, text, old, new string) string {
	t.Helper()
	if !strings.Contains(text, old) {
		t.Fatalf("the script no longer holds %q", old)
	}
	return strings.Replace(text, old, new, 1)
}

func TestRWRecognizedByBehaviour(t *testing.T) {
	scripts := redissonRW(t) // every operation recognized in the jar, once
	for _, l := range classify.RWLayouts() {
		text := scripts[l.Role]
		for _, other := range classify.RWLayouts() {
			if other.Role != l.Role && classify.RWRecognize([]byte(text), other) == "" {
				t.Errorf("Redisson's %s script is recognized as %s too", l.Role, other.Role)
			}
		}
		re := reworded(text)
		if re == text || !strings.Contains(re, "lockMode") && l.Role != classify.RWReadRenew {
			t.Fatalf("%s: the rewording changed nothing", l.Role)
		}
		if why := classify.RWRecognize([]byte(re), l); why != "" {
			t.Errorf("%s reworded is not recognized: %s\n%s", l.Role, why, re)
		}
	}
	ra, wa := scripts[classify.RWReadAcquire], scripts[classify.RWWriteAcquire]
	rr, wr := scripts[classify.RWReadRelease], scripts[classify.RWWriteRelease]
	for _, c := range []struct {
		name  string
		role  classify.RWRole
		text  string
		probe string // the probe named in the refusal
	}{
		{"a read acquire that ignores another's writer", classify.RWReadAcquire,
			broken(t, ra, "(mode == 'write' and redis.call('hexists', KEYS[1], ARGV[3]) == 1)", "(mode == 'write')"), "on another's write lock"},
		{"a write acquire that ignores readers", classify.RWWriteAcquire,
			broken(t, broken(t, wa, "if (mode == 'write') then", "if (mode ~= false) then"),
				"if (redis.call('hexists', KEYS[1], ARGV[2]) == 1) then", "if (true) then"), "on another's read hold"},
		{"a write release that frees another's write lock", classify.RWWriteRelease,
			broken(t, wr, "local lockExists = redis.call('hexists', KEYS[1], ARGV[3]);", "local lockExists = 1;"), "on another's write lock"},
		{"a read release that frees the lock under another's read hold", classify.RWReadRelease,
			broken(t, rr, "if (redis.call('hlen', KEYS[1]) > 1) then", "if (false) then"), "on the caller's and another's read holds"},
		{"a read release that takes off another's hold", classify.RWReadRelease,
			broken(t, rr, "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1);", "local counter = redis.call('hincrby', KEYS[1], ARGV[2], -1); for _, f in ipairs(redis.call('hkeys', KEYS[1])) do if f ~= 'mode' and f ~= ARGV[2] then redis.call('hdel', KEYS[1], f); end; end;"), "another's read hold"},
	} {
		why := classify.RWRecognize([]byte(c.text), classify.RWLayouts()[c.role-1])
		t.Logf("%s: %s", c.name, why)
		if why == "" || !strings.Contains(why, c.probe) {
			t.Errorf("%s: RWRecognize = %q, want a refusal %s", c.name, why, c.probe)
		}
	}
}

// Through the proxy, over real masters: a reworded read acquire is served
// as Redisson's is (a writer is refused, the masters hold the read lock),
// and a read acquire that ignores another's writer is refused, naming the
// probe.
func TestRWRewordedScriptThroughProxy(t *testing.T) {
	r := newRWRig(t)
	ctx := context.Background()
	key := uniqueKey("rw-reworded")
	r.scripts[classify.RWReadAcquire] = reworded(r.scripts[classify.RWReadAcquire])
	if got := r.read(key, "reader-a", 10000); got != "nil" {
		t.Fatalf("reworded read acquire: %s, want a grant (nil)", got)
	}
	r.expect("the read lock", key, func(int) string { return "map[mode:read reader-a:1]" })
	if got := r.write(key, "writer-w:write", 10000); got == "nil" {
		t.Fatalf("a writer was granted a lock a reader holds")
	}
	// SCRIPT LOAD keeps a reworded write acquire, EVALSHA runs it, and
	// SCRIPT EXPLAIN names its operation.
	wa := reworded(r.scripts[classify.RWWriteAcquire])
	sha, err := r.cl.ScriptLoad(ctx, wa).Result()
	if err != nil {
		t.Fatalf("SCRIPT LOAD of a reworded write acquire: %v", err)
	}
	if got := replyOf(r.cl.EvalSha(ctx, sha, []string{uniqueKey("rw-loaded")}, 10000, "writer-v:write").Result()); got != "nil" {
		t.Fatalf("EVALSHA of the reworded write acquire: %s, want a grant (nil)", got)
	}
	if ex, err := r.cl.Do(ctx, "SCRIPT", "EXPLAIN", sha).Result(); err != nil || !strings.Contains(fmt.Sprint(ex), "rwlock-write-acquire keys=1 args=2") {
		t.Fatalf("SCRIPT EXPLAIN: %v %v", ex, err)
	}
	bad := broken(t, r.scripts[classify.RWReadAcquire], "lockMode == 'write' and redis.call (", "lockMode == 'write' or redis.call (")
	_, err = r.cl.Eval(ctx, bad, []string{uniqueKey("rw-bad"), "{x}:h:rwlock_timeout"}, 10000, "h", "h:write").Result()
	t.Logf("refused: %v", err)
	if err == nil || !strings.Contains(err.Error(), "rwlock-read-acquire") || !strings.Contains(err.Error(), "on another's write lock") {
		t.Fatalf("a read acquire that ignores another's writer: %v, want a refusal naming the probe", err)
	}
}
