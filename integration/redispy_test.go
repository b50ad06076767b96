package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// redis-py's Lock (Debian's python3-redis, run by Debian's /usr/bin/python3)
// drives integration/python/redispy_lock.py; the program checks what the
// library returns, lockprog_test.go checks the masters after each step.

// debianPython is the interpreter that sees Debian's python3-redis; a
// python3 earlier on PATH (pyenv, a virtualenv) may not.
const debianPython = "/usr/bin/python3"

var redisPyScenarios = []traceScenario{
	{"lifecycle", []string{"acquire", "refused", "extend", "extend", "reacquire", "release", "acquire", "release"}},
	{"not-owned", []string{"acquire", "expired", "acquire", "not-owner", "release"}},
	{"handoff", []string{"acquire", "handoff", "release"}},
	{"contention", []string{"contention"}},
	{"long", []string{"acquire", "extend", "release"}}, // Lock(timeout=300)
}

// requireRedisPy fails the test unless /usr/bin/python3 imports redis.lock,
// and returns the program's command line and redis-py's version.
func requireRedisPy(t *testing.T) (argv []string, version string) {
	t.Helper()
	if _, err := os.Stat(debianPython); err != nil {
		t.Fatalf("%s is missing: the redis-py tests need Debian's python3 and python3-redis (./test.sh installs them): %v", debianPython, err)
	}
	out, err := exec.Command(debianPython, "-c", "import redis, redis.lock; print(redis.__version__)").CombinedOutput()
	if err != nil {
		t.Fatalf("%s cannot import redis.lock: install Debian's python3-redis (./test.sh does): %v\n%s", debianPython, err, out)
	}
	script, _ := filepath.Abs(filepath.Join("python", "redispy_lock.py"))
	return []string{debianPython, script}, strings.TrimSpace(string(out))
}

// TestRedisPyLockAgainstLoneRedis runs redis-py's Lock against one
// redis-server: the reference every scenario must pass.
func TestRedisPyLockAgainstLoneRedis(t *testing.T) {
	argv, version := requireRedisPy(t)
	t.Logf("redis-py %s", version)
	testTraceScenarios(t, loneTarget(t), append(redisPyScenarios, noExpiryLone), argv...)
}

// TestRedisPyLockThroughProxy runs the same scenarios through the proxy
// over five masters, checking each step on every master. Lock() without a
// timeout is refused with the reason, and nothing is written.
func TestRedisPyLockThroughProxy(t *testing.T) {
	argv, version := requireRedisPy(t)
	t.Logf("redis-py %s", version)
	testTraceScenarios(t, proxyTarget(t), append(redisPyScenarios, noExpiryProxy), argv...)
}

// TestRedisPyContentionControlLosesUpdates runs the contention scenario
// without the lock: the program must then report lost updates, which shows
// that its counter check can fail.
func TestRedisPyContentionControlLosesUpdates(t *testing.T) {
	argv, _ := requireRedisPy(t)
	testContentionControl(t, `"step": "error"`, argv...)
}
