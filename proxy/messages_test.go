package proxy

import (
	"strings"
	"testing"
)

// Commands of lock designs no majority can make safe are answered with
// why, not "unknown command"; a command that is simply not served still
// gets Redis's own reply.
func TestUnsafeDesignsSayWhy(t *testing.T) {
	s, m := modelServer(3)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"SETNX", "k", "tok"}, "never expires if its client stops"},
		{[]string{"setnx", "k", "tok"}, "SET key token NX PX milliseconds"},
		{[]string{"EXPIRE", "k", "10"}, "whatever holds it"},
		{[]string{"PEXPIREAT", "k", "1"}, "IFEQ"},
		{[]string{"SETEX", "k", "10", "tok"}, "takes a lock from its holder"},
		{[]string{"GETSET", "k", "tok"}, "without an expiry"},
		{[]string{"GETDEL", "k"}, "DELIFEQ"},
		{[]string{"PERSIST", "k"}, "must always expire"},
		{[]string{"INCR", "fence"}, "FENCE key token"},
		{[]string{"MULTI"}, "each master on its own"},
		{[]string{"WATCH", "k"}, "each master on its own"},
	} {
		v := do(t, s, c.args...)
		if !strings.HasPrefix(v.String(), "-ERR redlock-proxy: ") || !strings.Contains(v.String(), c.want) || strings.Contains(v.String(), "unknown command") {
			t.Errorf("%q = %v; want why, naming %q", c.args, v, c.want)
		}
	}
	if v := do(t, s, "LPUSH", "q", "x"); !strings.Contains(v.String(), "unknown command 'LPUSH'") {
		t.Errorf("LPUSH = %v; want Redis's unknown command", v)
	}
	for n, sent := range m.sent {
		if len(sent) != 0 {
			t.Fatalf("node %d was sent %q", n, sent)
		}
	}
}

// A refused script's error says why, points to SCRIPT EXPLAIN and the
// scripts: section, and never to the vote policy.
func TestScriptRefusalPointsToExplainAndScripts(t *testing.T) {
	s, _ := modelServer(3)
	v := do(t, s, evalArgs(`if redis.call("get", KEYS[1]) then return redis.call("del", KEYS[1]) end return 0`, []string{"k"}, "tok")...)
	text := v.String()
	for _, want := range []string{"unknown script", "deleted KEYS[1]", "SCRIPT EXPLAIN", "'scripts:' in the configuration"} {
		if !strings.Contains(text, want) {
			t.Errorf("refusal lacks %q: %s", want, text)
		}
	}
	if strings.Contains(text, "unknown_scripts") || strings.Contains(text, "vote") {
		t.Errorf("refusal recommends the vote policy: %s", text)
	}
}
