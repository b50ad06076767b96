package integration

import (
	"context"
	"os/exec"
	"strings"
	"testing"
)

// python-redis-lock (PyPI), unchanged: on one Redis it takes, is refused to
// another, and releases; through the proxy it takes and is refused to
// another, but its release, which pushes a signal element onto a list
// that waiters take with BLPOP, is refused naming LPUSH and why, and the
// lock stays on every master until its expiry.
func TestPythonRedisLock(t *testing.T) {
	argv, versions := requirePyPILibrary(t, pypiLibrary{name: "python-redis-lock", program: "python_redis_lock.py"})
	t.Log(versions)
	run := func(addr, name string) string {
		cmd := exec.Command(argv[0], argv[1], "--addr", addr, "--name", name)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%v\n%s%s", err, out, stderr.String())
		}
		return string(out)
	}
	lone := startRedis(t, 1)[0].Addr
	if out := run(lone, "lock:py"); out != "acquire True\nother False\nrelease ok\n" {
		t.Fatalf("on one Redis:\n%s", out)
	}
	c := newCluster(t, 5)
	name := uniqueKey("pylock")
	out := run(c.app.Addr(), name)
	if !strings.HasPrefix(out, "acquire True\nother False\nrelease error") || !strings.Contains(out, `calls \"LPUSH\"`) && !strings.Contains(out, `calls "LPUSH"`) ||
		!strings.Contains(out, "a signal list that waiters take with BLPOP") {
		t.Fatalf("through the proxy:\n%s", out)
	}
	for i, d := range c.direct {
		if n, err := d.Exists(context.Background(), "lock:"+name).Result(); n != 1 || err != nil {
			t.Fatalf("master %d does not hold the lock after its refused release (%v)", i, err)
		}
	}
	t.Logf("through the proxy:\n%s", out)
}
