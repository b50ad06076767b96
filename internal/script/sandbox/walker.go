package sandbox

import (
	"slices"
	"strconv"

	"github.com/yuin/gopher-lua/ast"
)

// The static walker: what a script's syntax tree must satisfy before it is
// compiled (nesting depth, no goto, concatenation only where it cannot
// grow without bound), and the string constants it names.

// walker checks what the compiler cannot: nesting depth, goto (not Lua
// 5.1, and a loop the concatenation rule would not see), and where
// concatenation is used.
type walker struct {
	// loopConcat allows concatenation in loops and functions
	// (PrepareDerived: its runs bound every string they build).
	loopConcat bool
	concats    int
	ref        *Stop
	strs       []string
	lits       Literals // every constant, for the relations (relations.go)
}

func (w *walker) literal(ok bool) {
	if !ok {
		w.fail("names more than %d constants; the proxy compares each call's arguments with every one", maxLiterals)
	}
}

// maxConstants bounds the string constants a program keeps.
const maxConstants = 64

func (w *walker) fail(format string, args ...any) {
	if w.ref == nil {
		w.ref = Refuse(RefuseOther, format, args...)
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
		w.literal(w.lits.addString(e.Value))
		if len(e.Value) <= 64 && len(w.strs) < maxConstants && !slices.Contains(w.strs, e.Value) {
			w.strs = append(w.strs, e.Value)
		}
	case *ast.NumberExpr:
		f, ok := LuaNumber(e.Value)
		w.literal(w.lits.addNumber(f))
		if !ok {
			w.fail("writes the number %s, which Redis's Lua and the classifier's interpreter read differently (a leading zero, 0b, 0o or _)", strconv.Quote(e.Value))
		}
	case *ast.TrueExpr, *ast.FalseExpr, *ast.NilExpr, *ast.Comma3Expr, *ast.IdentExpr:
	case *ast.AttrGetExpr:
		w.expr(e.Object, d+1, loop)
		if argIndex(e) {
			return // KEYS[2], ARGV[1]: a position, not a value compared with
		}
		if k, ok := e.Key.(*ast.StringExpr); ok {
			// A field name is no member name of the script's, but a
			// table the script indexes with an argument may hold it.
			w.literal(w.lits.addString(k.Value))
		} else {
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
		if loop && !w.loopConcat {
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

// argIndex reports whether e is KEYS[n] or ARGV[n] with a number n.
func argIndex(e *ast.AttrGetExpr) bool {
	id, ok := e.Object.(*ast.IdentExpr)
	if !ok || id.Value != "KEYS" && id.Value != "ARGV" {
		return false
	}
	n, ok := e.Key.(*ast.NumberExpr)
	if ok {
		_, ok = LuaNumber(n.Value)
	}
	return ok
}
