package integration

import (
	"errors"
	"testing"
	"time"
)

// pollEvery is how often waitFor checks.
const pollEvery = 20 * time.Millisecond

// errNotYet is a check's answer when it has no more to say (see holds).
var errNotYet = errors.New("not yet")

// holds is the check of a condition with nothing more to report.
func holds(ok bool) error {
	if ok {
		return nil
	}
	return errNotYet
}

// waitFor calls check every pollEvery until it returns nil. When within
// passes first, the test fails with what it waited for and check's last
// error, which says what it saw instead. It must run on the test's own
// goroutine (it calls t.Fatalf).
func waitFor(t testing.TB, within time.Duration, what string, check func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := check()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s: %v", within, what, err)
		}
		time.Sleep(pollEvery)
	}
}

// waits marks a test that spends most of its time waiting (a quarantine, a
// lock's expiry, a failover, a library's renewal period) rather than
// computing: it runs beside the other such tests (`go test -parallel`),
// once the package's other tests are done. Such a test owns its servers
// and proxies, changes no process-wide state, and judges no timing finer
// than its own backend timeout.
func waits(t *testing.T) {
	t.Helper()
	t.Parallel()
}
