package script

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	lua "github.com/yuin/gopher-lua"
	"github.com/yuin/gopher-lua/ast"
	"github.com/yuin/gopher-lua/parse"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Bounds of the sandbox. A lock script needs a few hundred instructions;
// these leave room for many keys while keeping a hostile script to a few
// milliseconds and megabytes.
const (
	// MaxScriptBytes is the longest script the classifier reads.
	MaxScriptBytes = 256 << 10
	// maxSteps bounds the Lua instructions of one run.
	maxSteps = 100_000
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
)

// Program is a script compiled for the sandbox.
type Program struct {
	Sha    string
	proto  *lua.FunctionProto
	concat bool // uses "..": registers are watched for long strings
	// strs are the script's string constants, in order, each once: the
	// names a script may give a member of its own (a lock's marker).
	strs []string
}

// Compile reads, checks and compiles a script. The refusal says why a
// script cannot be run in the sandbox (too long, not Lua, nested too deep,
// concatenation in a loop).
func Compile(body []byte) (*Program, *Refusal) {
	p, ref := compile(body)
	if ref != nil {
		return nil, &Refusal{Sha: Sha1(body), Reason: ref.reason}
	}
	return p, nil
}

func compile(body []byte) (*Program, *refusal) {
	p := &Program{Sha: Sha1(body)}
	if len(body) > MaxScriptBytes {
		return nil, refuse(refuseOther, "is longer than %d bytes", MaxScriptBytes)
	}
	chunk, err := parseChunk(body)
	if err != nil {
		return nil, refuse(refuseOther, "does not compile: %s", oneLine(err.Error()))
	}
	w := &walker{}
	w.stmts(chunk, 0, false)
	if w.ref != nil {
		return nil, w.ref
	}
	p.concat = w.concats > 0
	p.strs = w.strs
	proto, err := compileChunk(chunk, p.Sha)
	if err != nil {
		return nil, refuse(refuseOther, "does not compile: %s", oneLine(err.Error()))
	}
	p.proto = proto
	return p, nil
}

func parseChunk(body []byte) (chunk []ast.Stmt, err error) {
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

func oneLine(s string) string {
	s = strings.ReplaceAll(s, "\r", " ")
	s = strings.ReplaceAll(s, "\n", " ")
	if len(s) > 200 {
		s = s[:197] + "..."
	}
	return s
}

// walker checks what the compiler cannot: nesting depth, goto (not Lua
// 5.1, and a loop the concatenation rule would not see), and where
// concatenation is used.
type walker struct {
	concats int
	ref     *refusal
	strs    []string
}

// maxConstants bounds the string constants a program keeps.
const maxConstants = 64

func (w *walker) fail(format string, args ...any) {
	if w.ref == nil {
		w.ref = refuse(refuseOther, format, args...)
	}
}

func (w *walker) deep(d int) bool {
	if d > maxNesting {
		w.fail("nests deeper than %d levels", maxNesting)
		return true
	}
	return w.ref != nil
}

// stmts walks a block; loop is true inside a loop or function body.
func (w *walker) stmts(ss []ast.Stmt, d int, loop bool) {
	if w.deep(d) {
		return
	}
	for _, s := range ss {
		switch s := s.(type) {
		case *ast.AssignStmt:
			w.exprs(s.Lhs, d+1, loop)
			w.exprs(s.Rhs, d+1, loop)
		case *ast.LocalAssignStmt:
			w.exprs(s.Exprs, d+1, loop)
		case *ast.FuncCallStmt:
			w.expr(s.Expr, d+1, loop)
		case *ast.DoBlockStmt:
			w.stmts(s.Stmts, d+1, loop)
		case *ast.WhileStmt:
			w.expr(s.Condition, d+1, true)
			w.stmts(s.Stmts, d+1, true)
		case *ast.RepeatStmt:
			w.expr(s.Condition, d+1, true)
			w.stmts(s.Stmts, d+1, true)
		case *ast.IfStmt:
			w.expr(s.Condition, d+1, loop)
			w.stmts(s.Then, d+1, loop)
			w.stmts(s.Else, d+1, loop)
		case *ast.NumberForStmt:
			w.expr(s.Init, d+1, loop)
			w.expr(s.Limit, d+1, loop)
			if s.Step != nil {
				w.expr(s.Step, d+1, loop)
			}
			w.stmts(s.Stmts, d+1, true)
		case *ast.GenericForStmt:
			w.exprs(s.Exprs, d+1, loop)
			w.stmts(s.Stmts, d+1, true)
		case *ast.FuncDefStmt:
			if s.Name != nil {
				w.expr(s.Name.Func, d+1, loop)
				if s.Name.Receiver != nil {
					w.expr(s.Name.Receiver, d+1, loop)
				}
			}
			w.expr(s.Func, d+1, loop)
		case *ast.ReturnStmt:
			w.exprs(s.Exprs, d+1, loop)
		case *ast.BreakStmt:
		case *ast.LabelStmt, *ast.GotoStmt:
			w.fail("uses goto, which Lua 5.1 (Redis's Lua) does not have")
		default:
			w.fail("uses a statement the classifier does not know (%T)", s)
		}
	}
}

func (w *walker) exprs(es []ast.Expr, d int, loop bool) {
	for _, e := range es {
		w.expr(e, d, loop)
	}
}

func (w *walker) expr(e ast.Expr, d int, loop bool) {
	if e == nil || w.deep(d) {
		return
	}
	switch e := e.(type) {
	case *ast.StringExpr:
		if len(e.Value) <= 64 && len(w.strs) < maxConstants && !slices.Contains(w.strs, e.Value) {
			w.strs = append(w.strs, e.Value)
		}
	case *ast.NumberExpr:
		if _, ok := luaNumber(e.Value); !ok {
			w.fail("writes the number %s, which Redis's Lua and the classifier's interpreter read differently (a leading zero, 0b, 0o or _)", strconv.Quote(e.Value))
		}
	case *ast.TrueExpr, *ast.FalseExpr, *ast.NilExpr, *ast.Comma3Expr, *ast.IdentExpr:
	case *ast.AttrGetExpr:
		w.expr(e.Object, d+1, loop)
		if _, ok := e.Key.(*ast.StringExpr); !ok { // a field name is no constant of the script's
			w.expr(e.Key, d+1, loop)
		}
	case *ast.TableExpr:
		for _, f := range e.Fields {
			w.expr(f.Key, d+1, loop)
			w.expr(f.Value, d+1, loop)
		}
	case *ast.FuncCallExpr:
		w.expr(e.Func, d+1, loop)
		w.expr(e.Receiver, d+1, loop)
		w.exprs(e.Args, d+1, loop)
	case *ast.LogicalOpExpr:
		w.expr(e.Lhs, d+1, loop)
		w.expr(e.Rhs, d+1, loop)
	case *ast.RelationalOpExpr:
		w.expr(e.Lhs, d+1, loop)
		w.expr(e.Rhs, d+1, loop)
	case *ast.ArithmeticOpExpr:
		w.expr(e.Lhs, d+1, loop)
		w.expr(e.Rhs, d+1, loop)
	case *ast.StringConcatOpExpr:
		if loop {
			w.fail("concatenates strings inside a loop or a function, which the classifier does not run (it could build strings without bound)")
			return
		}
		w.concats++
		if w.concats > maxConcats {
			w.fail("concatenates strings more than %d times", maxConcats)
			return
		}
		// a .. b .. c is one instruction over a right-nested chain.
		operands := 1
		var last ast.Expr = e
		for {
			c, ok := last.(*ast.StringConcatOpExpr)
			if !ok {
				break
			}
			operands++
			w.expr(c.Lhs, d+1, loop)
			last = c.Rhs
		}
		if operands > maxConcatOperands {
			w.fail("concatenates more than %d strings in one expression", maxConcatOperands)
			return
		}
		w.expr(last, d+1, loop)
	case *ast.UnaryMinusOpExpr:
		w.expr(e.Expr, d+1, loop)
	case *ast.UnaryNotOpExpr:
		w.expr(e.Expr, d+1, loop)
	case *ast.UnaryLenOpExpr:
		w.expr(e.Expr, d+1, loop)
	case *ast.FunctionExpr:
		w.stmts(e.Stmts, d+1, true)
	default:
		w.fail("uses an expression the classifier does not know (%T)", e)
	}
}

// result is what one run did.
type result struct {
	reply   resp.Value
	state   *State
	ref     *refusal
	steps   int
	touched map[string]bool // the keys commands were given
	zset    bool            // it called a sorted-set command
	hash    bool            // it called a hash command
}

// noTTL refuses a run that left a key it wrote without an expiry (a key
// may be written in steps, SETNX then PEXPIRE, HSET then PEXPIREAT: what
// counts is how the run leaves it).
func noTTL(before, after *State, wrote map[string]string) *refusal {
	names := make([]string, 0, len(wrote))
	for k := range wrote {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		it, ok := after.lookup(k)
		if !ok || it.At != 0 {
			continue
		}
		if b, ok := before.lookup(k); ok && b.equal(it) {
			continue // left as it was
		}
		return refuse(refuseNoTTL, "leaves %s without an expiry (it ran %s on it): the proxy never writes a lock that cannot expire", strconv.Quote(short(k)), wrote[k])
	}
	return nil
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

var errStopped = errors.New("script stopped by the classifier")

// meter is the context gopher-lua consults before every instruction: it
// counts instructions, watches registers for long strings when the script
// concatenates, and stops the script once it is refused.
type meter struct {
	L     *lua.LState
	left  int
	scan  bool
	ref   *refusal
	steps int
}

func (m *meter) Deadline() (time.Time, bool) { return time.Time{}, false }
func (m *meter) Value(any) any               { return nil }
func (m *meter) Err() error {
	if m.ref != nil {
		return errStopped
	}
	return nil
}

func (m *meter) Done() <-chan struct{} {
	if m.ref != nil {
		return closedCh
	}
	m.steps++
	if m.steps > m.left {
		m.ref = refuse(refuseBudget, "runs more than %d Lua instructions", m.left)
		return closedCh
	}
	if m.scan {
		for i := m.L.GetTop(); i > 0; i-- {
			if s, ok := m.L.Get(i).(lua.LString); ok && len(s) > maxString {
				m.ref = refuse(refuseBudget, "builds a string longer than %d bytes", maxString)
				return closedCh
			}
		}
	}
	return nil
}

// stop refuses the run from inside a library function.
func (m *meter) stop(L *lua.LState, r *refusal) int {
	if m.ref == nil {
		m.ref = r
	}
	L.RaiseError("%s", errStopped.Error())
	return 0
}

// runner is a Lua interpreter reused for many runs: its library
// functions are made once, and every run gets fresh tables (globals,
// string, table, math, os, redis, KEYS, ARGV), so nothing one run does is
// seen by the next.
type runner struct {
	L      *lua.LState
	libs   map[string]map[string]lua.LValue // "" for the globals
	m      *meter
	sb     *sandbox
	broken bool // a Go panic went through the interpreter: do not reuse it
}

func newRunner() *runner {
	L := lua.NewState(lua.Options{SkipOpenLibs: true, CallStackSize: 64, RegistrySize: 256, RegistryMaxSize: 1 << 14})
	r := &runner{L: L, libs: map[string]map[string]lua.LValue{}}
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

func (r *runner) close() { r.L.Close() }

// install replaces or removes the library functions the sandbox does not
// offer as they are.
func (r *runner) install() {
	L := r.L
	fn := func(f lua.LGFunction) lua.LValue { return L.NewFunction(f) }
	stopWith := func(kind refusalKind, format string, args ...any) lua.LValue {
		return fn(func(L *lua.LState) int { return r.m.stop(L, refuse(kind, format, args...)) })
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
		str[name] = stopWith(refuseOther, "uses string.%s, which the classifier does not run (pattern matching has no bound on its time)", name)
	}
	str["rep"] = fn(func(L *lua.LState) int { return r.sb.strRep(L) })
	str["format"] = fn(func(L *lua.LState) int { return r.sb.strFormat(L) })
	str["byte"] = fn(func(L *lua.LState) int { return r.sb.strByte(L) })
	r.libs["table"]["concat"] = fn(func(L *lua.LState) int { return r.sb.tableConcat(L) })
	for _, name := range []string{"random", "randomseed"} {
		r.libs["math"][name] = stopWith(refuseCommand, "calls math.%s: a lock script must not depend on randomness", name)
	}
	r.libs["os"] = map[string]lua.LValue{
		"__index": fn(func(L *lua.LState) int {
			return r.m.stop(L, refuse(refuseCommand, "reads os.%s: a lock script must not depend on time or the system", L.CheckAny(2).String()))
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
			return r.m.stop(L, refuse(refuseOther, "switches its replies to RESP3 (redis.setresp), which the proxy does not model"))
		}),
		"acl_check_cmd": stopWith(refuseOther, "calls redis.acl_check_cmd, which the proxy does not model"),
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
func (r *runner) table(name string) *lua.LTable {
	lib := r.libs[name]
	t := r.L.CreateTable(0, len(lib))
	for k, v := range lib {
		t.RawSetString(k, v)
	}
	return t
}

// env builds a run's globals.
func (r *runner) env(keys, argv []string) *lua.LTable {
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
func (p *Program) run(keys, argv []string, st *State, steps int) result {
	r := newRunner()
	defer r.close()
	return p.runOn(r, keys, argv, st, steps)
}

// runOn executes the program once with r; every entry of KEYS may be used
// as a key.
func (p *Program) runOn(r *runner, keys, argv []string, st *State, steps int) result {
	return p.runLocked(r, keys, len(keys), argv, st, steps)
}

// runLocked executes the program once with r: KEYS is keys, of which the
// first lock may be used as keys (the rest are arguments passed in KEYS).
func (p *Program) runLocked(r *runner, keys []string, lock int, argv []string, st *State, steps int) (res result) {
	res.state = st.clone()
	res.touched = map[string]bool{}
	L := r.L
	L.SetTop(0)
	m := &meter{L: L, left: steps, scan: p.concat}
	keySet := make(map[string]bool, lock)
	for _, k := range keys[:lock] {
		keySet[k] = true
	}
	r.m = m
	wrote := map[string]string{}
	r.sb = &sandbox{m: m, st: res.state, keys: keySet, touched: res.touched, wrote: wrote}
	defer func() { res.zset, res.hash = r.sb.zset, r.sb.hash }()
	defer func() {
		// gopher-lua turns errors inside scripts into errors; this guards
		// against a panic anywhere else.
		if x := recover(); x != nil {
			r.broken = true
			res.ref = refuse(refuseOther, "crashes the Lua interpreter: %v", x)
		}
		res.steps = m.steps
	}()
	g := r.env(keys, argv)
	L.Env = g
	L.G.Global = g
	L.SetContext(m)
	L.Push(L.NewFunctionFromProto(p.proto))
	err := L.PCall(0, 1, nil)
	L.RemoveContext()
	if m.ref != nil {
		res.ref = m.ref
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
		res.ref = refuse(refuseOther, "raises an error: %s", oneLine(msg))
		return res
	}
	if ref := noTTL(st, res.state, wrote); ref != nil {
		res.ref = ref
		return res
	}
	v, ref := toRESP(L.Get(-1), 0)
	L.Pop(1)
	if ref != nil {
		res.ref = ref
		return res
	}
	res.reply = v
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
			return sb.m.stop(L, refuse(refuseOther, "passes a %s to redis.call (Redis accepts strings and numbers only)", v.Type()))
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

// toLua converts a reply as Redis converts RESP2 for Lua.
func toLua(L *lua.LState, v resp.Value) lua.LValue {
	switch v.Kind {
	case resp.KindInt:
		return lua.LNumber(v.Int)
	case resp.KindBulk:
		return lua.LString(v.Str)
	case resp.KindSimple:
		t := L.NewTable()
		t.RawSetString("ok", lua.LString(v.Str))
		return t
	case resp.KindError:
		t := L.NewTable()
		t.RawSetString("err", lua.LString(v.Str))
		return t
	case resp.KindArray:
		t := L.CreateTable(len(v.Elems), 0)
		for _, e := range v.Elems {
			t.Append(toLua(L, e))
		}
		return t
	}
	return lua.LFalse
}

// errorReply is redis.error_reply as Redis 7.0 builds it: a message with
// no error code ("ERROR") gets "ERR", one starting with "-CODE " keeps its
// code.
func errorReply(L *lua.LState) int {
	if L.GetTop() != 1 || L.Get(1).Type() != lua.LTString {
		t := L.NewTable()
		t.RawSetString("err", lua.LString("ERR wrong number or type of arguments"))
		L.Push(t)
		return 1
	}
	t := L.NewTable()
	t.RawSetString("err", lua.LString(redisErrorText(L.ToString(1))))
	L.Push(t)
	return 1
}

// redisErrorText is the "CODE message" form Redis 7.0 gives an error.
func redisErrorText(msg string) string {
	if !strings.HasPrefix(msg, "-") {
		msg = "-" + msg
	}
	code, text := "ERR", msg[1:]
	if i := strings.IndexByte(msg, ' '); i >= 0 {
		code, text = msg[1:i], msg[i+1:]
	}
	return code + " " + strings.TrimRight(strings.TrimLeft(text, "\r\n"), "\r\n")
}

func statusReply(L *lua.LState) int {
	if L.GetTop() != 1 || L.Get(1).Type() != lua.LTString {
		t := L.NewTable()
		t.RawSetString("err", lua.LString("ERR wrong number or type of arguments"))
		L.Push(t)
		return 1
	}
	t := L.NewTable()
	t.RawSetString("ok", L.Get(1))
	L.Push(t)
	return 1
}

// toRESP converts a script's return value to the reply Redis 7 sends.
func toRESP(v lua.LValue, depth int) (resp.Value, *refusal) {
	if depth > maxReplyDepth {
		return resp.Value{}, refuse(refuseOther, "returns a reply nested deeper than %d", maxReplyDepth)
	}
	switch v := v.(type) {
	case lua.LNumber:
		return resp.IntValue(luaInt(float64(v))), nil
	case lua.LString:
		return resp.BulkValue([]byte(v)), nil
	case lua.LBool:
		if v {
			return resp.IntValue(1), nil
		}
		return resp.Nil, nil
	case *lua.LTable:
		if e, ok := v.RawGetString("err").(lua.LString); ok {
			return resp.ErrorValue(noCRLF(string(e))), nil
		}
		if s, ok := v.RawGetString("ok").(lua.LString); ok {
			return resp.Value{Kind: resp.KindSimple, Str: []byte(noCRLF(string(s)))}, nil
		}
		if _, ok := v.RawGetString("double").(lua.LNumber); ok {
			return resp.Value{}, refuse(refuseOther, "returns a RESP3 double, which the proxy does not model")
		}
		if _, ok := v.RawGetString("big_number").(lua.LString); ok {
			return resp.Value{}, refuse(refuseOther, "returns a RESP3 big number, which the proxy does not model")
		}
		for _, f := range []string{"map", "set"} {
			if _, ok := v.RawGetString(f).(*lua.LTable); ok {
				return resp.Value{}, refuse(refuseOther, "returns a RESP3 %s, which the proxy does not model", f)
			}
		}
		out := resp.Value{Kind: resp.KindArray, Elems: []resp.Value{}}
		for j := 1; ; j++ {
			e := v.RawGetInt(j)
			if e == lua.LNil {
				break
			}
			if j > maxReplyElems {
				return resp.Value{}, refuse(refuseBudget, "returns more than %d elements", maxReplyElems)
			}
			ev, ref := toRESP(e, depth+1)
			if ref != nil {
				return resp.Value{}, ref
			}
			out.Elems = append(out.Elems, ev)
		}
		return out, nil
	}
	return resp.Nil, nil
}

// luaInt is C's (long long) cast of a double on x86-64, which Redis uses
// for number replies: truncation toward zero, and INT64_MIN for what does
// not fit.
func luaInt(f float64) int64 {
	if math.IsNaN(f) || f >= 9223372036854775808.0 || f < -9223372036854775808.0 {
		return math.MinInt64
	}
	return int64(f)
}

func noCRLF(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// Bounded versions of the library functions that can make large values.

func (sb *sandbox) unpack(L *lua.LState) int {
	t := L.CheckTable(1)
	i := L.OptInt(2, 1)
	j := L.OptInt(3, t.Len())
	if j-i+1 > maxUnpack {
		return sb.m.stop(L, refuse(refuseBudget, "unpacks more than %d values", maxUnpack))
	}
	for k := i; k <= j; k++ {
		L.Push(t.RawGetInt(k))
	}
	return max(j-i+1, 0)
}

func (sb *sandbox) strRep(L *lua.LState) int {
	s := L.CheckString(1)
	n := L.CheckInt(2)
	if n <= 0 || len(s) == 0 {
		L.Push(lua.LString(""))
		return 1
	}
	if n > maxString/len(s) {
		return sb.m.stop(L, refuse(refuseBudget, "builds a string longer than %d bytes", maxString))
	}
	L.Push(lua.LString(strings.Repeat(s, n)))
	return 1
}

func (sb *sandbox) strByte(L *lua.LState) int {
	s := L.CheckString(1)
	i := L.OptInt(2, 1)
	j := L.OptInt(3, i)
	l := len(s)
	if i < 0 {
		i = l + i + 1
	}
	if j < 0 {
		j = l + j + 1
	}
	i = max(i, 1)
	j = min(j, l)
	if j-i+1 > maxUnpack {
		return sb.m.stop(L, refuse(refuseBudget, "unpacks more than %d values", maxUnpack))
	}
	for k := i; k <= j; k++ {
		L.Push(lua.LNumber(s[k-1]))
	}
	return max(j-i+1, 0)
}

// strFormat supports the common conversions with widths and precisions of
// at most two digits: what a lock script formats is a number or a short
// message, and a width is memory.
func (sb *sandbox) strFormat(L *lua.LState) int {
	f := L.CheckString(1)
	var b strings.Builder
	arg := 2
	for i := 0; i < len(f); i++ {
		c := f[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		if i < len(f) && f[i] == '%' {
			b.WriteByte('%')
			continue
		}
		start := i
		for i < len(f) && strings.IndexByte("-+ #0123456789.", f[i]) >= 0 {
			i++
		}
		if i >= len(f) || !smallSpec(f[start:i]) {
			return sb.m.stop(L, refuse(refuseOther, "uses a string.format specification the classifier does not run"))
		}
		spec := "%" + f[start:i+1]
		switch f[i] {
		case 'd', 'i':
			fmt.Fprintf(&b, strings.Replace(spec, "i", "d", 1), luaInt(float64(L.CheckNumber(arg))))
		case 's':
			fmt.Fprintf(&b, spec, L.ToStringMeta(L.CheckAny(arg)).String())
		case 'x', 'X', 'o', 'c':
			fmt.Fprintf(&b, spec, luaInt(float64(L.CheckNumber(arg))))
		case 'f', 'g', 'e', 'G', 'E':
			fmt.Fprintf(&b, spec, float64(L.CheckNumber(arg)))
		default:
			return sb.m.stop(L, refuse(refuseOther, "uses a string.format specification the classifier does not run"))
		}
		arg++
		if b.Len() > maxString {
			return sb.m.stop(L, refuse(refuseBudget, "builds a string longer than %d bytes", maxString))
		}
	}
	L.Push(lua.LString(b.String()))
	return 1
}

func (sb *sandbox) tableConcat(L *lua.LState) int {
	t := L.CheckTable(1)
	sep := L.OptString(2, "")
	i := L.OptInt(3, 1)
	j := L.OptInt(4, t.Len())
	var b strings.Builder
	for k := i; k <= j; k++ {
		v := t.RawGetInt(k)
		if !lua.LVCanConvToString(v) {
			L.ArgError(1, "invalid value (at index "+strconv.Itoa(k)+") in table for 'concat'")
		}
		if k > i {
			b.WriteString(sep)
		}
		b.WriteString(lua.LVAsString(v))
		if b.Len() > maxString {
			return sb.m.stop(L, refuse(refuseBudget, "builds a string longer than %d bytes", maxString))
		}
	}
	L.Push(lua.LString(b.String()))
	return 1
}

// smallSpec reports whether a conversion's flags, width and precision
// have no number longer than two digits.
func smallSpec(s string) bool {
	run := 0
	for i := 0; i < len(s); i++ {
		if s[i] >= '0' && s[i] <= '9' {
			run++
			if run > 2 {
				return false
			}
		} else {
			run = 0
		}
	}
	return len(s) <= 8
}

// Eval runs a script once in the sandbox against a model state and
// returns its reply and the state after it (a copy): a model Redis for
// tests that need backends without a network. Everything the sandbox
// refuses is an error.
func Eval(body []byte, keys, argv []string, st *State) (resp.Value, *State, error) {
	p, ref := compile(body)
	if ref != nil {
		return resp.Value{}, st, errors.New(ref.reason)
	}
	res := p.run(keys, argv, st, maxSteps)
	if res.ref != nil {
		return resp.Value{}, st, errors.New(res.ref.reason)
	}
	return res.reply, res.state, nil
}

// luaNumber is the value of a numeral as both Lua 5.1 and gopher-lua read
// it: ok is false where they differ (gopher-lua reads 010 as octal, and
// takes 0b, 0o and underscores) or the numeral is not Lua 5.1's.
func luaNumber(tok string) (float64, bool) {
	if h, ok := strings.CutPrefix(strings.ToLower(tok), "0x"); ok {
		n, err := strconv.ParseUint(h, 16, 64)
		return float64(n), err == nil && !strings.Contains(h, "_")
	}
	if strings.ContainsAny(tok, "_xXbBoOpP") {
		return 0, false
	}
	if len(tok) > 1 && tok[0] == '0' && tok[1] >= '0' && tok[1] <= '9' {
		// gopher-lua reads a leading zero as octal where it can.
		if _, err := strconv.ParseInt(tok, 0, 64); err == nil {
			if v, _ := strconv.ParseFloat(tok, 64); v != 0 {
				return 0, false
			}
		}
	}
	f, err := strconv.ParseFloat(tok, 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, false
	}
	return f, true
}
