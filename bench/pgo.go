package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// The pgo mode makes the profile that profile-guided optimisation builds
// the proxy with (default.pgo beside main.go, which go build uses by
// default): the CPU profiles of the working tree's proxy under the bench's
// own loads, merged. The loads are the against mode's: lock cycles at 50
// and at 1 client over five backends, and redis-benchmark's SET NX PX and
// release EVALSHA at 50 clients over one.

// pgoLoad is one load the profile is taken under.
type pgoLoad struct {
	name string
	run  func(d time.Duration) error // drives the proxy for about d
}

// makePGO profiles the working tree's proxy under each load for d and
// writes the merged profile to out.
func makePGO(out string, d time.Duration, logFile *os.File) error {
	tmp, err := os.MkdirTemp("", "redlock-bench-pgo-")
	if err != nil {
		return err
	}
	defer atExit(func() { os.RemoveAll(tmp) })()
	progress("building the proxy")
	bin, err := buildProxy(tmp)
	if err != nil {
		return err
	}
	five, stop, adminFive, err := startProfiledRig(tmp, bin, 5, logFile)
	if err != nil {
		return err
	}
	defer stop()
	one, stop, adminOne, err := startProfiledRig(tmp, bin, 1, logFile)
	if err != nil {
		return err
	}
	defer stop()
	lone, err := redisproc.Start(tmp)
	if err != nil {
		return err
	}
	defer atExit(lone.Stop)()
	b := &bencher{o: options{rounds: 1, proxyLog: logFile}, tmp: tmp, lone: lone}
	ep := peerEndpoint{target: "proxy", addr: one.px.Addr, n: 1, own: one.px.pid(), behind: one.pids}
	sha, err := b.loadRelease([]peerEndpoint{ep})
	if err != nil {
		return err
	}
	cyclesAt := func(c int) func(time.Duration) error {
		return func(d time.Duration) error {
			res := cycles(five.px.Addr, c, d, five.cpu)
			if res.Cycles == 0 {
				return fmt.Errorf("no lock cycle at %d clients: %s", c, res.Error)
			}
			return nil
		}
	}
	peerAt := func(command string) func(time.Duration) error {
		return func(d time.Duration) error {
			// Requests for about d at the rate of a loaded two-core machine
			// (the profile covers d, whatever is left).
			_, err := peerLoad(ep, 50, int(d.Seconds()*25000), command, sha, "pgo, one backend")
			return err
		}
	}
	loads := []struct {
		pgoLoad
		admin string
	}{
		{pgoLoad{"lock cycles, 50 clients, five backends", cyclesAt(50)}, adminFive},
		{pgoLoad{"lock cycles, 1 client, five backends", cyclesAt(1)}, adminFive},
		{pgoLoad{"SET NX PX, 50 clients, one backend", peerAt("SET NX PX")}, adminOne},
		{pgoLoad{"EVALSHA release, 50 clients, one backend", peerAt("EVALSHA release")}, adminOne},
	}
	var profiles []string
	for i, l := range loads {
		progress("profiling under %s (%v)", l.name, d)
		p := filepath.Join(tmp, fmt.Sprintf("cpu%d.prof", i))
		if err := profileDuring(l.admin, p, d, l.run); err != nil {
			return fmt.Errorf("%s: %w", l.name, err)
		}
		profiles = append(profiles, p)
	}
	return mergeProfiles(profiles, out)
}

// startProfiledRig is startRig with the proxy's admin address on (it
// serves /debug/pprof/ on loopback), which it returns.
func startProfiledRig(tmp, bin string, n int, logFile *os.File) (*proxyRig, func(), string, error) {
	port, err := redisproc.FreePort()
	if err != nil {
		return nil, nil, "", err
	}
	admin := fmt.Sprintf("127.0.0.1:%d", port)
	rig, stop, err := startRig(tmp, bin, n, 0, logFile, "-admin", admin)
	return rig, stop, admin, err
}

// profileDuring takes a CPU profile of the proxy whose admin address is
// admin for d, while run drives it, and writes it to path.
func profileDuring(admin, path string, d time.Duration, run func(time.Duration) error) error {
	type fetched struct {
		body []byte
		err  error
	}
	got := make(chan fetched, 1)
	go func() { // owned by profileDuring: ends within d and the client's timeout, which it waits for
		cl := http.Client{Timeout: d + 30*time.Second}
		resp, err := cl.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", admin, int(d.Seconds())))
		if err != nil {
			got <- fetched{err: err}
			return
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err == nil && resp.StatusCode != http.StatusOK {
			err = fmt.Errorf("CPU profile: %s: %s", resp.Status, strings.TrimSpace(string(body)))
		}
		got <- fetched{body, err}
	}()
	runErr := run(d)
	f := <-got
	switch {
	case runErr != nil:
		return runErr
	case f.err != nil:
		return f.err
	}
	return os.WriteFile(path, f.body, 0o644)
}

// mergeProfiles merges CPU profiles into one (go tool pprof -proto).
func mergeProfiles(paths []string, out string) error {
	cmd := exec.Command("go", append([]string{"tool", "pprof", "-proto"}, paths...)...)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go tool pprof -proto: %w: %s", err, stderr.String())
	}
	return os.WriteFile(out, b, 0o644)
}
