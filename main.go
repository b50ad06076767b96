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
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// run is the whole program: -h prints the usage to stdout; a mistake in
// the arguments or the file is one line on stderr and exit code 2; a
// failure to start is one line and exit code 1; a shutdown that left undos
// of partial acquisitions unrun exits 3.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, warnings, err := config.Load(args, stdout)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "redlock-proxy:", err)
		return 2
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
