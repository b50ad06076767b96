package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The pgo mode profiles a real proxy under each of the bench's loads and
// merges the profiles into one that go build accepts: its samples are the
// proxy's serving code, taken over every load.
func TestPGOProfile(t *testing.T) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Fatalf("%v (Debian's redis-tools; ./test.sh installs it)", err)
	}
	dir := t.TempDir()
	log, err := os.Create(filepath.Join(dir, "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	out := filepath.Join(dir, "default.pgo")
	if err := makePGO(out, 2*time.Second, log); err != nil {
		t.Fatal(err)
	}
	top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=400", out).CombinedOutput()
	if err != nil {
		t.Fatalf("go tool pprof: %v\n%s", err, top)
	}
	for _, want := range []string{"Duration: 8", "proxy.(*client).serve", "netio.(*Link).readLoop", "proxy.handleSet", "proxy.handleEvalSha"} {
		if !strings.Contains(string(top), want) {
			t.Errorf("the merged profile lacks %q:\n%s", want, top)
		}
	}
}
