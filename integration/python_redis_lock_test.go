package integration

import (
	"context"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// python-redis-lock (PyPI), unchanged, on one Redis and through two proxies
// over five masters: it takes, is refused to another, and releases; its
// release pushes a signal onto a list that a waiter blocked in BLPOP
// (through the other proxy) takes, so the waiter gets the lock at once,
// not at its timeout; a waiter with a timeout of one second on a lock no
// one releases gives up after it. Through the proxy the signal is the
// release's notice, delivered once a majority of masters delivered it:
// no master ever holds the lock's signal list.
func TestPythonRedisLock(t *testing.T) {
	argv, versions := requirePyPILibrary(t, pypiLibrary{name: "python-redis-lock", program: "python_redis_lock.py"})
	t.Log(versions)
	run := func(name string, addrs ...string) string {
		args := []string{argv[1], "--addr", addrs[0], "--name", name}
		if len(addrs) > 1 {
			args = append(args, "--other", addrs[1])
		}
		cmd := exec.Command(argv[0], args...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v\n%s%s", err, out, stderr.String())
		}
		return string(out)
	}
	check := func(where, out string) {
		t.Helper()
		t.Logf("%s:\n%s", where, out)
		want := "acquire True\nother False\nrelease ok\nwaiter True\nhandoff N ms\ntimeout False\nwaited N ms\nwaiter release ok\n"
		if got := regexp.MustCompile(`\d+ ms`).ReplaceAllString(out, "N ms"); got != want {
			t.Fatalf("%s:\n%s\nwant\n%s", where, out, want)
		}
		if ms := millis(t, out, "handoff"); ms > 4000 {
			t.Fatalf("%s: the waiter got the lock %d ms after the release: it was not woken", where, ms)
		}
		if ms := millis(t, out, "waited"); ms < 900 || ms > 4000 {
			t.Fatalf("%s: a waiter with a timeout of 1 s waited %d ms", where, ms)
		}
	}
	check("on one Redis", run("lock:py", startRedis(t, 1)[0].Addr))

	c := newCluster(t, 5)
	other, _ := startApp(t, c.addrs())
	name := uniqueKey("pylock")
	check("through two proxies", run(name, c.app.Addr(), other.Addr()))
	ctx := context.Background()
	for i, d := range c.direct {
		for _, k := range []string{"lock:" + name, "lock-signal:" + name} {
			if n, err := d.Exists(ctx, k).Result(); n != 0 || err != nil {
				t.Fatalf("master %d holds %s after the last release (%v)", i, k, err)
			}
		}
	}
}

// millis reads the milliseconds on a program's line "what N ms".
func millis(t *testing.T, out, what string) int64 {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + what + ` (\d+) ms$`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no %q line in:\n%s", what, out)
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}
