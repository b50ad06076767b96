package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// The Java lock libraries (integration/java: Jedis, ShedLock, Spring
// Integration's RedisLockRegistry over Lettuce, Redisson) run unchanged
// from Maven Central. ./test.sh resolves them into the local Maven
// repository and writes their class path to
// integration/java/target/classpath.txt; the tests compile the programs
// with javac once per run and start one JVM per library family, which
// checks every step on each master (Masters.java). A missing JDK or class
// path fails the tests.

var (
	javaOnce sync.Once
	javaCP   string // the compiled programs and the libraries, for java -cp
	javaErr  error
)

// requireJava compiles integration/java/src once per run and returns the
// java binary and the class path, or fails the test.
func requireJava(t *testing.T) (java, cp string) {
	t.Helper()
	java, err := exec.LookPath("java")
	if err != nil {
		t.Fatalf("java not found: the Java library tests need a JDK 17 and Maven (./test.sh installs them): %v", err)
	}
	javaOnce.Do(func() { javaCP, javaErr = compileJava() })
	if javaErr != nil {
		t.Fatal(javaErr)
	}
	return java, javaCP
}

func compileJava() (string, error) {
	dir, _ := filepath.Abs("java")
	b, err := os.ReadFile(filepath.Join(dir, "target", "classpath.txt"))
	if err != nil {
		return "", fmt.Errorf("the Java libraries are not resolved: run `mvn dependency:build-classpath -Dmdep.outputFile=target/classpath.txt` in integration/java (./test.sh does): %w", err)
	}
	libs := strings.TrimSpace(string(b))
	for _, jar := range filepath.SplitList(libs) {
		if _, err := os.Stat(jar); err != nil {
			return "", fmt.Errorf("a Java library is missing from the local Maven repository (./test.sh resolves them): %w", err)
		}
	}
	javac, err := exec.LookPath("javac")
	if err != nil {
		return "", fmt.Errorf("javac not found: the Java library tests need a JDK 17: %w", err)
	}
	sources, _ := filepath.Glob(filepath.Join(dir, "src", "main", "java", "lockcompat", "*.java"))
	classes := filepath.Join(dir, "target", "classes")
	if err := os.RemoveAll(classes); err != nil {
		return "", err
	}
	args := append([]string{"-d", classes, "-cp", libs, "--release", "17", "-Xlint:all,-processing,-serial", "-Werror"}, sources...)
	if out, err := exec.Command(javac, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("javac: %w\n%s", err, out)
	}
	return classes + string(os.PathListSeparator) + libs, nil
}

var javaCase = regexp.MustCompile(`(?m)^(PASS|FAIL) (.*)$`)
var javaTotals = regexp.MustCompile(`(?m)^cases: (\d+) passed, (\d+) failed$`)

// runJava runs one library family's cases against the lock addresses
// (which all serve lt's masters) and returns each case's outcome by name:
// "" for a pass, the failure otherwise. The run itself failing (no
// closing count, a crash) fails the test.
func runJava(t *testing.T, family string, lt lockTarget, addrs ...string) map[string]string {
	t.Helper()
	java, cp := requireJava(t)
	if len(addrs) == 0 {
		addrs = []string{lt.addr}
	}
	var masters []string
	for _, m := range lt.masters {
		masters = append(masters, m.Options().Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// A small heap and one compiler thread: the machine runs other tests
	// beside this JVM.
	cmd := exec.CommandContext(ctx, java, "-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:CICompilerCount=1",
		"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp, "lockcompat.Main", family)
	cmd.Env = append(os.Environ(), "LOCK_ADDRS="+strings.Join(addrs, ","), "MASTERS="+strings.Join(masters, ","))
	out, err := cmd.CombinedOutput()
	t.Logf("java lockcompat.Main %s:\n%s", family, out)
	totals := javaTotals.FindSubmatch(out)
	if totals == nil {
		t.Fatalf("java %s: no closing count (exit %v); see the log above", family, err)
	}
	results := map[string]string{}
	for _, m := range javaCase.FindAllStringSubmatch(string(out), -1) {
		name, why := m[2], ""
		if m[1] == "FAIL" {
			name, why, _ = strings.Cut(m[2], " -- ")
			why = "failed: " + why
		} else if i := strings.LastIndex(name, " ("); i > 0 {
			name = name[:i]
		}
		results[name] = why
	}
	passed, _ := strconv.Atoi(string(totals[1]))
	failed, _ := strconv.Atoi(string(totals[2]))
	if passed+failed != len(results) {
		t.Fatalf("java %s: counted %d passed and %d failed, but %d cases reported", family, passed, failed, len(results))
	}
	return results
}

// requireJavaCases fails the test unless want cases ran and every one
// passed, but those in pending, each of which must fail with the error
// text given: a case that waits for the proxy to support what it does is
// held to its exact refusal, so one that starts passing, or fails
// otherwise, is seen (remove its line then).
func requireJavaCases(t *testing.T, results map[string]string, want int, pending map[string]string) {
	t.Helper()
	for name, why := range results {
		refusal, isPending := pending[name]
		switch {
		case isPending && why == "":
			t.Errorf("%s: passes now; remove it from the pending cases", name)
		case isPending && !strings.Contains(why, refusal):
			t.Errorf("%s: pending on %q, but %s", name, refusal, why)
		case isPending:
			t.Logf("%s: pending: %s", name, refusal)
		case why != "":
			t.Errorf("%s: %s", name, why)
		}
	}
	for name := range pending {
		if _, ok := results[name]; !ok {
			t.Errorf("pending case %q did not run", name)
		}
	}
	if len(results) != want {
		t.Errorf("%d cases ran, want %d", len(results), want)
	}
}

// Cases that fail through the proxy by design: Redisson's RSemaphore,
// whose permits are a count with no holder and no expiry
// (docs/compatibility.md).
const refusedCounter = "a counting semaphore kept as a count of free permits"

var (
	javaRedissonPending = map[string]string{
		"RSemaphore: at most its permits": refusedCounter,
	}
)

// javaProxies starts the proxy over five masters, a second proxy over the
// same masters, with a max_ttl of five minutes (ShedLock's lockAtMostFor
// is minutes), and returns the target and both addresses.
func javaProxies(t *testing.T) (lockTarget, []string) {
	t.Helper()
	longTTL := func(cfg *config.Config) { cfg.MaxTTL = 5 * time.Minute }
	c := newCluster(t, 5, longTTL)
	var addrs []string
	for _, s := range c.servers {
		addrs = append(addrs, s.Addr)
	}
	other, _ := startApp(t, addrs, longTTL)
	return lockTarget{addr: c.app.Addr(), masters: c.direct, settle: 2 * time.Second}, []string{c.app.Addr(), other.Addr()}
}

// The number of cases of each family.
const (
	javaJedisCases    = 5
	javaShedLockCases = 6
	javaSpringCases   = 8
	javaRedissonCases = 17
)

// TestJavaJedisAgainstLoneRedis runs Jedis's SET NX PX with scripted
// release and extend against one redis-server: the reference.
func TestJavaJedisAgainstLoneRedis(t *testing.T) {
	requireJavaCases(t, runJava(t, "jedis", loneTarget(t)), javaJedisCases, nil)
}

// TestJavaJedisThroughProxy runs the same cases through two proxies over
// five masters, checking each step on every master.
func TestJavaJedisThroughProxy(t *testing.T) {
	lt, addrs := javaProxies(t)
	requireJavaCases(t, runJava(t, "jedis", lt, addrs...), javaJedisCases, nil)
}

// TestJavaShedLockAgainstLoneRedis runs ShedLock's Redis provider
// (shedlock-provider-redis-spring) against one redis-server.
func TestJavaShedLockAgainstLoneRedis(t *testing.T) {
	requireJavaCases(t, runJava(t, "shedlock", loneTarget(t)), javaShedLockCases, nil)
}

// TestJavaShedLockThroughProxy runs ShedLock's cases through two proxies
// with a max_ttl of five minutes, its lockAtMostFor four.
func TestJavaShedLockThroughProxy(t *testing.T) {
	lt, addrs := javaProxies(t)
	requireJavaCases(t, runJava(t, "shedlock", lt, addrs...), javaShedLockCases, nil)
}

// TestJavaSpringLockRegistryAgainstLoneRedis runs Spring Integration's
// RedisLockRegistry, SPIN_LOCK and PUB_SUB_LOCK, against one redis-server.
func TestJavaSpringLockRegistryAgainstLoneRedis(t *testing.T) {
	requireJavaCases(t, runJava(t, "spring", loneTarget(t)), javaSpringCases, nil)
}

// TestJavaSpringLockRegistryThroughProxy runs the same cases through two
// proxies over five masters; PUB_SUB_LOCK's release publishes, and its
// waiters are woken through either proxy (the release's notice).
func TestJavaSpringLockRegistryThroughProxy(t *testing.T) {
	lt, addrs := javaProxies(t)
	requireJavaCases(t, runJava(t, "spring", lt, addrs...), javaSpringCases, nil)
}

// TestJavaRedissonAgainstLoneRedis runs Redisson's locks and semaphores
// against one redis-server.
func TestJavaRedissonAgainstLoneRedis(t *testing.T) {
	requireJavaCases(t, runJava(t, "redisson", loneTarget(t)), javaRedissonCases, nil)
}

// TestJavaRedissonThroughProxy runs the same cases through two proxies over
// five masters; those in javaRedissonPending are held to their refusal.
func TestJavaRedissonThroughProxy(t *testing.T) {
	lt, addrs := javaProxies(t)
	requireJavaCases(t, runJava(t, "redisson", lt, addrs...), javaRedissonCases, javaRedissonPending)
}
