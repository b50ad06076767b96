package spec

import (
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Templates print and parse back, and fill their holes from a situation.
func TestTemplatesPrintParseAndFill(t *testing.T) {
	sit := &Situation{Case: CaseOther, Focus: 1, PTTL: 41734, PTTLAfter: 30000, Value: []byte("v,]"), HasValue: true, Count: 2, NKeys: 3,
		Keys: [][]byte{[]byte("a"), []byte("b"), []byte("c")}, Argv: [][]byte{[]byte("tok"), []byte("15")}}
	for _, c := range []struct{ text, filled string }{
		{"1", ":1"},
		{"-3", ":-3"},
		{"nil", "(nil)"},
		{"+OK", "+OK"},
		{"-ERR ERROR", "-ERR ERROR"},
		{`-"a, b"`, "-a, b"},
		{`"x y"`, `"x y"`},
		{"pttl", ":41734"},
		{"ttl", ":42"},
		{"pttl_after", ":30000"},
		{"ttl_after", ":30"},
		{"value", `"v,]"`},
		{"ARGV[1]", `"tok"`},
		{"int(ARGV[2])", ":15"},
		{"KEYS[3]", `"c"`},
		{"KEYS[index]", `"b"`},
		{"index", ":2"},
		{"count", ":2"},
		{"nkeys", ":3"},
		{"[]", "[]"},
		{`[1, pttl, [value, "z"], nil]`, `[:1 :41734 ["v,]" "z"] (nil)]`},
	} {
		tm, err := ParseTemplate(c.text)
		if err != nil {
			t.Errorf("ParseTemplate(%q): %v", c.text, err)
			continue
		}
		if tm.String() != c.text {
			t.Errorf("ParseTemplate(%q) prints as %q", c.text, tm.String())
		}
		if got := tm.Fill(sit).String(); got != c.filled {
			t.Errorf("%s filled = %s; want %s", c.text, got, c.filled)
		}
	}
	for _, bad := range []string{"", "[1,", "[1 2]", "ARGV[0]", "KEYS[x]", "pttl2", `"open`, "1]"} {
		if _, err := ParseTemplate(bad); err == nil {
			t.Errorf("ParseTemplate(%q) accepted", bad)
		}
	}
	// A missing key's value is nil; an argument that is no integer has
	// no integer (learning rejects it).
	if v := MustTemplate("value").Fill(&Situation{}); v.Kind != resp.KindNil {
		t.Errorf("value of a missing key = %v", v)
	}
	if _, ok := MustTemplate("int(ARGV[1])").eval(sit); ok {
		t.Errorf("int(ARGV[1]) of %q evaluated", sit.Argv[0])
	}
}
