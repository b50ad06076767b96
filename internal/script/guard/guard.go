package guard

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"

	"github.com/yuin/gopher-lua/ast"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// The vote policy's guard. Under unknown_scripts: vote a script the
// classifier refused runs on every backend, but never as the client sent
// it. The proxy parses it (the sandbox's parser), refuses it if it reaches
// any global outside an allow-list (no _G, rawget, getmetatable,
// loadstring, debug...), and writes it out again as plain Lua of its own
// (every expression parenthesized, every string escaped, no comments), so
// that the backend runs exactly the program that was checked, whatever
// the differences between this parser and Redis's. That program runs as
// the body of a function inside the guard, which shadows the global redis
// with a local one whose call and pcall check every command first: the
// command must be on the allow-list (commands.go), every key must be one
// of the call's KEYS and not the proxy's own, and SET must carry an
// expiry. When the script ends, every key it wrote that has no expiry, or
// more than max_ttl, is deleted, and the call is answered with an error;
// so is a script that tried a refused command, even if it caught the
// error.

// guardGlobals are the globals a voted script may read.
var guardGlobals = map[string]bool{
	"KEYS": true, "ARGV": true, "redis": true,
	"string": true, "table": true, "math": true, "bit": true, "cjson": true, "cmsgpack": true, "struct": true,
	"tonumber": true, "tostring": true, "type": true, "pairs": true, "ipairs": true, "next": true, "select": true,
	"unpack": true, "error": true, "assert": true, "pcall": true, "xpcall": true, "_VERSION": true,
}

// Script returns the script the backends run for body under the vote
// policy, or why body may not run there at all. keyPrefix is the prefix of
// the proxy's own keys; maxTTLms bounds the TTL of every key the script
// writes.
func Script(body []byte, keyPrefix string, maxTTLms int64) (*resp.Script, *sandbox.Refusal) {
	sha := sandbox.Sha1(body)
	if maxTTLms <= 0 {
		maxTTLms = 1 << 62 // no bound configured
	}
	if _, ref := sandbox.Prepare(body); ref != nil {
		return nil, &sandbox.Refusal{Sha: sha, Reason: ref.Reason}
	}
	chunk, err := sandbox.ParseChunk(body)
	if err != nil {
		return nil, &sandbox.Refusal{Sha: sha, Reason: "does not compile: " + sandbox.OneLine(err.Error())}
	}
	e := &emitter{}
	e.block(chunk, scope{})
	if e.err != "" {
		return nil, &sandbox.Refusal{Sha: sha, Reason: e.err}
	}
	var b strings.Builder
	b.WriteString(guardPrelude(keyPrefix))
	b.WriteString("local __rlp_user = function(...)\n")
	b.WriteString(e.out.String())
	b.WriteString("\nend\n")
	fmt.Fprintf(&b, guardEpilogue, maxTTLms)
	return resp.NewScript([]byte(b.String())), nil
}

// scope is the locals visible at a point of the script.
type scope map[string]bool

func (s scope) with(names ...string) scope {
	out := make(scope, len(s)+len(names))
	for k := range s {
		out[k] = true
	}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// emitter writes a parsed script back as canonical Lua, checking the
// globals it names.
type emitter struct {
	out strings.Builder
	err string
}

func (e *emitter) fail(format string, args ...any) {
	if e.err == "" {
		e.err = fmt.Sprintf(format, args...)
	}
}

func (e *emitter) w(parts ...string) {
	for _, p := range parts {
		e.out.WriteString(p)
	}
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// luaNumeral writes a number as a Lua 5.1 numeral of the same value.
func luaNumeral(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "1e999"
	case f == math.Trunc(f) && math.Abs(f) < 1<<53:
		return strconv.FormatInt(int64(f), 10)
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

func (e *emitter) name(n string) {
	if !identRE.MatchString(n) {
		e.fail("uses the name %q, which the vote guard does not write back", n)
		return
	}
	e.w(n)
}

// block writes statements in a new scope (locals declared in it stay in
// it).
func (e *emitter) block(ss []ast.Stmt, sc scope) scope {
	sc = sc.with()
	for i, s := range ss {
		if e.err != "" {
			return sc
		}
		switch s.(type) {
		case *ast.ReturnStmt, *ast.BreakStmt:
			if i < len(ss)-1 {
				// Lua 5.1 wants return and break last in a block: in one of
				// their own, written as a do block's last statement is.
				e.w("do\n")
				e.stmt(s, sc)
				e.w("\nend\n")
				continue
			}
		}
		sc = e.stmt(s, sc)
		e.w("\n")
	}
	return sc
}

func (e *emitter) names(ns []string) {
	for i, n := range ns {
		if i > 0 {
			e.w(", ")
		}
		e.name(n)
	}
}

func (e *emitter) exprs(es []ast.Expr, sc scope) {
	for i, x := range es {
		if i > 0 {
			e.w(", ")
		}
		e.expr(x, sc)
	}
}

// stmt writes one statement and returns the scope after it.
func (e *emitter) stmt(s ast.Stmt, sc scope) scope {
	switch s := s.(type) {
	case *ast.LocalAssignStmt:
		if len(s.Names) == 1 && len(s.Exprs) == 1 {
			if f, ok := s.Exprs[0].(*ast.FunctionExpr); ok {
				// The parser (and the sandbox) see the name inside the
				// function: written as a local function, so does Redis.
				sc = sc.with(s.Names[0])
				e.w("local function ")
				e.name(s.Names[0])
				e.funcBody(f, sc, false)
				return sc
			}
		}
		e.w("local ")
		e.names(s.Names)
		if len(s.Exprs) > 0 {
			e.w(" = ")
			e.exprs(s.Exprs, sc)
		}
		return sc.with(s.Names...)
	case *ast.AssignStmt:
		for i, l := range s.Lhs {
			if i > 0 {
				e.w(", ")
			}
			if id, ok := l.(*ast.IdentExpr); ok && !sc[id.Value] {
				e.fail("assigns the global %s", id.Value)
			}
			e.expr(l, sc)
		}
		e.w(" = ")
		e.exprs(s.Rhs, sc)
	case *ast.FuncCallStmt:
		e.expr(s.Expr, sc)
	case *ast.DoBlockStmt:
		e.body("do\n", s.Stmts, sc)
	case *ast.WhileStmt:
		e.w("while ")
		e.expr(s.Condition, sc)
		e.body(" do\n", s.Stmts, sc)
	case *ast.RepeatStmt:
		e.w("repeat\n")
		inner := e.block(s.Stmts, sc) // the condition sees the body's locals
		e.w("until ")
		e.expr(s.Condition, inner)
	case *ast.IfStmt:
		e.w("if ")
		e.expr(s.Condition, sc)
		e.w(" then\n")
		e.block(s.Then, sc)
		if len(s.Else) > 0 {
			e.w("else\n")
			e.block(s.Else, sc)
		}
		e.w("end")
	case *ast.NumberForStmt:
		e.w("for ")
		e.name(s.Name)
		e.w(" = ")
		e.expr(s.Init, sc)
		e.w(", ")
		e.expr(s.Limit, sc)
		if s.Step != nil {
			e.w(", ")
			e.expr(s.Step, sc)
		}
		e.body(" do\n", s.Stmts, sc.with(s.Name))
	case *ast.GenericForStmt:
		e.w("for ")
		e.names(s.Names)
		e.w(" in ")
		e.exprs(s.Exprs, sc)
		e.body(" do\n", s.Stmts, sc.with(s.Names...))
	case *ast.FuncDefStmt:
		e.w("function ")
		method := s.Name.Func == nil
		if method {
			e.funcTarget(s.Name.Receiver, sc)
			e.w(":")
			e.name(s.Name.Method)
		} else {
			e.funcTarget(s.Name.Func, sc)
		}
		e.funcBody(s.Func, sc, method)
	case *ast.ReturnStmt:
		e.w("return")
		if len(s.Exprs) > 0 {
			e.w(" ")
			e.exprs(s.Exprs, sc)
		}
	case *ast.BreakStmt:
		e.w("break")
	default:
		e.fail("uses a statement the vote guard does not write back (%T)", s)
	}
	return sc
}

// body writes a block after its opening word, and its end.
func (e *emitter) body(open string, ss []ast.Stmt, sc scope) {
	e.w(open)
	e.block(ss, sc)
	e.w("end")
}

// funcTarget writes the name of function a.b.c (a must not be a global
// the script may not assign).
func (e *emitter) funcTarget(x ast.Expr, sc scope) {
	switch x := x.(type) {
	case *ast.IdentExpr:
		if !sc[x.Value] {
			e.fail("assigns the global %s", x.Value)
		}
		e.name(x.Value)
	case *ast.AttrGetExpr:
		e.funcTarget(x.Object, sc)
		k, ok := x.Key.(*ast.StringExpr)
		if !ok {
			e.fail("names a function in a form the vote guard does not write back")
			return
		}
		e.w(".")
		e.name(k.Value)
	default:
		e.fail("names a function in a form the vote guard does not write back")
	}
}

func (e *emitter) funcBody(f *ast.FunctionExpr, sc scope, method bool) {
	params := slices.Clone(f.ParList.Names)
	e.w("(")
	e.names(params)
	if f.ParList.HasVargs {
		if len(params) > 0 {
			e.w(", ")
		}
		e.w("...")
	}
	e.w(")\n")
	if method {
		params = append(params, "self")
	}
	e.block(f.Stmts, sc.with(params...))
	e.w("end")
}

// expr writes an expression. A call or ... is left bare (it may give
// several values where Lua expands them); every other compound
// expression is parenthesized.
func (e *emitter) expr(x ast.Expr, sc scope) {
	if e.err != "" {
		return
	}
	switch x := x.(type) {
	case *ast.TrueExpr:
		e.w("true")
	case *ast.FalseExpr:
		e.w("false")
	case *ast.NilExpr:
		e.w("nil")
	case *ast.NumberExpr:
		f, ok := sandbox.LuaNumber(x.Value)
		if !ok {
			e.fail("writes the number %q in a form the vote guard does not write back", x.Value)
			return
		}
		e.w("(", luaNumeral(f), ")")
	case *ast.StringExpr:
		e.w(luaQuote(x.Value))
	case *ast.Comma3Expr:
		if x.AdjustRet {
			e.w("(...)")
		} else {
			e.w("...")
		}
	case *ast.IdentExpr:
		if !sc[x.Value] && !guardGlobals[x.Value] {
			e.fail("reads the global %s, which a voted script may not reach (it may use %s)", x.Value, strings.Join(sortedKeys(guardGlobals), ", "))
			return
		}
		e.name(x.Value)
	case *ast.AttrGetExpr:
		e.prefix(x.Object, sc)
		e.w("[")
		e.expr(x.Key, sc)
		e.w("]")
	case *ast.TableExpr:
		e.w("{")
		for i, f := range x.Fields {
			if i > 0 {
				e.w(", ")
			}
			if f.Key != nil {
				e.w("[")
				e.expr(f.Key, sc)
				e.w("] = ")
			}
			e.expr(f.Value, sc)
		}
		e.w("}")
	case *ast.FuncCallExpr:
		if x.AdjustRet {
			e.w("(")
		}
		if x.Func != nil {
			e.prefix(x.Func, sc)
		} else {
			e.prefix(x.Receiver, sc)
			e.w(":")
			e.name(x.Method)
		}
		e.w("(")
		e.exprs(x.Args, sc)
		e.w(")")
		if x.AdjustRet {
			e.w(")")
		}
	case *ast.LogicalOpExpr:
		e.binary(x.Lhs, x.Operator, x.Rhs, sc)
	case *ast.RelationalOpExpr:
		e.binary(x.Lhs, x.Operator, x.Rhs, sc)
	case *ast.ArithmeticOpExpr:
		e.binary(x.Lhs, x.Operator, x.Rhs, sc)
	case *ast.StringConcatOpExpr:
		e.binary(x.Lhs, "..", x.Rhs, sc)
	case *ast.UnaryMinusOpExpr:
		e.unary("-", x.Expr, sc)
	case *ast.UnaryNotOpExpr:
		e.unary("not ", x.Expr, sc)
	case *ast.UnaryLenOpExpr:
		e.unary("#", x.Expr, sc)
	case *ast.FunctionExpr:
		e.w("function")
		e.funcBody(x, sc, false)
	default:
		e.fail("uses an expression the vote guard does not write back (%T)", x)
	}
}

func (e *emitter) unary(op string, x ast.Expr, sc scope) {
	e.w("(", op)
	e.operand(x, sc)
	e.w(")")
}

func (e *emitter) binary(l ast.Expr, op string, r ast.Expr, sc scope) {
	switch op {
	case "+", "-", "*", "/", "%", "^", "..", "==", "~=", "<", "<=", ">", ">=", "and", "or":
	default:
		e.fail("uses the operator %q, which the vote guard does not write back", op)
		return
	}
	e.w("(")
	e.operand(l, sc)
	e.w(" ", op, " ")
	e.operand(r, sc)
	e.w(")")
}

// operand writes an expression whose value is used once (an operator's
// operand): parenthesized, which also cuts a call or ... to one value, as
// the operator does.
func (e *emitter) operand(x ast.Expr, sc scope) {
	switch x := x.(type) {
	case *ast.FuncCallExpr:
		if x.AdjustRet { // already cut to one value, and parenthesized
			e.expr(x, sc)
			return
		}
	case *ast.Comma3Expr:
		if x.AdjustRet {
			e.expr(x, sc)
			return
		}
	}
	e.w("(")
	e.expr(x, sc)
	e.w(")")
}

// prefix writes an expression that is called or indexed: a name, an index
// or a call as it is, anything else parenthesized.
func (e *emitter) prefix(x ast.Expr, sc scope) {
	switch x := x.(type) {
	case *ast.IdentExpr, *ast.AttrGetExpr:
		e.expr(x, sc)
	case *ast.FuncCallExpr:
		e.expr(x, sc)
	default:
		e.operand(x, sc)
	}
}

// luaQuote writes a string literal with every byte that is not plain
// printable ASCII as a three-digit decimal escape.
func luaQuote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= 0x20 && c < 0x7f && c != '"' && c != '\\' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "\\%03d", c)
	}
	b.WriteByte('"')
	return b.String()
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// guardPrelude defines, before the script, the guard's own locals and the
// redis table the script sees.
func guardPrelude(keyPrefix string) string {
	var cmds, writes []string
	for _, n := range sandbox.CommandNames() {
		c := sandbox.LockCommands[n]
		cmds = append(cmds, fmt.Sprintf("%s = %d", n, c.Keys))
		if c.Write {
			writes = append(writes, n+" = true")
		}
	}
	return `-- redlock-proxy vote guard: the client's script, each command checked
local __rlp_call, __rlp_pcall, __rlp_errr, __rlp_stat, __rlp_sha1, __rlp_log = redis.call, redis.pcall, redis.error_reply, redis.status_reply, redis.sha1hex, redis.log
local __rlp_lower, __rlp_sub, __rlp_len, __rlp_type, __rlp_str, __rlp_pcallf, __rlp_error, __rlp_select, __rlp_unpack = string.lower, string.sub, string.len, type, tostring, pcall, error, select, unpack
local __rlp_cmds = {` + strings.Join(cmds, ", ") + `}
local __rlp_writes = {` + strings.Join(writes, ", ") + `}
local __rlp_prefix = ` + luaQuote(keyPrefix) + `
local __rlp_keys = {}
for i = 1, #KEYS do __rlp_keys[KEYS[i]] = true end
local __rlp_written, __rlp_order = {}, {}
local __rlp_bad = nil
local function __rlp_refuse(msg)
  if not __rlp_bad then __rlp_bad = msg end
  __rlp_error({err = 'ERR redlock-proxy: ' .. msg}, 0)
end
local function __rlp_key(name, k)
  if __rlp_type(k) ~= 'string' then __rlp_refuse(name .. ' was given a key that is not a string') end
  if not __rlp_keys[k] then __rlp_refuse(name .. ' accesses a key that is not in KEYS') end
  if __rlp_sub(k, 1, __rlp_len(__rlp_prefix)) == __rlp_prefix then __rlp_refuse(name .. ' accesses one of the proxy\'s own keys') end
  if __rlp_writes[name] and not __rlp_written[k] then
    -- How the key was before the script first wrote it.
    __rlp_written[k] = {__rlp_call('pttl', k), __rlp_call('dump', k)}
    __rlp_order[#__rlp_order + 1] = k
  end
end
local function __rlp_check(...)
  local n = __rlp_select('#', ...)
  local a = {...}
  if __rlp_type(a[1]) ~= 'string' then __rlp_refuse('redis.call was given no command name') end
  local name = __rlp_lower(a[1])
  local spec = __rlp_cmds[name]
  if spec == nil then __rlp_refuse('the script called ' .. name .. ', which is not one of the commands a lock script may use') end
  if spec == 1 then
    if n >= 2 then __rlp_key(name, a[2]) end
  elseif spec == 2 then
    for i = 2, n do __rlp_key(name, a[i]) end
  elseif spec == 3 then
    for i = 2, n, 2 do __rlp_key(name, a[i]) end
  end
  if name == 'set' then
    local expires = false
    for i = 4, n do
      local o = a[i]
      if __rlp_type(o) == 'string' then
        o = __rlp_lower(o)
        if o == 'ex' or o == 'px' or o == 'exat' or o == 'pxat' or o == 'keepttl' then expires = true end
      end
    end
    if not expires then __rlp_refuse('SET without an expiry: the proxy never writes a lock that cannot expire') end
  end
  if name == 'select' and __rlp_str(a[2]) ~= '0' then __rlp_refuse('SELECT of another database than 0') end
end
local redis = {
  call = function(...) __rlp_check(...) return __rlp_call(...) end,
  pcall = function(...)
    local ok, e = __rlp_pcallf(__rlp_check, ...)
    if not ok then return e end
    return __rlp_pcall(...)
  end,
  error_reply = __rlp_errr, status_reply = __rlp_stat, sha1hex = __rlp_sha1, log = __rlp_log,
  setresp = function(v) if v ~= 2 then __rlp_refuse('redis.setresp: a voted script answers in RESP2') end end,
  replicate_commands = function() return true end,
  LOG_DEBUG = redis.LOG_DEBUG, LOG_VERBOSE = redis.LOG_VERBOSE, LOG_NOTICE = redis.LOG_NOTICE, LOG_WARNING = redis.LOG_WARNING,
}
`
}

// guardEpilogue runs the script and checks what it left (%d: max_ttl in
// ms).
const guardEpilogue = `local __rlp_ok, __rlp_res = __rlp_pcallf(__rlp_user)
for i = 1, #__rlp_order do
  local k = __rlp_order[i]
  local before, p = __rlp_written[k], __rlp_call('pttl', k)
  local changed = __rlp_call('dump', k) ~= before[2]
  -- Left without an expiry (one it had, or a value it wrote), or with a
  -- longer TTL than max_ttl that the script gave it.
  if (p == -1 and (before[1] ~= -1 or changed)) or (p > %d and (before[1] < 0 or p > before[1])) then
    __rlp_call('del', k)
    if not __rlp_bad then __rlp_bad = 'the script left a key it wrote without an expiry, or with more than max_ttl; it was deleted' end
  end
end
if __rlp_bad then return __rlp_errr('ERR redlock-proxy: ' .. __rlp_bad) end
if not __rlp_ok then __rlp_error(__rlp_res, 0) end
return __rlp_res
`
