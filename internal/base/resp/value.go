package resp

import (
	"crypto/sha1"
	"encoding/hex"
	"strconv"
)

// Kind is the type of a RESP value.
type Kind uint8

// The kinds of RESP2 replies a backend can send.
const (
	KindInvalid Kind = iota
	KindSimple       // +OK
	KindError        // -ERR ...
	KindInt          // :1
	KindBulk         // $3\r\nabc
	KindNil          // $-1 or *-1
	KindArray        // *2 ...
)

// Value is one decoded reply. Str holds simple strings, errors and bulks; Int
// holds integers; Elems holds array elements.
type Value struct {
	Kind  Kind
	Int   int64
	Str   []byte
	Elems []Value
}

// Frequently used values. They must not be modified.
var (
	OK  = Value{Kind: KindSimple, Str: []byte("OK")}
	Nil = Value{Kind: KindNil}
)

// IntValue returns an integer reply.
func IntValue(n int64) Value { return Value{Kind: KindInt, Int: n} }

// BulkValue returns a bulk reply.
func BulkValue(b []byte) Value { return Value{Kind: KindBulk, Str: b} }

// ErrorValue returns an error reply; msg excludes the leading '-'.
func ErrorValue(msg string) Value { return Value{Kind: KindError, Str: []byte(msg)} }

// IsOK reports whether v is the simple string OK.
func (v Value) IsOK() bool {
	return v.Kind == KindSimple && len(v.Str) == 2 && v.Str[0] == 'O' && v.Str[1] == 'K'
}

// Equal reports whether two values are the same reply.
func (v Value) Equal(w Value) bool {
	if v.Kind != w.Kind || v.Int != w.Int || string(v.Str) != string(w.Str) || len(v.Elems) != len(w.Elems) {
		return false
	}
	for i := range v.Elems {
		if !v.Elems[i].Equal(w.Elems[i]) {
			return false
		}
	}
	return true
}

// String renders v for logs and test failures.
func (v Value) String() string {
	switch v.Kind {
	case KindSimple:
		return "+" + string(v.Str)
	case KindError:
		return "-" + string(v.Str)
	case KindInt:
		return ":" + strconv.FormatInt(v.Int, 10)
	case KindBulk:
		return strconv.Quote(string(v.Str))
	case KindNil:
		return "(nil)"
	case KindArray:
		s := "["
		for i, e := range v.Elems {
			if i > 0 {
				s += " "
			}
			s += e.String()
		}
		return s + "]"
	}
	return "(invalid)"
}

// Clone returns a deep copy of v that shares no memory with it.
func (v Value) Clone() Value {
	c := v
	if v.Str != nil {
		c.Str = append([]byte(nil), v.Str...)
	}
	if v.Elems != nil {
		c.Elems = make([]Value, len(v.Elems))
		for i, e := range v.Elems {
			c.Elems[i] = e.Clone()
		}
	}
	return c
}

// Script is a Lua script the proxy sends by EVALSHA; backends that have not
// seen it get a SCRIPT LOAD first.
type Script struct {
	Sha  string // lowercase hex sha1 of Body
	Body []byte
}

// NewScript computes the sha1 of body.
func NewScript(body []byte) *Script {
	sum := sha1.Sum(body)
	return &Script{Sha: hex.EncodeToString(sum[:]), Body: body}
}
