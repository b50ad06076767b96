package integration

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// rslock (crates.io, the Rust implementation on the Redlock page) drives
// integration/rust, a cargo project whose Cargo.lock pins it and all it
// pulls in; the program checks what the library returns, lockprog_test.go
// checks the masters after each step. Its tokens are 20 random bytes: the
// proxy carries them as any other.

var rslockScenarios = []traceScenario{
	{"lifecycle", []string{"acquire", "refused", "not-owner", "extend", "release", "acquire", "release"}},
	{"not-owned", []string{"acquire", "expired", "acquire", "not-owner", "release"}},
	{"handoff", []string{"acquire", "handoff", "release"}},
	{"contention", []string{"contention"}},
}

// requireRslock builds integration/rust with cargo (at once when
// ./test.sh has built it) and returns the program's command line.
func requireRslock(t *testing.T) []string {
	t.Helper()
	cargo, err := exec.LookPath("cargo")
	if err != nil {
		t.Fatalf("cargo not found: the rslock tests build integration/rust with cargo (rustup's, or Debian's cargo): %v", err)
	}
	dir, _ := filepath.Abs("rust")
	cmd := exec.Command(cargo, "build", "--locked", "--quiet", "--manifest-path", filepath.Join(dir, "Cargo.toml"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cargo build of integration/rust: %v\n%s", err, out)
	}
	return []string{filepath.Join(dir, "target", "debug", "rslock_lock")}
}

// TestRslockAgainstLoneRedis runs rslock against one redis-server: the
// reference every scenario must pass.
func TestRslockAgainstLoneRedis(t *testing.T) {
	testTraceScenarios(t, loneTarget(t), rslockScenarios, requireRslock(t)...)
}

// TestRslockThroughProxy runs the same scenarios through the proxy over
// five masters, checking each step on every master.
func TestRslockThroughProxy(t *testing.T) {
	testTraceScenarios(t, proxyTarget(t), rslockScenarios, requireRslock(t)...)
}

// TestRslockContentionControlLosesUpdates runs the contention scenario
// without the lock: the program must then report lost updates.
func TestRslockContentionControlLosesUpdates(t *testing.T) {
	testContentionControl(t, `"step": "error"`, requireRslock(t)...)
}
