package integration

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Symfony Lock (LockFactory over RedisStore with phpredis: Debian's
// php-symfony-lock and php-redis) drives integration/php/symfony_lock.php;
// the program checks what the library returns, lockprog_test.go checks
// the masters after each step (a sorted set of owners per lock).

var symfonyScenarios = []traceScenario{
	{"lifecycle", []string{"acquire", "refused", "extend", "release", "acquire", "release"}},
	{"expired", []string{"acquire", "expired", "acquire", "not-owner", "release"}},
	{"handoff", []string{"acquire", "handoff", "release"}},
	{"shared", []string{"read", "read", "read", "refused", "release", "read", "release", "acquire", "refused", "release"}},
	{"promote", []string{"read", "acquire", "read", "read", "read", "read", "release", "release"}},
	{"contention", []string{"contention"}},
	{"defaults", []string{"acquire", "refused", "extend", "release"}}, // 300 s locks
}

// requireSymfony fails the test unless php runs with the phpredis
// extension and loads Symfony's lock component, and returns the program's
// command line and the component's version.
func requireSymfony(t *testing.T) (argv []string, version string) {
	t.Helper()
	php, err := exec.LookPath("php")
	if err != nil {
		t.Fatalf("php not found: the Symfony Lock tests need Debian's php-cli, php-redis and php-symfony-lock (./test.sh installs them): %v", err)
	}
	probe := `require 'Symfony/Component/Lock/autoload.php';
		if (!extension_loaded('redis')) { fwrite(STDERR, "phpredis extension not loaded\n"); exit(1); }
		foreach (['Symfony\Component\Lock\LockFactory', 'Symfony\Component\Lock\Store\RedisStore'] as $c) {
			if (!class_exists($c)) { fwrite(STDERR, "$c missing\n"); exit(1); } }`
	if out, err := exec.Command(php, "-r", probe).CombinedOutput(); err != nil {
		t.Fatalf("php cannot load Symfony Lock: install Debian's php-redis and php-symfony-lock (./test.sh does): %v\n%s", err, out)
	}
	if v, err := exec.Command("dpkg-query", "-W", "-f=${Version}", "php-symfony-lock").Output(); err == nil {
		version = string(v)
	}
	script, _ := filepath.Abs(filepath.Join("php", "symfony_lock.php"))
	return []string{php, script}, version
}

// TestSymfonyLockAgainstLoneRedis runs Symfony's LockFactory over
// RedisStore against one redis-server: the reference every scenario must
// pass.
func TestSymfonyLockAgainstLoneRedis(t *testing.T) {
	argv, version := requireSymfony(t)
	t.Logf("php-symfony-lock %s", version)
	testTraceScenarios(t, loneTarget(t), symfonyScenarios, argv...)
}

// TestSymfonyLockThroughProxy runs the same scenarios through the proxy
// over five masters, checking each step on every master.
func TestSymfonyLockThroughProxy(t *testing.T) {
	argv, version := requireSymfony(t)
	t.Logf("php-symfony-lock %s", version)
	testTraceScenarios(t, proxyTarget(t), symfonyScenarios, argv...)
}

// TestSymfonyContentionControlLosesUpdates runs the contention scenario
// without the lock: the program must then report lost updates.
func TestSymfonyContentionControlLosesUpdates(t *testing.T) {
	argv, _ := requireSymfony(t)
	testContentionControl(t, `"step":"error"`, argv...)
}

// TestOwnersTraceCheckSeesWrongMasters feeds the sorted-set checks states
// that are wrong for the step: each must be reported.
func TestOwnersTraceCheckSeesWrongMasters(t *testing.T) {
	lt := mastersOnly(t, 5)
	ctx := context.Background()
	key := uniqueKey("ownerscheck")
	// setOn makes the first n masters hold the members, each with its TTL.
	setOn := func(n int, members map[string]time.Duration) {
		for i, m := range lt.masters {
			m.Del(ctx, key)
			if i >= n {
				continue
			}
			now := time.Now()
			for name, ttl := range members {
				m.ZAdd(ctx, key, redis.Z{Score: float64(now.Add(ttl).UnixMilli()), Member: name})
			}
			m.PExpire(ctx, key, time.Minute)
		}
	}
	w := 10 * time.Second
	for _, tc := range []struct {
		name    string
		members map[string]time.Duration
		n       int
		step    traceStep
	}{
		{"a minority holds it", map[string]time.Duration{"tok": w, ownersMarker: w}, 2, traceStep{Step: "acquire", Key: key, Token: "tok", TTLms: 10000, Mode: "write"}},
		{"a writer without the marker", map[string]time.Duration{"tok": w}, 5, traceStep{Step: "acquire", Key: key, Token: "tok", TTLms: 10000, Mode: "write"}},
		{"a writer beside a reader", map[string]time.Duration{"tok": w, ownersMarker: w, "r": w}, 5, traceStep{Step: "acquire", Key: key, Token: "tok", TTLms: 10000, Mode: "write"}},
		{"a reader holding it exclusively", map[string]time.Duration{"tok": w, ownersMarker: w}, 5, traceStep{Step: "read", Key: key, Token: "tok", TTLms: 10000}},
		{"a deadline not extended", map[string]time.Duration{"tok": w}, 5, traceStep{Step: "extend", Key: key, Token: "tok", TTLms: 20000, Mode: "read"}},
		{"still an owner after release", map[string]time.Duration{"tok": w}, 1, traceStep{Step: "release", Key: key, Token: "tok"}},
		{"the refused token written", map[string]time.Duration{"tok": w, "other": w}, 5, traceStep{Step: "refused", Key: key, Token: "other", Holder: "tok", TTLms: 10000, Mode: "read"}},
	} {
		setOn(tc.n, tc.members)
		tc.step.Shape = "owners"
		if err := lt.checkStep(tc.step); err == nil {
			t.Errorf("%s: the check passed", tc.name)
		}
	}
	setOn(3, map[string]time.Duration{"tok": w, ownersMarker: w})
	if err := lt.checkStep(traceStep{Step: "acquire", Key: key, Token: "tok", TTLms: 10000, Mode: "write", Shape: "owners"}); err != nil {
		t.Errorf("a majority holding it exclusively: %v", err)
	}
}
