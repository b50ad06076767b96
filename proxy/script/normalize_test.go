package script

import (
	"bytes"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// seedScript is the release script of the Redlock page (seed 000), byte for
// byte.
const seedScript = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend"

const seedSha = "647c65a442733a1aa440f99908d249d13b4d6c4a"

// seedOneLine is the seed on one line, the base of the must-differ cases.
const seedOneLine = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

func sha1Hex(b []byte) string {
	sum := sha1.Sum(b)
	return hex.EncodeToString(sum[:])
}

func mustNormalize(t testing.TB, src string) string {
	t.Helper()
	canon, err := Normalize([]byte(src))
	if err != nil {
		t.Fatalf("Normalize(%q): %v", src, err)
	}
	return canon
}

func TestSeedScriptBytes(t *testing.T) {
	if got := sha1Hex([]byte(seedScript)); got != seedSha {
		t.Fatalf("sha1 of the seed script = %s, want %s (the test constant is wrong)", got, seedSha)
	}
}

func TestNormalizeCanonicalForm(t *testing.T) {
	// The documented form: tokens one space apart, strings re-quoted,
	// comments gone, command names lowercased.
	want := `if redis . call ( "get" , KEYS [ 1 ] ) == ARGV [ 1 ] then return redis . call ( "del" , KEYS [ 1 ] ) else return 0 end`
	if got := mustNormalize(t, seedScript); got != want {
		t.Fatalf("Normalize(seed) =\n%s\nwant\n%s", got, want)
	}
	// Locals become _1, _2... in order of declaration.
	got := mustNormalize(t, "local token, key = ARGV[1], KEYS[1]\nreturn redis.call('GET', key) == token")
	want = `local _1 , _2 = ARGV [ 1 ] , KEYS [ 1 ] return redis . call ( "get" , _2 ) == _1`
	if got != want {
		t.Fatalf("Normalize(locals) =\n%s\nwant\n%s", got, want)
	}
}

func TestNormalizeDoesNotModifyInput(t *testing.T) {
	src := []byte("if redis.call('GET',KEYS[1]) == ARGV[1] then -- c\r\n return redis.call('DEL',KEYS[1]); end; return 0")
	orig := append([]byte(nil), src...)
	mustNormalize(t, string(src))
	if _, err := Normalize(src); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(src, orig) {
		t.Fatalf("Normalize modified its input: %q", src)
	}
}

// seedVariants are scripts that differ from the seed only in ways Normalize
// promises to ignore.
var seedVariants = []struct{ name, src string }{
	{"exact", seedScript},
	{"one line", seedOneLine},
	{"no spaces around == and after commas", `if redis.call("get",KEYS[1])==ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`},
	{"spaces around every token", `  if  redis . call ( "get" , KEYS [ 1 ] )  ==  ARGV [ 1 ]  then  return  redis . call ( "del" , KEYS [ 1 ] )  else  return  0  end  `},
	{"spaces after commas", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`},
	{"tabs", "if\tredis.call(\"get\",\tKEYS[1])\t==\tARGV[1]\tthen\n\t\treturn\tredis.call(\"del\",\tKEYS[1])\n\telse\n\t\treturn\t0\n\tend\n"},
	{"vertical tab and form feed", "\fif redis.call(\"get\",KEYS[1]) ==\vARGV[1] then\freturn redis.call(\"del\",KEYS[1]) else return 0 end\f"},
	{"blank lines around", "\n\n\n" + seedScript + "\n\n\n"},
	{"CRLF", strings.ReplaceAll(seedScript, "\n", "\r\n")},
	{"CRLF with trailing newline", strings.ReplaceAll(seedScript, "\n", "\r\n") + "\r\n"},
	// redlock-py's unlock script, exact bytes (sha1 4e92fdc6...).
	{"redlock-py", "\n    if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n        return redis.call(\"del\",KEYS[1])\n    else\n        return 0\n    end"},
	// bsm/redislock v0.9.4 luaRelease, exact bytes.
	{"bsm/redislock", `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("del", KEYS[1]) else return 0 end`},
	// go-redsync/redsync v1 deleteScript, exact bytes.
	{"redsync v1", "\n\tif redis.call(\"GET\", KEYS[1]) == ARGV[1] then\n\t\treturn redis.call(\"DEL\", KEYS[1])\n\telse\n\t\treturn 0\n\tend\n"},
	{"redsync one line", `if redis.call("GET", KEYS[1]) == ARGV[1] then return redis.call("DEL", KEYS[1]) else return 0 end`},

	// Quotes and string forms.
	{"single quotes", `if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end`},
	{"mixed quotes", `if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`},
	{"long brackets", `if redis.call([[get]],KEYS[1]) == ARGV[1] then return redis.call([[del]],KEYS[1]) else return 0 end`},
	{"long brackets level 2", `if redis.call([==[get]==],KEYS[1]) == ARGV[1] then return redis.call([=[del]=],KEYS[1]) else return 0 end`},
	{"long bracket, first newline dropped", "if redis.call([[\nget]],KEYS[1]) == ARGV[1] then return redis.call([=[\r\ndel]=],KEYS[1]) else return 0 end"},
	{"long bracket upper case", `if redis.call([[GET]],KEYS[1]) == ARGV[1] then return redis.call([==[Del]==],KEYS[1]) else return 0 end`},
	{"decimal escapes", `if redis.call("\103\101\116",KEYS[1]) == ARGV[1] then return redis.call("\100\101\108",KEYS[1]) else return 0 end`},
	{"decimal escape then upper case", `if redis.call("\103ET",KEYS[1]) == ARGV[1] then return redis.call('\068EL',KEYS[1]) else return 0 end`},
	{"short decimal escape", `if redis.call("\71ET",KEYS[1]) == ARGV[1] then return redis.call("d\101l",KEYS[1]) else return 0 end`},
	{"escaped ordinary letters", `if redis.call("\g\et",KEYS[1]) == ARGV[1] then return redis.call('\d\e\l',KEYS[1]) else return 0 end`},

	// Command-name case.
	{"upper case commands", `if redis.call("GET",KEYS[1]) == ARGV[1] then return redis.call("DEL",KEYS[1]) else return 0 end`},
	{"title case commands", `if redis.call("Get",KEYS[1]) == ARGV[1] then return redis.call("Del",KEYS[1]) else return 0 end`},
	{"mixed case commands", `if redis.call("gEt",KEYS[1]) == ARGV[1] then return redis.call('dEL',KEYS[1]) else return 0 end`},

	// Comments.
	{"leading line comment", "-- release the lock if it is ours\n" + seedScript},
	{"trailing line comment without newline", seedScript + " -- done"},
	{"trailing line comment with newline", seedScript + "\n-- done\n"},
	{"end-of-line comments", "if redis.call(\"get\",KEYS[1]) == ARGV[1] then -- ours?\n    return redis.call(\"del\",KEYS[1]) -- yes: delete\nelse -- somebody else's\n    return 0 -- not deleted\nend -- the end"},
	{"end-of-line comments, CRLF", "if redis.call(\"get\",KEYS[1]) == ARGV[1] then -- ours?\r\n    return redis.call(\"del\",KEYS[1]) -- yes\r\nelse\r\n    return 0\r\nend -- the end\r\n"},
	{"empty line comments", "--\n" + seedScript + "\n--"},
	{"triple dash is a line comment", "---[[ not a block comment\n" + seedScript},
	{"dash space bracket is a line comment", "-- [[ not a block comment\n" + seedScript},
	{"comment holding quotes", "-- it's \"ours\"\n" + seedScript},
	{"block comment before", "--[[ release\n  the lock ]]" + seedScript},
	{"block comment between every token", `if--[[a]]redis--[[b]].--[[c]]call--[[d]](--[[e]]"get"--[[f]],--[[g]]KEYS--[[h]][--[[i]]1--[[j]]]--[[k]])--[[l]]==--[[m]]ARGV[1]--[[n]]then--[[o]]return redis.call("del",KEYS[1])--[[p]]else--[[q]]return--[[r]]0--[[s]]end--[[t]]`},
	{"level-2 block comment holding ]] and newlines", "--[==[ multi\nline ]] still comment ]=] still\n]==]\n" + seedScript},
	{"block comment holding an unterminated quote", `--[[ "unterminated ]]` + seedScript},
	{"block comment at the end", seedScript + "--[=[ bye ]=]"},
	{"block comment, CRLF inside", "--[[ a\r\nb\r\n]]\r\n" + strings.ReplaceAll(seedScript, "\n", "\r\n")},

	// Semicolons.
	{"trailing semicolons", `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]); else return 0; end;`},
	{"semicolons, multi-line", "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1]);\nelse\n    return 0;\nend;\n"},

	// Everything at once.
	{"everything", "-- Redlock release\r\nif redis.call( 'GET' , KEYS[ 1 ] )==ARGV[ 1 ] then --[[ ours ]]\r\n\treturn redis.call([[DEL]],KEYS[1]);\r\nelse\r\n\treturn 0; -- not ours\r\nend;\r\n"},
}

func TestNormalizeSeedVariants(t *testing.T) {
	want := mustNormalize(t, seedScript)
	for _, v := range seedVariants {
		t.Run(v.name, func(t *testing.T) {
			got, err := Normalize([]byte(v.src))
			if err != nil {
				t.Fatalf("Normalize(%q): %v", v.src, err)
			}
			if got != want {
				t.Errorf("Normalize(%q) =\n%s\nwant (the seed's)\n%s", v.src, got, want)
			}
		})
	}
}

func TestNormalizePcallCommandCase(t *testing.T) {
	lower := mustNormalize(t, `if redis.pcall("get",KEYS[1]) == ARGV[1] then return redis.pcall("del",KEYS[1]) else return 0 end`)
	for _, src := range []string{
		`if redis.pcall("GET",KEYS[1]) == ARGV[1] then return redis.pcall("DEL",KEYS[1]) else return 0 end`,
		`if redis.pcall('Get', KEYS[1]) == ARGV[1] then return redis.pcall([[Del]], KEYS[1]) else return 0 end`,
		"if redis.pcall(\"\\071ET\",KEYS[1]) == ARGV[1] then\r\n return redis.pcall(\"dEl\",KEYS[1]) -- x\r\nelse return 0 end",
	} {
		if got := mustNormalize(t, src); got != lower {
			t.Errorf("Normalize(%q) =\n%s\nwant\n%s", src, got, lower)
		}
	}
	// pcall is not call: a different script.
	if lower == mustNormalize(t, seedScript) {
		t.Errorf("redis.pcall and redis.call scripts normalize equal: %s", lower)
	}
	// The mixed script lowercases both command names.
	mixed := mustNormalize(t, `if redis.call("GET",KEYS[1]) == ARGV[1] then return redis.pcall("DEL",KEYS[1]) else return 0 end`)
	if !strings.Contains(mixed, `call ( "get"`) || !strings.Contains(mixed, `pcall ( "del"`) {
		t.Errorf("command names not lowercased in %s", mixed)
	}
}

func TestNormalizeLocalNames(t *testing.T) {
	groups := [][]string{
		{ // compare-and-delete through a local
			`local v = redis.call('get', KEYS[1]) if v == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end`,
			"local current = redis.call(\"GET\", KEYS[1])\nif current == ARGV[1] then\n    return redis.call(\"DEL\", KEYS[1])\nelse\n    return 0\nend\n",
			`local _ = redis.call("get", KEYS[1]); if _ == ARGV[1] then return redis.call("del", KEYS[1]); else return 0; end`,
			`local lock_value_1 = redis.call("get",KEYS[1]) if lock_value_1 == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`,
			"local call = redis.call('get', KEYS[1])\r\nif call == ARGV[1] then return redis.call('del', KEYS[1]) else return 0 end",
		},
		{ // several locals in one declaration
			`local key, token = KEYS[1], ARGV[1] if redis.call("get", key) == token then return redis.call("del", key) end return 0`,
			`local k, t = KEYS[1], ARGV[1] if redis.call("get", k) == t then return redis.call("del", k) end return 0`,
			"local a,b=KEYS[1],ARGV[1];\nif redis.call('GET',a)==b then return redis.call('DEL',a) end;\nreturn 0;",
		},
		{ // locals declared one by one: renaming follows declaration order
			`local key = KEYS[1] local token = ARGV[1] if redis.call("get", key) == token then return redis.call("del", key) end return 0`,
			`local token = KEYS[1] local key = ARGV[1] if redis.call("get", token) == key then return redis.call("del", token) end return 0`,
		},
		{ // loop variables (node-redlock's multi-key release)
			"\n  local count = 0\n  for i, key in ipairs(KEYS) do\n    -- Only remove entries for *this* lock value.\n    if redis.call(\"get\", key) == ARGV[1] then\n      redis.pcall(\"del\", key)\n      count = count + 1\n    end\n  end\n\n  -- Return the number of entries removed.\n  return count\n",
			"local n = 0 for _, k in ipairs(KEYS) do if redis.call('GET', k) == ARGV[1] then redis.pcall('DEL', k) n = n + 1 end end return n",
		},
		{ // numeric for
			`local n = 0 for i = 1, #KEYS do if redis.call("get", KEYS[i]) == ARGV[1] then n = n + redis.call("del", KEYS[i]) end end return n`,
			`local deleted = 0 for idx = 1, #KEYS do if redis.call("GET", KEYS[idx]) == ARGV[1] then deleted = deleted + redis.call("DEL", KEYS[idx]) end end return deleted`,
		},
		{ // function parameters
			`local function release(key, token) if redis.call("get", key) == token then return redis.call("del", key) end return 0 end return release(KEYS[1], ARGV[1])`,
			`local function f(k, t) if redis.call("GET", k) == t then return redis.call("DEL", k) end return 0 end return f(KEYS[1], ARGV[1])`,
		},
	}
	for gi, g := range groups {
		want := mustNormalize(t, g[0])
		for _, src := range g[1:] {
			if got := mustNormalize(t, src); got != want {
				t.Errorf("group %d: Normalize(%q) =\n%s\nwant\n%s", gi, src, got, want)
			}
		}
	}
}

func TestNormalizeDistinguishes(t *testing.T) {
	cases := []struct{ name, a, b string }{
		{"== vs ~=", seedOneLine,
			`if redis.call("get",KEYS[1]) ~= ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`},
		{"del vs get", seedOneLine,
			`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("get",KEYS[1]) else return 0 end`},
		{"get vs del", seedOneLine,
			`if redis.call("del",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`},
		{"del vs unlink", seedOneLine,
			`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("unlink",KEYS[1]) else return 0 end`},
		{"KEYS[1] vs KEYS[2]", seedOneLine,
			`if redis.call("get",KEYS[2]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`},
		{"KEYS[1] vs KEYS[11]", seedOneLine,
			`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[11]) else return 0 end`},
		{"ARGV[1] vs ARGV[2]", seedOneLine,
			`if redis.call("get",KEYS[1]) == ARGV[2] then return redis.call("del",KEYS[1]) else return 0 end`},
		{"return 0 vs return 1", seedOneLine,
			`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 1 end`},
		{"return 0 vs return -1", seedOneLine,
			`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return -1 end`},
		{"call vs pcall", seedOneLine,
			`if redis.call("get",KEYS[1]) == ARGV[1] then return redis.pcall("del",KEYS[1]) else return 0 end`},
		{"branches swapped", seedOneLine,
			`if redis.call("get",KEYS[1]) == ARGV[1] then return 0 else return redis.call("del",KEYS[1]) end`},
		{"KEYS vs keys (names are case-sensitive)", seedOneLine,
			`if redis.call("get",keys[1]) == ARGV[1] then return redis.call("del",keys[1]) else return 0 end`},
		{"IF vs if", `if ARGV[1] then return 1 end`, `IF ARGV[1] then return 1 end`},
		{"returned OK vs ok",
			`if redis.call("get",KEYS[1]) == ARGV[1] then return "OK" else return 0 end`,
			`if redis.call("get",KEYS[1]) == ARGV[1] then return "ok" else return 0 end`},
		{"status_reply OK vs ok",
			`return redis.status_reply("OK")`, `return redis.status_reply("ok")`},
		{"error_reply ERROR vs error",
			`return redis.error_reply('ERROR')`, `return redis.error_reply('error')`},
		{"compared reply OK vs ok",
			`if redis.call("set",KEYS[1],ARGV[1]) == "OK" then return 1 end return 0`,
			`if redis.call("set",KEYS[1],ARGV[1]) == "ok" then return 1 end return 0`},
		{"key literal case is kept (only the command name is lowercased)",
			`return redis.call("get","Lock")`, `return redis.call("get","lock")`},
		{"first argument of another function is not lowercased",
			`return string.len("GET")`, `return string.len("get")`},
		{"whitespace inside strings is kept", `return "a b"`, `return "a  b"`},
		{"whitespace inside long strings is kept", `return [[a b]]`, `return [[a  b]]`},
		{"comment markers inside strings are content", `return "--x"`, `return "--y"`},
		{"block comment markers inside strings are content", `return "--[[x]]" .. ARGV[1]`, `return "--[[y]]" .. ARGV[1]`},
		{"string vs name", `return "ARGV"`, `return ARGV`},
		{"local vs global", `local v = ARGV[1] return v`, `local v = ARGV[1] return w`},
		{"which local", `local a, b = KEYS[1], ARGV[1] return a`, `local a, b = KEYS[1], ARGV[1] return b`},
		{"field after . is not renamed (redis.call vs a local named call)",
			`local call = 5 return redis.call("get",KEYS[1])`,
			`local call = 5 return redis._1("get",KEYS[1])`},
		{"field after . is not renamed (table fields)",
			`local x = {} x.call = 1 return x.call`,
			`local x = {} x.other = 1 return x.other`},
		{"method after : is not renamed",
			`local get = 1 return s:get()`,
			`local get = 1 return s:_1()`},
		{"a local named call is not redis.call",
			`local call = redis.call return call("get",KEYS[1])`,
			`local call = redis.call return redis.call("get",KEYS[1])`},
		{"number", `return 10`, `return 1`},
		// A global that happens to be spelled like a renamed local must
		// not become that local: in Redis the first script compares the
		// value it read, the second reads the nonexistent global _1.
		{"undeclared _1 vs renamed local",
			`local v = redis.call("get",KEYS[1]) if v == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`,
			`local v = redis.call("get",KEYS[1]) if _1 == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`},
		{"undeclared _1 vs local itself", `local a = a`, `local a = _1`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			na, nb := mustNormalize(t, c.a), mustNormalize(t, c.b)
			if na == nb {
				t.Errorf("different scripts normalize equal:\n  %q\n  %q\nboth -> %s", c.a, c.b, na)
			}
		})
	}
}

func TestNormalizeFieldNamesKept(t *testing.T) {
	got := mustNormalize(t, `local call, pcall, redis2 = 1, 2, 3 return redis.call("GET", KEYS[1]), redis.pcall("DEL", KEYS[1]), t:call()`)
	for _, want := range []string{`redis . call ( "get"`, `redis . pcall ( "del"`, `t : call ( )`} {
		if !strings.Contains(got, want) {
			t.Errorf("Normalize = %s\nwant it to contain %s", got, want)
		}
	}
}

// In Lua a line comment ends at the first '\n' or '\r' (llex.c,
// currIsNewline), so a carriage return alone ends it. A normalizer that reads
// on to '\n' hides code that Redis runs.
func TestNormalizeLineCommentEndsAtCarriageReturn(t *testing.T) {
	t.Run("comment then code", func(t *testing.T) {
		got, want := mustNormalize(t, "-- note\rreturn 1"), mustNormalize(t, "return 1")
		if got != want {
			t.Errorf("Normalize(%q) = %q, want %q (Redis runs `return 1`)", "-- note\rreturn 1", got, want)
		}
	})
	t.Run("CR-only line endings", func(t *testing.T) {
		src := "-- release\rif redis.call(\"get\",KEYS[1]) == ARGV[1] then -- ours\r    return redis.call(\"del\",KEYS[1])\relse\r    return 0\rend"
		if got, want := mustNormalize(t, src), mustNormalize(t, seedScript); got != want {
			t.Errorf("Normalize(%q) =\n%s\nwant (the seed's)\n%s", src, got, want)
		}
	})
	t.Run("code hidden behind a CR is not the seed", func(t *testing.T) {
		// Redis runs the SET (overwriting another client's token), then
		// the seed's compare-and-delete succeeds: a forced unlock that
		// the proxy would take for a plain release.
		src := "-- x\rredis.call(\"set\",KEYS[1],ARGV[1])\n" + seedScript
		if mustNormalize(t, src) == mustNormalize(t, seedScript) {
			t.Errorf("Normalize(%q) equals the seed's canonical form, but Redis runs the SET after the CR", src)
		}
	})
}

func TestNormalizeUnreadable(t *testing.T) {
	for _, src := range []string{
		`return "abc`,
		`return 'abc`,
		`return "abc'`,
		"return \"ab\ncd\"",
		"return 'ab\r\ncd'",
		`return "abc\`,
		`return "\256"`,
		`return "\999"`,
		`return [[abc`,
		`return [==[abc]]`,
		`return [==[abc]=]`,
		`return [=[abc]==]`,
		`--[[ never closed`,
		`--[==[ closed at the wrong level ]]`,
		"--[[\n" + seedScript,
		seedScript + " --[[",
		seedScript + ` "`,
		`redis.call("get`,
		`redis.call('GET`,
	} {
		canon, err := Normalize([]byte(src))
		if !errors.Is(err, ErrSyntax) {
			t.Errorf("Normalize(%q) = %q, %v; want an error wrapping ErrSyntax", src, canon, err)
		}
		if canon != "" {
			t.Errorf("Normalize(%q) returned text %q with its error", src, canon)
		}
	}
}

func TestNormalizeTooLong(t *testing.T) {
	pad := func(n int) []byte {
		b := append([]byte("return 1"), bytes.Repeat([]byte(" "), n-len("return 1"))...)
		if len(b) != n {
			panic("bad pad")
		}
		return b
	}
	if got, err := Normalize(pad(MaxScriptBytes)); err != nil || got != "return 1" {
		t.Errorf("Normalize(%d bytes) = %q, %v; want \"return 1\", nil", MaxScriptBytes, got, err)
	}
	for _, n := range []int{MaxScriptBytes + 1, 2 * MaxScriptBytes, 4 << 20} {
		got, err := Normalize(pad(n))
		if err == nil {
			t.Errorf("Normalize(%d bytes) = %q, nil; want an error", n, got)
		}
		if got != "" {
			t.Errorf("Normalize(%d bytes) returned text with its error", n)
		}
	}
}

func TestNormalizeNeverPanics(t *testing.T) {
	inputs := []string{
		"", " ", "\n", "\r", "\x00", "\xff\xfe", "é", "🙂", "\\",
		"-", "--", "---", "--[", "--[=", "--[==", "--[=[", "--[==[]=]", "- -",
		"[", "[=", "[==", "[=[", "[[", "]]", "]=]", "[=x[",
		"\"", "'", "\"\\", "\"\\1", "\"\\12", "\"\\123", "\"\\1234\"", "\"\\\n\"", "\"\\\r\n\"",
		".", "..", "...", "....", ".5", "1e", "1e+", "1e-", "0x", "0xe-1", "1..2", "1.2.3",
		"==", "~=", "~", "<=", ">=", "::", "//", "<<", ">>", "#", "%", "^", "&", "|",
		"redis", "redis.", "redis.call", "redis.call(", "redis.call(\"", `redis.call("GET"`, `redis.pcall('X')`,
		`redis"."call"("GET")`,
		"local", "local function", "local function f(", "local function f(a,", "local a,", "local a, b,", "local 1",
		"function", "function(", "function f(a,", "function f(a, \")\", b)", "for", "for i", "for i,", "for ,",
		strings.Repeat("[", 1000), strings.Repeat("[=", 1000), strings.Repeat("--[", 1000),
		strings.Repeat("local ", 1000), strings.Repeat("function(", 1000), strings.Repeat("\"\\", 500),
	}
	for _, src := range inputs {
		canon, err := Normalize([]byte(src))
		if err != nil && !errors.Is(err, ErrSyntax) {
			t.Errorf("Normalize(%q): %v; want nil or ErrSyntax", src, err)
		}
		if err != nil && canon != "" {
			t.Errorf("Normalize(%q) returned text %q with its error", src, canon)
		}
	}
	// Every prefix and every one-byte deletion of commented scripts.
	for _, base := range []string{seedScript, seedVariants[len(seedVariants)-1].src, "--[==[ c ]==] local a = [[x]] -- y\r\n return '\\65'"} {
		for i := 0; i <= len(base); i++ {
			for _, src := range []string{base[:i], base[:i] + base[min(i+1, len(base)):]} {
				if _, err := Normalize([]byte(src)); err != nil && !errors.Is(err, ErrSyntax) {
					t.Errorf("Normalize(%q): %v; want nil or ErrSyntax", src, err)
				}
			}
		}
	}
}

func TestNormalizeIdempotentOnVariants(t *testing.T) {
	for _, v := range seedVariants {
		canon := mustNormalize(t, v.src)
		if again := mustNormalize(t, canon); again != canon {
			t.Errorf("%s: Normalize(Normalize(x)) = %s\nwant %s", v.name, again, canon)
		}
	}
}

// A byte outside strings and comments that is not part of a name, number or
// operator is a token of its own, one byte long (Lua rejects such scripts,
// but Normalize must still read them byte by byte, not swallow what
// follows).
func TestNormalizeStrayNonASCIIByte(t *testing.T) {
	if got := mustNormalize(t, "\xea"); got != "\xea" {
		t.Errorf("Normalize(%q) = %q, want %q", "\xea", got, "\xea")
	}
	// The quote after the stray byte opens an unterminated string.
	if got, err := Normalize([]byte("return 1 \xea\"")); !errors.Is(err, ErrSyntax) {
		t.Errorf("Normalize(%q) = %q, %v; want ErrSyntax", "return 1 \xea\"", got, err)
	}
	// The byte after the stray one is not dropped.
	a, b := mustNormalize(t, "return \xeaA"), mustNormalize(t, "return \xeaB")
	if a == b {
		t.Errorf("Normalize(%q) == Normalize(%q) == %q", "return \xeaA", "return \xeaB", a)
	}
}

// Normalize runs on every new script a client sends (EVAL, SCRIPT LOAD),
// so its cost must stay about linear in the script's length, up to
// MaxScriptBytes: otherwise one client can keep the proxy's CPUs busy.
//
// Long strings and long comments: each must be scanned where it is, not by
// copying the rest of the script. Measured in bytes allocated, which does not
// depend on the machine's speed.
func TestNormalizeLongBracketsCostLinear(t *testing.T) {
	const n = 64 << 10
	for _, src := range []string{
		strings.Repeat("[[]]", n/4),
		strings.Repeat("--[[]]", n/6),
		strings.Repeat("[==[x]==] ", n/10),
	} {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if _, err := Normalize([]byte(src)); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(256*len(src)); got > limit {
			t.Errorf("Normalize(%q... %d bytes) allocated %d MiB, want under %d MiB (256 bytes per input byte)",
				src[:12], len(src), got>>20, limit>>20)
		}
	}
}

// Function headers: the declaration scans must stop where a header ends,
// so that their work stays linear in the script (they once rescanned to
// the end of the script for every "function"). Counted, not timed.
func TestNormalizeFunctionHeadersCostLinear(t *testing.T) {
	const n = 128 << 10
	for _, src := range []string{
		strings.Repeat("function(", n/9),
		strings.Repeat("local function(", n/16),
		strings.Repeat("function f(a, b ", n/16),
		strings.Repeat("function a.b:c(", n/15),
		strings.Repeat("for a, b in ", n/12),
		strings.Repeat("local a, ", n/9),
	} {
		toks, err := tokenize([]byte(src))
		if err != nil {
			t.Fatal(err)
		}
		if scanned := renameLocals(toks); scanned > 4*len(toks) {
			t.Errorf("renameLocals(%q... %d tokens) scanned %d tokens, want at most 4 per token", src[:16], len(toks), scanned)
		}
	}
}
