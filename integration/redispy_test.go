package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redis-py's Lock (Debian's python3-redis, run by Debian's /usr/bin/python3)
// drives integration/python/redispy_lock.py against a lone Redis and
// through the proxy; the program checks what the library returns, and this
// side checks every master after each step of its trace.

// debianPython is the interpreter that sees Debian's python3-redis; a
// python3 earlier on PATH (pyenv, a virtualenv) may not.
const debianPython = "/usr/bin/python3"

// redisPyScenarios are the program's scenarios and the trace each must
// print, in order.
var redisPyScenarios = []struct {
	name  string
	steps []string
}{
	{"lifecycle", []string{"acquire", "refused", "extend", "extend", "reacquire", "release", "acquire", "release"}},
	{"not-owned", []string{"acquire", "expired", "acquire", "not-owner", "release"}},
	{"handoff", []string{"acquire", "handoff", "release"}},
	{"contention", []string{"contention"}},
}

// requireRedisPy fails the test unless /usr/bin/python3 imports redis.lock,
// and returns redis-py's version.
func requireRedisPy(t *testing.T) string {
	t.Helper()
	if _, err := os.Stat(debianPython); err != nil {
		t.Fatalf("%s is missing: the redis-py tests need Debian's python3 and python3-redis (./test.sh installs them): %v", debianPython, err)
	}
	out, err := exec.Command(debianPython, "-c", "import redis, redis.lock; print(redis.__version__)").CombinedOutput()
	if err != nil {
		t.Fatalf("%s cannot import redis.lock: install Debian's python3-redis (./test.sh does): %v\n%s", debianPython, err, out)
	}
	return strings.TrimSpace(string(out))
}

// lockTarget is an address to lock on and the masters behind it: the lone
// Redis itself, or the proxy's backends.
type lockTarget struct {
	addr    string
	masters []*redis.Client
	settle  time.Duration // how long a check retries before it reports
}

func (lt lockTarget) majority() int { return len(lt.masters)/2 + 1 }

func loneTarget(t *testing.T) lockTarget {
	s := startRedis(t, 1)[0]
	d := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	t.Cleanup(func() { d.Close() })
	return lockTarget{addr: s.Addr, masters: []*redis.Client{d}, settle: 2 * time.Second}
}

func proxyTarget(t *testing.T) lockTarget {
	c := newCluster(t, 5)
	return lockTarget{addr: c.app.Addr(), masters: c.direct, settle: 2 * time.Second}
}

// traceStep is one line of the program's trace.
type traceStep struct {
	Step   string `json:"step"`
	Key    string `json:"key"`
	Token  string `json:"token"`
	Holder string `json:"holder"` // refused: the token that keeps the lock
	Other  string `json:"other"`  // not-owner, handoff: a token that must be nowhere
	TTLms  int64  `json:"ttl_ms"`
	Error  string `json:"error"`
}

// ttlSlack is how far below a step's TTL a master's PTTL may be by the
// time it is checked (the steps before it, the check itself, a busy
// machine).
const ttlSlack = 2500 * time.Millisecond

// masterState is what one master holds under a key.
type masterState struct {
	value string
	pttl  time.Duration
	err   error
}

func (lt lockTarget) state(key string) []masterState {
	out := make([]masterState, len(lt.masters))
	for i, m := range lt.masters {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		v, err := m.Get(ctx, key).Result()
		if err == redis.Nil {
			v, err = "", nil
		}
		p, perr := m.PTTL(ctx, key).Result()
		cancel()
		if err == nil {
			err = perr
		}
		out[i] = masterState{value: v, pttl: p, err: err}
	}
	return out
}

// held reports whether a majority holds token under key with a PTTL in
// (ttl - ttlSlack, ttl] on every master that holds it.
func (lt lockTarget) held(key, token string, ttl time.Duration) error {
	st := lt.state(key)
	n := 0
	for i, s := range st {
		if s.err != nil {
			return fmt.Errorf("master %d: %w", i, s.err)
		}
		if s.value != token {
			continue
		}
		n++
		if s.pttl > ttl || s.pttl <= ttl-ttlSlack {
			return fmt.Errorf("master %d holds %q with PTTL %v; want (%v, %v]", i, token, s.pttl, ttl-ttlSlack, ttl)
		}
	}
	if n < lt.majority() {
		return fmt.Errorf("%q is held by %d of %d masters; want a majority (%d): %+v", token, n, len(st), lt.majority(), st)
	}
	return nil
}

// nowhere reports whether no master holds token under key (any token when
// token is empty).
func (lt lockTarget) nowhere(key, token string) error {
	for i, s := range lt.state(key) {
		if s.err != nil {
			return fmt.Errorf("master %d: %w", i, s.err)
		}
		if s.value != "" && (token == "" || s.value == token) {
			return fmt.Errorf("master %d still holds %q under %q (PTTL %v)", i, s.value, key, s.pttl)
		}
	}
	return nil
}

// checkStep checks the masters against one trace step. The proxy answers
// once a majority did a command, so the others may lag: it retries for a
// while (settle) before it reports the last mismatch.
func (lt lockTarget) checkStep(st traceStep) error {
	var check func() error
	ttl := time.Duration(st.TTLms) * time.Millisecond
	switch st.Step {
	case "acquire", "extend", "reacquire":
		check = func() error { return lt.held(st.Key, st.Token, ttl) }
	case "refused":
		check = func() error {
			if err := lt.nowhere(st.Key, st.Token); err != nil {
				return fmt.Errorf("the refused token: %w", err)
			}
			return lt.held(st.Key, st.Holder, ttl)
		}
	case "not-owner", "handoff":
		check = func() error {
			if err := lt.nowhere(st.Key, st.Other); err != nil {
				return fmt.Errorf("the previous holder's token: %w", err)
			}
			return lt.held(st.Key, st.Token, ttl)
		}
	case "release", "expired":
		check = func() error { return lt.nowhere(st.Key, st.Token) }
	case "contention":
		check = func() error { return lt.nowhere(st.Key, "") }
	default:
		return fmt.Errorf("unknown trace step %q", st.Step)
	}
	if st.Key == "" {
		return fmt.Errorf("trace step %q names no key", st.Step)
	}
	deadline := time.Now().Add(lt.settle)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runRedisPy runs one scenario of the program against lt, checks each
// trace step on the masters before letting the program go on, and returns
// the steps seen and the trace; a failure of the program or of
// a check is reported through t.
func runRedisPy(t *testing.T, lt lockTarget, scenario string, extra ...string) (steps []string, out string) {
	t.Helper()
	script, _ := filepath.Abs(filepath.Join("python", "redispy_lock.py"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append([]string{script, "--addr", lt.addr, "--scenario", scenario, "--wait-ack", "--prefix", uniqueKey("redispy")}, extra...)
	cmd := exec.CommandContext(ctx, debianPython, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", debianPython, err)
	}
	var trace strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		trace.WriteString(line + "\n")
		var st traceStep
		if err := json.Unmarshal([]byte(line), &st); err != nil {
			t.Errorf("trace line %q: %v", line, err)
			continue
		}
		steps = append(steps, st.Step)
		switch st.Step {
		case "done":
		case "error":
			t.Errorf("redis-py %s: %s", scenario, st.Error)
		default:
			if err := lt.checkStep(st); err != nil {
				t.Errorf("%s, after %s: %v", scenario, st.Step, err)
			}
			if _, err := io.WriteString(stdin, "\n"); err != nil {
				t.Errorf("acknowledging %s: %v", st.Step, err)
			}
		}
	}
	stdin.Close()
	werr := cmd.Wait()
	out = trace.String()
	if werr != nil {
		t.Errorf("redispy_lock.py %s exited: %v\n%s", scenario, werr, stderr.String())
	}
	return steps, out
}

// testRedisPyLock runs every scenario against lt and checks each trace.
func testRedisPyLock(t *testing.T, lt lockTarget) {
	for _, sc := range redisPyScenarios {
		t.Run(sc.name, func(t *testing.T) {
			steps, out := runRedisPy(t, lt, sc.name)
			want := append(append([]string(nil), sc.steps...), "done")
			if strings.Join(steps, ",") != strings.Join(want, ",") {
				t.Errorf("trace steps %v; want %v\n%s", steps, want, out)
			}
		})
	}
}

// TestRedisPyLockAgainstLoneRedis runs redis-py's Lock against one
// redis-server: the reference every scenario must pass.
func TestRedisPyLockAgainstLoneRedis(t *testing.T) {
	t.Logf("redis-py %s", requireRedisPy(t))
	testRedisPyLock(t, loneTarget(t))
}

// TestRedisPyLockThroughProxy runs the same scenarios through the proxy
// over five masters, checking each step on every master.
func TestRedisPyLockThroughProxy(t *testing.T) {
	t.Logf("redis-py %s", requireRedisPy(t))
	testRedisPyLock(t, proxyTarget(t))
}

// TestRedisPyContentionControlLosesUpdates runs the contention scenario
// without the lock: the program must then report lost updates, which shows
// that its counter check can fail.
func TestRedisPyContentionControlLosesUpdates(t *testing.T) {
	requireRedisPy(t)
	lt := loneTarget(t)
	script, _ := filepath.Abs(filepath.Join("python", "redispy_lock.py"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, debianPython, script, "--addr", lt.addr, "--scenario", "contention", "--no-lock").CombinedOutput()
	if err == nil {
		t.Fatalf("contention without the lock passed: the check cannot see lost updates\n%s", out)
	}
	if !strings.Contains(string(out), `"step": "error"`) || !strings.Contains(string(out), "lost ") {
		t.Fatalf("contention without the lock failed for another reason: %v\n%s", err, out)
	}
}

// TestLockTraceCheckSeesWrongMasters feeds the master checks states that
// are wrong for the step: each must be reported.
func TestLockTraceCheckSeesWrongMasters(t *testing.T) {
	servers := startRedis(t, 5)
	var lt lockTarget
	for _, s := range servers {
		d := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, MaxRetries: -1})
		t.Cleanup(func() { d.Close() })
		lt.masters = append(lt.masters, d)
	}
	ctx := context.Background()
	key := uniqueKey("tracecheck")
	setOn := func(n int, value string, ttl time.Duration) {
		for i, m := range lt.masters {
			if i < n {
				m.Set(ctx, key, value, ttl)
			} else {
				m.Del(ctx, key)
			}
		}
	}
	for _, tc := range []struct {
		name  string
		setup func()
		step  traceStep
	}{
		{"minority holds it", func() { setOn(2, "tok", 10*time.Second) }, traceStep{Step: "acquire", Key: key, Token: "tok", TTLms: 10000}},
		{"TTL not extended", func() { setOn(5, "tok", 10*time.Second) }, traceStep{Step: "extend", Key: key, Token: "tok", TTLms: 15000}},
		{"TTL above the step's", func() { setOn(5, "tok", 30*time.Second) }, traceStep{Step: "reacquire", Key: key, Token: "tok", TTLms: 10000}},
		{"still held after release", func() { setOn(1, "tok", 10*time.Second) }, traceStep{Step: "release", Key: key, Token: "tok"}},
		{"refused token written", func() { setOn(5, "tok", 10*time.Second); lt.masters[4].Set(ctx, key, "other", 10*time.Second) },
			traceStep{Step: "refused", Key: key, Token: "other", Holder: "tok", TTLms: 10000}},
		{"old holder kept", func() { setOn(3, "old", 10*time.Second) }, traceStep{Step: "handoff", Key: key, Token: "new", Other: "old", TTLms: 10000}},
		{"key left after contention", func() { setOn(1, "x", 10*time.Second) }, traceStep{Step: "contention", Key: key}},
	} {
		tc.setup()
		if err := lt.checkStep(tc.step); err == nil {
			t.Errorf("%s: the check passed", tc.name)
		}
	}
	// And the right state passes.
	setOn(3, "tok", 10*time.Second)
	if err := lt.checkStep(traceStep{Step: "acquire", Key: key, Token: "tok", TTLms: 10000}); err != nil {
		t.Errorf("a majority holding the token: %v", err)
	}
}
