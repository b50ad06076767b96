package buildinfo

import (
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// A test binary records no revision: it reads "unknown", with the
// version's default and the running Go version.
func TestReadWithoutARevision(t *testing.T) {
	info := Read()
	if info.GoVersion != runtime.Version() || info.Version != Version || info.Revision != "unknown" {
		t.Errorf("Read() = %+v; want version %s, revision unknown, Go %s", info, Version, runtime.Version())
	}
}

// The version and revision given with -ldflags are what Read returns.
func TestReadWhatTheBuildSet(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "printinfo")
	pkg := "github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo"
	out, err := exec.Command("go", "build", "-o", bin,
		"-ldflags", "-X "+pkg+".Version=9.8.7 -X "+pkg+".revision=0123abcd", "./testdata/printinfo").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	got, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	if want := "9.8.7 0123abcd " + runtime.Version(); strings.TrimSpace(string(got)) != want {
		t.Errorf("the binary reports %q; want %q", got, want)
	}
}
