package integration

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// counts reads redlock_proxy_commands_total for some commands and results.
// A pair that cannot occur has no series (a read is never granted): it
// reads as 0, and a count expected of it shows as missing.
func counts(t *testing.T, admin string, commands []string) map[string]float64 {
	t.Helper()
	_, m := httpGet(t, "http://"+admin+"/metrics")
	out := map[string]float64{}
	for _, c := range commands {
		for _, r := range []string{"granted", "refused", "no_quorum", "error", "ok"} {
			out[c+"/"+r] = max(sample(m, fmt.Sprintf(`redlock_proxy_commands_total{command=%q,result=%q}`, c, r)), 0)
		}
	}
	return out
}

// Results are counted by one rule for every command: with every master up
// a read is ok and a lock command granted or refused; with two of three
// down every command, reads included, is no_quorum, though the reads
// answer nil and -2 as for an absent key.
func TestResultsCountedAlikeForEveryCommand(t *testing.T) {
	c := newCluster(t, 3, fastTimeout)
	ctx := context.Background()
	cl := c.client(2)
	admin := c.app.AdminAddr()
	commands := []string{"set", "get", "pttl", "ttl", "del", "release", "delifeq"}
	key := uniqueKey("rule")

	// Each command once, every master up.
	run := func(key string) {
		cl.SetNX(ctx, key, "tok", 10*time.Second)
		cl.Get(ctx, key)
		cl.PTTL(ctx, key)
		cl.TTL(ctx, key)
		cl.Eval(ctx, seedRelease, []string{key}, "tok")
		cl.Do(ctx, "DELIFEQ", key, "tok")
		cl.Del(ctx, key)
	}
	noQuorum := infoField(t, cl, "stats", "lock_no_quorum")
	before := counts(t, admin, commands)
	run(key)
	after := counts(t, admin, commands)
	if n := infoField(t, cl, "stats", "lock_no_quorum") - noQuorum; n != 0 {
		t.Errorf("all up: INFO lock_no_quorum grew by %d; want 0", n)
	}
	want := map[string]string{
		"set": "granted", "get": "ok", "pttl": "ok", "ttl": "ok",
		"release": "granted", "delifeq": "refused", "del": "refused",
	}
	for cmd, result := range want {
		for _, r := range []string{"granted", "refused", "no_quorum", "error", "ok"} {
			d := after[cmd+"/"+r] - before[cmd+"/"+r]
			if (r == result) != (d == 1) || d > 1 {
				t.Errorf("all up: %s counted %v as %s; want once as %s", cmd, d, r, result)
			}
		}
	}

	// Two of three down: every one of them is no_quorum.
	c.servers[1].Kill()
	c.servers[2].Kill()
	waitHTTP(t, "http://"+admin+"/readyz", 503)
	key = uniqueKey("rule")
	if v, err := cl.Get(ctx, key).Result(); err != redis.Nil {
		t.Fatalf("GET without a quorum = %q, %v; want nil", v, err)
	}
	if v, err := cl.PTTL(ctx, key).Result(); err != nil || v != -2*time.Nanosecond {
		t.Fatalf("PTTL without a quorum = %v, %v; want -2", v, err)
	}
	infoBefore := infoField(t, cl, "stats", "lock_no_quorum")
	before = counts(t, admin, commands)
	run(key)
	after = counts(t, admin, commands)
	for _, cmd := range commands {
		for _, r := range []string{"granted", "refused", "no_quorum", "error", "ok"} {
			d := after[cmd+"/"+r] - before[cmd+"/"+r]
			if (r == "no_quorum") != (d == 1) || d > 1 {
				t.Errorf("2 of 3 down: %s counted %v as %s; want once as no_quorum", cmd, d, r)
			}
		}
	}
	// INFO counts the same answers without a quorum.
	if n := infoField(t, cl, "stats", "lock_no_quorum") - infoBefore; n != int64(len(commands)) {
		t.Errorf("INFO lock_no_quorum grew by %d; want %d, the commands above", n, len(commands))
	}
}

// infoField reads one integer field of an INFO section.
func infoField(t *testing.T, cl *redis.Client, section, field string) int64 {
	t.Helper()
	info, err := cl.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("INFO %s: %s", field, line)
			}
			return n
		}
	}
	t.Fatalf("INFO %s has no %s:\n%s", section, field, info)
	return 0
}
