package integration

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// Lock programs in other runtimes (integration/python, integration/php)
// run a library unchanged against one address and print a trace: one JSON
// line after each step that changes what the server holds, then wait for a
// line on stdin. The runner here checks every master against each step
// while the lock is in that state, so the same program is checked against
// a lone Redis (one master) and through the proxy (five).

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

// proxyTarget is a proxy over five fresh masters, with max_ttl at five
// minutes: the libraries' long locks (a scheduler's, Symfony Lock's
// default 300 s) are within it.
func proxyTarget(t *testing.T) lockTarget {
	c := newCluster(t, 5, longMaxTTL)
	return lockTarget{addr: c.app.Addr(), masters: c.direct, settle: 2 * time.Second}
}

// longMaxTTL sets max_ttl to five minutes.
func longMaxTTL(c *config.Config) { c.MaxTTL = 5 * time.Minute }

// Scenarios every lock program with no-expiry calls runs: a lone Redis
// grants a lock that never expires; the proxy refuses it and writes
// nothing.
var (
	noExpiryLone  = traceScenario{"no-expiry", []string{"no-expiry", "release"}}
	noExpiryProxy = traceScenario{"no-expiry", []string{"refused-no-expiry", "release"}}
)

// traceStep is one line of the program's trace.
type traceStep struct {
	Step   string `json:"step"`
	Key    string `json:"key"`
	Token  string `json:"token"`
	Holder string `json:"holder"` // refused: the token that keeps the lock
	Other  string `json:"other"`  // not-owner, handoff: a token that must be nowhere
	TTLms  int64  `json:"ttl_ms"` // the TTL the lock was given...
	AgeMs  int64  `json:"age_ms"` // ...this long before the step, when the step did not set it
	Error  string `json:"error"`
	// Hex: Token, Holder and Other are hex-encoded (binary tokens).
	Hex bool `json:"hex"`
	// Shape "owners": the lock is a sorted set of owners scored with their
	// deadlines (Symfony's RedisStore), held in Mode "write" (exclusive,
	// with the "__write__" member) or "read" (shared).
	Shape string `json:"shape"`
	Mode  string `json:"mode"`
}

// ownersMarker is the member that marks a sorted set of owners exclusive.
const ownersMarker = "__write__"

// owner is what one master holds of one owner of a sorted-set lock.
type owner struct {
	left   time.Duration // the owner's deadline less the master's now; <= 0: not an owner
	marked bool          // the marker is live with the owner's deadline
	others int           // live owners besides it, the marker aside
	err    error
}

func (lt lockTarget) owners(key, token string) []owner {
	out := make([]owner, len(lt.masters))
	for i, m := range lt.masters {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		t, err := m.Time(ctx).Result()
		var members []redis.Z
		if err == nil {
			members, err = m.ZRangeWithScores(ctx, key, 0, -1).Result()
		}
		cancel()
		if err != nil && !strings.Contains(err.Error(), "WRONGTYPE") {
			out[i].err = err
			continue
		}
		now := float64(t.UnixMilli())
		var mine, mark float64
		for _, z := range members {
			switch {
			case z.Score <= now:
			case z.Member == token:
				mine = z.Score
			case z.Member == ownersMarker:
				mark = z.Score
			default:
				out[i].others++
			}
		}
		if mine > 0 {
			out[i].left = time.Duration(mine-now) * time.Millisecond
			out[i].marked = mark == mine
		}
	}
	return out
}

// ownersHeld reports whether a majority of masters hold token as an owner
// in mode, with a deadline in (ttl - age - ttlSlack, ttl] from now; a
// writer alone with the marker, a reader without it.
func (lt lockTarget) ownersHeld(key, token, mode string, ttl, age time.Duration) error {
	n := 0
	var bad []string
	for i, o := range lt.owners(key, token) {
		if o.err != nil {
			return fmt.Errorf("master %d: %w", i, o.err)
		}
		if o.left <= 0 {
			continue
		}
		if lo := ttl - age - ttlSlack; o.left > ttl+50*time.Millisecond || o.left <= lo {
			return fmt.Errorf("master %d holds %q with %v left; want (%v, %v]", i, token, o.left, lo, ttl)
		}
		switch {
		case mode == "write" && (!o.marked || o.others > 0):
			bad = append(bad, fmt.Sprintf("master %d: %q is no lone writer (marker %v, %d other owners)", i, token, o.marked, o.others))
			continue
		case mode == "read" && o.marked:
			bad = append(bad, fmt.Sprintf("master %d: %q holds it exclusively, not shared", i, token))
			continue
		}
		n++
	}
	if n < lt.majority() {
		return fmt.Errorf("%q owns %q (%s) on %d of %d masters; want a majority (%d) %v", token, key, mode, n, len(lt.masters), lt.majority(), bad)
	}
	return nil
}

// ownersNowhere reports whether token owns key on no master.
func (lt lockTarget) ownersNowhere(key, token string) error {
	for i, o := range lt.owners(key, token) {
		if o.err != nil {
			return fmt.Errorf("master %d: %w", i, o.err)
		}
		if o.left > 0 {
			return fmt.Errorf("master %d still has %q as an owner of %q (%v left)", i, token, key, o.left)
		}
	}
	return nil
}

// ownersCheck is the check of a step on a sorted-set lock.
func (lt lockTarget) ownersCheck(st traceStep) func() error {
	ttl := time.Duration(st.TTLms) * time.Millisecond
	age := time.Duration(st.AgeMs) * time.Millisecond
	switch st.Step {
	case "acquire", "extend", "read":
		mode := st.Mode
		if st.Step == "read" {
			mode = "read"
		}
		return func() error { return lt.ownersHeld(st.Key, st.Token, mode, ttl, age) }
	case "refused":
		return func() error {
			if err := lt.ownersNowhere(st.Key, st.Token); err != nil {
				return fmt.Errorf("the refused token: %w", err)
			}
			return lt.ownersHeld(st.Key, st.Holder, st.Mode, ttl, age)
		}
	case "not-owner", "handoff":
		return func() error {
			if err := lt.ownersNowhere(st.Key, st.Other); err != nil {
				return fmt.Errorf("the previous holder's token: %w", err)
			}
			return lt.ownersHeld(st.Key, st.Token, st.Mode, ttl, age)
		}
	case "release", "expired":
		return func() error { return lt.ownersNowhere(st.Key, st.Token) }
	}
	return nil
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
		if errors.Is(err, redis.Nil) {
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
// (ttl - age - ttlSlack, ttl] on every master that holds it.
func (lt lockTarget) held(key, token string, ttl, age time.Duration) error {
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
		if lo := ttl - age - ttlSlack; s.pttl > ttl || s.pttl <= lo {
			return fmt.Errorf("master %d holds %q with PTTL %v; want (%v, %v]", i, token, s.pttl, lo, ttl)
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

// nowhereBut is nowhere(key, token), or, when token is empty, reports
// whether no master holds any token under key but holder.
func (lt lockTarget) nowhereBut(key, token, holder string) error {
	if token != "" {
		return lt.nowhere(key, token)
	}
	for i, s := range lt.state(key) {
		if s.err != nil {
			return fmt.Errorf("master %d: %w", i, s.err)
		}
		if s.value != "" && s.value != holder {
			return fmt.Errorf("master %d holds %q under %q (PTTL %v); only the holder's %q may be there", i, s.value, key, s.pttl, holder)
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
	age := time.Duration(st.AgeMs) * time.Millisecond
	if st.Shape == "owners" {
		if check = lt.ownersCheck(st); check == nil {
			return fmt.Errorf("unknown trace step %q of a sorted-set lock", st.Step)
		}
	}
	switch {
	case check != nil:
	default:
		check = lt.stringCheck(st, ttl, age)
		if check == nil {
			return fmt.Errorf("unknown trace step %q", st.Step)
		}
	}
	if st.Key == "" {
		return fmt.Errorf("trace step %q names no key", st.Step)
	}
	return lt.eventually(check)
}

// eventually retries check until it passes or settle has passed.
func (lt lockTarget) eventually(check func() error) error {
	deadline := time.Now().Add(lt.settle)
	for {
		err := check()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// mastersOnly is a target of n fresh redis-server processes with no
// address to lock on: for tests of the checks themselves.
func mastersOnly(t *testing.T, n int) lockTarget {
	var lt lockTarget
	for _, s := range startRedis(t, n) {
		d := redis.NewClient(&redis.Options{Addr: s.Addr, Protocol: 2, MaxRetries: -1})
		t.Cleanup(func() { d.Close() })
		lt.masters = append(lt.masters, d)
	}
	return lt
}

// stringCheck is the check of a step on a string lock.
func (lt lockTarget) stringCheck(st traceStep, ttl, age time.Duration) (check func() error) {
	switch st.Step {
	case "acquire", "extend", "reacquire":
		check = func() error { return lt.held(st.Key, st.Token, ttl, age) }
	case "refused":
		check = func() error {
			// A library that keeps no handle on a refused attempt's token
			// gives none: then no master may hold any token but the holder's.
			if err := lt.nowhereBut(st.Key, st.Token, st.Holder); err != nil {
				return fmt.Errorf("the refused token: %w", err)
			}
			return lt.held(st.Key, st.Holder, ttl, age)
		}
	case "not-owner", "handoff":
		check = func() error {
			if err := lt.nowhere(st.Key, st.Other); err != nil {
				return fmt.Errorf("the previous holder's token: %w", err)
			}
			return lt.held(st.Key, st.Token, ttl, age)
		}
	case "release", "expired":
		check = func() error { return lt.nowhere(st.Key, st.Token) }
	case "contention":
		check = func() error { return lt.nowhere(st.Key, "") }
	case "no-expiry":
		// A lone Redis granted a lock that never expires.
		check = func() error { return lt.heldForever(st.Key, st.Token) }
	case "refused-no-expiry":
		// The proxy refused it: nothing was written anywhere.
		check = func() error {
			if !strings.Contains(st.Error, "expir") {
				return fmt.Errorf("the refusal %q does not say the lock needs an expiry", st.Error)
			}
			return lt.nowhere(st.Key, "")
		}
	}
	return check
}

// heldForever reports whether every master holds token under key with no
// TTL (a lock that never expires, as one Redis grants it).
func (lt lockTarget) heldForever(key, token string) error {
	for i, s := range lt.state(key) {
		switch {
		case s.err != nil:
			return fmt.Errorf("master %d: %w", i, s.err)
		case s.value != token || s.pttl != -1:
			return fmt.Errorf("master %d holds %q with PTTL %v; want %q with no TTL", i, s.value, s.pttl, token)
		}
	}
	return nil
}

// parseTraceStep decodes one trace line, and its hex-encoded tokens.
func parseTraceStep(line string) (traceStep, error) {
	var st traceStep
	if err := json.Unmarshal([]byte(line), &st); err != nil {
		return st, err
	}
	if st.Hex {
		for _, f := range []*string{&st.Token, &st.Holder, &st.Other} {
			b, err := hex.DecodeString(*f)
			if err != nil {
				return st, fmt.Errorf("hex token %q: %w", *f, err)
			}
			*f = string(b)
		}
	}
	return st, nil
}

// traceScenario is a scenario of a lock program and the trace it must
// print, in order (before its final "done").
type traceScenario struct {
	name  string
	steps []string
}

// runTraceProgram runs a lock program (argv, to which --addr, --scenario,
// --wait-ack and --prefix are added) for one scenario against lt, checks
// each trace step on the masters before letting the program go on, and
// returns the steps seen and the trace; a failure of the program or of a
// check is reported through t.
func runTraceProgram(t *testing.T, lt lockTarget, scenario string, argv ...string) (steps []string, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	args := append(append([]string(nil), argv[1:]...), "--addr", lt.addr, "--scenario", scenario, "--wait-ack", "--prefix", uniqueKey("lib"))
	cmd := exec.CommandContext(ctx, argv[0], args...)
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
		t.Fatalf("starting %s: %v", argv[0], err)
	}
	var trace strings.Builder
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		line := sc.Text()
		trace.WriteString(line + "\n")
		st, err := parseTraceStep(line)
		if err != nil {
			t.Errorf("trace line %q: %v", line, err)
			continue
		}
		steps = append(steps, st.Step)
		switch st.Step {
		case "done":
		case "error":
			t.Errorf("%s: %s", scenario, st.Error)
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
	if err := cmd.Wait(); err != nil {
		t.Errorf("%s %s exited: %v\n%s", filepath.Base(argv[len(argv)-1]), scenario, err, stderr.String())
	}
	return steps, trace.String()
}

// testTraceScenarios runs every scenario of a lock program against lt and
// checks that each printed its whole trace.
func testTraceScenarios(t *testing.T, lt lockTarget, scenarios []traceScenario, argv ...string) {
	for _, sc := range scenarios {
		t.Run(sc.name, func(t *testing.T) {
			steps, out := runTraceProgram(t, lt, sc.name, argv...)
			want := append(append([]string(nil), sc.steps...), "done")
			if strings.Join(steps, ",") != strings.Join(want, ",") {
				t.Errorf("trace steps %v; want %v\n%s", steps, want, out)
			}
		})
	}
}

// TestLockTraceCheckSeesWrongMasters feeds the master checks states that
// are wrong for the step: each must be reported.
func TestLockTraceCheckSeesWrongMasters(t *testing.T) {
	lt := mastersOnly(t, 5)
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
		{"refused attempt's unknown token written", func() { setOn(5, "tok", 10*time.Second); lt.masters[4].Set(ctx, key, "theirs", 10*time.Second) },
			traceStep{Step: "refused", Key: key, Holder: "tok", TTLms: 10000}},
		{"old holder kept", func() { setOn(3, "old", 10*time.Second) }, traceStep{Step: "handoff", Key: key, Token: "new", Other: "old", TTLms: 10000}},
		{"key left after contention", func() { setOn(1, "x", 10*time.Second) }, traceStep{Step: "contention", Key: key}},
		{"no-expiry lock with a TTL", func() { setOn(5, "tok", 10*time.Second) }, traceStep{Step: "no-expiry", Key: key, Token: "tok"}},
		{"no-expiry lock on a minority", func() { setOn(2, "tok", 0) }, traceStep{Step: "no-expiry", Key: key, Token: "tok"}},
		{"refused lock written", func() { setOn(1, "tok", 0) }, traceStep{Step: "refused-no-expiry", Key: key, Error: "ERR needs an expiry"}},
		{"refusal that does not say why", func() { setOn(0, "", 0) }, traceStep{Step: "refused-no-expiry", Key: key, Error: "ERR syntax error"}},
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

// testContentionControl runs a lock program's contention scenario without
// the lock against one lone Redis: the program must then report lost
// updates (errStep is how its trace spells an error step), which shows that
// its counter check can fail.
func testContentionControl(t *testing.T, errStep string, argv ...string) {
	t.Helper()
	lt := loneTarget(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append(argv[1:len(argv):len(argv)], "--addr", lt.addr, "--scenario", "contention", "--no-lock")
	out, err := exec.CommandContext(ctx, argv[0], args...).CombinedOutput()
	if err == nil {
		t.Fatalf("contention without the lock passed: the check cannot see lost updates\n%s", out)
	}
	if !strings.Contains(string(out), errStep) || !strings.Contains(string(out), "lost ") {
		t.Fatalf("contention without the lock failed for another reason: %v\n%s", err, out)
	}
}
