package integration

import (
	"context"
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

// A release, a read and a forced delete after every master's script
// cache was emptied behind the proxy's back, under its live connections
// (the proxy believes its scripts loaded), do what they do on one Redis:
// they go as EVAL with their script's text, so they never meet NOSCRIPT,
// and no released lock stays on any master for its TTL. An acquisition
// whose continuity check meets NOSCRIPT is checked again and granted; a
// delete and an acquisition pipelined after a flush keep their order.
func TestCommandsAfterAScriptFlushDoWhatTheyDoOnOneRedis(t *testing.T) {
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
		key := uniqueKey("noscript-release")
		if round > 0 {
			flush()
		}
		if ok, err := cl.SetNX(ctx, key, "tok", 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("round %d: SET NX after SCRIPT FLUSH = %v, %v; want a grant", round, ok, err)
		}
		// Every script the rounds use is loaded on every link first.
		if v, err := cl.Get(ctx, key).Result(); v != "tok" || err != nil {
			t.Fatalf("round %d: GET = %q, %v", round, v, err)
		}
		if n, err := releaseScript.Run(ctx, cl, []string{uniqueKey("noscript-none")}, "tok").Int(); n != 0 || err != nil {
			t.Fatalf("round %d: release of a free key = %d, %v", round, n, err)
		}
		if n, err := cl.Del(ctx, uniqueKey("noscript-none")).Result(); n != 0 || err != nil {
			t.Fatalf("round %d: DEL of a free key = %d, %v", round, n, err)
		}

		flush()
		if v, err := cl.Get(ctx, key).Result(); v != "tok" || err != nil {
			t.Fatalf("round %d: GET after SCRIPT FLUSH = %q, %v; want tok", round, v, err)
		}
		flush()
		if n, err := releaseScript.Run(ctx, cl, []string{key}, "tok").Int(); n != 1 || err != nil {
			t.Fatalf("round %d: release after SCRIPT FLUSH = %d, %v; want 1", round, n, err)
		}
		if h := c.eventuallyHolders(key, "tok", 0); len(h) != 0 {
			t.Fatalf("round %d: the released lock is still on masters %v", round, h)
		}
		forced := uniqueKey("noscript-del")
		if ok, err := cl.SetNX(ctx, forced, "tok", 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("round %d: SET NX = %v, %v", round, ok, err)
		}
		flush()
		if n, err := cl.Del(ctx, forced).Result(); n != 1 || err != nil {
			t.Fatalf("round %d: DEL after SCRIPT FLUSH = %d, %v; want 1", round, n, err)
		}
		if h := c.eventuallyHolders(forced, "tok", 0); len(h) != 0 {
			t.Fatalf("round %d: the deleted lock is still on masters %v", round, h)
		}
		// A delete and an acquisition of the same key in one pipeline run
		// in that order on every master, flushed or not: the new lock is
		// there, and stays.
		if ok, err := cl.SetNX(ctx, forced, "tok", 30*time.Second).Result(); !ok || err != nil {
			t.Fatalf("round %d: SET NX = %v, %v", round, ok, err)
		}
		flush()
		pipe := cl.Pipeline()
		del := pipe.Del(ctx, forced)
		set := pipe.SetNX(ctx, forced, "tok2", 30*time.Second)
		if _, err := pipe.Exec(ctx); err != nil {
			t.Fatalf("round %d: pipelined DEL and SET NX after SCRIPT FLUSH: %v", round, err)
		}
		if del.Val() != 1 || !set.Val() {
			t.Fatalf("round %d: pipelined DEL, SET NX after SCRIPT FLUSH = %d, %v; want 1, true", round, del.Val(), set.Val())
		}
		time.Sleep(50 * time.Millisecond)
		if h := c.holders(forced, "tok2"); len(h) != 3 {
			t.Fatalf("round %d: the lock taken after the pipelined DEL is on masters %v; want all three", round, h)
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
