// Command printinfo prints what buildinfo.Read returns, for the package's
// test of a binary built with -ldflags.
package main

import (
	"fmt"

	"github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo"
)

func main() {
	i := buildinfo.Read()
	fmt.Println(i.Version, i.Revision, i.GoVersion)
}
