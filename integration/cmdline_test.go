package integration

import (
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// The binary as an operator runs it: -version prints the version, the
// revision and the Go version; -check validates a configuration without
// serving, like nginx -t: 0 and a one-line summary when it is good, 1 and
// the usual message when it is not (here a rule a user cannot have, and a
// file that is not there).
func TestCommandLineVersionAndCheck(t *testing.T) {
	bin := buildBinary(t)
	runBin := func(args ...string) (stdout, stderr string, code int) {
		t.Helper()
		cmd := exec.Command(bin, args...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		switch {
		case errors.As(err, &ee):
			code = ee.ExitCode()
		case err != nil:
			t.Fatalf("%v: %v", args, err)
		}
		return out.String(), errb.String(), code
	}

	out, _, code := runBin("-version")
	if code != 0 || !strings.HasPrefix(out, "redlock-proxy ") || !strings.Contains(out, "revision ") || !strings.Contains(out, runtime.Version()) || strings.Count(out, "\n") != 1 {
		t.Errorf("-version = %q, exit %d; want one line with the version, the revision and %s", out, code, runtime.Version())
	}

	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	os.WriteFile(good, []byte("backends: [10.0.0.11:6379, 10.0.0.12:6379, 10.0.0.13:6379]\nusers:\n  - name: orders\n    password: p\n    rules: \"~orders:* +@all\"\n"), 0o600)
	out, errOut, code := runBin("-check", "-config", good)
	if code != 0 || strings.Count(out, "\n") != 1 || !strings.HasPrefix(out, "redlock-proxy: configuration OK: 3 backends") || !strings.Contains(out, "majority 2") || errOut != "" {
		t.Errorf("-check of a good file: exit %d, stdout %q, stderr %q; want 0 and one summary line", code, out, errOut)
	}

	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("backends: [10.0.0.11:6379]\nusers:\n  - name: orders\n    password: p\n    rules: \"~orders:* +@lock\"\n"), 0o600)
	out, errOut, code = runBin("-check", "-config", bad)
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, "redlock-proxy: invalid configuration: ") || !strings.Contains(errOut, "line 2: users[0].rules: \"+@lock\": unknown command category") {
		t.Errorf("-check of a bad file: exit %d, stdout %q, stderr %q; want 1 and the usual one-line message", code, out, errOut)
	}
	tabbed := filepath.Join(dir, "tabbed.yaml")
	os.WriteFile(tabbed, []byte("max_ttl: 30s\nbackends:\n\t- 10.0.0.11:6379\n"), 0o600)
	_, errOut, code = runBin("-check", "-config", tabbed)
	if want := "tabbed.yaml, line 3: indent with spaces"; code != 1 || !strings.Contains(errOut, want) {
		t.Errorf("-check of a file indented with a tab: exit %d, stderr %q; want 1 and %q", code, errOut, want)
	}
	_, errOut, code = runBin("-check", "-config", filepath.Join(dir, "missing.yaml"))
	if code != 1 || !strings.HasPrefix(errOut, "redlock-proxy: config: open ") {
		t.Errorf("-check of a missing file: exit %d, stderr %q; want 1", code, errOut)
	}
}

// JSON logs write durations as the text logs do ("1m0.602s"), not as bare
// nanoseconds: the quarantine of fresh masters and the start-up summary.
func TestJSONLogsWriteReadableDurations(t *testing.T) {
	servers := startRedis(t, 3)
	p := startProxyProcess(t, servers, freeAddr(t), "-admin", "", "-log_format", "json", "-max_ttl", "30s")
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(p.logs.String(), `"counts_in"`) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	var seen int
	for _, line := range strings.Split(strings.TrimSpace(p.logs.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("not a JSON log line: %q", line)
		}
		for _, k := range []string{"max_ttl", "backend_timeout", "counts_in", "quarantine_hold"} {
			v, ok := rec[k]
			if !ok {
				continue
			}
			seen++
			s, isString := v.(string)
			if _, err := time.ParseDuration(s); !isString || err != nil {
				t.Errorf("%s = %#v in %s; want a duration such as 30s", k, v, line)
			}
		}
	}
	if seen < 3 {
		t.Errorf("only %d durations in the JSON log:\n%s", seen, p.logs.String())
	}
}

// shutdown_delay makes the drain the Kubernetes example documents: at
// SIGTERM /readyz turns 503 at once, while the listener still accepts and
// serves clients for the delay; then it closes, and the process exits 0.
func TestShutdownDelayDrainsBeforeTheListenerCloses(t *testing.T) {
	waits(t)
	servers := startRedis(t, 3)
	addr, admin := freeAddr(t), freeAddr(t)
	p := startProxyProcess(t, servers, addr, "-admin", admin, "-restart_quarantine", "run-id", "-shutdown_delay", "2s")
	waitHTTP(t, "http://"+admin+"/readyz", 200)
	if err := p.cmd.Process.Signal(sigterm()); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	waitHTTP(t, "http://"+admin+"/readyz", 503)
	if _, body := httpGet(t, "http://"+admin+"/readyz"); !strings.Contains(body, "shutting down") {
		t.Errorf("/readyz during the delay: %q", body)
	}
	// A new client is still accepted and served during the delay.
	cl := proxyClient(t, addr, 2)
	if ok, err := cl.SetNX(t.Context(), uniqueKey("drain"), "t", 5*time.Second).Result(); !ok || err != nil {
		t.Errorf("SET NX during shutdown_delay = %v, %v; want it served", ok, err)
	}
	if time.Since(start) > 1500*time.Millisecond {
		t.Fatalf("the checks took %v, too near the 2s delay to show anything", time.Since(start))
	}
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("exit: %v; want 0", err)
		}
		if d := time.Since(start); d < 2*time.Second {
			t.Errorf("exited %v after SIGTERM, before shutdown_delay", d)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the proxy did not exit")
	}
	if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
		c.Close()
		t.Error("the listener still accepts after the shutdown")
	}
}
