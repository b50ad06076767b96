package main

import (
	"bytes"
	"strings"
	"testing"
)

// A mistake on the command line or in the file is one line on stderr, with
// exit code 2, and no usage after it.
func TestArgumentMistakesAreOneLine(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-max_ttl", "sixty"}, "redlock-proxy: invalid configuration: -max_ttl: want a duration such as 30s, got sixty; redlock-proxy -h lists every flag"},
		{[]string{"-max_tll", "30s"}, "redlock-proxy: invalid configuration: unknown flag -max_tll (did you mean -max_ttl?); redlock-proxy -h lists every flag"},
		{[]string{"-backend_timeout", "5m"}, "redlock-proxy: invalid configuration: backend_timeout: must be below max_ttl (5m0s)"},
		{[]string{"-config", "/nonexistent/redlock-proxy.yaml"}, "redlock-proxy: config: open /nonexistent/redlock-proxy.yaml"},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(tt.args, &stdout, &stderr); code != 2 {
			t.Errorf("run(%q) = %d, want exit code 2", tt.args, code)
		}
		lines := strings.Split(strings.TrimRight(stderr.String(), "\n"), "\n")
		if len(lines) != 1 || !strings.HasPrefix(lines[0], tt.want) {
			t.Errorf("run(%q) stderr:\n%s\nwant one line starting %q", tt.args, stderr.String(), tt.want)
		}
		if stdout.Len() != 0 {
			t.Errorf("run(%q) printed to stdout:\n%s", tt.args, stdout.String())
		}
	}
}

// -h prints a description, an example and the flags to stdout, and exits 0.
func TestHelpGoesToStdout(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"-h"}, &stdout, &stderr); code != 0 {
		t.Fatalf("run(-h) = %d, want 0", code)
	}
	usage := stdout.String()
	if !strings.HasPrefix(usage, "redlock-proxy: ") || !strings.Contains(usage, "-backends 10.0.0.11:6379,") || !strings.Contains(usage, "-max_ttl duration") {
		t.Errorf("usage:\n%s", usage)
	}
	if stderr.Len() != 0 {
		t.Errorf("run(-h) wrote to stderr:\n%s", stderr.String())
	}
}
