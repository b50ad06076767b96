package config

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/proxy/script"
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
		{ScriptConfig{Text: "return 'unterminated", Role: "release"}, "scripts[0].text"},
		// The seed release is built in already, as a release with other replies.
		{ScriptConfig{Text: `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`, Role: "release"}, "scripts[0].text"},
	} {
		c := Default()
		c.Scripts = []ScriptConfig{tt.sc}
		_, err := c.Validate()
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.wantKey) {
			t.Errorf("%+v: err = %v; want an ErrInvalid naming %q", tt.sc, err, tt.wantKey)
		}
	}
}

func TestScriptConfigRecognised(t *testing.T) {
	c := Default()
	c.Scripts = []ScriptConfig{
		{Name: "my acquire", Text: "if redis.call('set', KEYS[1], ARGV[2], 'NX', 'EX', ARGV[1]) then return 1 end return 0",
			Role: "acquire", TokenArg: ip(2), TTLArg: ip(1), TTLUnit: "s", Granted: []string{"int:1"}, Refused: []string{"int:0"},
			Success: "int:1", Failure: "int:0"},
		{Name: "by sha", SHA1: strings.Repeat("AB", 20), Role: "release"},
	}
	if _, err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	r := script.NewRegistry()
	if err := c.RegisterScripts(r); err != nil {
		t.Fatal(err)
	}
	// Recognised in another formatting.
	k := r.Lookup([]byte("if redis.call(\"SET\",KEYS[1],ARGV[2],\"NX\",\"EX\",ARGV[1]) then\r\n  return 1\r\nend\r\nreturn 0 -- mine"))
	if k.Spec == nil || k.Spec.Name != "my acquire" {
		t.Fatalf("configured acquire not recognised: %+v", k.Spec)
	}
	s := k.Spec
	if s.Role != script.RoleAcquire || s.TokenArg != 1 || s.TTLArg != 0 || s.TTLUnit != time.Second || s.Keys != 1 {
		t.Errorf("spec = %+v", s)
	}
	if g, _ := s.Classify(resp.IntValue(1), 1); !g {
		t.Errorf("1 not granted")
	}
	if _, ref := s.Classify(resp.IntValue(0), 1); !ref {
		t.Errorf("0 not refused")
	}
	// A sha-registered script is recognised only byte for byte: its sha
	// must match what Lookup computes, so no text can be tested here
	// beyond the registry's own entry.
	if r.BySha([]byte(strings.Repeat("ab", 20))) != nil {
		t.Errorf("a sha-only script appeared without its text being seen")
	}
}
