package classify

import (
	"bufio"
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/respconn"
)

// The oracle: a real redis-server. A classified script and its role's
// reference script are run on the same states of a real Redis, and must
// leave the same keys and give the reply the classification promises.

// redisConn is a connection to the test's own redis-server, with the
// probe states' helpers.
type redisConn struct{ *respconn.Conn }

func startRedis(t *testing.T) *redisConn { return &redisConn{respconn.Start(t)} }

// setState puts a probe state on Redis (an expired key is left out).
func (r *redisConn) setState(keys []string, specs []keySpec) {
	r.Do("FLUSHALL")
	for k, s := range specs {
		switch {
		case !s.held || s.ttl < 0:
		case s.ttl == 0:
			r.Do("SET", keys[k], s.value)
		default:
			r.Do("SET", keys[k], s.value, "PX", strconv.FormatInt(s.ttl, 10))
		}
	}
}

// keyState is a key on Redis: value and PTTL.
type keyState struct {
	exists bool
	value  string
	pttl   int64
}

func (r *redisConn) state(keys []string) []keyState {
	out := make([]keyState, len(keys))
	for i, k := range keys {
		v := r.Do("GET", k)
		out[i] = keyState{exists: v.Kind == resp.KindBulk, value: string(v.Str), pttl: r.Do("PTTL", k).Int}
	}
	return out
}

// slack is how far two PTTLs read moments apart may differ beyond the
// time the two runs took.
const slack = 20

func sameState(a, b []keyState, tolerance int64) bool {
	for i := range a {
		if a[i].exists != b[i].exists || a[i].value != b[i].value {
			return false
		}
		if (a[i].pttl < 0 || b[i].pttl < 0) && a[i].pttl != b[i].pttl {
			return false
		}
		if d := a[i].pttl - b[i].pttl; d > tolerance || d < -tolerance {
			return false
		}
	}
	return true
}

// approxReply compares a reply with the one a template promised, letting
// TTL holes differ by the time between the two runs.
func approxReply(t *spec.Template, want, got resp.Value, tolerance int64) bool {
	if t.Kind == resp.KindArray {
		if got.Kind != resp.KindArray || len(got.Elems) != len(t.Elems) || len(want.Elems) != len(t.Elems) {
			return false
		}
		for i, e := range t.Elems {
			if !approxReply(e, want.Elems[i], got.Elems[i], tolerance) {
				return false
			}
		}
		return true
	}
	if want.Kind == resp.KindInt && got.Kind == resp.KindInt {
		d := want.Int - got.Int
		switch t.Src {
		case spec.SrcPTTL, spec.SrcPTTLAfter:
			return d <= tolerance && d >= -tolerance
		case spec.SrcTTL, spec.SrcTTLAfter:
			return d <= 1 && d >= -1
		}
	}
	return want.Equal(got)
}

// reference runs a call of cl on Redis as the proxy does on each master:
// the role's reference script with the keys' companions and, for an extend
// that sets a TTL and acted, its second step. It returns the reference's
// reply.
func (r *redisConn) reference(cl *spec.Class, keys, argv []string, ca spec.CallArgs) resp.Value {
	eval := func(b []byte) resp.Value {
		k, a := spec.DecodeCall(b)
		return r.Do(append(append([]string{"EVAL", string(cl.ReferenceFor(len(keys), ca).Body), strconv.Itoa(len(k))}, k...), a...)...)
	}
	ca.Companion = "redlock-proxy:fence:"
	if cl.SetsTTL() && !ca.ReadOnly {
		ca.Nonce = "oracle"
	}
	v := eval(cl.AppendReference(nil, spec.StrArgs(keys), spec.StrArgs(argv), ca))
	acted := (v.Kind == resp.KindInt && v.Int&1 == 1) || (v.Kind == resp.KindArray && len(v.Elems) > 0 && v.Elems[0].Int == 1)
	if ca.Nonce != "" && acted {
		k, a := spec.DecodeCall(cl.AppendSecondStep(nil, spec.StrArgs(keys), spec.StrArgs(argv), ca))
		r.Do(append(append([]string{"EVAL", string(spec.RefSecondStep.Body), strconv.Itoa(len(k))}, k...), a...)...)
	}
	return v
}

// situationOnOne reads a detailed reference reply from one Redis.
func situationOnOne(cl *spec.Class, keys, argv []string, v resp.Value) (*spec.Situation, bool, error) {
	n := len(keys)
	if v.Kind != resp.KindArray || len(v.Elems) != 1+4*n {
		return nil, false, fmt.Errorf("reference reply %v", v)
	}
	cases := make([]spec.Case, n)
	count := 0
	for k := range cases {
		cases[k] = spec.Case(v.Elems[1+4*k].Int)
		if cases[k] == spec.CaseOwn || cases[k] == spec.CaseOwnNoTTL || cases[k] == spec.CaseOwnLowTTL {
			count++
		}
	}
	cs, focus := cl.Combine(cases)
	e := v.Elems[1+4*focus:]
	return &spec.Situation{Case: cs, Focus: focus, PTTL: e[1].Int, PTTLAfter: e[3].Int, Value: e[2].Str, HasValue: e[2].Kind == resp.KindBulk,
		Count: count, NKeys: n, Keys: spec.StrArgs(keys), Argv: spec.StrArgs(argv)}, v.Elems[0].Int == 1, nil
}

// oracle runs text (classified as cl) and cl's reference on a state of
// Redis; it returns a description of any difference.
func (r *redisConn) oracle(text string, cl *spec.Class, keys, argv []string, specs []keySpec) string {
	eval := func(body string, keys, args []string) resp.Value {
		a := append([]string{"EVAL", body, strconv.Itoa(len(keys))}, keys...)
		return r.Do(append(a, args...)...)
	}
	t0 := time.Now()
	r.setState(keys, specs)
	// The client's script gets its arguments back where it takes them.
	got := eval(text, append(slices.Clone(keys), argv[:cl.KeyArgs]...), argv[cl.KeyArgs:])
	after1 := r.state(keys)
	run1 := time.Since(t0)

	t0 = time.Now()
	r.setState(keys, specs)
	ttl, _ := cl.TTLAt(spec.StrArgs(argv), time.Now().UnixMilli())
	ca := spec.CallArgs{TTLms: ttl.Milliseconds(), LowMs: cl.ThresholdOf(argv), CapMs: 1 << 40, Detailed: true}
	ref := r.reference(cl, keys, argv, ca)
	after2 := r.state(keys)
	// PTTLs of the two runs may differ by how long the runs took.
	tolerance := slack + (run1 + time.Since(t0)).Milliseconds()
	desc := describe(keys, argv, argv, specs, nil)
	sit, _, err := situationOnOne(cl, keys, argv, ref)
	if err != nil {
		return desc + ": " + err.Error()
	}
	tmpl := cl.Replies[sit.Case]
	if tmpl == nil {
		return fmt.Sprintf("%s: case %s has no template", desc, sit.Case)
	}
	want := tmpl.Fill(sit)
	if !sameState(lengthened(cl, specs, after1, tolerance), after2, tolerance) {
		return fmt.Sprintf("%s: the script left %+v, the reference %+v", desc, after1, after2)
	}
	if !approxReply(tmpl, want, got, tolerance) {
		return fmt.Sprintf("%s (case %s): the script replied %v, the classification promises %v", desc, sit.Case, got, want)
	}
	return ""
}

// lengthened is what the reference leaves where the client's script left
// after: the same, but where the extend has no second step (a lock of
// several owners), one that shortened a key on one Redis keeps what the key
// had left, as the reference never shortens such a lock.
func lengthened(cl *spec.Class, specs []keySpec, after []keyState, tolerance int64) []keyState {
	counted := cl.Counted && cl.Role == spec.RoleRelease
	if (cl.Role != spec.RoleExtend && cl.Role != spec.RoleExtendOrAcquire && !counted) || cl.SetsTTL() {
		return after
	}
	out := slices.Clone(after)
	for k, s := range specs {
		if s.held && s.ttl > 0 && out[k].exists && out[k].pttl >= 0 && out[k].pttl+tolerance < s.ttl {
			out[k].pttl = s.ttl
		}
	}
	return out
}

// randomSpecs draws a state for the keys of a call of cl.
func randomSpecs(rng *rand.Rand, cl *spec.Class, keys, argv []string) []keySpec {
	thr := cl.ThresholdOf(argv)
	specs := make([]keySpec, len(keys))
	for k := range specs {
		var ttl int64
		switch rng.Intn(4) {
		case 0:
			ttl = 0
		case 1:
			ttl = 41_734
		case 2:
			ttl = 300 + rng.Int63n(59_000)
		default:
			ttl = 5_000 + rng.Int63n(2_000)
		}
		if thr > 0 && ttl > 0 && ttl > thr-200 && ttl < thr+200 {
			ttl = thr + 500 // far from the threshold: the runs are moments apart
		}
		tok := cl.Token(argv, k)
		switch rng.Intn(6) {
		case 0, 1:
			specs[k] = keySpec{}
		case 2, 3:
			specs[k] = keySpec{held: true, value: tok, ttl: ttl}
		case 4:
			specs[k] = keySpec{held: true, value: "someone-else", ttl: ttl}
		default:
			specs[k] = keySpec{held: true, value: tok + "-x", ttl: ttl}
		}
	}
	return specs
}

// randomArgs varies a call's token and TTL arguments.
func randomArgs(rng *rand.Rand, cl *spec.Class, argv []string) []string {
	a := slices.Clone(argv)
	if cl.Tokens != nil && rng.Intn(3) == 0 {
		alt := []string{"t", "another-token", "tok\x00\xff"}[rng.Intn(3)]
		for _, t := range cl.Tokens {
			a[t] = alt
		}
	}
	if cl.TTLArg >= 0 && rng.Intn(3) == 0 {
		n := 1 + rng.Int63n(59)
		if cl.TTLUnit == time.Millisecond {
			n = 1000 + rng.Int63n(58_000)
		}
		a[cl.TTLArg] = ttlArgValue(cl, n)
	}
	return a
}

// ttlArgValue is the TTL argument that asks for n of the class's unit: n
// itself, or for a deadline the time n from now.
func ttlArgValue(cl *spec.Class, n int64) string {
	if cl.Deadline {
		now := time.Now().UnixMilli()
		if cl.TTLUnit == time.Second {
			now /= 1000
		}
		n += now
	}
	return strconv.FormatInt(n, 10)
}

// checkOracle compares a classified script with its reference on many
// random states of Redis.
func checkOracle(t *testing.T, r *redisConn, rng *rand.Rand, text string, cl *spec.Class, keys, argv []string, states int) {
	t.Helper()
	for i := 0; i < states; i++ {
		a := randomArgs(rng, cl, argv)
		ca := cl
		if !cl.Matches(spec.BytesOf(keys), spec.BytesOf(a)) || !cl.Covers(spec.BytesOf(keys), spec.BytesOf(a)) {
			// Arguments in other relations, or beyond the values
			// probed: the proxy classifies such a call on its own, and
			// so does the oracle.
			p, ref := sandbox.Compile([]byte(text))
			if ref == nil {
				ca, ref = Script(p, keys, a)
			}
			if ref != nil {
				continue
			}
		}
		if diff := r.oracle(text, ca, keys, a, randomSpecs(rng, ca, keys, a)); diff != "" {
			t.Fatalf("%s\nclassified as %s\n%s", text, ca.Spec(), diff)
		}
	}
}

// The reference scripts, run on Redis, do what the roles mean
// (semantics.go): the same keys afterwards, the same case per key.
func TestReferenceScriptsOnRedisDoWhatTheRolesMean(t *testing.T) {
	r := startRedis(t)
	rng := rand.New(rand.NewSource(1))
	var classes []*spec.Class
	for _, f := range Facts() {
		classes = append(classes, instance(f.Class, 1), instance(f.Class, 3))
	}
	for _, cl := range classes {
		if cl.Keys != 1 && cl.Role == spec.RoleExtendOrAcquire {
			continue
		}
		keys := []string{"a", "b", "c"}[:cl.Keys]
		argv := make([]string, max(cl.Args, 0))
		for i := range argv {
			argv[i] = "tok-" + strconv.Itoa(i)
		}
		if cl.TTLArg >= 0 {
			argv[cl.TTLArg] = ttlArgValue(cl, 30000)
		}
		if cl.MinArg >= 0 {
			argv[cl.MinArg] = "1500"
		}
		for _, ct := range cl.Controls {
			argv[ct.Arg] = ct.Value
		}
		for i := 0; i < 40; i++ {
			a := randomArgs(rng, cl, argv)
			specs := randomSpecs(rng, cl, keys, a)
			st := (&classifier{now: time.Now().UnixMilli()}).state(keys, specs)
			want, acted := cl.SimulateRef(st, keys, a)
			t0 := time.Now()
			r.setState(keys, specs)
			ttl, _ := cl.TTLAt(spec.StrArgs(a), time.Now().UnixMilli())
			ca := spec.CallArgs{TTLms: ttl.Milliseconds(), LowMs: cl.ThresholdOf(a), CapMs: 1 << 40, Detailed: true}
			v := r.reference(cl, keys, a, ca)
			sit, refActed, err := situationOnOne(cl, keys, a, v)
			if err != nil {
				t.Fatalf("%s: %v", cl.Spec(), err)
			}
			got := r.state(keys)
			tolerance := slack + time.Since(t0).Milliseconds()
			wantState := make([]keyState, len(keys))
			for k, key := range keys {
				it, ok := want.Lookup(key)
				wantState[k] = keyState{exists: ok, value: it.Value, pttl: want.PTTL(key)}
			}
			desc := describe(keys, a, a, specs, nil)
			if cl.Role.Query() {
				acted = true // a query's reference always answers
			}
			if !sameState(got, wantState, tolerance) || refActed != acted {
				t.Fatalf("%s\n%s: reference left %+v (acted %v); the role means %+v (acted %v)", cl.Spec(), desc, got, refActed, wantState, acted)
			}
			wantSit := cl.Situate(st, want, keys, a)
			if sit.Case != wantSit.Case || sit.Focus != wantSit.Focus {
				t.Fatalf("%s\n%s: reference says case %s (key %d), the role's meaning %s (key %d)", cl.Spec(), desc, sit.Case, sit.Focus, wantSit.Case, wantSit.Focus)
			}
			// The compact answer (a script of its own for some roles) says
			// the same and leaves the same keys.
			if len(keys) == 1 {
				t0 = time.Now()
				r.setState(keys, specs)
				ca.Detailed = false
				if c := r.reference(cl, keys, a, ca); c.Kind != resp.KindInt || spec.Case(c.Int>>1) != sit.Case || (c.Int&1 == 1) != acted {
					t.Fatalf("%s\n%s: compact reference reply %v; want case %s acted %v", cl.Spec(), desc, c, sit.Case, acted)
				}
				if got := r.state(keys); !sameState(got, wantState, slack+time.Since(t0).Milliseconds()) {
					t.Fatalf("%s\n%s: compact reference left %+v; the role means %+v", cl.Spec(), desc, got, wantState)
				}
			}
		}
	}
}

// Every installed library's script, every style script and every fresh
// script gives, on Redis, the effects and replies of its classification.
func TestClassifiedScriptsMatchTheirReferenceOnRedis(t *testing.T) {
	r := startRedis(t)
	rng := rand.New(rand.NewSource(2))
	scripts, err := libscripts.Installed(".")
	if err != nil {
		t.Fatal(err)
	}
	scripts = append(scripts, libscripts.Styles()...)
	for _, s := range scripts {
		cl := mustClassify(t, s.Text, s.Keys, s.Argv)
		keys, argv := cl.Split(spec.StrArgs(s.Keys), spec.StrArgs(s.Argv))
		checkOracle(t, r, rng, s.Text, cl, sandbox.Strs(keys), sandbox.Strs(argv), 40)
	}
}

// With companion keys (the proxy's fencing state beside a lock), an
// extend re-arms each companion with its lock, a release deletes it, and
// an acquisition of a free key deletes what an earlier grant left.
func TestReferenceScriptsKeepCompanionsWithTheirGrant(t *testing.T) {
	r := startRedis(t)
	fresh := false
	companion := string(keyslot.Companion(nil, "c:", []byte("k")))
	run := func(text string, argv []string) []keyState {
		cl := spec.Must(text)
		r.Do("FLUSHALL")
		r.Do("SET", "k", "tok", "PX", "10000")
		r.Do("SET", companion, "state", "PX", "10000")
		if fresh {
			r.Do("DEL", "k")
		}
		ttl, _ := cl.TTLAt(spec.StrArgs(argv), time.Now().UnixMilli())
		ca := spec.CallArgs{TTLms: ttl.Milliseconds(), CapMs: 1 << 40, Companion: "c:"}
		b := cl.AppendReference(nil, spec.StrArgs([]string{"k"}), spec.StrArgs(argv), ca)
		rd := resp.NewReader(bufio.NewReader(bytes.NewReader(b)), resp.ReaderLimits{})
		cmd, _ := rd.Read()
		args := []string{"EVAL", string(cl.ReferenceFor(1, ca).Body)}
		for _, e := range cmd.Elems[2:] {
			args = append(args, string(e.Str))
		}
		r.Do(args...)
		return r.state([]string{"k", companion})
	}
	extend := "extend keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"
	if s := run(extend, []string{"tok", "30000"}); s[0].pttl < 29000 || s[1].pttl < 29000 {
		t.Fatalf("extend: lock and companion %+v; want both re-armed to 30000", s)
	}
	adding := `extend keys=1 args=3 token=1 ttl=2ms additive control=3:"0"; missing: 0; own: 1; own-no-ttl: 0; other: 0; other-no-ttl: 0`
	if s := run(adding, []string{"tok", "5000", "0"}); s[0].pttl < 14000 || s[1].pttl < 14000 || s[1].pttl > 15000 {
		t.Fatalf("adding extend: %+v; want both at 15000", s)
	}
	if s := run(extend, []string{"other", "30000"}); s[0].pttl > 10000 || s[1].pttl > 10000 {
		t.Fatalf("extend by another token re-armed something: %+v", s)
	}
	eoa := "extend-or-acquire keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: 1; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"
	if s := run(eoa, []string{"tok", "30000"}); s[0].pttl < 29000 || s[1].pttl < 29000 {
		t.Fatalf("extend-or-acquire of the caller's lock: %+v; want both re-armed", s)
	}
	release := "release keys=1 args=1 token=1; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0"
	if s := run(release, []string{"tok"}); s[0].exists || s[1].exists {
		t.Fatalf("release: %+v; want the lock and its companion gone", s)
	}
	if s := run(release, []string{"other"}); !s[0].exists || !s[1].exists {
		t.Fatalf("release by another token: %+v; want both left", s)
	}
	acquire := "acquire keys=1 args=2 token=1 ttl=2ms; missing: 1; own: 0; own-no-ttl: 0; other: 0; other-no-ttl: 0"
	if s := run(acquire, []string{"tok", "30000"}); s[0].pttl > 10000 || !s[1].exists {
		t.Fatalf("refused acquire: %+v; want both left", s)
	}
	fresh = true // the lock gone, what its grant left still there
	if s := run(acquire, []string{"tok", "30000"}); s[0].pttl < 29000 || s[1].exists {
		t.Fatalf("acquire of a free key: %+v; want the lock taken and the earlier grant's companion gone", s)
	}
	if s := run(eoa, []string{"tok", "30000"}); s[0].pttl < 29000 || s[1].exists {
		t.Fatalf("extend-or-acquire of a free key: %+v; want the lock taken and the companion gone", s)
	}
}
