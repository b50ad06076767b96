package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// partialAcquire makes an acquire of key fail with a grant on master 0
// only: masters 1 and 2 hold the key for another client.
func (c *cluster) partialAcquire(t *testing.T, cl *redis.Client, key, token string) {
	t.Helper()
	ctx := context.Background()
	for _, i := range []int{1, 2} {
		if err := c.direct[i].Set(ctx, key, "someone-else", 30*time.Second).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if ok, err := cl.SetNX(ctx, key, token, 30*time.Second).Result(); ok || err != nil {
		t.Fatalf("SET NX with two of three masters held by another = %v, %v; want nil", ok, err)
	}
}

// An undo that meets NOSCRIPT (the master's script cache was emptied
// behind the proxy's back) is sent again with its script, and runs: the
// failed acquisition's token does not stay on that master for its TTL.
func TestUndoThatMeetsNoScriptRunsAgain(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(2)
	ctx := context.Background()
	// A first failed acquisition loads the undo scripts on every link.
	first := uniqueKey("noscript-first")
	c.partialAcquire(t, cl, first, "tok")
	if h := c.eventuallyHolders(first, "tok", 0); len(h) != 0 {
		t.Fatalf("the first failed acquisition is left on masters %v", h)
	}
	if err := c.direct[0].ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	key := uniqueKey("noscript")
	c.partialAcquire(t, cl, key, "tok")
	if h := c.eventuallyHolders(key, "tok", 0); len(h) != 0 {
		t.Fatalf("after SCRIPT FLUSH on master 0, the failed acquisition's token is still on masters %v", h)
	}
}

// An acquisition right after every master's script cache was emptied
// behind the proxy's back, under its live connections (the proxy believes
// its scripts loaded, so the continuity check after the grant meets
// NOSCRIPT), is granted: the check is sent again, its script loaded first,
// and the grant waits for it. A delete and an acquisition pipelined after
// a flush keep their order: the new lock is there, and stays.
func TestAcquisitionAfterAScriptFlushIsGranted(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(2)
	ctx := context.Background()
	flush := func() {
		t.Helper()
		for i, d := range c.direct {
			if err := d.ScriptFlush(ctx).Err(); err != nil {
				t.Fatalf("SCRIPT FLUSH on master %d: %v", i, err)
			}
		}
	}
	for round := 0; round < 5; round++ {
		key := uniqueKey("noscript-acquire")
		if round > 0 {
			flush()
		}
		if ok, err := cl.SetNX(ctx, key, "tok", 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("round %d: SET NX after SCRIPT FLUSH = %v, %v; want a grant", round, ok, err)
		}
		if h := c.holders(key, "tok"); len(h) != 3 {
			t.Fatalf("round %d: the lock is on masters %v; want all three", round, h)
		}
		// Every script the pipeline uses is loaded on every link first.
		if n, err := cl.Del(ctx, key).Result(); n != 1 || err != nil {
			t.Fatalf("round %d: DEL = %d, %v", round, n, err)
		}
		forced := uniqueKey("noscript-del")
		if ok, err := cl.SetNX(ctx, forced, "tok", 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("round %d: SET NX = %v, %v", round, ok, err)
		}
		flush()
		pipe := cl.Pipeline()
		pipe.Del(ctx, forced) // may meet NOSCRIPT: a documented limit
		set := pipe.SetNX(ctx, forced, "tok2", 30*time.Second)
		if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
			t.Fatalf("round %d: pipelined DEL and SET NX after SCRIPT FLUSH: %v", round, err)
		}
		time.Sleep(50 * time.Millisecond)
		if set.Val() {
			if h := c.holders(forced, "tok2"); len(h) < 2 {
				t.Fatalf("round %d: the lock granted after the pipelined DEL is on masters %v; want a majority", round, h)
			}
		}
	}
}

// SIGTERM while two of three masters hang (SIGSTOP) and an acquire is in
// flight: the client gets nil, /readyz answers 503 from the moment the drain
// starts, the undos that could not run are logged by key at WARN, and the
// exit status is 3 (docs/operations.md).
func TestShutdownWithUndosPendingSaysSo(t *testing.T) {
	servers := startRedis(t, 3)
	port, _ := redisproc.FreePort()
	aport, _ := redisproc.FreePort()
	addr, admin := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", aport)
	p := startProxyProcess(t, servers, addr, "-admin", admin, "-restart_quarantine", "run-id", "-shutdown_grace", "1500ms")
	logs, exited := p.logs, p.exited
	cmd := p.cmd
	cl := proxyClient(t, addr, 2)
	ctx := context.Background()
	if ok, err := cl.SetNX(ctx, uniqueKey("warm"), "t", time.Second).Result(); !ok || err != nil {
		t.Fatalf("a first lock: %v, %v", ok, err)
	}
	for _, s := range servers[1:] {
		if err := s.Pause(); err != nil {
			t.Fatal(err)
		}
		defer s.Resume()
	}
	key := uniqueKey("ghost")
	reply := make(chan error, 1)
	go func() {
		ok, err := cl.SetNX(ctx, key, "tokB", 30*time.Second).Result()
		if ok {
			err = fmt.Errorf("granted with two masters hung")
		}
		reply <- err
	}()
	time.Sleep(100 * time.Millisecond) // the acquire is in flight
	if err := cmd.Process.Signal(sigterm()); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	sawDraining := false
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		resp, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			break
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable && strings.Contains(string(body), "shutting down") {
			mu.Lock()
			sawDraining = true
			mu.Unlock()
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !sawDraining {
		t.Errorf("/readyz never answered 503 (shutting down) during the drain; logs:\n%s", logs.String())
	}
	select {
	case err := <-exited:
		exited <- err // for the cleanup
		code := -1
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		}
		if code != 3 {
			t.Fatalf("the proxy exited with %v (code %d); want 3: undos were left pending; logs:\n%s", err, code, logs.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("the proxy did not exit; logs:\n%s", logs.String())
	}
	if err := <-reply; err != nil && err != redis.Nil && !strings.Contains(err.Error(), "closed") {
		t.Logf("the in-flight acquire got %v", err)
	}
	out := logs.String()
	if !strings.Contains(out, "level=WARN") || !strings.Contains(out, "did not run within shutdown_grace") || !strings.Contains(out, key) {
		t.Fatalf("no WARN naming the pending undo of %q; logs:\n%s", key, out)
	}
}
