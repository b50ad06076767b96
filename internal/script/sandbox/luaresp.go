package sandbox

import (
	"errors"
	"math"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	lua "github.com/yuin/gopher-lua"
)

// Conversion between Lua values and RESP replies, as Redis converts them:
// a command's reply as redis.call returns it to the script, and the
// script's return value as the reply it sends.

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
func toRESP(v lua.LValue, depth int) (resp.Value, *Stop) {
	if depth > maxReplyDepth {
		return resp.Value{}, Refuse(RefuseOther, "returns a reply nested deeper than %d", maxReplyDepth)
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
			return resp.Value{}, Refuse(RefuseOther, "returns a RESP3 double, which the proxy does not model")
		}
		if _, ok := v.RawGetString("big_number").(lua.LString); ok {
			return resp.Value{}, Refuse(RefuseOther, "returns a RESP3 big number, which the proxy does not model")
		}
		for _, f := range []string{"map", "set"} {
			if _, ok := v.RawGetString(f).(*lua.LTable); ok {
				return resp.Value{}, Refuse(RefuseOther, "returns a RESP3 %s, which the proxy does not model", f)
			}
		}
		out := resp.Value{Kind: resp.KindArray, Elems: []resp.Value{}}
		for j := 1; ; j++ {
			e := v.RawGetInt(j)
			if e == lua.LNil {
				break
			}
			if j > maxReplyElems {
				return resp.Value{}, Refuse(RefuseBudget, "returns more than %d elements", maxReplyElems)
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

// luaNumber is the value of a numeral as both Lua 5.1 and gopher-lua read
// it: ok is false where they differ (gopher-lua reads 010 as octal, and
// takes 0b, 0o and underscores) or the numeral is not Lua 5.1's.
func LuaNumber(tok string) (float64, bool) {
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
