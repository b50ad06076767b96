package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The npm lock libraries run unchanged under Node.js's test runner
// (integration/node/*.test.js), pointed at LOCK_ADDR, with MASTERS the
// masters behind it that every step is checked on. Node.js and the npm
// packages must be installed (./test.sh runs npm ci); their absence fails
// the tests.

// nodePackages are the packages the test files load; one missing means
// npm ci did not run.
var nodePackages = []string{"redlock", "redlock5", "@sesamecare-oss/redlock", "ioredis", "redis", "redis4",
	"redis-semaphore", "node-redis-warlock", "redis-lock", "simple-redis-mutex", "@microfleet/ioredis-lock"}

// requireNode returns the node binary and the test directory, or fails.
func requireNode(t *testing.T) (node, dir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: the npm library tests need Node.js >= 20 (./test.sh installs what it can): %v", err)
	}
	dir, _ = filepath.Abs("node")
	for _, p := range nodePackages {
		if _, err := os.Stat(filepath.Join(dir, "node_modules", p, "package.json")); err != nil {
			t.Fatalf("npm package %s is missing: run `npm ci` in integration/node (./test.sh does): %v", p, err)
		}
	}
	return node, dir
}

var nodeCount = regexp.MustCompile(`(?m)^\S* ?(pass|fail) (\d+)$`)

// runNodeTests runs one test file against lt and fails unless all of its
// want tests passed.
func runNodeTests(t *testing.T, file string, lt lockTarget, want int) {
	t.Helper()
	node, dir := requireNode(t)
	var masters []string
	for _, m := range lt.masters {
		masters = append(masters, m.Options().Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// --test-force-exit: a library that keeps retrying in the background
	// after a failed test must not keep the run open.
	cmd := exec.CommandContext(ctx, node, "--test", "--test-force-exit", "--test-reporter=spec", file)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LOCK_ADDR="+lt.addr, "MASTERS="+strings.Join(masters, ","))
	out, err := cmd.CombinedOutput()
	t.Logf("node --test %s:\n%s", file, out)
	counts := map[string]int{}
	for _, m := range nodeCount.FindAllStringSubmatch(string(out), -1) {
		counts[m[1]], _ = strconv.Atoi(m[2])
	}
	if err != nil || counts["pass"] != want || counts["fail"] != 0 {
		t.Fatalf("node --test %s: %d passed, %d failed, exit %v; want all %d to pass (see the log above)", file, counts["pass"], counts["fail"], err, want)
	}
}

// TestNodeLibraries runs node-redlock 4.2.0, node-redlock 5 and
// @sesamecare-oss/redlock 1.4 (compat.test.js) through the proxy over
// five real masters.
func TestNodeLibraries(t *testing.T) {
	requireNode(t)
	runNodeTests(t, "compat.test.js", proxyTarget(t), 6)
}

// The number of tests in locks.test.js: simple-redis-mutex's two run
// against the lone Redis; through the proxy one test checks its refusal.
const (
	nodeLockTests        = 12
	nodeLockTestsThrough = 11
)

// TestNodeLockLibrariesAgainstLoneRedis runs redis-semaphore, node-redis-warlock,
// redis-lock, simple-redis-mutex and @microfleet/ioredis-lock (locks.test.js)
// against one redis-server: the reference they must all pass.
func TestNodeLockLibrariesAgainstLoneRedis(t *testing.T) {
	requireNode(t)
	runNodeTests(t, "locks.test.js", loneTarget(t), nodeLockTests)
}

// TestNodeLockLibrariesThroughProxy runs the same tests through the proxy
// over five real masters.
func TestNodeLockLibrariesThroughProxy(t *testing.T) {
	requireNode(t)
	runNodeTests(t, "locks.test.js", proxyTarget(t), nodeLockTestsThrough)
}

// The number of tests in semaphore.test.js: through the proxy one more
// runs the library's own RedlockSemaphore over three masters directly.
const (
	nodeSemaphoreTests        = 4
	nodeSemaphoreTestsThrough = 5
)

// TestNodeSemaphoreAgainstLoneRedis runs redis-semaphore's Semaphore
// (semaphore.test.js) against one redis-server: the reference.
func TestNodeSemaphoreAgainstLoneRedis(t *testing.T) {
	requireNode(t)
	runNodeTests(t, "semaphore.test.js", loneTarget(t), nodeSemaphoreTests)
}

// TestNodeSemaphoreThroughProxy runs the same tests through the proxy over
// five real masters, and the library's RedlockSemaphore over three of them
// directly (three holders of a limit-2 semaphore).
func TestNodeSemaphoreThroughProxy(t *testing.T) {
	requireNode(t)
	runNodeTests(t, "semaphore.test.js", proxyTarget(t), nodeSemaphoreTestsThrough)
}
