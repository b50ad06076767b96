package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The Redlock libraries from PyPI (pottery, aioredlock, redlock-py), pinned
// in integration/python/requirements.txt and installed by ./test.sh into
// the virtualenv integration/python/.venv, each drive a program in
// integration/python; the program checks what the library returns,
// lockprog_test.go checks the masters after each step. Each library is
// given the one address (a lone Redis, or the proxy) as its only master.

type pypiLibrary struct {
	name      string // as on PyPI
	program   string // in integration/python
	scenarios []traceScenario
}

var pypiLibraries = []pypiLibrary{
	{"pottery", "pottery_lock.py", []traceScenario{
		{"lifecycle", []string{"acquire", "refused", "not-owner", "extend", "release", "acquire", "release"}},
		{"not-owned", []string{"acquire", "expired", "acquire", "not-owner", "release"}},
		{"handoff", []string{"acquire", "handoff", "release"}},
		{"contention", []string{"contention"}},
	}},
	{"aioredlock", "aioredlock_lock.py", []traceScenario{
		{"lifecycle", []string{"acquire", "refused", "extend", "not-owner", "release"}},
		{"not-owned", []string{"acquire", "expired", "reacquire", "release", "acquire", "not-owner", "release"}},
		{"watchdog", []string{"acquire", "extend", "release"}},
		{"handoff", []string{"acquire", "handoff", "release"}},
		{"contention", []string{"contention"}},
	}},
	{"redlock-py", "redlockpy_lock.py", []traceScenario{
		{"lifecycle", []string{"acquire", "refused", "not-owner", "release", "acquire", "release"}},
		{"not-owned", []string{"acquire", "expired", "acquire", "not-owner", "release"}},
		{"handoff", []string{"acquire", "handoff", "release"}},
		{"contention", []string{"contention"}},
	}},
}

// requirePyPILibrary fails the test unless the virtualenv imports the
// library, and returns its program's command line and the libraries'
// versions.
func requirePyPILibrary(t *testing.T, lib pypiLibrary) (argv []string, versions string) {
	t.Helper()
	dir, _ := filepath.Abs("python")
	python := filepath.Join(dir, ".venv", "bin", "python")
	if _, err := os.Stat(python); err != nil {
		t.Fatalf("the PyPI lock libraries' virtualenv is missing (./test.sh makes it from integration/python/requirements.txt): %v", err)
	}
	out, err := exec.Command(python, "-c", `import sys
from importlib.metadata import version
print(", ".join(n + " " + version(n) for n in sys.argv[1:]))`, lib.name, "redis").CombinedOutput()
	if err != nil {
		t.Fatalf("the virtualenv has no %s (run ./test.sh, which installs integration/python/requirements.txt): %v\n%s", lib.name, err, out)
	}
	return []string{python, filepath.Join(dir, lib.program)}, strings.TrimSpace(string(out))
}

// eachPyPILibrary runs fn for each library, with its program's command
// line.
func eachPyPILibrary(t *testing.T, fn func(t *testing.T, lib pypiLibrary, argv []string)) {
	for _, lib := range pypiLibraries {
		t.Run(lib.name, func(t *testing.T) {
			argv, versions := requirePyPILibrary(t, lib)
			t.Log(versions)
			fn(t, lib, argv)
		})
	}
}

// TestPyPILockLibrariesAgainstLoneRedis runs each library against one
// redis-server: the reference every scenario must pass.
func TestPyPILockLibrariesAgainstLoneRedis(t *testing.T) {
	eachPyPILibrary(t, func(t *testing.T, lib pypiLibrary, argv []string) {
		testTraceScenarios(t, loneTarget(t), lib.scenarios, argv...)
	})
}

// TestPyPILockLibrariesThroughProxy runs the same scenarios through the
// proxy over five masters, checking each step on every master.
func TestPyPILockLibrariesThroughProxy(t *testing.T) {
	eachPyPILibrary(t, func(t *testing.T, lib pypiLibrary, argv []string) {
		testTraceScenarios(t, proxyTarget(t), lib.scenarios, argv...)
	})
}

// TestPyPILockLibrariesContentionControlLosesUpdates runs each contention
// scenario without the lock: the program must then report lost updates.
func TestPyPILockLibrariesContentionControlLosesUpdates(t *testing.T) {
	eachPyPILibrary(t, func(t *testing.T, _ pypiLibrary, argv []string) {
		testContentionControl(t, `"step": "error"`, argv...)
	})
}
