package classify

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/respconn"
)

// Locks kept as sorted sets of owners (Symfony Lock's RedisStore, from
// Debian's php-symfony-lock): each script classifies as its role, and on a
// real Redis the library's script and the role's reference leave the same
// owners and the reply the classification promises, on every probe state.

// symfonyScripts reads the RedisStore scripts, by method name.
func symfonyScripts(t *testing.T) map[string]libscripts.Script {
	t.Helper()
	ss, err := libscripts.Symfony()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]libscripts.Script{}
	for _, s := range ss {
		out[strings.TrimPrefix(s.Name, "RedisStore::")] = s
	}
	return out
}

func TestSymfonyScriptsClassify(t *testing.T) {
	want := map[string]string{
		"probe": "delete keys=1 args=0; missing: 1; other: 1; other-no-ttl: 1",
		"save": `extend-or-acquire keys=1 args=3 token=2 ttl=3ms owners marker="__write__" promotes; ` +
			"missing: 1; own: 1; other: nil; own-shared: 1; own-shared-others: nil; other-shared: nil",
		"saveRead": `share keys=1 args=3 token=2 ttl=3ms owners marker="__write__" demotes; ` +
			"missing: 1; own: 1; other: nil; own-shared: 1; own-shared-others: 1; other-shared: 1",
		"putOffExpiration": `extend keys=1 args=3 token=2 ttl=3ms owners marker="__write__"; ` +
			"missing: nil; own: 1; other: nil; own-shared: 1; own-shared-others: 1; other-shared: nil",
		"exists": "owner keys=1 args=2 token=2 owners; missing: nil; own: 1; other: nil; own-shared-others: 1; other-shared: nil",
		"delete": `release keys=1 args=1 token=1 owners marker="__write__"; ` +
			"missing: nil; own: 1; other: nil; own-shared: 1; own-shared-others: 1; other-shared: nil",
	}
	for name, s := range symfonyScripts(t) {
		got := mustClassify(t, s.Text, s.Keys, s.Argv)
		if got.Spec() != want[name] {
			t.Errorf("RedisStore::%s classified as\n  %s\nwant\n  %s", name, got.Spec(), want[name])
		}
		if back, err := spec.Parse(got.Spec()); err != nil || back.Spec() != got.Spec() {
			t.Errorf("RedisStore::%s: spec parses back as %v, %v", name, back, err)
		}
	}
}

// ownersState is a sorted set on Redis: its members with their scores
// less now, and its expiry less now.
type ownersState struct {
	typ     string
	members map[string]int64
	left    int64
}

func (r *redisConn) redisNow() int64 {
	v := r.Do("TIME")
	sec, _ := strconv.ParseInt(string(v.Elems[0].Str), 10, 64)
	usec, _ := strconv.ParseInt(string(v.Elems[1].Str), 10, 64)
	return sec*1000 + usec/1000
}

// putItem writes a model item on Redis.
func (r *redisConn) putItem(key string, it sandbox.Item) {
	switch it.Type {
	case sandbox.TypeString:
		r.Do("SET", key, it.Value)
	case sandbox.TypeZset:
		for m, s := range it.Zset {
			r.Do("ZADD", key, sandbox.FormatScore(s), m)
		}
	case sandbox.TypeHash:
		for f, v := range it.Hash {
			r.Do("HSET", key, f, v)
		}
	}
	if it.At != 0 {
		r.Do("PEXPIREAT", key, strconv.FormatInt(it.At, 10))
	}
}

func (r *redisConn) owners(key string) ownersState {
	now := r.redisNow()
	st := ownersState{typ: string(r.Do("TYPE", key).Str), members: map[string]int64{}}
	if st.typ == "zset" {
		v := r.Do("ZRANGE", key, "0", "-1", "WITHSCORES")
		for i := 0; i+1 < len(v.Elems); i += 2 {
			f, _ := strconv.ParseFloat(string(v.Elems[i+1].Str), 64)
			st.members[string(v.Elems[i].Str)] = int64(f) - now
		}
	}
	if at := r.Do("PEXPIRETIME", key).Int; at > 0 {
		st.left = at - now
	} else {
		st.left = at
	}
	return st
}

// lengthenedOwners is what the reference leaves where the library's
// script left after: the caller's member (and the marker with it) never
// earlier than it was before, and the key expiring with its last member.
func lengthenedOwners(cl *spec.Class, before, after ownersState, tok string) ownersState {
	if cl.Role == spec.RoleRelease || cl.Role.Query() || after.typ != "zset" {
		return after
	}
	out := ownersState{typ: after.typ, members: map[string]int64{}, left: after.left}
	for m, s := range after.members {
		out.members[m] = s
	}
	if b, ok := before.members[tok]; ok && b > out.members[tok] {
		if _, has := out.members[tok]; has {
			if m, ok := out.members[cl.Marker]; ok && m == out.members[tok] {
				out.members[cl.Marker] = b
			}
			out.members[tok] = b
		}
	}
	top := int64(math.MinInt64)
	for _, s := range out.members {
		top = max(top, s)
	}
	out.left = top
	return out
}

func sameOwners(a, b ownersState, tol int64) bool {
	if a.typ != b.typ || len(a.members) != len(b.members) || !near(a.left, b.left, tol) && (a.left >= 0 || b.left >= 0) {
		return false
	}
	for m, s := range a.members {
		if t, ok := b.members[m]; !ok || !near(s, t, tol) {
			return false
		}
	}
	return true
}

func TestSymfonyScriptsMatchTheirReferenceOnRedis(t *testing.T) {
	r := startRedis(t)
	for name, s := range symfonyScripts(t) {
		if name == "probe" {
			continue
		}
		cl := mustClassify(t, s.Text, s.Keys, s.Argv)
		c := &classifier{keys: s.Keys, argv: s.Argv}
		variants := []argVariant{{keys: s.Keys, argv: s.Argv, full: true}}
		for _, alt := range tokenAlts {
			a := slices.Clone(s.Argv)
			a[cl.Tokens[0]] = alt
			variants = append(variants, argVariant{keys: s.Keys, argv: a, full: true})
		}
		if cl.TTLArg >= 0 {
			a := slices.Clone(s.Argv)
			a[cl.TTLArg] = "9000"
			variants = append(variants, argVariant{keys: s.Keys, argv: a, full: true})
		}
		runs := 0
		for _, v := range variants {
			for _, specs := range c.ownerStates(cl, v) {
				if nearlyGone(specs) {
					continue
				}
				key := s.Keys[0]
				tok := cl.Token(v.argv, 0)
				set := func() {
					r.Do("FLUSHALL")
					c.now = r.redisNow()
					if it, ok := c.state(v.keys, specs).Lookup(key); ok {
						r.putItem(key, it)
					}
				}
				t0 := time.Now()
				set()
				before := r.owners(key)
				got := r.Eval(s.Text, v.keys, v.argv)
				after1 := r.owners(key)

				set()
				ttl, _ := cl.TTLAt(spec.StrArgs(v.argv), r.redisNow())
				ca := spec.CallArgs{TTLms: ttl.Milliseconds(), CapMs: 1 << 40, Detailed: true}
				ref := r.Eval(string(cl.Reference().Body), v.keys, cl.ReferenceArgs(v.keys, v.argv, ca))
				after2 := r.owners(key)
				tol := slack + time.Since(t0).Milliseconds()
				desc := fmt.Sprintf("RedisStore::%s %s", name, describeIn(c.names, v.keys, v.argv, s.Argv, specs, nil))
				sit, _, err := situationOnOne(cl, v.keys, v.argv, ref)
				if err != nil {
					t.Fatalf("%s: %v", desc, err)
				}
				want := lengthenedOwners(cl, before, after1, tok)
				if !sameOwners(want, after2, tol) {
					t.Fatalf("%s (case %s): the script left %+v, the reference %+v", desc, sit.Case, after1, after2)
				}
				tmpl := cl.Replies[sit.Case]
				if tmpl == nil || !approxReply(tmpl, tmpl.Fill(sit), got, tol) {
					t.Fatalf("%s (case %s): the script replied %v, the classification promises %v", desc, sit.Case, got, tmpl)
				}
				runs++
			}
		}
		if runs < 20 {
			t.Fatalf("RedisStore::%s: %d runs", name, runs)
		}
	}
}

// The reference of a lock of several owners sees the cases the role's
// meaning sees (semantics.go), on Redis: for every probe state.
func TestOwnersReferenceCasesOnRedis(t *testing.T) {
	r := startRedis(t)
	for _, text := range []string{
		`extend-or-acquire keys=1 args=2 token=1 ttl=2ms owners marker="w" promotes; missing: 1; own: 1; other: 0; own-shared: 1; own-shared-others: 0; other-shared: 0`,
		`owner keys=1 args=1 token=1 owners; missing: 0; own: 1; other: 0; own-shared-others: 1; other-shared: 0`,
	} {
		cl := spec.Must(text)
		argv := []string{"tok", "20000"}[:max(cl.Args, 0)]
		c := &classifier{keys: []string{"k"}, argv: argv}
		for _, specs := range c.ownerStates(cl, argVariant{keys: []string{"k"}, argv: argv, full: true}) {
			if nearlyGone(specs) {
				continue
			}
			r.Do("FLUSHALL")
			c.now = r.redisNow()
			st := c.state([]string{"k"}, specs)
			if it, ok := st.Lookup("k"); ok {
				r.putItem("k", it)
			}
			v := r.Eval(string(spec.RefOwnersQuery.Body), []string{"k"}, cl.ReferenceArgs([]string{"k"}, argv, spec.CallArgs{Detailed: true}))
			want := cl.KeyCase(st, "k", cl.Token(argv, 0), 0)
			if v.Kind != resp.KindArray || spec.Case(v.Elems[1].Int) != want {
				t.Fatalf("%s\n%s: the reference says %v; the role's meaning %s", text, describeIn(c.names, []string{"k"}, argv, argv, specs, nil), v, want)
			}
		}
	}
}

// nearlyGone reports whether a probe state ends within a few milliseconds,
// too soon to be put on a real Redis and read in the same state.
func nearlyGone(specs []keySpec) bool {
	for _, s := range specs {
		if s.held && s.ttl > 0 && s.ttl < 100 {
			return true
		}
	}
	return false
}

// hashScripts are locks kept as a hash whose one field is the owner's
// token, in several styles (written for these tests).
var hashScripts = []struct{ name, text, call, spec string }{
	{"acquire", `if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[1], 1)
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0`, "k -- tok 8000", `acquire keys=1 args=2 token=1 ttl=2ms hash="1"; missing: 1; own: 0; own-no-ttl: 0; other: 0; other-no-ttl: 0`},
	{"acquire, the field holding an argument, answering the holder's PTTL", `if redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[2], ARGV[3])
  redis.call('pexpire', KEYS[1], ARGV[1])
  return nil
end
return redis.call('pttl', KEYS[1])`, "k -- 8000 tok host-7", `acquire keys=1 args=3 token=2 ttl=1ms hash=3; missing: nil; own: pttl; own-no-ttl: -1; other: pttl; other-no-ttl: -1`},
	{"release by HDEL", `if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return redis.call('hdel', KEYS[1], ARGV[1]) end return 0`, "k -- tok",
		`release keys=1 args=1 token=1 hash="1"; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0`},
	{"take or keep, the field holding an argument", `local v = redis.call('hget', KEYS[1], ARGV[1])
if v == ARGV[3] or redis.call('exists', KEYS[1]) == 0 then
  redis.call('hset', KEYS[1], ARGV[1], ARGV[3])
  redis.call('pexpire', KEYS[1], ARGV[2])
  return 1
end
return 0`, "k -- tok 30000 host-7",
		`extend-or-acquire keys=1 args=3 token=1 ttl=2ms nottl-acts hash=3 control=3:"host-7"; missing: 1; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0`},
	{"release of a lock of one field", `if redis.call('hlen', KEYS[1]) == 1 and redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return redis.call('del', KEYS[1]) end return 0`, "k -- tok",
		`release keys=1 args=1 token=1 hash="1"; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0`},
	{"extend", `if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0`, "k -- tok 8000",
		`extend keys=1 args=2 token=1 ttl=2ms nottl-acts hash="1"; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0`},
	{"TTL query", `if redis.call('hexists', KEYS[1], ARGV[1]) == 1 then return redis.call('pttl', KEYS[1]) end return -3`, "k -- tok",
		`ttl keys=1 args=1 token=1 hash="1"; missing: -3; own: pttl; own-no-ttl: -1; other: -3; other-no-ttl: -3`},
}

// countedScripts are reentrant locks: the owner's field counts its holds.
// Their texts live in libscripts (the integration tests run them too).
func countedScripts() []struct{ name, text, call, spec string } {
	var out []struct{ name, text, call, spec string }
	for _, s := range libscripts.Reentrant() {
		if !strings.Contains(s.Spec, " hash=") || strings.HasSuffix(strings.Split(s.Spec, ";")[0], " each") {
			continue // not a hash lock's script, or one the proxy runs key by key (each key's class is)
		}
		keys := strings.Join(append([]string{"k"}, s.Keys...), " ")
		out = append(out, struct{ name, text, call, spec string }{s.Name, s.Text, keys + " -- " + strings.Join(s.Argv, " "), s.Spec})
	}
	return out
}

// Locks kept in a hash classify as string locks of that shape, and on a
// real Redis each script and its reference leave the same keys and the
// reply the classification promises, on every probe state.
func TestHashScriptsMatchTheirReferenceOnRedis(t *testing.T) {
	r := startRedis(t)
	for _, h := range append(slices.Clone(hashScripts), countedScripts()...) {
		keys, argv := splitCall(h.call)
		cl := mustClassify(t, h.text, keys, argv)
		if cl.Spec() != h.spec {
			t.Fatalf("%s classified as\n  %s\nwant\n  %s", h.name, cl.Spec(), h.spec)
		}
		// Arguments passed in KEYS (a channel) are the class's first
		// arguments.
		x := cl.KeyArgs
		lock := keys[:len(keys)-x]
		c := &classifier{keys: lock, argv: append(slices.Clone(keys[len(lock):]), argv...), extra: x, names: spec.Namer{Lock: len(lock), Extra: x}, cur: cl}
		keys, argv = c.keys, c.argv
		runs := 0
		for _, v := range c.variants(cl) {
			for _, specs := range c.states(cl, v) {
				if nearlyGone(specs) {
					continue
				}
				set := func() {
					r.Do("FLUSHALL")
					c.now = r.redisNow()
					st := c.state(v.keys, specs)
					for _, k := range v.keys {
						if it, ok := st.Lookup(k); ok {
							r.putItem(k, it)
						}
					}
				}
				t0 := time.Now()
				set()
				got := r.Eval(h.text, append(slices.Clone(v.keys), v.argv[:x]...), v.argv[x:])
				after1 := r.hashState(v.keys)
				var count int64 // a counter's count after the script: its grant's number
				if cl.Counter != nil {
					count, _ = sandbox.ParseInt(string(r.Do("GET", v.argv[cl.Counter.Arg]).Str))
				}
				set()
				ttl, _ := cl.TTLAt(spec.StrArgs(v.argv), r.redisNow())
				ref := r.reference(cl, v.keys, v.argv, spec.CallArgs{TTLms: ttl.Milliseconds(), CapMs: 1 << 40, Detailed: true})
				after2 := r.hashState(v.keys)
				tol := slack + time.Since(t0).Milliseconds()
				desc := h.name + " " + describeIn(c.names, v.keys, v.argv, argv, specs, keys)
				sit, _, err := situationOnOne(cl, v.keys, v.argv, ref)
				if err != nil {
					t.Fatalf("%s: %v", desc, err)
				}
				sit.Fence = count
				if !sameState(lengthened(cl, specs, after1, tol), after2, tol) {
					t.Fatalf("%s (case %s): the script left %+v, the reference %+v", desc, sit.Case, after1, after2)
				}
				tmpl := cl.Replies[sit.Case]
				if tmpl == nil || !approxReply(tmpl, tmpl.Fill(sit), got, tol) {
					t.Fatalf("%s (case %s): the script replied %v, the classification promises %v", desc, sit.Case, got, tmpl)
				}
				runs++
			}
		}
		if runs < 20 {
			t.Fatalf("%s: %d runs", h.name, runs)
		}
	}
}

// hashState reads keys as keyState: the value of a hash is its fields.
func (r *redisConn) hashState(keys []string) []keyState {
	out := make([]keyState, len(keys))
	for i, k := range keys {
		v := r.Do("HGETALL", k)
		out[i] = keyState{exists: r.Do("EXISTS", k).Int == 1, value: respconn.Canonical("hash", v), pttl: r.Do("PTTL", k).Int}
	}
	return out
}

// The reentrant lock's scripts (and a forced unlock that tells waiters)
// classify as their specs say.
func TestReentrantScriptsClassify(t *testing.T) {
	for _, s := range libscripts.Reentrant() {
		keys := append([]string{"k"}, s.Keys...)
		if got := mustClassify(t, s.Text, keys, s.Argv).Spec(); got != s.Spec {
			t.Errorf("%s classified as\n  %s\nwant\n  %s", s.Name, got, s.Spec)
		}
	}
}

// A read-write lock's write lock (fields "mode" = "write" and the
// caller's, once and twice held) and another's: on a real Redis every
// hash lock's reference leaves the keys as its role means there
// (semantics.go), whatever its role. The probes put an extend's script on
// these states (its reference renews the caller's write lock); for every
// other role the reference, as the role, reads them as another holder's.
func TestHashReferencesReadAWriteLockAsTheirRoleMeans(t *testing.T) {
	r := startRedis(t)
	for _, h := range append(slices.Clone(hashScripts), countedScripts()...) {
		keys, argv := splitCall(h.call)
		cl := mustClassify(t, h.text, keys, argv)
		if cl.Tokens == nil || len(keys)-cl.KeyArgs != 1 {
			continue
		}
		x := cl.KeyArgs
		c := &classifier{keys: keys[:1], argv: append(slices.Clone(keys[1:]), argv...), extra: x, cur: cl}
		tok := cl.Token(c.argv, 0)
		for _, s := range []keySpec{
			{held: true, value: tok, ttl: 41_734, mode: true},
			{held: true, value: tok, ttl: 41_734, mode: true, count: 2},
			{held: true, value: "other-holder-7f3a", ttl: 41_734, mode: true},
		} {
			r.Do("FLUSHALL")
			c.now = r.redisNow()
			st := c.state(c.keys, []keySpec{s})
			it, _ := st.Lookup(c.keys[0])
			r.putItem(c.keys[0], it)
			t0 := time.Now()
			ttl, _ := cl.TTLAt(spec.StrArgs(c.argv), c.now)
			r.reference(cl, c.keys, c.argv, spec.CallArgs{TTLms: ttl.Milliseconds(), CapMs: 1 << 40, Detailed: true})
			got := r.hashState(c.keys)
			want, _ := cl.SimulateRef(st, c.keys, c.argv)
			wit, ok := want.Lookup(c.keys[0])
			wantState := []keyState{{exists: ok, value: respconn.Canonical("hash", hashReply(wit.Hash)), pttl: want.PTTL(c.keys[0])}}
			if !sameState(got, wantState, slack+time.Since(t0).Milliseconds()) {
				t.Errorf("%s (%s) on %v: the reference left %+v, the role means %+v", h.name, cl.Role, it.Hash, got, wantState)
			}
		}
	}
}

// hashReply is h as HGETALL answers it.
func hashReply(h map[string]string) resp.Value {
	v := resp.Value{Kind: resp.KindArray}
	for f, x := range h {
		v.Elems = append(v.Elems, resp.Value{Kind: resp.KindBulk, Str: []byte(f)}, resp.Value{Kind: resp.KindBulk, Str: []byte(x)})
	}
	return v
}
