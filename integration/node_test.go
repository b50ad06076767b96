package integration

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestNodeLibraries runs node-redlock 4.2.0, node-redlock 5 and
// @sesamecare-oss/redlock 1.4 (integration/node/compat.test.js) through the
// proxy over five real masters. Node.js and the npm packages must be
// installed (./test.sh runs npm ci); their absence fails the test.
func TestNodeLibraries(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Fatalf("node not found: the node-redlock compatibility tests need Node.js >= 20 (./test.sh installs what it can): %v", err)
	}
	dir, _ := filepath.Abs("node")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "redlock", "package.json")); err != nil {
		t.Fatalf("integration/node/node_modules is missing: run `npm ci` in integration/node (./test.sh does): %v", err)
	}
	c := newCluster(t, 5)
	var addrs []string
	for _, s := range c.servers {
		addrs = append(addrs, s.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, node, "--test", "--test-reporter=spec", "compat.test.js")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PROXY_ADDR="+c.app.Addr(), "BACKENDS="+strings.Join(addrs, ","))
	out, err := cmd.CombinedOutput()
	t.Logf("node --test:\n%s", out)
	if err != nil {
		t.Fatalf("node compatibility tests failed: %v", err)
	}
	if !strings.Contains(string(out), "pass 5") || !strings.Contains(string(out), "fail 0") {
		t.Fatalf("expected 5 passing node tests and no failure; see the log above")
	}
}
