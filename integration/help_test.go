package integration

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
)

// People at a prompt learn what this server serves: redis-cli's help
// comes from COMMAND DOCS, HELP lists every command and what a nil may
// mean, commands not served keep Redis's wording for libraries, and
// PUBLISH says what SUBSCRIBE is for.
func TestHelpForPeopleAtAPrompt(t *testing.T) {
	c := newCluster(t, 3)
	_, port, _ := net.SplitHostPort(c.app.Addr())
	cli := func(args ...string) string {
		out, err := exec.Command("redis-cli", append([]string{"-p", port}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	if out := cli("help", "SET"); !strings.Contains(out, "key token NX|IFEQ token PX milliseconds") || !strings.Contains(out, "Acquire a lock: OK when a majority") {
		t.Errorf("redis-cli help SET:\n%s", out)
	}
	lock := cli("help", "@lock")
	for _, cmd := range []string{"SET", "GET", "PTTL", "TTL", "DEL", "DELIFEQ", "DELEX", "EVAL", "EVALSHA", "SCRIPT", "FENCE"} {
		if !strings.Contains(lock, "\x1b[1m"+cmd+"\x1b[0m") {
			t.Errorf("redis-cli help @lock lacks %s:\n%s", cmd, lock)
		}
	}
	if strings.Contains(lock, "PING") {
		t.Errorf("redis-cli help @lock lists PING:\n%s", lock)
	}
	for _, args := range [][]string{{"FLUSHALL"}, {"MONITOR"}} {
		want := fmt.Sprintf("ERR unknown command '%s', with args beginning with: ", args[0])
		if out := cli(args...); !strings.HasPrefix(out, want) {
			t.Errorf("redis-cli %v = %q; want Redis's own %q", args, out, want)
		}
	}
	for _, args := range [][]string{{"INCR", "n"}, {"MULTI"}, {"SETNX", "k", "v"}} {
		if out := cli(args...); !strings.HasPrefix(out, "ERR redlock-proxy: ") || strings.Contains(out, "unknown command") {
			t.Errorf("redis-cli %v = %q; want why it is not served", args, out)
		}
	}

	ctx := context.Background()
	cl := c.client(2)
	lines, err := cl.Do(ctx, "HELP").StringSlice()
	if err != nil {
		t.Fatalf("HELP: %v", err)
	}
	help := strings.Join(lines, "\n")
	for _, want := range []string{
		"Every lock command is a Redlock majority vote over 3 Redis masters (2 needed).",
		"  SET key token NX|IFEQ token PX milliseconds",
		"  DELIFEQ key token",
		"  SUBSCRIBE channel [channel ...]\n      Accepted so that clients that open a subscription connection (StackExchange.Redis) can connect; nothing is ever published here.",
		`is not served: it gets Redis's "unknown command" error; the commands of lock designs no majority makes safe`,
		"a nil (or 0, -2) reply may also mean that too few backends answered: INFO proxy and /readyz say how many count",
	} {
		if !strings.Contains(help, want) {
			t.Errorf("HELP lacks %q:\n%s", want, help)
		}
	}
	if lines, err := cl.Do(ctx, "HELP", "pttl").StringSlice(); err != nil || !strings.HasPrefix(lines[0], "PTTL key") {
		t.Errorf("HELP pttl = %q, %v", lines, err)
	}
	if err := cl.Do(ctx, "PUBLISH", "ch", "m").Err(); err == nil || !strings.Contains(err.Error(), "SUBSCRIBE is accepted only so that clients that open a subscription connection (StackExchange.Redis) can connect") {
		t.Errorf("PUBLISH: %v; want an error saying what SUBSCRIBE is for", err)
	}
	// COMMAND DOCS over RESP3 is a map, as Redis sends it.
	docs, err := c.client(3).Do(ctx, "COMMAND", "DOCS", "subscribe", "flushall").Result()
	if err != nil {
		t.Fatalf("COMMAND DOCS: %v", err)
	}
	m, ok := docs.(map[any]any)
	if !ok || len(m) != 1 {
		t.Fatalf("COMMAND DOCS subscribe flushall = %#v; want a map with subscribe only", docs)
	}
	sub, _ := m["subscribe"].(map[any]any)
	if s, _ := sub["summary"].(string); !strings.Contains(s, "nothing is ever published") {
		t.Errorf("COMMAND DOCS subscribe = %#v", sub)
	}
}
