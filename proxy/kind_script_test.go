package proxy

import (
	"bufio"
	"bytes"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// modelBackends are in-process backends that run every script they are
// sent in the classifier's sandbox over a model keyspace each (a clock
// that stands still): the engine's quorum logic without a network. (The
// same paths run against real redis-server processes in integration/.)
type modelBackends struct {
	mu     sync.Mutex
	states []*sandbox.State
	down   map[int]bool
	sent   [][]string // per node: the SHA1s of the scripts run
	flags  [][]netio.SendFlags
}

func newModelBackends(n int) *modelBackends {
	m := &modelBackends{down: map[int]bool{}, sent: make([][]string, n), flags: make([][]netio.SendFlags, n)}
	for i := 0; i < n; i++ {
		m.states = append(m.states, &sandbox.State{Now: 1_700_000_000_000, Keys: map[string]sandbox.Item{}})
	}
	return m
}

func (m *modelBackends) N() int                     { return len(m.states) }
func (m *modelBackends) Veto() (netio.Health, bool) { return netio.Health{}, false }
func (m *modelBackends) Health() []netio.Health     { return make([]netio.Health, len(m.states)) }

// Undo runs the undo at once: the model's connections are never lost.
func (m *modelBackends) Undo(node int, u netio.UndoCmd, rcv netio.Receiver, tag int) {
	m.Send(node, u.Now, u.NowScript, rcv, tag, time.Time{}, 0)
}

func (m *modelBackends) Send(node int, cmd []byte, sc *resp.Script, rcv netio.Receiver, tag int, deadline time.Time, flags netio.SendFlags) {
	m.mu.Lock()
	if m.down[node] {
		m.mu.Unlock()
		rcv.Receive(tag, netio.Result{Err: errDownForTest})
		return
	}
	rd := resp.NewReader(bufio.NewReader(bytes.NewReader(cmd)), resp.ReaderLimits{})
	c, _ := rd.Read()
	var v resp.Value
	if sc == nil || len(c.Elems) < 3 {
		v = resp.ErrorValue("ERR the model runs scripts only")
	} else {
		nk, _ := resp.ParseInt(c.Elems[2].Str)
		var keys, argv []string
		for i, e := range c.Elems[3:] {
			if int64(i) < nk {
				keys = append(keys, string(e.Str))
			} else {
				argv = append(argv, string(e.Str))
			}
		}
		m.sent[node] = append(m.sent[node], sc.Sha)
		m.flags[node] = append(m.flags[node], flags)
		var st *sandbox.State
		var err error
		v, st, err = sandbox.Eval(sc.Body, keys, argv, m.states[node])
		if err != nil {
			v = resp.ErrorValue("ERR " + err.Error())
		} else {
			m.states[node] = st
		}
	}
	m.mu.Unlock()
	rcv.Receive(tag, netio.Result{V: v, Counts: true})
}

type testErr string

func (e testErr) Error() string { return string(e) }

const errDownForTest = testErr("backend down")

// set puts key=value with a PTTL (0: none) on the given nodes.
func (m *modelBackends) set(nodes []int, key, value string, pttl int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, n := range nodes {
		it := sandbox.Item{Value: value}
		if pttl > 0 {
			it.At = m.states[n].Now + pttl
		}
		m.states[n].Keys[key] = it
	}
}

// held lists the nodes where key holds value, and its PTTLs there.
func (m *modelBackends) held(key, value string) (nodes []int, pttls []int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for n, st := range m.states {
		if it, ok := st.Keys[key]; ok && it.Value == value {
			nodes = append(nodes, n)
			p := int64(-1)
			if it.At != 0 {
				p = it.At - st.Now
			}
			pttls = append(pttls, p)
		}
	}
	return nodes, pttls
}

// do sends one command through a client of s and returns the reply.
func do(t *testing.T, s *Server, args ...string) resp.Value {
	t.Helper()
	b := resp.AppendArrayHeader(nil, len(args))
	for _, a := range args {
		b = resp.AppendBulkString(b, a)
	}
	conn := &fakeConn{in: bytes.NewReader(b)}
	c := newClient(s, conn)
	c.serve()
	rd := resp.NewReader(bufio.NewReader(&conn.out), resp.ReaderLimits{})
	v, err := rd.Read()
	if err != nil {
		t.Fatalf("%q: no reply: %v", args, err)
	}
	return v
}

func evalArgs(text string, keys []string, argv ...string) []string {
	a := append([]string{"EVAL", text, itoa(int64(len(keys)))}, keys...)
	return append(a, argv...)
}

func modelServer(n int) (*Server, *modelBackends) {
	m := newModelBackends(n)
	return New(Config{Logger: discardLogger()}, m), m
}

const releaseText = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`

// A release succeeds when a majority deleted the token; the other owner's
// key is left alone; the reply is the script's for each case.
func TestScriptReleaseByMajority(t *testing.T) {
	s, m := modelServer(5)
	m.set([]int{0, 1, 2}, "k", "tok", 30000)
	m.set([]int{3}, "k", "other", 30000)
	if v := do(t, s, evalArgs(releaseText, []string{"k"}, "tok")...); v.String() != ":1" {
		t.Fatalf("release = %v; want :1", v)
	}
	if nodes, _ := m.held("k", "tok"); len(nodes) != 0 {
		t.Fatalf("token left on %v", nodes)
	}
	if nodes, _ := m.held("k", "other"); len(nodes) != 1 {
		t.Fatalf("another owner's key deleted")
	}
	// Held by the caller on two of five only: not released, reply 0.
	m.set([]int{0, 1}, "k2", "tok", 30000)
	if v := do(t, s, evalArgs(releaseText, []string{"k2"}, "tok")...); v.String() != ":0" {
		t.Fatalf("minority release = %v; want :0", v)
	}
	// A compact release of one key runs the one-key reference.
	release := (&spec.Class{Role: spec.RoleRelease, Layout: spec.Layout{Tokens: []int{0}}}).ReferenceFor(1, spec.CallArgs{}).Sha
	for n, sent := range m.sent {
		if len(sent) != 2 || sent[0] != release || sent[1] != release {
			t.Fatalf("node %d ran %q; want the one-key reference release (%s) twice", n, sent, release)
		}
	}
}

// A release that may re-arm a lock is sent as a grant is, checked and
// recording its TTL: a reentrant release that leaves holds re-arms the
// lock to its TTL (an argument or a constant). A compare-and-delete release, which cannot,
// is sent with neither (no continuity check follows it). A voted script,
// whose TTL is unknown, records max_ttl.
func TestChecksAndRecordsOfReleasesAndVotes(t *testing.T) {
	const voted = `redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) return redis.call("get", KEYS[1])`
	var leave, leaveFixed libscripts.Counted
	for _, sc := range libscripts.Reentrant() {
		switch sc.Name {
		case "leave once":
			leave = sc
		case "leave once, re-arming for a fixed 30 s":
			leaveFixed = sc
		}
	}
	for _, tc := range []struct {
		name string
		args []string
		want netio.SendFlags
	}{
		{"compare-and-delete", evalArgs(releaseText, []string{"k"}, "tok"), 0},
		{"reentrant, holds left", evalArgs(leave.Text, []string{"r"}, "30000", "6f1c2e7a-52b8-4a42:41"), netio.Checked | netio.Records(30*time.Second)},
		{"reentrant, a fixed TTL", evalArgs(leaveFixed.Text, []string{"r"}, "6f1c2e7a-52b8-4a42:41"), netio.Checked | netio.Records(30*time.Second)},
		{"voted", evalArgs(voted, []string{"v"}, "tok", "1000"), netio.Checked | netio.Records(7*time.Minute)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newModelBackends(3)
			s := New(Config{Logger: discardLogger(), VoteUnknownScripts: true, MaxTTL: 7 * time.Minute}, m)
			do(t, s, tc.args...)
			for n, fl := range m.flags {
				if len(fl) == 0 || fl[0] != tc.want {
					t.Fatalf("node %d was sent flags %#x; want %#x first", n, fl, tc.want)
				}
			}
		})
	}
}

// A failed acquire is undone where it was not refused (each key with its
// own token); the client gets the script's reply naming the first key
// taken on the majority.
func TestScriptAcquireFailureIsUndone(t *testing.T) {
	s, m := modelServer(5)
	m.set([]int{2, 3, 4}, "b", "someone", 30000)
	v := do(t, s, evalArgs(libscripts.BatchAcquire, []string{"a", "b", "c"}, "t1", "t2", "t3", "9000")...)
	if v.String() != `[:0 :2 "b"]` {
		t.Fatalf("batch acquire = %v; want [:0 :2 \"b\"]", v)
	}
	for _, k := range []string{"a", "c"} {
		if nodes, _ := m.held(k, "t"+map[string]string{"a": "1", "c": "3"}[k]); len(nodes) != 0 {
			t.Fatalf("%s still held on %v after the failed acquire", k, nodes)
		}
	}
	for n := 0; n < 2; n++ {
		if last := m.sent[n][len(m.sent[n])-1]; last != undoPerKeyScript.Sha {
			t.Fatalf("node %d: last script %s; want the per-key undo (%s)", n, last, undoPerKeyScript.Sha)
		}
	}
	for n := 2; n < 5; n++ {
		if len(m.sent[n]) != 1 {
			t.Fatalf("node %d refused yet got %q", n, m.sent[n])
		}
	}
	// Free on a majority: granted, every key with its own token.
	s2, m2 := modelServer(5)
	m2.set([]int{4}, "b", "someone", 30000)
	if v := do(t, s2, evalArgs(libscripts.BatchAcquire, []string{"a", "b"}, "t1", "t2", "9000")...); v.String() != "[:1 :2]" {
		t.Fatalf("batch acquire = %v; want [:1 :2]", v)
	}
	if nodes, pttls := m2.held("b", "t2"); len(nodes) != 4 || pttls[0] != 9000 {
		t.Fatalf("b held on %v with %v", nodes, pttls)
	}
}

// A failed extend is never undone: the caller's lock, still valid where it
// was, stays.
func TestScriptExtendFailureIsNotUndone(t *testing.T) {
	s, m := modelServer(5)
	extend := `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
	m.set([]int{0, 1}, "k", "tok", 20000)
	if v := do(t, s, evalArgs(extend, []string{"k"}, "tok", "40000")...); v.String() != ":0" {
		t.Fatalf("extend on a minority = %v; want :0", v)
	}
	nodes, pttls := m.held("k", "tok")
	if len(nodes) != 2 || pttls[0] != 40000 {
		t.Fatalf("after the failed extend the lock is on %v with %v; want left (extended) on 0 and 1", nodes, pttls)
	}
	for _, sent := range m.sent {
		if len(sent) != 1 {
			t.Fatalf("scripts sent %q; want the extend alone (no undo)", sent)
		}
	}
}

// A {status, ttl} extend replies the majority's remaining validity, and
// its other cases from the majority's state.
func TestScriptStatusTTLExtend(t *testing.T) {
	var atomic string
	for _, st := range libscripts.Styles() {
		if st.Name == "ATOMIC_EXTEND_SCRIPT" {
			atomic = st.Text
		}
	}
	s, m := modelServer(5)
	m.set([]int{0, 1, 2, 3}, "k", "tok", 20000)
	m.set([]int{4}, "k", "tok", 5000)
	v := do(t, s, evalArgs(atomic, []string{"k"}, "tok", "1500", "30000")...)
	if v.Kind != resp.KindArray || len(v.Elems) != 2 || v.Elems[0].Int != 1 || v.Elems[1].Int > 20000 || v.Elems[1].Int < 19000 {
		t.Fatalf("extend = %v; want [1, the majority's validity just under 20000]", v)
	}
	if nodes, pttls := m.held("k", "tok"); len(nodes) != 5 || pttls[0] != 30000 {
		t.Fatalf("after the extend: %v %v", nodes, pttls)
	}
	// Too little time left on a majority: not extended, [0, ttl].
	m.set([]int{0, 1, 2}, "k2", "tok", 1000)
	m.set([]int{3, 4}, "k2", "tok", 20000)
	v = do(t, s, evalArgs(atomic, []string{"k2"}, "tok", "1500", "30000")...)
	if v.Kind != resp.KindArray || v.Elems[0].Int != 0 || v.Elems[1].Int > 1000 {
		t.Fatalf("extend with too little left = %v; want [0, under 1000]", v)
	}
	// Held by another: [-1, ttl]; missing: [-1, -2].
	m.set([]int{0, 1, 2, 3, 4}, "k3", "other", 20000)
	if v := do(t, s, evalArgs(atomic, []string{"k3"}, "tok", "1500", "30000")...); v.Elems[0].Int != -1 || v.Elems[1].Int < 19000 {
		t.Fatalf("extend of another's lock = %v", v)
	}
	if v := do(t, s, evalArgs(atomic, []string{"k4"}, "tok", "1500", "30000")...); v.String() != "[:-1 :-2]" {
		t.Fatalf("extend of a missing lock = %v", v)
	}
}

// A TTL query answers the majority-th largest TTL among the backends
// holding the caller's token, less drift; not held on a majority, its
// "not held" reply.
func TestScriptTTLQuery(t *testing.T) {
	s, m := modelServer(5)
	query := `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pttl", KEYS[1]) else return -3 end`
	m.set([]int{0}, "k", "tok", 30000)
	m.set([]int{1}, "k", "tok", 28000)
	m.set([]int{2}, "k", "tok", 25000)
	v := do(t, s, evalArgs(query, []string{"k"}, "tok")...)
	if v.Kind != resp.KindInt || v.Int > 25000 || v.Int < 24000 {
		t.Fatalf("ttl = %v; want the third largest, 25000 less drift", v)
	}
	if v := do(t, s, evalArgs(query, []string{"k"}, "other")...); v.String() != ":-3" {
		t.Fatalf("ttl of another's lock = %v; want -3", v)
	}
}

// SCRIPT EXPLAIN shows a classification or a refusal; a refused script's
// error names its reason and how to see more.
func TestScriptExplain(t *testing.T) {
	s, _ := modelServer(3)
	v := do(t, s, "SCRIPT", "EXPLAIN", releaseText, "1", "k", "tok")
	text := v.String()
	for _, want := range []string{"role: release", "token ARGV[1]", "when held by another owner: refused, replies 0"} {
		if !strings.Contains(text, want) {
			t.Errorf("EXPLAIN lacks %q: %s", want, text)
		}
	}
	sha := sandbox.Sha1([]byte(releaseText))
	if v := do(t, s, "SCRIPT", "EXPLAIN", sha); !strings.Contains(v.String(), "role: release") {
		t.Errorf("EXPLAIN by sha1 after a classification = %v", v)
	}
	bad := `if redis.call("get", KEYS[1]) then return redis.call("del", KEYS[1]) end return 0`
	v = do(t, s, evalArgs(bad, []string{"k"}, "tok")...)
	if v.Kind != resp.KindError || !strings.Contains(v.String(), "deleted KEYS[1]") || !strings.Contains(v.String(), "SCRIPT EXPLAIN") {
		t.Errorf("refused script's error = %v", v)
	}
	if v := do(t, s, "SCRIPT", "EXPLAIN", bad, "1", "k", "tok"); !strings.Contains(v.String(), "refused: with KEYS[1] holding another value") {
		t.Errorf("EXPLAIN of a refused script = %v", v)
	}
	if v := do(t, s, "SCRIPT", "EXPLAIN", strings.Repeat("ab", 20)); !strings.Contains(v.String(), "not known here") {
		t.Errorf("EXPLAIN of an unseen sha1 = %v", v)
	}
}

// A refusal is logged once per script; under unknown_scripts: vote a
// script the sandbox sees writing without an expiry is still refused,
// and never reaches a backend.
func TestRefusalLoggedOnceAndVoteRefusesNoTTL(t *testing.T) {
	var logs bytes.Buffer
	m := newModelBackends(3)
	s := New(Config{Logger: slogTo(&logs), VoteUnknownScripts: true}, m)
	noTTL := `return redis.call("set", KEYS[1], ARGV[1])`
	for i := 0; i < 3; i++ {
		v := do(t, s, evalArgs(noTTL, []string{"k"}, "v")...)
		if v.Kind != resp.KindError || !strings.Contains(v.String(), "without an expiry") {
			t.Fatalf("vote mode, a write without expiry: %v", v)
		}
	}
	if n := strings.Count(logs.String(), "script refused"); n != 1 {
		t.Fatalf("refusal logged %d times:\n%s", n, logs.String())
	}
	for n, sent := range m.sent {
		if len(sent) != 0 {
			t.Fatalf("node %d was sent %q", n, sent)
		}
	}
}

func slogTo(w *bytes.Buffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }

// A failed extend-or-acquire is undone only where it took a free key:
// where it extended the caller's own lock, the lock stays.
func TestScriptExtendOrAcquireFailureUndoesOnlyWhatItTook(t *testing.T) {
	s, m := modelServer(5)
	eoa := `local v = redis.call("get", KEYS[1])
if v == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end
if v == false then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) and 1 or 0 end
return 0`
	m.set([]int{0}, "k", "tok", 5000)
	m.set([]int{2, 3, 4}, "k", "other", 5000)
	if v := do(t, s, evalArgs(eoa, []string{"k"}, "tok", "20000")...); v.String() != ":0" {
		t.Fatalf("extend-or-acquire refused by a majority = %v; want :0", v)
	}
	if nodes, pttls := m.held("k", "tok"); len(nodes) != 1 || nodes[0] != 0 || pttls[0] != 20000 {
		t.Fatalf("the caller's token is on %v (%v); want on node 0 only, extended (node 1's acquisition undone)", nodes, pttls)
	}
	if nodes, _ := m.held("k", "other"); len(nodes) != 3 {
		t.Fatalf("the other owner's lock is on %v", nodes)
	}
}

// rueidislockScript reads one of rueidislock's scripts from the module
// cache.
func rueidislockScript(t *testing.T, name string) string {
	t.Helper()
	text, err := libscripts.GoText(".", "github.com/redis/rueidis", "rueidislock/lock.go", name)
	if err != nil {
		t.Fatal(err)
	}
	return text
}

func msFromNow(d time.Duration) string { return itoa(time.Now().Add(d).UnixMilli()) }

// A deadline in a script (PXAT, PEXPIREAT) is judged against real time: the
// lock gets the time left until it; a deadline beyond max_ttl is refused
// with the time actually left; one already passed writes nothing, and an
// acquire answers as one Redis (OK where free, nil where held), an extend
// as failed, leaving the lock as it was.
func TestScriptDeadlines(t *testing.T) {
	acq, ext := rueidislockScript(t, "acqat"), rueidislockScript(t, "extend")
	s, m := modelServer(5)
	if v := do(t, s, evalArgs(acq, []string{"k"}, "tok", msFromNow(5*time.Second))...); v.String() != "+OK" {
		t.Fatalf("acquire until 5 s from now = %v; want +OK", v)
	}
	nodes, pttls := m.held("k", "tok")
	if len(nodes) != 5 || pttls[0] > 5000 || pttls[0] < 4000 {
		t.Fatalf("held on %v with PTTLs %v; want every master, just under 5000 ms", nodes, pttls)
	}
	if v := do(t, s, evalArgs(ext, []string{"k"}, "tok", msFromNow(20*time.Second))...); v.String() != ":1" {
		t.Fatalf("extend to 20 s from now = %v; want :1", v)
	}
	if _, pttls := m.held("k", "tok"); pttls[0] > 20000 || pttls[0] < 19000 {
		t.Fatalf("after the extend PTTL %v; want just under 20000", pttls)
	}
	v := do(t, s, evalArgs(acq, []string{"far"}, "tok", msFromNow(6*time.Minute))...)
	if v.Kind != resp.KindError || !strings.Contains(v.String(), "exceeds max_ttl (300000 ms)") || !strings.Contains(v.String(), "TTL of 3") {
		t.Fatalf("acquire 6 min ahead = %v; want the max_ttl refusal with about 360000 ms left", v)
	}
	if nodes, _ := m.held("far", "tok"); len(nodes) != 0 {
		t.Fatalf("refused acquire written on %v", nodes)
	}
	// Passed: free, then held.
	if v := do(t, s, evalArgs(acq, []string{"past"}, "tok", msFromNow(-time.Second))...); v.String() != "+OK" {
		t.Fatalf("acquire of a free key until a second ago = %v; want +OK, as one Redis", v)
	}
	if nodes, _ := m.held("past", "tok"); len(nodes) != 0 {
		t.Fatalf("a deadline in the past was written on %v", nodes)
	}
	if v := do(t, s, evalArgs(acq, []string{"k"}, "tok2", msFromNow(-time.Second))...); v.String() != "(nil)" {
		t.Fatalf("acquire of a held key until a second ago = %v; want nil", v)
	}
	if v := do(t, s, evalArgs(ext, []string{"k"}, "tok", msFromNow(-time.Second))...); v.String() != ":0" {
		t.Fatalf("extend to a second ago = %v; want :0 (failed, the lock kept)", v)
	}
	if nodes, pttls := m.held("k", "tok"); len(nodes) != 5 || pttls[0] < 19000 {
		t.Fatalf("after the extend to a past time the lock is on %v with %v; want it as it was", nodes, pttls)
	}
	clients := map[string]bool{resp.NewScript([]byte(acq)).Sha: true, resp.NewScript([]byte(ext)).Sha: true}
	for n, sent := range m.sent {
		for _, sha := range sent {
			if clients[sha] {
				t.Fatalf("node %d ran %s: the client's text reached a backend", n, sha)
			}
		}
	}
}

// A script first seen with a deadline already passed is read as it is
// with one ahead: rueidislock's extend stays an extend (with the deadline
// passed it deletes the lock on one Redis, which would read as a release
// and delete the lock of any later call), so that call leaves the lock as
// it was, and a later one extends it.
func TestScriptFirstSeenWithAPassedDeadline(t *testing.T) {
	ext := rueidislockScript(t, "extend")
	s, m := modelServer(5)
	m.set([]int{0, 1, 2, 3, 4}, "k", "tok", 10000)
	if v := do(t, s, evalArgs(ext, []string{"k"}, "tok", msFromNow(-time.Second))...); v.String() != ":0" {
		t.Fatalf("extend to a second ago, first seen = %v; want :0", v)
	}
	if nodes, pttls := m.held("k", "tok"); len(nodes) != 5 || pttls[0] != 10000 {
		t.Fatalf("after it the lock is on %v with %v; want as it was", nodes, pttls)
	}
	if v := do(t, s, evalArgs(ext, []string{"k"}, "tok", msFromNow(20*time.Second))...); v.String() != ":1" {
		t.Fatalf("extend to 20 s from now = %v; want :1", v)
	}
	if nodes, pttls := m.held("k", "tok"); len(nodes) != 5 || pttls[0] < 19000 {
		t.Fatalf("after the extend the lock is on %v with %v; want extended", nodes, pttls)
	}
	if v := do(t, s, "SCRIPT", "EXPLAIN", sandbox.Sha1([]byte(ext))); !strings.Contains(v.String(), "role: extend") || strings.Contains(v.String(), "role: release") {
		t.Fatalf("EXPLAIN = %v; want the extend alone", v)
	}
}

// A lock script given a TTL of 0 is refused as SET without an expiry is,
// and nothing reaches a backend: after a classification of the same shape
// (the call then stands in other relations), as the first call of its
// script, and for a declared classification.
func TestScriptZeroTTLIsRefusedAsSetWithoutExpiry(t *testing.T) {
	conditional := `if redis.call("set", KEYS[1], ARGV[1], "NX") then
if tonumber(ARGV[2]) > 0 then redis.call("pexpire", KEYS[1], ARGV[2]) end
return 1 end return 0`
	setPX := `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`
	declared := `return redis.call("set", KEYS[1], ARGV[2], "NX", "PX", ARGV[1])`
	want := msgScriptNeedsExpiry("ARGV[2]")
	if !strings.HasSuffix(want, strings.SplitN(msgSetNeedsExpiry, ": ", 3)[2]) {
		t.Fatalf("%q does not end as SET's refusal %q", want, msgSetNeedsExpiry)
	}
	for _, c := range []struct {
		name, text string
		warm       bool
		argv       []string
		want       string
	}{
		{"conditional expiry, after a classified call", conditional, true, []string{"tok", "0"}, want},
		{"conditional expiry, first call", conditional, false, []string{"tok", "0"}, want},
		{"SET PX, after a classified call", setPX, true, []string{"tok", "0"}, want},
		{"SET PX, first call", setPX, false, []string{"tok", "0"}, want},
		{"declared", declared, false, []string{"0", "tok"}, msgScriptNeedsExpiry("ARGV[1]")},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := newModelBackends(5)
			reg := classify.NewRegistry()
			cl, err := spec.Parse("acquire keys=1 args=2 token=2 ttl=1ms; missing: 1; own: 0; own-no-ttl: 0; other: 0; other-no-ttl: 0")
			if err != nil {
				t.Fatal(err)
			}
			reg.Declare(sandbox.Sha1([]byte(declared)), cl)
			s := New(Config{Logger: discardLogger(), Scripts: reg}, m)
			if c.warm {
				if v := do(t, s, evalArgs(c.text, []string{"k0"}, "tok", "30000")...); v.Kind == resp.KindError {
					t.Fatalf("a call with a TTL: %v", v)
				}
			}
			sent := len(m.sent[0])
			if v := do(t, s, evalArgs(c.text, []string{"k1"}, c.argv...)...); v.String() != "-"+c.want {
				t.Fatalf("TTL 0: %v; want %q", v, c.want)
			}
			if len(m.sent[0]) != sent {
				t.Fatalf("a backend was sent %q", m.sent[0][sent:])
			}
		})
	}
}
