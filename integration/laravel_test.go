package integration

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// Laravel's cache lock (Cache::lock on the redis store: Debian's
// php-illuminate-cache and php-illuminate-redis with the phpredis
// extension) drives integration/php/laravel_lock.php; the program checks
// what the library returns, lockprog_test.go checks the masters after each
// step.

var laravelScenarios = []traceScenario{
	{"lifecycle", []string{"acquire", "refused", "not-owner", "release", "acquire", "release", "acquire", "release"}},
	{"not-owned", []string{"acquire", "expired", "acquire", "not-owner", "release"}},
	{"handoff", []string{"acquire", "handoff", "release"}},
	{"contention", []string{"contention"}},
	{"long", []string{"acquire", "refused", "release"}}, // a 300 s lock
}

// requireLaravel fails the test unless php runs with the phpredis
// extension and loads Illuminate's cache and redis components, and returns
// the program's command line and the component's version.
func requireLaravel(t *testing.T) (argv []string, version string) {
	t.Helper()
	php, err := exec.LookPath("php")
	if err != nil {
		t.Fatalf("php not found: the Laravel lock tests need Debian's php-cli, php-redis, php-illuminate-cache and php-illuminate-redis (./test.sh installs them): %v", err)
	}
	probe := `require 'Illuminate/Cache/autoload.php'; require 'Illuminate/Redis/autoload.php';
		if (!extension_loaded('redis')) { fwrite(STDERR, "phpredis extension not loaded\n"); exit(1); }
		foreach (['Illuminate\Cache\RedisStore', 'Illuminate\Cache\PhpRedisLock', 'Illuminate\Redis\RedisManager'] as $c) {
			if (!class_exists($c)) { fwrite(STDERR, "$c missing\n"); exit(1); } }
		echo (new ReflectionClass('Illuminate\Cache\RedisStore'))->getFileName();`
	out, err := exec.Command(php, "-r", probe).CombinedOutput()
	if err != nil {
		t.Fatalf("php cannot load Laravel's redis cache lock: install Debian's php-redis, php-illuminate-cache and php-illuminate-redis (./test.sh does): %v\n%s", err, out)
	}
	if v, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "php-illuminate-cache").Output(); err == nil {
		version = string(v)
	}
	script, _ := filepath.Abs(filepath.Join("php", "laravel_lock.php"))
	return []string{php, script}, version
}

// TestLaravelCacheLockAgainstLoneRedis runs Laravel's Cache::lock against
// one redis-server: the reference every scenario must pass.
func TestLaravelCacheLockAgainstLoneRedis(t *testing.T) {
	argv, version := requireLaravel(t)
	t.Logf("php-illuminate-cache %s", version)
	testTraceScenarios(t, loneTarget(t), append(laravelScenarios, noExpiryLone), argv...)
}

// TestLaravelCacheLockThroughProxy runs the same scenarios through the
// proxy over five masters, checking each step on every master.
// Cache::lock($name) without seconds (SETNX) is refused with the reason,
// and nothing is written.
func TestLaravelCacheLockThroughProxy(t *testing.T) {
	argv, version := requireLaravel(t)
	t.Logf("php-illuminate-cache %s", version)
	testTraceScenarios(t, proxyTarget(t), append(laravelScenarios, noExpiryProxy), argv...)
}

// TestLaravelContentionControlLosesUpdates runs the contention scenario
// without the lock: the program must then report lost updates.
func TestLaravelContentionControlLosesUpdates(t *testing.T) {
	argv, _ := requireLaravel(t)
	testContentionControl(t, `"step":"error"`, argv...)
}
