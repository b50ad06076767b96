package acl

import (
	"strings"
	"testing"
)

// Match is Redis's glob matching of keys.
func TestMatch(t *testing.T) {
	for _, c := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "anything", true}, {"team:*", "team:a", true}, {"team:*", "teams:a", false},
		{"a?c", "abc", true}, {"a?c", "ac", false}, {"a[bc]d", "acd", true}, {"a[^bc]d", "acd", false},
		{"a[^bc]d", "aed", true}, {"a[a-c]d", "abd", true}, {"a[c-a]d", "abd", true}, {"a[a-c]d", "add", false},
		{`a\*b`, "a*b", true}, {`a\*b`, "axb", false}, {"a*b*c", "a-b-x-c", true}, {"a*b*c", "a-b-x-d", false},
		{"a/*", "a/b/c", true}, {"lock:{*}", "lock:{x}", true}, {"[]", "x", false},
	} {
		if got := Match(c.pattern, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v; want %v", c.pattern, c.s, got, c.want)
		}
	}
}

// Parse reads the rules in order and refuses the ones not served, naming
// them.
func TestParse(t *testing.T) {
	r, err := Parse("on ~team:* %R~shared:* %W~drop:* resetchannels -@all +@read +set -get +client|id allkeys resetkeys off")
	if err != nil {
		t.Fatal(err)
	}
	want := []Rule{
		{Kind: KeyPattern, Pattern: "team:*", Read: true, Write: true},
		{Kind: KeyPattern, Pattern: "shared:*", Read: true},
		{Kind: KeyPattern, Pattern: "drop:*", Write: true},
		{Kind: DenyCategory, Name: "all"}, {Kind: AllowCategory, Name: "read"},
		{Kind: AllowCommand, Name: "set"}, {Kind: DenyCommand, Name: "get"}, {Kind: AllowCommand, Name: "client|id"},
		{Kind: KeyPattern, Pattern: "*", Read: true, Write: true}, {Kind: ResetKeys},
	}
	if !r.Off || len(r.Rules) != len(want) {
		t.Fatalf("Parse = %+v", r)
	}
	for i := range want {
		if r.Rules[i] != want[i] {
			t.Errorf("rule %d = %+v; want %+v", i, r.Rules[i], want[i])
		}
	}
	for _, c := range []struct{ rules, want string }{
		{"+@lock", "unknown command category"},
		{">secret", "passwords go in the user's password"},
		{"%X~a", "key permissions are R, W or RW"},
		{"%R", "needs its ~"},
		{"+", "not a command name"},
		{"sanitize-payload", "not an ACL rule this proxy serves"},
	} {
		if _, err := Parse(c.rules); err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.rules) {
			t.Errorf("Parse(%q) = %v; want an error naming it and saying %q", c.rules, err, c.want)
		}
	}
}
