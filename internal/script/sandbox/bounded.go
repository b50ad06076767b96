package sandbox

import (
	"fmt"
	"strconv"
	"strings"

	lua "github.com/yuin/gopher-lua"
)

// Bounded replacements of the Lua library functions that can make large
// values (unpack, string.rep, string.byte, string.format, table.concat):
// each refuses a result over the sandbox's bounds instead of allocating
// it.

func (sb *sandbox) unpack(L *lua.LState) int {
	t := L.CheckTable(1)
	i := L.OptInt(2, 1)
	j := L.OptInt(3, t.Len())
	if j-i+1 > maxUnpack {
		return sb.m.stop(L, Refuse(RefuseBudget, "unpacks more than %d values", maxUnpack))
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
		return sb.m.stop(L, Refuse(RefuseBudget, "builds a string longer than %d bytes", maxString))
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
		return sb.m.stop(L, Refuse(RefuseBudget, "unpacks more than %d values", maxUnpack))
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
			return sb.m.stop(L, Refuse(RefuseOther, "uses a string.format specification the classifier does not run"))
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
			return sb.m.stop(L, Refuse(RefuseOther, "uses a string.format specification the classifier does not run"))
		}
		arg++
		if b.Len() > maxString {
			return sb.m.stop(L, Refuse(RefuseBudget, "builds a string longer than %d bytes", maxString))
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
			return sb.m.stop(L, Refuse(RefuseBudget, "builds a string longer than %d bytes", maxString))
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
