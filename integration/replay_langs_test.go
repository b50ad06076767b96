package integration

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Libraries on the Redlock page that no registry here carries are replayed
// in their own language's real client: their commands in their argument
// layout, with scripts of the same behaviour written for these tests (the
// libraries' own text cannot be taken from an installed copy). Each
// program prints the trace lockprog_test.go checks on every master.

type langReplay struct {
	library string
	argv    func(t *testing.T) []string
	steps   []string // of its lifecycle scenario
	// Scenarios whose steps differ on one Redis and through the proxy.
	lone, proxy []traceScenario
}

var langReplays = []langReplay{
	{"redlock-rb", interpreterArgv("ruby", "ruby/redlock_rb.rb", "ruby-redis"),
		[]string{"acquire", "refused", "extend", "not-owner", "release", "release"}, nil, nil},
	{"Redlock-php", interpreterArgv("php", "php/replays.php", "php-redis", "--lib", "redlock-php"),
		[]string{"acquire", "refused", "release"}, nil, nil},
	{"cheprasov/php-redis-lock", interpreterArgv("php", "php/replays.php", "php-redis", "--lib", "cheprasov"),
		[]string{"acquire", "refused", "not-owner", "extend", "release"}, nil, nil},
	{"Redis::DistLock", interpreterArgv("perl", "perl/distlock.pl", "libredis-perl"),
		[]string{"acquire", "refused", "not-owner", "release"}, nil, nil},
	// ContinueLock (hand the lock to a new value) is one Redis's hand-over;
	// the proxy reads its script as an acquire of the new value and refuses
	// it while the old value holds the lock, which keeps it.
	{"redlock-cpp", redlockCppArgv, []string{"acquire", "refused", "not-owner", "release"},
		[]traceScenario{{"continue", []string{"acquire", "handoff", "refused", "release"}}},
		[]traceScenario{{"continue", []string{"acquire", "refused", "refused", "release"}}}},
}

// interpreterArgv runs program (under integration/) with the interpreter,
// which Debian's package pkg gives its Redis client.
func interpreterArgv(interpreter, program, pkg string, extra ...string) func(t *testing.T) []string {
	return func(t *testing.T) []string {
		t.Helper()
		path, err := exec.LookPath(interpreter)
		if err != nil {
			t.Fatalf("%s not found: this replay needs it with Debian's %s (./test.sh installs them): %v", interpreter, pkg, err)
		}
		abs, _ := filepath.Abs(program)
		return append([]string{path, abs}, extra...)
	}
}

// redlockCppArgv builds the hiredis program with the C++ compiler.
func redlockCppArgv(t *testing.T) []string {
	t.Helper()
	cxx, err := exec.LookPath("g++")
	if err != nil {
		t.Fatalf("g++ not found: the redlock-cpp replay is built with it against Debian's libhiredis-dev (./test.sh installs them): %v", err)
	}
	src, _ := filepath.Abs(filepath.Join("cpp", "redlock_cpp.cpp"))
	bin := filepath.Join(t.TempDir(), "redlock_cpp")
	if out, err := exec.Command(cxx, "-O1", "-Wall", "-Werror", "-o", bin, src, "-lhiredis").CombinedOutput(); err != nil {
		t.Fatalf("building %s with hiredis (Debian's libhiredis-dev): %v\n%s", src, err, out)
	}
	return []string{bin}
}

func testLangReplays(t *testing.T, target func(*testing.T) lockTarget, proxy bool) {
	for _, r := range langReplays {
		t.Run(r.library, func(t *testing.T) {
			scenarios := append([]traceScenario{{"lifecycle", r.steps}}, r.lone...)
			if proxy {
				scenarios = append([]traceScenario{{"lifecycle", r.steps}}, r.proxy...)
			}
			testTraceScenarios(t, target(t), scenarios, r.argv(t)...)
		})
	}
}

// TestLanguageReplaysAgainstLoneRedis runs each replay against one
// redis-server: the reference.
func TestLanguageReplaysAgainstLoneRedis(t *testing.T) {
	testLangReplays(t, func(t *testing.T) lockTarget { return loneTarget(t) }, false)
}

// TestLanguageReplaysThroughProxy runs each replay through the proxy over
// five masters, checking each step on every master.
func TestLanguageReplaysThroughProxy(t *testing.T) {
	testLangReplays(t, proxyTarget, true)
}
