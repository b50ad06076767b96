package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

func ip(n int) *int { return &n }

func TestScriptConfigRefusals(t *testing.T) {
	text := "return 1"
	for _, tt := range []struct {
		sc      ScriptConfig
		wantKey string
	}{
		{ScriptConfig{Text: text}, "scripts[0].role"},
		{ScriptConfig{Text: text, Role: "grab"}, "scripts[0].role"},
		{ScriptConfig{Role: "release"}, "scripts[0]: give exactly one"},
		{ScriptConfig{Text: text, SHA1: strings.Repeat("a", 40), Role: "release"}, "scripts[0]: give exactly one"},
		{ScriptConfig{SHA1: "xyz", Role: "release"}, "scripts[0].sha1"},
		{ScriptConfig{Text: text, Role: "release", Keys: ip(-1)}, "scripts[0].keys"},
		{ScriptConfig{Text: text, Role: "release", TokenArg: ip(0)}, "scripts[0].token_arg"},
		{ScriptConfig{Text: text, Role: "extend", TTLArg: ip(1)}, "scripts[0].ttl_arg"},
		{ScriptConfig{Text: text, Role: "acquire", TTLArg: ip(0)}, "scripts[0].ttl_arg"},
		{ScriptConfig{Text: text, Role: "extend", TTLUnit: "h"}, "scripts[0].ttl_unit"},
		{ScriptConfig{Text: text, Role: "ttl", ReplyUnit: "min"}, "scripts[0].reply_unit"},
		{ScriptConfig{Text: text, Role: "release", Granted: []string{"int:x"}}, "scripts[0].granted[0]"},
		{ScriptConfig{Text: text, Role: "release", Refused: []string{"int:0", "maybe"}}, "scripts[0].refused[1]"},
		{ScriptConfig{Text: text, Role: "release", Success: "yes"}, "scripts[0].success"},
		{ScriptConfig{Text: text, Role: "release", Failure: "int:"}, "scripts[0].failure"},
		{ScriptConfig{Text: text, Role: "release", Replies: Replies{Missing: "[1,"}}, "scripts[0].replies.missing"},
		{ScriptConfig{Text: "return 'unterminated", Role: "release"}, "scripts[0].text"},
	} {
		c := Default()
		c.Scripts = []ScriptConfig{tt.sc}
		_, err := c.Validate()
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantKey) {
			t.Errorf("%+v: err = %v; want an ErrInvalid naming %q", tt.sc, err, tt.wantKey)
		}
	}
}

// A declaration becomes a classification that wins over the classifier
// for its sha1, whether given by text or by sha1.
func TestScriptConfigDeclared(t *testing.T) {
	c := Default()
	text := "if redis.call('set', KEYS[1], ARGV[2], 'NX', 'EX', ARGV[1]) then return 1 end return 0"
	c.Scripts = []ScriptConfig{
		{Name: "my acquire", Text: text, Role: "acquire", TokenArg: ip(2), TTLArg: ip(1), TTLUnit: "s", Success: "int:1", Failure: "int:0"},
		{Name: "by sha", SHA1: strings.Repeat("AB", 20), Role: "release", Replies: Replies{Missing: "-1"}},
		{Name: "ttl in seconds", SHA1: strings.Repeat("cd", 20), Role: "ttl", ReplyUnit: "s", Failure: "error:ERROR"},
	}
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r := classify.NewRegistry()
	if err := c.RegisterScripts(r); err != nil {
		t.Fatal(err)
	}
	args := func(s ...string) [][]byte {
		out := make([][]byte, len(s))
		for i, x := range s {
			out[i] = []byte(x)
		}
		return out
	}
	e := r.BySha([]byte(sandbox.Sha1([]byte(text))))
	if e == nil {
		t.Fatalf("the declared text's sha1 is unknown")
	}
	cl := e.Lookup(args("k"), args("30", "tok"))
	if cl == nil {
		t.Fatalf("no classification for a call of the declared script")
	}
	want := "acquire keys=1 args=any token=2 ttl=1s; missing: 1; own: 0; own-no-ttl: 0; other: 0; other-no-ttl: 0"
	if got := cl.Spec(); got != want {
		t.Errorf("declared acquire = %s\nwant %s", got, want)
	}
	if ttl, ok := cl.TTL(args("30", "tok")); !ok || ttl != 30*time.Second {
		t.Errorf("TTL = %v, %v; want 30s", ttl, ok)
	}
	e = r.BySha([]byte(strings.Repeat("ab", 20)))
	if e == nil || e.Lookup(args("k"), args("tok")).Spec() != "release keys=1 args=any token=1; missing: -1; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0" {
		t.Errorf("declared release by sha1 = %v", e)
	}
	e = r.BySha([]byte(strings.Repeat("CD", 20)))
	if got := e.Lookup(args("k"), args("tok")).Spec(); got != `ttl keys=1 args=any token=1; missing: -ERROR; own: ttl; own-no-ttl: ttl; other: -ERROR; other-no-ttl: -ERROR` {
		t.Errorf("declared ttl query = %s", got)
	}
}
