package script

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Exact bytes sent by libraries whose sources are at hand (module cache).
const (
	// bsm/redislock v0.9.4 luaRefresh.
	bsmRefresh = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
	// A compare-and-persist: no library sends it, so no built-in knows it.
	persistScript = `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("persist", KEYS[1]) else return 0 end`
	// go-redsync/redsync v4.18.1 touchScript (sha1 d75bb8b5...).
	redsyncV4Touch = "\n\tif redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n\t\treturn redis.call(\"PEXPIRE\", KEYS[1], ARGV[2])\n\telse\n\t\treturn 0\n\tend\n"
	// go-redsync/redsync v1.4.2 touchScript.
	redsyncV1Touch = "\n\tif redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n\t\treturn redis.call(\"pexpire\", KEYS[1], ARGV[2])\n\telse\n\t\treturn 0\n\tend\n"
	// redlock-py unlock_script (sha1 4e92fdc6...).
	redlockPyRelease = "\n    if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n        return redis.call(\"del\",KEYS[1])\n    else\n        return 0\n    end"
)

func TestLibraryScriptBytes(t *testing.T) {
	// Guards the constants above against typos: CLIENTS.md gives these
	// digests for the exact bytes.
	for _, c := range []struct{ src, sha string }{
		{seedScript, seedSha},
		{redlockPyRelease, "4e92fdc63815b3a0a2dd1c1df3694de73607c88d"},
		{redsyncV4Touch, "d75bb8b5bd13532ddedd17762e772346e39b321e"},
	} {
		if got := sha1Hex([]byte(c.src)); got != c.sha {
			t.Errorf("sha1(%q) = %s, want %s", c.src, got, c.sha)
		}
	}
}

func TestNewRegistryRecognisesBuiltins(t *testing.T) {
	r := NewRegistry()
	cases := []struct {
		name string
		src  string
		want *Spec
	}{
		{"seed", seedScript, seedRelease},
		{"seed one line", seedOneLine, seedRelease},
		{"seed CRLF", strings.ReplaceAll(seedScript, "\n", "\r\n"), seedRelease},
		{"seed upper case, single quotes", `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end`, seedRelease},
		{"seed with comments and semicolons", "-- unlock\nif redis.call(\"get\",KEYS[1]) == ARGV[1] then --[[ ours ]]\n  return redis.call(\"del\",KEYS[1]);\nelse\n  return 0; -- not ours\nend;", seedRelease},
		{"seed, long-bracket and escaped command names", `if redis.call([[GET]],KEYS[1]) == ARGV[1] then return redis.call("\068EL",KEYS[1]) else return 0 end`, seedRelease},
		{"redlock-py", redlockPyRelease, seedRelease},
		{"bsm/redislock release", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`, seedRelease},
		{"redsync v1 release", "\n\tif redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n\t\treturn redis.call(\"DEL\", KEYS[1])\n\telse\n\t\treturn 0\n\tend\n", seedRelease},
		{"release with unlink", `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('UNLINK', KEYS[1]) else return 0 end`, seedRelease},
		{"release, token first", "if ARGV[1] == redis.call('get', KEYS[1]) then\r\n  return redis.call('del', KEYS[1])\r\nelse\r\n  return 0\r\nend", seedRelease},
		{"release, end then return 0", "if redis.call('get', KEYS[1]) == ARGV[1] then\n    return redis.call('del', KEYS[1])\nend\nreturn 0", seedRelease},
		{"release through a local", "local current = redis.call('GET', KEYS[1])\nif current == ARGV[1] then\n  return redis.call('DEL', KEYS[1])\nelse\n  return 0\nend", seedRelease},
		{"release through a local, end then return", `local value = redis.call("GET", KEYS[1]); if value == ARGV[1] then return redis.call("DEL", KEYS[1]); end; return 0;`, seedRelease},

		{"bsm/redislock refresh", bsmRefresh, seedExtend},
		{"redsync v4 touch", redsyncV4Touch, seedExtend},
		{"redsync v1 touch", redsyncV1Touch, seedExtend},
		{"extend, token first", `if ARGV[1] == redis.call("GET", KEYS[1]) then return redis.call("PEXPIRE", KEYS[1], ARGV[2]) else return 0 end`, seedExtend},
		{"extend, end then return 0", "if redis.call('get', KEYS[1]) == ARGV[1] then\n  return redis.call('pexpire', KEYS[1], ARGV[2])\nend\nreturn 0\n", seedExtend},
		{"extend through a local", `local t = redis.call('get', KEYS[1]) if t == ARGV[1] then return redis.call('PExpire', KEYS[1], ARGV[2]) else return 0 end`, seedExtend},

		{"compare-and-expire", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("expire",KEYS[1],ARGV[2]) else return 0 end`, seedExtendSeconds},
		{"compare-and-expire, formatted", "if redis.call('GET', KEYS[1]) == ARGV[1] then\r\n\treturn redis.call('EXPIRE', KEYS[1], ARGV[2]) -- seconds\r\nelse\r\n\treturn 0\r\nend\r\n", seedExtendSeconds},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			k := r.Lookup([]byte(c.src))
			if k == nil || k.Script == nil {
				t.Fatalf("Lookup returned %+v", k)
			}
			if k.Spec != c.want {
				t.Fatalf("Lookup(%q).Spec = %v, want %q", c.src, specName(k.Spec), c.want.Name)
			}
		})
	}

	// The built-in specs say what they are.
	checks := []struct {
		spec    *Spec
		role    Role
		ttlArg  int
		ttlUnit time.Duration
	}{
		{seedRelease, RoleRelease, -1, 0},
		{seedExtend, RoleExtend, 1, time.Millisecond},
		{seedExtendSeconds, RoleExtend, 1, time.Second},
	}
	for _, c := range checks {
		if c.spec.Role != c.role || c.spec.Keys != 1 || c.spec.TokenArg != 0 || c.spec.TTLArg != c.ttlArg || c.spec.TTLUnit != c.ttlUnit {
			t.Errorf("%s: %+v", c.spec.Name, *c.spec)
		}
	}
}

func specName(s *Spec) string {
	if s == nil {
		return "nil"
	}
	return fmt.Sprintf("%q", s.Name)
}

func TestLookupUnknownScripts(t *testing.T) {
	r := NewRegistry()
	for _, src := range []string{
		"",
		"return 1",
		persistScript,
		`return redis.call("del",KEYS[1])`,
		`if redis.call("get",KEYS[1]) ~= ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`,
		`if redis.call("get",KEYS[2]) == ARGV[1] then return redis.call("del",KEYS[2]) else return 0 end`,
		`if redis.call("get",KEYS[1]) == ARGV[2] then return redis.call("del",KEYS[1]) else return 0 end`,
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 1 end`,
		`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("pexpire",KEYS[1],ARGV[3]) else return 0 end`,
		`if redis.pcall("get",KEYS[1]) == ARGV[1] then return redis.pcall("del",KEYS[1]) else return 0 end`,
		seedScript + "\nredis.call('flushall')",
		`return "unterminated`,
		"--[[ unterminated " + seedScript,
	} {
		k := r.Lookup([]byte(src))
		if k == nil || k.Script == nil {
			t.Fatalf("Lookup(%q) = %+v", src, k)
		}
		if k.Spec != nil {
			t.Errorf("Lookup(%q).Spec = %q, want nil", src, k.Spec.Name)
		}
		if want := sha1Hex([]byte(src)); k.Script.Sha != want {
			t.Errorf("Lookup(%q).Script.Sha = %s, want %s", src, k.Script.Sha, want)
		}
		// Unknown scripts are not remembered by Lookup (junk must not fill
		// the budget); Remember keeps them, for the vote policy.
		if got := r.BySha([]byte(k.Script.Sha)); got != nil {
			t.Errorf("BySha(%s) = %p for an unknown script Lookup saw; want nil", k.Script.Sha, got)
		}
		r.Remember(k)
		if got := r.BySha([]byte(k.Script.Sha)); got != k {
			t.Errorf("BySha(%s) after Remember = %p, want %p", k.Script.Sha, got, k)
		}
	}
	// A script too long to normalize is unknown, not an error.
	big := append([]byte(seedScript+"\n--"), bytes.Repeat([]byte("x"), MaxScriptBytes)...)
	if k := r.Lookup(big); k.Spec != nil || k.Script.Sha != sha1Hex(big) {
		t.Errorf("Lookup(too long) = spec %s, sha %s", specName(k.Spec), k.Script.Sha)
	}
}

func TestLookupSameKnownAndSha(t *testing.T) {
	r := NewRegistry()
	body := []byte(seedScript)
	k1 := r.Lookup(body)
	if k1.Script.Sha != seedSha || k1.Script.Sha != sha1Hex(body) {
		t.Fatalf("Sha = %s, want %s", k1.Script.Sha, seedSha)
	}
	if want := resp.NewScript(body).Sha; k1.Script.Sha != want {
		t.Fatalf("Sha = %s, resp.NewScript says %s", k1.Script.Sha, want)
	}
	if !bytes.Equal(k1.Script.Body, body) {
		t.Fatalf("Body = %q", k1.Script.Body)
	}
	// The Known keeps its own copy of the body.
	body[0] = 'X'
	if string(k1.Script.Body) != seedScript {
		t.Fatalf("Known shares the caller's buffer: %q", k1.Script.Body)
	}
	k2 := r.Lookup([]byte(seedScript))
	if k2 != k1 {
		t.Fatalf("second Lookup of the same bytes returned %p, want %p", k2, k1)
	}
	if k1.Spec != seedRelease {
		t.Fatalf("Spec = %s", specName(k1.Spec))
	}

	// A formatting variant is another script (another sha) with the same spec.
	k3 := r.Lookup([]byte(redlockPyRelease))
	if k3 == k1 || k3.Script.Sha != "4e92fdc63815b3a0a2dd1c1df3694de73607c88d" || k3.Spec != seedRelease {
		t.Fatalf("variant: %p sha %s spec %s", k3, k3.Script.Sha, specName(k3.Spec))
	}
	if k := r.Lookup([]byte(redsyncV4Touch)); k.Script.Sha != "d75bb8b5bd13532ddedd17762e772346e39b321e" || k.Spec != seedExtend {
		t.Fatalf("redsync touch: sha %s spec %s", k.Script.Sha, specName(k.Spec))
	}
	// The same answer every time.
	for range 3 {
		if r.Lookup([]byte(redlockPyRelease)) != k3 || r.Lookup([]byte(seedScript)) != k1 {
			t.Fatal("Lookup is not stable")
		}
	}
}

func TestBySha(t *testing.T) {
	r := NewRegistry()
	// Registering (built-ins) does not make a sha known: a client's first
	// EVALSHA must get NOSCRIPT so that it sends the text.
	if k := r.BySha([]byte(seedSha)); k != nil {
		t.Fatalf("BySha before any Lookup = %+v, want nil", k)
	}
	k := r.Lookup([]byte(seedScript))
	upper := strings.ToUpper(seedSha)
	mixed := []byte(seedSha)
	for i := 0; i < len(mixed); i += 2 {
		if mixed[i] >= 'a' && mixed[i] <= 'f' {
			mixed[i] -= 'a' - 'A'
		}
	}
	for _, sha := range []string{seedSha, upper, string(mixed)} {
		if got := r.BySha([]byte(sha)); got != k {
			t.Errorf("BySha(%s) = %p, want %p", sha, got, k)
		}
	}
	// BySha does not modify its argument.
	arg := []byte(upper)
	r.BySha(arg)
	if string(arg) != upper {
		t.Errorf("BySha modified its argument: %s", arg)
	}

	for _, sha := range []string{
		"",
		"0000000000000000000000000000000000000000", // 40 hex, unknown
		sha1Hex([]byte(redlockPyRelease)),          // known to the registry by text, never looked up
		seedSha[:39],
		seedSha + "0",
		seedSha + seedSha[:24], // a sha256-long string
		seedSha[:20],
		strings.Repeat("g", 40),
		strings.Repeat("\x00", 40),
		" " + seedSha[:39],
		seedSha[:39] + " ",
	} {
		if got := r.BySha([]byte(sha)); got != nil {
			t.Errorf("BySha(%q) = %+v, want nil", sha, got)
		}
	}
	if got := r.BySha(nil); got != nil {
		t.Errorf("BySha(nil) = %+v, want nil", got)
	}
}

func TestRegister(t *testing.T) {
	r := NewRegistry()
	custom := &Spec{
		Name: "test persist", Role: RoleExtend, Keys: 1, TokenArg: 0, TTLArg: -1,
		Granted: []Pattern{int1}, Refused: []Pattern{int0}, Success: int1, Failure: int0,
	}
	other := &Spec{Name: "test other", Role: RoleRelease, Keys: 1, TTLArg: -1}

	if k := r.Lookup([]byte(strings.ReplaceAll(persistScript, "persist", "PERSIST"))); k.Spec != nil {
		t.Fatalf("unregistered script recognised as %s", k.Spec.Name)
	}
	if err := r.Register(persistScript, custom); err != nil {
		t.Fatalf("Register: %v", err)
	}
	for _, src := range []string{
		persistScript,
		"if redis.call('GET', KEYS[1]) == ARGV[1] then\r\n  return redis.call('PERSIST', KEYS[1]) -- forever\r\nelse\r\n  return 0\r\nend",
	} {
		if k := r.Lookup([]byte(src)); k.Spec != custom {
			t.Errorf("Lookup(%q).Spec = %s, want %q", src, specName(k.Spec), custom.Name)
		}
	}
	// The same spec again, by the same or another text: accepted.
	if err := r.Register(persistScript, custom); err != nil {
		t.Errorf("re-Register same spec: %v", err)
	}
	if err := r.Register(`if redis.call('get',KEYS[1])==ARGV[1] then return redis.call('persist',KEYS[1]) else return 0 end`, custom); err != nil {
		t.Errorf("Register variant with the same spec: %v", err)
	}
	// Another spec for the same canonical form: refused, first one kept.
	err := r.Register("-- mine\n"+persistScript+";", other)
	if err == nil {
		t.Fatal("Register accepted a second spec for the same canonical script")
	}
	if !strings.Contains(err.Error(), other.Name) || !strings.Contains(err.Error(), custom.Name) {
		t.Errorf("error %q should name both specs", err)
	}
	if k := r.Lookup([]byte(persistScript + " ")); k.Spec != custom {
		t.Errorf("after the refused Register, Spec = %s, want %q", specName(k.Spec), custom.Name)
	}
	// Nor may a built-in be re-registered under another spec.
	if err := r.Register(`if redis.call('GET',KEYS[1]) == ARGV[1] then return redis.call('DEL',KEYS[1]) else return 0 end`, other); err == nil {
		t.Error("Register accepted another spec for the seed release script")
	}
	if k := r.Lookup([]byte(seedOneLine)); k.Spec != seedRelease {
		t.Errorf("seed now recognised as %s", specName(k.Spec))
	}
	// Unreadable scripts are refused.
	err = r.Register(`return "unterminated`, other)
	if !errors.Is(err, ErrSyntax) {
		t.Errorf("Register(unreadable) = %v, want an error wrapping ErrSyntax", err)
	}
	if err := r.Register("return 1"+strings.Repeat(" ", MaxScriptBytes), other); err == nil {
		t.Error("Register accepted a script longer than MaxScriptBytes")
	}
}

func TestRegisterSha(t *testing.T) {
	r := NewRegistry()
	custom := &Spec{Name: "test by sha", Role: RoleRelease, Keys: 1, TTLArg: -1}
	body := `local x = redis.call("get", KEYS[1]) if x == ARGV[1] then redis.call("del", KEYS[1]) return 1 end return 0`
	r.RegisterSha(sha1Hex([]byte(body)), custom)
	if k := r.Lookup([]byte(body)); k.Spec != custom {
		t.Errorf("Lookup(exact bytes).Spec = %s, want %q", specName(k.Spec), custom.Name)
	}
	// Only the exact bytes: a reformatted copy is unknown.
	if k := r.Lookup([]byte(body + "\n")); k.Spec != nil {
		t.Errorf("Lookup(variant).Spec = %s, want nil", specName(k.Spec))
	}
	// A sha registration is more specific than a canonical match.
	override := &Spec{Name: "test override", Role: RoleRelease, Keys: 1, TTLArg: -1}
	r.RegisterSha(sha1Hex([]byte(redlockPyRelease)), override)
	if k := r.Lookup([]byte(redlockPyRelease)); k.Spec != override {
		t.Errorf("Lookup(redlock-py).Spec = %s, want %q", specName(k.Spec), override.Name)
	}
	if k := r.Lookup([]byte(seedScript)); k.Spec != seedRelease {
		t.Errorf("Lookup(seed).Spec = %s, want the built-in", specName(k.Spec))
	}
}

func TestRoleNames(t *testing.T) {
	for _, r := range []Role{RoleAcquire, RoleRelease, RoleExtend, RoleExtendOrAcquire, RoleTTL} {
		got, err := ParseRole(r.String())
		if err != nil || got != r {
			t.Errorf("ParseRole(%q) = %v, %v; want %v", r.String(), got, err, r)
		}
	}
	for _, s := range []string{"", "unknown", "lock", "release "} {
		if _, err := ParseRole(s); err == nil {
			t.Errorf("ParseRole(%q) accepted", s)
		}
	}
	if RoleUnknown.String() != "unknown" {
		t.Errorf("RoleUnknown.String() = %q", RoleUnknown.String())
	}
}

func TestPatternMatch(t *testing.T) {
	var (
		ok      = resp.OK
		okLower = resp.Value{Kind: resp.KindSimple, Str: []byte("ok")}
		okBulk  = resp.BulkValue([]byte("OK"))
		okLong  = resp.Value{Kind: resp.KindSimple, Str: []byte("OKAY")}
		queued  = resp.Value{Kind: resp.KindSimple, Str: []byte("QUEUED")}
		nilV    = resp.Nil
		empty   = resp.BulkValue(nil)
		arr     = resp.Value{Kind: resp.KindArray}
		i0      = resp.IntValue(0)
		i1      = resp.IntValue(1)
		i3      = resp.IntValue(3)
		iM1     = resp.IntValue(-1)
		bulk1   = resp.BulkValue([]byte("1"))
		errE    = resp.ErrorValue("ERROR")
		errEx   = resp.ErrorValue("ERROR something")
		errErr  = resp.ErrorValue("ERR wrong")
		errLow  = resp.ErrorValue("error")
		simpleE = resp.Value{Kind: resp.KindSimple, Str: []byte("ERROR")}
		invalid = resp.Value{}
	)
	all := []resp.Value{ok, okLower, okBulk, okLong, queued, nilV, empty, arr, i0, i1, i3, iM1, bulk1, errE, errEx, errErr, errLow, simpleE, invalid}
	cases := []struct {
		name  string
		p     Pattern
		nkeys int
		match []resp.Value // everything else in all must not match
	}{
		{"OK", Pattern{Kind: PatOK}, 1, []resp.Value{ok}},
		{"nil", Pattern{Kind: PatNil}, 1, []resp.Value{nilV}},
		{"int 1", Pattern{Kind: PatInt, Int: 1}, 1, []resp.Value{i1}},
		{"int 0", Pattern{Kind: PatInt, Int: 0}, 1, []resp.Value{i0}},
		{"int -1", Pattern{Kind: PatInt, Int: -1}, 1, []resp.Value{iM1}},
		{"nkeys 3", Pattern{Kind: PatIntNKeys}, 3, []resp.Value{i3}},
		{"nkeys 1", Pattern{Kind: PatIntNKeys}, 1, []resp.Value{i1}},
		{"nkeys 0", Pattern{Kind: PatIntNKeys}, 0, []resp.Value{i0}},
		{"positive", Pattern{Kind: PatIntPos}, 1, []resp.Value{i1, i3}},
		{"error ERROR", Pattern{Kind: PatError, Str: "ERROR"}, 1, []resp.Value{errE, errEx}},
		{"error ERR", Pattern{Kind: PatError, Str: "ERR"}, 1, []resp.Value{errE, errEx, errErr}},
		{"any error", Pattern{Kind: PatError}, 1, []resp.Value{errE, errEx, errErr, errLow}},
		{"simple QUEUED", Pattern{Kind: PatSimpleStr, Str: "QUEUED"}, 1, []resp.Value{queued}},
		{"simple OK", Pattern{Kind: PatSimpleStr, Str: "OK"}, 1, []resp.Value{ok}},
		{"simple ERROR", Pattern{Kind: PatSimpleStr, Str: "ERROR"}, 1, []resp.Value{simpleE}},
		{"at least -1", Pattern{Kind: PatIntAtLeast, Int: -1}, 1, []resp.Value{iM1, i0, i1, i3}},
		{"at least 0", Pattern{Kind: PatIntAtLeast, Int: 0}, 1, []resp.Value{i0, i1, i3}},
		{"at least 2", Pattern{Kind: PatIntAtLeast, Int: 2}, 1, []resp.Value{i3}},
		{"zero kind", Pattern{}, 1, nil},
		{"unknown kind", Pattern{Kind: 99, Int: 1, Str: "OK"}, 1, nil},
	}
	for _, c := range cases {
		for _, v := range all {
			want := false
			for _, m := range c.match {
				if v.Equal(m) {
					want = true
				}
			}
			if got := c.p.Match(v, c.nkeys); got != want {
				t.Errorf("%s: Match(%v, %d) = %v, want %v", c.name, v, c.nkeys, got, want)
			}
		}
	}
}

func TestPatternValue(t *testing.T) {
	cases := []struct {
		p     Pattern
		nkeys int
		want  resp.Value
	}{
		{Pattern{Kind: PatOK}, 1, resp.OK},
		{Pattern{Kind: PatNil}, 1, resp.Nil},
		{Pattern{Kind: PatInt, Int: 1}, 5, resp.IntValue(1)},
		{Pattern{Kind: PatInt, Int: 0}, 5, resp.IntValue(0)},
		{Pattern{Kind: PatInt, Int: -1}, 5, resp.IntValue(-1)},
		{Pattern{Kind: PatIntNKeys}, 5, resp.IntValue(5)},
		{Pattern{Kind: PatIntNKeys}, 1, resp.IntValue(1)},
		{Pattern{Kind: PatIntPos}, 5, resp.IntValue(1)},
		{Pattern{Kind: PatError, Str: "ERROR"}, 1, resp.ErrorValue("ERROR")},
		{Pattern{Kind: PatSimpleStr, Str: "QUEUED"}, 1, resp.Value{Kind: resp.KindSimple, Str: []byte("QUEUED")}},
		{Pattern{Kind: PatIntAtLeast, Int: -1}, 1, resp.IntValue(-1)},
		{Pattern{Kind: PatIntAtLeast, Int: 0}, 3, resp.IntValue(0)},
		{Pattern{}, 1, resp.Nil},
		{Pattern{Kind: 99}, 1, resp.Nil},
	}
	for _, c := range cases {
		got := c.p.Value(c.nkeys)
		if !got.Equal(c.want) {
			t.Errorf("%+v.Value(%d) = %v, want %v", c.p, c.nkeys, got, c.want)
		}
		// What a pattern answers, it also matches.
		if c.p.Kind != 0 && c.p.Kind != 99 && !c.p.Match(got, c.nkeys) {
			t.Errorf("%+v does not match its own Value %v", c.p, got)
		}
	}
	// Value must not hand out memory shared with the pattern's callers.
	p := Pattern{Kind: PatSimpleStr, Str: "QUEUED"}
	v := p.Value(1)
	v.Str[0] = 'X'
	if p.Value(1).Str[0] != 'Q' {
		t.Error("Value shares its bytes between calls")
	}
}

func TestSpecClassify(t *testing.T) {
	type want struct{ granted, refused bool }
	var (
		granted = want{true, false}
		refused = want{false, true}
		unknown = want{false, false}
	)
	type tc struct {
		name  string
		spec  *Spec
		v     resp.Value
		nkeys int
		want  want
	}
	cases := []tc{
		{"release 1", seedRelease, resp.IntValue(1), 1, granted},
		{"release 0", seedRelease, resp.IntValue(0), 1, refused},
		{"release -1", seedRelease, resp.IntValue(-1), 1, unknown},
		{"release 2", seedRelease, resp.IntValue(2), 1, unknown},
		{"release nil", seedRelease, resp.Nil, 1, unknown},
		{"release error", seedRelease, resp.ErrorValue("ERR busy"), 1, unknown},
		{"release bulk 1", seedRelease, resp.BulkValue([]byte("1")), 1, unknown},
		{"extend 1", seedExtend, resp.IntValue(1), 1, granted},
		{"extend 0", seedExtend, resp.IntValue(0), 1, refused},
		{"extend-s 1", seedExtendSeconds, resp.IntValue(1), 1, granted},
		{"extend-s OK", seedExtendSeconds, resp.OK, 1, unknown},
	}
	add := func(name string, s *Spec, v resp.Value, nkeys int, w want) {
		cases = append(cases, tc{name, s, v, nkeys, w})
	}
	// node-redlock-like multi-key: n of n, or 0.
	multi := &Spec{Name: "multi acquire", Role: RoleAcquire, Granted: []Pattern{{Kind: PatIntNKeys}}, Refused: []Pattern{{Kind: PatInt, Int: 0}}}
	add("multi all", multi, resp.IntValue(3), 3, granted)
	add("multi some", multi, resp.IntValue(2), 3, unknown)
	add("multi none", multi, resp.IntValue(0), 3, refused)
	// node-redlock as built in: anything short of all keys is a refusal.
	partial := &Spec{Name: "multi, partial refused", Granted: []Pattern{{Kind: PatIntNKeys}}, Refused: []Pattern{{Kind: PatIntAtLeast, Int: 0}}}
	add("partial all", partial, resp.IntValue(3), 3, granted)
	add("partial some", partial, resp.IntValue(2), 3, refused)
	add("partial none", partial, resp.IntValue(0), 3, refused)
	add("partial -1", partial, resp.IntValue(-1), 3, unknown)
	add("partial error", partial, resp.ErrorValue("ERR x"), 3, unknown)
	// aioredlock-like: OK or an ERROR error reply.
	aio := &Spec{Name: "ok or ERROR", Granted: []Pattern{{Kind: PatOK}}, Refused: []Pattern{{Kind: PatError, Str: "ERROR"}}}
	add("aio OK", aio, resp.OK, 1, granted)
	add("aio ERROR", aio, resp.ErrorValue("ERROR"), 1, refused)
	add("aio ERR", aio, resp.ErrorValue("ERR timeout"), 1, unknown)
	add("aio nil", aio, resp.Nil, 1, unknown)
	// acquire-like: OK or nil.
	acq := &Spec{Name: "ok or nil", Granted: []Pattern{{Kind: PatOK}}, Refused: []Pattern{{Kind: PatNil}}}
	add("acquire OK", acq, resp.OK, 1, granted)
	add("acquire nil", acq, resp.Nil, 1, refused)
	add("acquire 0", acq, resp.IntValue(0), 1, unknown)
	// TTL-like: positive or a sentinel.
	ttl := &Spec{Name: "pttl", Granted: []Pattern{{Kind: PatIntPos}}, Refused: []Pattern{{Kind: PatInt, Int: -3}, {Kind: PatInt, Int: -2}}}
	add("ttl 1500", ttl, resp.IntValue(1500), 1, granted)
	add("ttl -3", ttl, resp.IntValue(-3), 1, refused)
	add("ttl -2", ttl, resp.IntValue(-2), 1, refused)
	add("ttl 0", ttl, resp.IntValue(0), 1, unknown)
	ttl2 := &Spec{Name: "pttl at least -1", Granted: []Pattern{{Kind: PatIntAtLeast, Int: -1}}, Refused: []Pattern{{Kind: PatInt, Int: -3}}}
	add("ttl2 0", ttl2, resp.IntValue(0), 1, granted)
	add("ttl2 -1", ttl2, resp.IntValue(-1), 1, granted)
	add("ttl2 -2", ttl2, resp.IntValue(-2), 1, unknown)
	add("ttl2 -3", ttl2, resp.IntValue(-3), 1, refused)
	// Simple strings.
	ss := &Spec{Name: "simple", Granted: []Pattern{{Kind: PatSimpleStr, Str: "DONE"}}, Refused: []Pattern{{Kind: PatSimpleStr, Str: "BUSY"}}}
	add("simple DONE", ss, resp.Value{Kind: resp.KindSimple, Str: []byte("DONE")}, 1, granted)
	add("simple BUSY", ss, resp.Value{Kind: resp.KindSimple, Str: []byte("BUSY")}, 1, refused)
	add("simple bulk BUSY", ss, resp.BulkValue([]byte("BUSY")), 1, unknown)
	// A reply matching both lists counts as granted.
	both := &Spec{Name: "both", Granted: []Pattern{{Kind: PatIntPos}}, Refused: []Pattern{{Kind: PatInt, Int: 1}}}
	add("both 1", both, resp.IntValue(1), 1, granted)
	// No patterns: nothing is known.
	add("empty spec", &Spec{}, resp.IntValue(1), 1, unknown)

	for _, c := range cases {
		g, r := c.spec.Classify(c.v, c.nkeys)
		if g != c.want.granted || r != c.want.refused {
			t.Errorf("%s: Classify(%v, %d) = granted %v refused %v, want %+v", c.name, c.v, c.nkeys, g, r, c.want)
		}
	}
}

func TestLookupBudget(t *testing.T) {
	r := NewRegistry()
	if r.budget != 32<<20 {
		t.Fatalf("default budget = %d, want 32 MiB", r.budget)
	}
	a := []byte(seedScript)
	b := []byte(seedOneLine)
	c := []byte(strings.ReplaceAll(seedScript, "\n", "\r\n"))
	d := []byte("return 1")
	r.budget = len(a) + len(b) + len(d)

	ka, kb := r.Lookup(a), r.Lookup(b)
	if r.BySha([]byte(ka.Script.Sha)) != ka || r.BySha([]byte(kb.Script.Sha)) != kb {
		t.Fatal("scripts within the budget are not remembered")
	}
	r.Lookup(a) // no double counting
	if r.bytes != len(a)+len(b) {
		t.Fatalf("bytes = %d, want %d", r.bytes, len(a)+len(b))
	}
	// c does not fit: it is still recognised, but not remembered.
	kc := r.Lookup(c)
	if kc.Spec != seedRelease || kc.Script.Sha != sha1Hex(c) || !bytes.Equal(kc.Script.Body, c) {
		t.Fatalf("over budget: spec %s sha %s", specName(kc.Spec), kc.Script.Sha)
	}
	if k := r.BySha([]byte(kc.Script.Sha)); k != nil {
		t.Fatal("script over the budget was remembered")
	}
	if k := r.Lookup(c); k.Spec != seedRelease || r.BySha([]byte(kc.Script.Sha)) != nil {
		t.Fatal("second Lookup over budget")
	}
	// d (unknown, so remembered explicitly) fills the budget exactly.
	kd := r.Lookup(d)
	r.Remember(kd)
	if r.BySha([]byte(kd.Script.Sha)) != kd || r.bytes != r.budget {
		t.Fatalf("script filling the budget exactly: remembered %v, bytes %d/%d", r.BySha([]byte(kd.Script.Sha)) != nil, r.bytes, r.budget)
	}
	// Nothing more fits, not even one byte.
	k1 := r.Lookup([]byte("1"))
	r.Remember(k1)
	if r.BySha([]byte(k1.Script.Sha)) != nil {
		t.Fatal("one-byte script remembered past the budget")
	}
	// What was remembered stays.
	if r.BySha([]byte(ka.Script.Sha)) != ka || r.Lookup(a) != ka || r.Lookup(b) != kb {
		t.Fatal("remembered scripts lost")
	}
	if r.bytes != r.budget {
		t.Fatalf("bytes = %d, want %d", r.bytes, r.budget)
	}
}

func TestLookupDefaultBudget(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates 64 MiB")
	}
	r := NewRegistry()
	const size = 1 << 20 // 32 of these fill the 32 MiB budget exactly
	body := bytes.Repeat([]byte("-"), size)
	var shas []string
	for i := range 33 {
		copy(body, fmt.Sprintf("return %d\n", i)) // distinct bodies, same length
		k := r.Lookup(body)
		r.Remember(k) // unknown scripts are kept only when asked
		shas = append(shas, k.Script.Sha)
	}
	for i, sha := range shas {
		remembered := r.BySha([]byte(sha)) != nil
		if want := i < 32; remembered != want {
			t.Errorf("script %d: remembered %v, want %v", i, remembered, want)
		}
	}
	if r.bytes != 32<<20 {
		t.Errorf("bytes = %d, want %d", r.bytes, 32<<20)
	}
}

func TestRegistryConcurrentUse(t *testing.T) {
	r := NewRegistry()
	bodies := [][]byte{
		[]byte(seedScript), []byte(seedOneLine), []byte(redlockPyRelease),
		[]byte(bsmRefresh), []byte(redsyncV4Touch), []byte("return 1"),
	}
	wantSpec := []*Spec{seedRelease, seedRelease, seedRelease, seedExtend, seedExtend, nil}
	var wg sync.WaitGroup
	errs := make(chan string, 64)
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				n := (g + i) % len(bodies)
				k := r.Lookup(bodies[n])
				if k.Spec != wantSpec[n] || k.Script.Sha != sha1Hex(bodies[n]) {
					select {
					case errs <- fmt.Sprintf("Lookup(%d): spec %s sha %s", n, specName(k.Spec), k.Script.Sha):
					default:
					}
				}
				if k := r.BySha([]byte(strings.ToUpper(sha1Hex(bodies[(n+1)%len(bodies)])))); k != nil && k.Spec != wantSpec[(n+1)%len(bodies)] {
					select {
					case errs <- fmt.Sprintf("BySha(%d): spec %s", n, specName(k.Spec)):
					default:
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	for n, b := range bodies {
		k := r.BySha([]byte(sha1Hex(b)))
		if wantSpec[n] == nil {
			if k != nil {
				t.Errorf("unknown body %d remembered without Remember", n)
			}
			continue
		}
		if k == nil || r.Lookup(b) != k {
			t.Errorf("body %d not remembered after concurrent use", n)
		}
	}
}

// A recognised script runs as the registered reference text of its
// canonical form, never as the client's bytes; a script registered by sha1
// runs as itself.
func TestKnownRunsTheReference(t *testing.T) {
	r := NewRegistry()
	variant := []byte("-- ours\r\nif redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) else return 0 end")
	k := r.Lookup(variant)
	if k.Spec != seedRelease {
		t.Fatalf("variant not recognised: %s", specName(k.Spec))
	}
	if k.Run == nil || k.Run.Sha != "647c65a442733a1aa440f99908d249d13b4d6c4a" || k.Run.Sha != sha1Hex(k.Run.Body) {
		t.Fatalf("Run = %+v; want the seed's exact text", k.Run)
	}
	if k.Script.Sha == k.Run.Sha {
		t.Fatalf("the client's own sha should differ from the reference's")
	}
	body := []byte("return redis.call('get', KEYS[1])")
	r.RegisterSha(strings.ToUpper(sha1Hex(body)), seedRelease)
	if k := r.Lookup(body); k.Spec != seedRelease || k.Run != k.Script {
		t.Fatalf("sha-registered script: spec %s, Run %p, Script %p; want Run == Script", specName(k.Spec), k.Run, k.Script)
	}
	if k := r.Lookup([]byte("return 1")); k.Run != nil {
		t.Fatalf("unknown script has a Run")
	}
}

// Every text that defines a built-in, and formatting variants of it, is
// recognised as that built-in.
func TestBuiltinTextsRecognised(t *testing.T) {
	r := NewRegistry()
	for _, b := range builtins {
		for _, src := range b.texts() {
			variants := map[string]string{
				"exact":          src,
				"comment before": "-- " + b.spec.Name + "\n" + src,
				"block comment":  "--[==[ " + b.spec.Name + " ]==]" + src,
				"comment after":  src + "\n-- end",
				"CRLF":           strings.ReplaceAll(strings.ReplaceAll(src, "\r\n", "\n"), "\n", "\r\n"),
				"LF":             strings.ReplaceAll(src, "\r\n", "\n"),
				"semicolon":      src + ";",
				"indented":       "\t" + strings.ReplaceAll(src, "\n", "\n\t") + "\n",
			}
			for name, v := range variants {
				if k := r.Lookup([]byte(v)); k.Spec != b.spec {
					t.Errorf("%s, %s: Lookup(%q).Spec = %s", b.spec.Name, name, v, specName(k.Spec))
				}
			}
		}
	}
}

func TestParsePattern(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Pattern
	}{
		{"ok", Pattern{Kind: PatOK}},
		{"OK", Pattern{Kind: PatOK}},
		{"nil", Pattern{Kind: PatNil}},
		{"int:1", Pattern{Kind: PatInt, Int: 1}},
		{"int:-3", Pattern{Kind: PatInt, Int: -3}},
		{"int:nkeys", Pattern{Kind: PatIntNKeys}},
		{"int:>0", Pattern{Kind: PatIntPos}},
		{"int:>=0", Pattern{Kind: PatIntAtLeast, Int: 0}},
		{"int:>=-1", Pattern{Kind: PatIntAtLeast, Int: -1}},
		{"error:ERROR", Pattern{Kind: PatError, Str: "ERROR"}},
		{"status:QUEUED", Pattern{Kind: PatSimpleStr, Str: "QUEUED"}},
	} {
		got, err := ParsePattern(c.in)
		if err != nil || got != c.want {
			t.Errorf("ParsePattern(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, in := range []string{"", "int", "int:", "int:x", "int:>=", "int:>=x", "int:1.5", "okay", "string:x"} {
		if got, err := ParsePattern(in); err == nil {
			t.Errorf("ParsePattern(%q) = %+v, want an error", in, got)
		}
	}
}
