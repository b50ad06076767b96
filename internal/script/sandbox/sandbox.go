package sandbox

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Bounds of the sandbox. A lock script needs a few hundred instructions;
// these leave room for many keys while keeping a hostile script to a few
// milliseconds and megabytes.
const (
	// MaxScriptBytes is the longest script the classifier reads.
	MaxScriptBytes = 256 << 10
	// maxSteps bounds the Lua instructions of one run.
	MaxSteps = 100_000
	// maxString bounds every string a script makes (its inputs may be up
	// to the proxy's argument limit, below this).
	maxString = 1 << 20
	// maxNesting bounds the syntactic nesting of a script (Lua 5.1's own
	// parser stops at 200 levels).
	maxNesting = 200
	// Concatenation is the one operator that allocates in proportion to
	// its operands. It is allowed outside loops and functions only, a few
	// times, with few operands, and every register is watched for a
	// string over maxString while such a script runs.
	maxConcats        = 16
	maxConcatOperands = 8
	// maxReplyElems and maxReplyDepth bound a script's reply.
	maxReplyElems = 10_000
	maxReplyDepth = 32
	// maxUnpack bounds the values unpack and string.byte may push.
	maxUnpack = 1024
	// maxDerivedString bounds every string of a program compiled by
	// PrepareDerived, which may concatenate in loops: its runs build at
	// most MaxSteps strings of this size.
	maxDerivedString = 4 << 10
)

// Program is a script compiled for the sandbox.
type Program struct {
	Sha    string
	proto  *lua.FunctionProto
	concat bool // uses "..": registers are watched for long strings
	// maxStr bounds the strings a run builds (maxString, or
	// maxDerivedString for PrepareDerived).
	maxStr int
	// strs are the script's string constants, in order, each once: the
	// names a script may give a member of its own (a lock's marker).
	Strs []string
	// lits are every constant of the script, which a call's arguments are
	// compared with (relations.go).
	Lits *Literals
}

// Compile reads, checks and compiles a script. The refusal says why a
// script cannot be run in the sandbox (too long, not Lua, nested too deep,
// concatenation in a loop).
func Compile(body []byte) (*Program, *Refusal) {
	p, ref := Prepare(body)
	if ref != nil {
		return nil, &Refusal{Sha: Sha1(body), Reason: ref.Reason}
	}
	return p, nil
}

func Prepare(body []byte) (*Program, *Stop) {
	return prepare(body, false)
}

// PrepareDerived compiles a script that may concatenate strings inside
// loops and functions (as scripts that build key names per hold do), for
// runs with SideKeys.Derived only: every string such a run builds is
// bounded by a few kilobytes instead.
func PrepareDerived(body []byte) (*Program, *Stop) {
	return prepare(body, true)
}

func prepare(body []byte, derived bool) (*Program, *Stop) {
	p := &Program{Sha: Sha1(body), maxStr: maxString}
	if derived {
		p.maxStr = maxDerivedString
	}
	if len(body) > MaxScriptBytes {
		return nil, Refuse(RefuseOther, "is longer than %d bytes", MaxScriptBytes)
	}
	chunk, err := ParseChunk(body)
	if err != nil {
		return nil, Refuse(RefuseOther, "does not compile: %s", OneLine(err.Error()))
	}
	w := &walker{loopConcat: derived}
	w.stmts(chunk, 0, false)
	if w.ref != nil {
		return nil, w.ref
	}
	p.concat = w.concats > 0
	p.Strs = w.strs
	w.lits.finish()
	p.Lits = &w.lits
	proto, err := compileChunk(chunk, p.Sha)
	if err != nil {
		return nil, Refuse(RefuseOther, "does not compile: %s", OneLine(err.Error()))
	}
	p.proto = proto
	return p, nil
}

func ParseChunk(body []byte) (chunk []ast.Stmt, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return parse.Parse(strings.NewReader(string(body)), "user_script")
}

func compileChunk(chunk []ast.Stmt, name string) (p *lua.FunctionProto, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("%v", r)
		}
	}()
	return lua.Compile(chunk, name)
}

func OneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

// result is what one run did.
type Result struct {
	Reply   resp.Value
	State   *State
	Ref     *Stop
	Steps   int
	Touched map[string]bool // the keys commands were given
	Zset    bool            // it called a sorted-set command
	Hash    bool            // it called a hash command
}

// noTTL refuses a run that left a key it wrote without an expiry (a key
// may be written in steps, SETNX then PEXPIRE, HSET then PEXPIREAT: what
// counts is how the run leaves it).
func noTTL(before, after *State, wrote map[string]string) *Stop {
	names := make([]string, 0, len(wrote))
	for k := range wrote {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		it, ok := after.Lookup(k)
		if !ok || it.At != 0 {
			continue
		}
		if b, ok := before.Lookup(k); ok && b.Equal(it) {
			continue // left as it was
		}
		return Refuse(RefuseNoTTL, "leaves %s without an expiry (it ran %s on it): the proxy never writes a lock that cannot expire", strconv.Quote(Short(k)), wrote[k])
	}
	return nil
}

// runner is a Lua interpreter reused for many runs: its library
// functions are made once, and every run gets fresh tables (globals,
// string, table, math, os, redis, KEYS, ARGV), so nothing one run does is
// seen by the next.
type Runner struct {
	L      *lua.LState
	libs   map[string]map[string]lua.LValue // "" for the globals
	m      *meter
	sb     *sandbox
	Broken bool // a Go panic went through the interpreter: do not reuse it
}

func NewRunner() *Runner {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 64, RegistrySize: 256, RegistryMaxSize: 1 << 14})
	r := &Runner{L: L, libs: map[string]map[string]lua.LValue{}}
	for _, lib := range []struct {
		name string
		fn   lua.LGFunction
	}{{lua.BaseLibName, lua.OpenBase}, {lua.TabLibName, lua.OpenTable}, {lua.StringLibName, lua.OpenString}, {lua.MathLibName, lua.OpenMath}} {
		L.Push(L.NewFunction(lib.fn))
		L.Push(lua.LString(lib.name))
		L.Call(1, 0)
	}
	snapshot := func(t *lua.LTable) map[string]lua.LValue {
		out := map[string]lua.LValue{}
		t.ForEach(func(k, v lua.LValue) {
			if ks, ok := k.(lua.LString); ok {
				if _, isTable := v.(*lua.LTable); !isTable {
					out[string(ks)] = v
				}
			}
		})
		return out
	}
	g := L.G.Global
	r.libs[""] = snapshot(g)
	for _, name := range []string{"string", "table", "math"} {
		r.libs[name] = snapshot(g.RawGetString(name).(*lua.LTable))
	}
	r.install()
	return r
}

func (r *Runner) Close() { r.L.Close() }

// install replaces or removes the library functions the sandbox does not
// offer as they are.
func (r *Runner) install() {
	L := r.L
	fn := func(f lua.LGFunction) lua.LValue { return L.NewFunction(f) }
	stopWith := func(kind StopKind, format string, args ...any) lua.LValue {
		return fn(func(L *lua.LState) int { return r.m.stop(L, Refuse(kind, format, args...)) })
	}
	base := r.libs[""]
	for _, name := range []string{"dofile", "loadfile", "load", "loadstring", "require", "module", "getfenv", "setfenv",
		"newproxy", "_printregs", "collectgarbage", "_GOPHER_LUA_VERSION", "_G"} {
		delete(base, name)
	}
	base["print"] = fn(func(*lua.LState) int { return 0 })
	base["unpack"] = fn(func(L *lua.LState) int { return r.sb.unpack(L) })
	str := r.libs["string"]
	for _, name := range []string{"find", "match", "gmatch", "gsub", "dump"} {
		str[name] = stopWith(RefuseOther, "uses string.%s, which the classifier does not run (pattern matching has no bound on its time)", name)
	}
	str["rep"] = fn(func(L *lua.LState) int { return r.sb.strRep(L) })
	str["format"] = fn(func(L *lua.LState) int { return r.sb.strFormat(L) })
	str["byte"] = fn(func(L *lua.LState) int { return r.sb.strByte(L) })
	r.libs["table"]["concat"] = fn(func(L *lua.LState) int { return r.sb.tableConcat(L) })
	for _, name := range []string{"random", "randomseed"} {
		r.libs["math"][name] = stopWith(RefuseCommand, "calls math.%s: a lock script must not depend on randomness", name)
	}
	r.libs["os"] = map[string]lua.LValue{
		"__index": fn(func(L *lua.LState) int {
			return r.m.stop(L, Refuse(RefuseCommand, "reads os.%s: a lock script must not depend on time or the system", L.CheckAny(2).String()))
		}),
	}
	r.libs["redis"] = map[string]lua.LValue{
		"call":         fn(func(L *lua.LState) int { return r.sb.call(L, true) }),
		"pcall":        fn(func(L *lua.LState) int { return r.sb.call(L, false) }),
		"error_reply":  fn(errorReply),
		"status_reply": fn(statusReply),
		"sha1hex": fn(func(L *lua.LState) int {
			L.Push(lua.LString(Sha1([]byte(L.CheckString(1)))))
			return 1
		}),
		"log":                fn(func(*lua.LState) int { return 0 }),
		"set_repl":           fn(func(*lua.LState) int { return 0 }),
		"debug":              fn(func(*lua.LState) int { return 0 }),
		"replicate_commands": fn(func(L *lua.LState) int { L.Push(lua.LTrue); return 1 }),
		"breakpoint":         fn(func(L *lua.LState) int { L.Push(lua.LFalse); return 1 }),
		"setresp": fn(func(L *lua.LState) int {
			if L.CheckInt(1) == 2 {
				return 0
			}
			return r.m.stop(L, Refuse(RefuseOther, "switches its replies to RESP3 (redis.setresp), which the proxy does not model"))
		}),
		"acl_check_cmd": stopWith(RefuseOther, "calls redis.acl_check_cmd, which the proxy does not model"),
		"LOG_DEBUG":     lua.LNumber(0), "LOG_VERBOSE": lua.LNumber(1), "LOG_NOTICE": lua.LNumber(2), "LOG_WARNING": lua.LNumber(3),
		"REPL_NONE": lua.LNumber(0), "REPL_AOF": lua.LNumber(1), "REPL_SLAVE": lua.LNumber(2), "REPL_REPLICA": lua.LNumber(2), "REPL_ALL": lua.LNumber(3),
	}
	r.libs["_G.meta"] = map[string]lua.LValue{
		"__newindex": fn(func(L *lua.LState) int {
			L.RaiseError("Attempt to modify a readonly table")
			return 0
		}),
		"__index": fn(func(L *lua.LState) int {
			L.RaiseError("Script attempted to access nonexistent global variable '%s'", L.CheckAny(2).String())
			return 0
		}),
	}
}

// table makes a fresh table holding a library's functions.
func (r *Runner) table(name string) *lua.LTable {
	lib := r.libs[name]
	t := r.L.CreateTable(0, len(lib))
	for k, v := range lib {
		t.RawSetString(k, v)
	}
	return t
}

// env builds a run's globals.
func (r *Runner) env(keys, argv []string) *lua.LTable {
	L := r.L
	g := r.table("")
	g.RawSetString("_G", g)
	for _, name := range []string{"string", "table", "math", "redis"} {
		g.RawSetString(name, r.table(name))
	}
	os := L.NewTable()
	L.SetMetatable(os, r.table("os"))
	g.RawSetString("os", os)
	smeta := L.NewTable()
	smeta.RawSetString("__index", g.RawGetString("string"))
	L.SetMetatable(lua.LString(""), smeta)
	kt := L.CreateTable(len(keys), 0)
	for _, k := range keys {
		kt.Append(lua.LString(k))
	}
	at := L.CreateTable(len(argv), 0)
	for _, a := range argv {
		at.Append(lua.LString(a))
	}
	g.RawSetString("KEYS", kt)
	g.RawSetString("ARGV", at)
	// Redis 7 scripts cannot create globals, and reading one that does
	// not exist is an error.
	L.SetMetatable(g, r.table("_G.meta"))
	return g
}

// run executes the program once on a copy of st with the given KEYS and
// ARGV, at most steps instructions, in a fresh interpreter.
func (p *Program) Run(keys, argv []string, st *State, steps int) Result {
	r := NewRunner()
	defer r.Close()
	return p.RunOn(r, keys, argv, st, steps)
}

// runOn executes the program once with r; every entry of KEYS may be used
// as a key.
func (p *Program) RunOn(r *Runner, keys, argv []string, st *State, steps int) Result {
	return p.RunKeyed(r, keys, len(keys), argv, st, steps, SideKeys{})
}

// sideKeys are keys beside the lock keys that a run may use (a latch, a
// counter, a signal list: see Layout.Latch, Layout.Counter and
// Notice.List), named by arguments
// passed in KEYS. A counter is left without an expiry as it found it.
type SideKeys struct {
	Latch, Counter, Signal string
	// detect: a run that looks for a signal list may push onto any key.
	Detect bool
	// Derived are prefixes: a key that starts with one and ':' may be
	// used too (the keys a read-write lock names per hold, built at run
	// time from the lock's name). HKeys is the order of HKEYS' reply
	// (HKeysAsc, HKeysDesc); 0 refuses HKEYS, as for every other run.
	Derived []string
	HKeys   int
}

// The orders of HKEYS' reply in a run with SideKeys.HKeys: a script whose
// outcome depends on the server's hash-table order is told apart by
// running it in both.
const (
	HKeysAsc = iota + 1
	HKeysDesc
)

// runKeyed executes the program once with r: KEYS is keys, of which the
// first lock may be used as keys (the rest are arguments passed in KEYS),
// and so may the side keys.
func (p *Program) RunKeyed(r *Runner, keys []string, lock int, argv []string, st *State, steps int, side SideKeys) (res Result) {
	res.State = st.Clone()
	res.State.signals = signals{key: side.Signal, any: side.Detect}
	res.State.derived = derived{prefixes: side.Derived, hkeys: side.HKeys}
	res.Touched = map[string]bool{}
	L := r.L
	L.SetTop(0)
	m := &meter{L: L, left: steps, scan: p.concat, maxStr: p.maxStr}
	keySet := make(map[string]bool, lock)
	for _, k := range keys[:lock] {
		keySet[k] = true
	}
	for _, k := range [...]string{side.Latch, side.Counter, side.Signal} {
		if k != "" {
			keySet[k] = true
		}
	}
	r.m = m
	wrote := map[string]string{}
	r.sb = &sandbox{m: m, st: res.State, keys: keySet, touched: res.Touched, wrote: wrote}
	defer func() { res.Zset, res.Hash = r.sb.zset, r.sb.hash }()
	defer func() {
		// gopher-lua turns errors inside scripts into errors; this guards
		// against a panic anywhere else.
		if x := recover(); x != nil {
			r.Broken = true
			res.Ref = Refuse(RefuseOther, "crashes the Lua interpreter: %v", x)
		}
		res.Steps = m.steps
	}()
	g := r.env(keys, argv)
	L.Env = g
	L.G.Global = g
	L.SetContext(m)
	L.Push(L.NewFunctionFromProto(p.proto))
	err := L.PCall(0, 1, nil)
	L.RemoveContext()
	if m.ref != nil {
		res.Ref = m.ref
		return res
	}
	if err != nil {
		msg := err.Error()
		var ae *lua.ApiError
		if errors.As(err, &ae) {
			if t, ok := ae.Object.(*lua.LTable); ok {
				if e, ok := t.RawGetString("err").(lua.LString); ok {
					msg = string(e)
				}
			} else if ae.Object != nil {
				msg = ae.Object.String()
			}
		}
		res.Ref = Refuse(RefuseOther, "raises an error: %s", OneLine(msg))
		return res
	}
	if side.Counter != "" {
		delete(wrote, side.Counter) // a count, which the proxy never keeps (Counter)
	}
	if ref := noTTL(st, res.State, wrote); ref != nil {
		res.Ref = ref
		// The reply too: a semaphore kept as a count without expiry is
		// read by what it writes and answers (classify's permits.go).
		if v, vref := toRESP(L.Get(-1), 0); vref == nil {
			res.Reply = v
		}
		return res
	}
	v, ref := toRESP(L.Get(-1), 0)
	L.Pop(1)
	if ref != nil {
		res.Ref = ref
		return res
	}
	res.Reply = v
	return res
}

// sandbox is one run's view of the model.
type sandbox struct {
	m       *meter
	st      *State
	keys    map[string]bool
	touched map[string]bool
	wrote   map[string]string // the keys written, by the last command that wrote them
	zset    bool              // a sorted-set command was called
	hash    bool              // a hash command was called
}

// call is redis.call (raise) and redis.pcall.
func (sb *sandbox) call(L *lua.LState, raise bool) int {
	n := L.GetTop()
	args := make([]string, 0, n)
	for i := 1; i <= n; i++ {
		switch v := L.Get(i).(type) {
		case lua.LString:
			args = append(args, string(v))
		case lua.LNumber:
			args = append(args, strconv.FormatFloat(float64(v), 'g', 17, 64))
		default:
			return sb.m.stop(L, Refuse(RefuseOther, "passes a %s to redis.call (Redis accepts strings and numbers only)", v.Type()))
		}
	}
	if len(args) > 0 && len(args[0]) > 1 {
		switch args[0][0] {
		case 'z', 'Z':
			sb.zset = true
		case 'h', 'H':
			sb.hash = true
		}
	}
	v, ref := sb.st.exec(args, sb.keys, sb.touched, sb.wrote)
	if ref != nil {
		return sb.m.stop(L, ref)
	}
	L.Push(toLua(L, v))
	return 1
}

// Eval runs a script once in the sandbox against a model state and
// returns its reply and the state after it (a copy): a model Redis for
// tests that need backends without a network. Everything the sandbox
// refuses is an error.
func Eval(body []byte, keys, argv []string, st *State) (resp.Value, *State, error) {
	p, ref := Prepare(body)
	if ref != nil {
		return resp.Value{}, st, errors.New(ref.Reason)
	}
	res := p.Run(keys, argv, st, MaxSteps)
	if res.Ref != nil {
		return resp.Value{}, st, errors.New(res.Ref.Reason)
	}
	return res.Reply, res.State, nil
}

// Sha1 returns the lowercase hex SHA1 of a script.
func Sha1(body []byte) string {
	sum := sha1.Sum(body)
	return hex.EncodeToString(sum[:])
}

func Strs(b [][]byte) []string {
	out := make([]string, len(b))
	for i, x := range b {
		out[i] = string(x)
	}
	return out
}
