// Package buildinfo says which build of redlock-proxy is running: its
// version and source revision, set at build time with -ldflags
//
//	-X github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo.Version=1.2.3
//	-X github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo.revision=$(git rev-parse HEAD)
//
// (the revision falls back to the one the Go toolchain stamps, when it
// does), and the Go version it was built with.
//
// It promises: Read never fails; what the binary does not record reads
// "unknown".
package buildinfo

import (
	"runtime"
	"runtime/debug"
	"sync"
)

// Version is the proxy's version.
var Version = "0.1.0-dev"

// revision is the source revision given at build time.
var revision string

// Info is what a binary records about its build.
type Info struct {
	Version   string
	Revision  string // the source revision, "unknown" when not recorded
	GoVersion string
}

// Read returns the running binary's build information.
var Read = sync.OnceValue(func() Info {
	info := Info{Version: Version, Revision: revision, GoVersion: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok && info.Revision == "" {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				info.Revision = s.Value
			}
		}
	}
	if info.Revision == "" {
		info.Revision = "unknown"
	}
	return info
})
