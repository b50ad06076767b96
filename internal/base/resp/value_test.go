package resp

import (
	"testing"
)

func TestValueEqual(t *testing.T) {
	for _, tc := range []struct {
		a, b Value
		want bool
	}{
		{OK, simple("OK"), true},
		{OK, bulk("OK"), false},
		{IntValue(1), IntValue(1), true},
		{IntValue(1), IntValue(2), false},
		{bulk(""), BulkValue(nil), true},
		{Nil, Value{Kind: KindNil}, true},
		{Nil, bulk(""), false},
		{ErrorValue("ERR x"), errv("ERR x"), true},
		{arr(), arr(), true},
		{arr(IntValue(1)), arr(), false},
		{arr(arr(bulk("a"))), arr(arr(bulk("a"))), true},
		{arr(arr(bulk("a"))), arr(arr(bulk("b"))), false},
	} {
		if got := tc.a.Equal(tc.b); got != tc.want {
			t.Errorf("%v.Equal(%v) = %v, want %v", tc.a, tc.b, got, tc.want)
		}
		if got := tc.b.Equal(tc.a); got != tc.want {
			t.Errorf("%v.Equal(%v) = %v, want %v (not symmetric)", tc.b, tc.a, got, tc.want)
		}
	}
}

func TestValueString(t *testing.T) {
	for _, tc := range []struct {
		v    Value
		want string
	}{
		{OK, "+OK"},
		{ErrorValue("ERR x"), "-ERR x"},
		{IntValue(-3), ":-3"},
		{bulk("a\"b\n"), `"a\"b\n"`},
		{Nil, "(nil)"},
		{arr(), "[]"},
		{arr(IntValue(1), bulk("x"), arr(Nil)), `[:1 "x" [(nil)]]`},
		{Value{}, "(invalid)"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("String() = %q, want %q", got, tc.want)
		}
	}
}

func TestValueClone(t *testing.T) {
	orig := arr(bulk("abc"), arr(simple("x")), IntValue(5))
	c := orig.Clone()
	if !c.Equal(orig) {
		t.Fatalf("Clone() = %v, want %v", c, orig)
	}
	c.Elems[0].Str[0] = 'X'
	c.Elems[1].Elems[0].Str[0] = 'Y'
	c.Elems[2].Int = 6
	if !orig.Equal(arr(bulk("abc"), arr(simple("x")), IntValue(5))) {
		t.Errorf("changing the clone changed the original: %v", orig)
	}
	if n := Nil.Clone(); !n.Equal(Nil) || n.Str != nil || n.Elems != nil {
		t.Errorf("Nil.Clone() = %+v", n)
	}
}

func TestNewScript(t *testing.T) {
	for _, tc := range []struct {
		body, sha string
	}{
		{"", "da39a3ee5e6b4b0d3255bfef95601890afd80709"},
		{"return 1", "e0e1f9fabfc9d4800c877a703b823ac0578ff8db"},
	} {
		s := NewScript([]byte(tc.body))
		if s.Sha != tc.sha || string(s.Body) != tc.body {
			t.Errorf("NewScript(%q) = %q, %q; want sha %q", tc.body, s.Sha, s.Body, tc.sha)
		}
	}
}
