// Command redlock-proxy is a Redis-protocol proxy that turns every
// single-instance lock command into a Redlock majority vote over N
// independent Redis masters. See README.md.
//
// main only composes: it reads the configuration, sets up logging and
// GOMAXPROCS (the gomaxprocs key), runs the app until SIGINT or SIGTERM,
// and exits 0 after a clean shutdown.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"go.uber.org/automaxprocs/maxprocs"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/base/buildinfo"
	"github.com/redlock-proxy/redlock-proxy/internal/base/gcfloor"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the whole program: -h prints the usage to stdout; -version the
// version, revision and Go version; -check validates the configuration and
// exits, 0 with a one-line summary on stdout, 1 with the usual message; a
// mistake in the arguments or the file is one line on stderr and exit code
// 2; a failure to start is one line and exit code 1; a shutdown that left
// undos of partial acquisitions unrun exits 3.
func run(args []string, stdout, stderr io.Writer) int {
	args, version := takeFlag(args, "version")
	args, check := takeFlag(args, "check")
	if version {
		b := buildinfo.Read()
		fmt.Fprintf(stdout, "redlock-proxy %s (revision %s, %s)\n", b.Version, b.Revision, b.GoVersion)
		return 0
	}
	cfg, warnings, err := config.Load(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "redlock-proxy:", err)
		if check {
			return 1
		}
		return 2
	}
	if check {
		for _, w := range warnings {
			fmt.Fprintln(stderr, "redlock-proxy: warning:", w)
		}
		fmt.Fprintln(stdout, "redlock-proxy: configuration OK:", config.Summary(cfg))
		return 0
	}
	log := app.NewLogger(cfg, stderr)
	for _, w := range warnings {
		log.Warn("configuration: " + w)
	}
	if _, err := maxprocs.Set(maxprocs.Logger(func(f string, a ...any) { log.Debug(fmt.Sprintf(f, a...)) })); err != nil {
		log.Warn("automaxprocs", "err", err)
	}
	// automaxprocs set GOMAXPROCS to the CPU quota (or left the
	// environment's); gomaxprocs decides from there.
	if cfg.GoMaxProcs > 0 || os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(config.Procs(cfg.GoMaxProcs, runtime.GOMAXPROCS(0)))
	}
	log.Debug("gomaxprocs", "procs", runtime.GOMAXPROCS(0))
	// A small live heap is collected less often (unless GOGC is set).
	defer gcfloor.Start()()
	a, err := app.New(cfg, log)
	if err != nil {
		fmt.Fprintln(stderr, "redlock-proxy: cannot start:", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := a.Run(ctx); err != nil {
		log.Error("stopped on error", "err", err)
		if errors.Is(err, app.ErrUndosPending) {
			return 3
		}
		return 1
	}
	return 0
}

// takeFlag removes the command-line-only boolean flag name (-name or
// --name) from args and reports whether it was there: -version and -check
// are modes of the program, not configuration keys.
func takeFlag(args []string, name string) ([]string, bool) {
	out := args[:0:0]
	found := false
	for _, a := range args {
		if a == "-"+name || a == "--"+name {
			found = true
			continue
		}
		out = append(out, a)
	}
	return out, found
}
