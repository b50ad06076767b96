package integration

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// malkusch/lock's RedisMutex, the PHP implementation on the Redlock page,
// with both of its clients: PHPRedisMutex over phpredis and PredisMutex
// over Predis (Debian's php-malkusch-lock, php-redis and php-predis),
// drives integration/php/malkusch_lock.php; the program checks what the
// library returns, lockprog_test.go checks the masters after each step.

var malkuschScenarios = []traceScenario{
	{"lifecycle", []string{"acquire", "refused", "release", "acquire", "release"}},
	{"not-owned", []string{"acquire", "expired", "acquire", "release"}},
	{"long", []string{"acquire", "release"}},
	{"contention", []string{"contention"}},
}

// requireMalkusch fails the test unless php loads malkusch/lock, Predis and
// the phpredis extension, and returns the program's command line for
// client (phpredis or predis) and the package's version.
func requireMalkusch(t *testing.T, client string) (argv []string, version string) {
	t.Helper()
	php, err := exec.LookPath("php")
	if err != nil {
		t.Fatalf("php not found: the malkusch/lock tests need Debian's php-cli, php-redis, php-malkusch-lock and php-predis (./test.sh installs them): %v", err)
	}
	probe := `require 'Malkusch/Lock/autoload.php'; require 'Predis/autoload.php';
		if (!extension_loaded('redis')) { fwrite(STDERR, "phpredis extension not loaded\n"); exit(1); }
		foreach (['malkusch\lock\mutex\PHPRedisMutex', 'malkusch\lock\mutex\PredisMutex', 'Predis\Client'] as $c) {
			if (!class_exists($c)) { fwrite(STDERR, "$c missing\n"); exit(1); } }`
	if out, err := exec.Command(php, "-r", probe).CombinedOutput(); err != nil {
		t.Fatalf("php cannot load malkusch/lock with phpredis and Predis: install Debian's php-redis, php-malkusch-lock and php-predis (./test.sh does): %v\n%s", err, out)
	}
	if v, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "php-malkusch-lock", "php-predis").Output(); err == nil {
		version = string(v)
	}
	script, _ := filepath.Abs(filepath.Join("php", "malkusch_lock.php"))
	return []string{php, script, "--client", client}, version
}

var malkuschClients = []string{"phpredis", "predis"}

// eachMalkuschClient runs fn for each client, with the program's command
// line for it.
func eachMalkuschClient(t *testing.T, fn func(t *testing.T, argv []string)) {
	for _, client := range malkuschClients {
		t.Run(client, func(t *testing.T) {
			argv, version := requireMalkusch(t, client)
			t.Logf("php-malkusch-lock, php-predis %s", version)
			fn(t, argv)
		})
	}
}

// TestMalkuschRedisMutexAgainstLoneRedis runs both mutexes against one
// redis-server: the reference every scenario must pass.
func TestMalkuschRedisMutexAgainstLoneRedis(t *testing.T) {
	eachMalkuschClient(t, func(t *testing.T, argv []string) {
		testTraceScenarios(t, loneTarget(t), malkuschScenarios, argv...)
	})
}

// TestMalkuschRedisMutexThroughProxy runs the same scenarios through the
// proxy over five masters, checking each step on every master.
func TestMalkuschRedisMutexThroughProxy(t *testing.T) {
	eachMalkuschClient(t, func(t *testing.T, argv []string) {
		testTraceScenarios(t, proxyTarget(t), malkuschScenarios, argv...)
	})
}

// TestMalkuschContentionControlLosesUpdates runs the contention scenario
// without the lock: the program must then report lost updates.
func TestMalkuschContentionControlLosesUpdates(t *testing.T) {
	eachMalkuschClient(t, func(t *testing.T, argv []string) {
		testContentionControl(t, `"step":"error"`, argv...)
	})
}
