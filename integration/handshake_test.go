package integration

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// What client libraries send while connecting, answered as
// Redis would.
func TestHandshakes(t *testing.T) {
	c := newCluster(t, 3)
	addr := c.app.Addr()
	ctx := context.Background()

	// HELLO 3 with AUTH and SETNAME: the default user has no password.
	got := rawDo(t, addr, "*7\r\n$5\r\nHELLO\r\n$1\r\n3\r\n$4\r\nAUTH\r\n$7\r\ndefault\r\n$3\r\nany\r\n$7\r\nSETNAME\r\n$2\r\nme\r\n")
	for _, want := range []string{"%7\r\n", "$6\r\nserver\r\n$5\r\nredis\r\n", "$5\r\nproto\r\n:3\r\n", "$4\r\nrole\r\n$6\r\nmaster\r\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("HELLO 3 AUTH SETNAME reply lacks %q: %q", want, got)
		}
	}
	if got := rawDo(t, addr, "HELLO 3 AUTH someone secret\r\n"); got != "-WRONGPASS invalid username-password pair or user is disabled.\r\n" {
		t.Errorf("HELLO with an unknown user = %q", got)
	}
	if got := rawDo(t, addr, "HELLO 4\r\n"); got != "-NOPROTO unsupported protocol version\r\n" {
		t.Errorf("HELLO 4 = %q", got)
	}
	if got := rawDo(t, addr, "AUTH pw\r\n"); !strings.HasPrefix(got, "-ERR AUTH <password> called without any password configured") {
		t.Errorf("AUTH without a configured password = %q", got)
	}

	for _, proto := range []int{2, 3} {
		cl := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, ClientName: "hs"})
		defer cl.Close()
		cfg, err := cl.ConfigGet(ctx, "*").Result()
		if err != nil || cfg["timeout"] != "0" || cfg["databases"] != "1" || cfg["replica-read-only"] != "yes" {
			t.Errorf("RESP%d CONFIG GET * = %v, %v", proto, cfg, err)
		}
		if cfg, _ := cl.ConfigGet(ctx, "datab*").Result(); len(cfg) != 1 {
			t.Errorf("RESP%d CONFIG GET datab* = %v", proto, cfg)
		}
		if err := cl.ConfigSet(ctx, "timeout", "5").Err(); err == nil {
			t.Errorf("CONFIG SET accepted")
		}
		if n, err := cl.Do(ctx, "WAIT", "1", "0").Int(); err != nil || n != 0 {
			t.Errorf("WAIT = %d, %v", n, err)
		}
		for _, sec := range []string{"replication", "server"} {
			info, err := cl.Info(ctx, sec).Result()
			if err != nil || !strings.Contains(info, "role:master") && sec == "replication" || !strings.Contains(info, "# ") {
				t.Errorf("INFO %s = %q, %v", sec, info, err)
			}
		}
		if err := cl.Do(ctx, "CLIENT", "TRACKING", "ON", "OPTIN").Err(); err != nil {
			t.Errorf("CLIENT TRACKING ON OPTIN: %v", err)
		}
		if err := cl.Do(ctx, "CLIENT", "CACHING", "YES").Err(); err != nil {
			t.Errorf("CLIENT CACHING YES in OPTIN mode: %v", err)
		}
		if err := cl.Do(ctx, "CLIENT", "CACHING", "NO").Err(); err == nil || !strings.Contains(err.Error(), "OPTOUT") {
			t.Errorf("CLIENT CACHING NO in OPTIN mode: %v; want Redis's error", err)
		}
		if err := cl.Do(ctx, "CLIENT", "SETINFO", "LIB-NAME", "go-redis").Err(); err != nil {
			t.Errorf("CLIENT SETINFO: %v", err)
		}
	}

	// RESET returns to RESP2, no name.
	if got := rawDo(t, addr, "HELLO 3 SETNAME x\r\nRESET\r\nCLIENT GETNAME\r\n"); !strings.HasSuffix(got, "+RESET\r\n$-1\r\n") {
		t.Errorf("HELLO 3, RESET, CLIENT GETNAME = %q", got)
	}
	// A subscription connection (StackExchange.Redis) is accepted; in RESP2
	// only pub/sub commands are allowed on it, and UNSUBSCRIBE with no
	// channel leaves each by name, as in Redis.
	got = rawDo(t, addr, "SUBSCRIBE __Booksleeve_MasterChanged\r\nGET k\r\nPING\r\nUNSUBSCRIBE\r\nGET k\r\n")
	want := "*3\r\n$9\r\nsubscribe\r\n$26\r\n__Booksleeve_MasterChanged\r\n:1\r\n" +
		"-ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context\r\n" +
		"*2\r\n$4\r\npong\r\n$0\r\n\r\n" +
		"*3\r\n$11\r\nunsubscribe\r\n$26\r\n__Booksleeve_MasterChanged\r\n:0\r\n" +
		"$-1\r\n"
	if got != want {
		t.Errorf("subscribed session:\n got %q\nwant %q", got, want)
	}
}

// Newer release primitives (Valkey 9 DELIFEQ, Redis 8.4 DELEX IFEQ and
// SET IFEQ), translated for Redis 7 backends.
func TestNewReleasePrimitives(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)

	for _, del := range [][]any{{"DELIFEQ"}, {"DELEX", "", "IFEQ"}} {
		key := uniqueKey("prim")
		cl.SetNX(ctx, key, "tok", 30*time.Second)
		args := func(v string) []any {
			if len(del) == 1 {
				return []any{del[0], key, v}
			}
			return []any{del[0], key, del[2], v}
		}
		if n, err := cl.Do(ctx, args("other")...).Int(); err != nil || n != 0 {
			t.Fatalf("%v with another value = %d, %v; want 0", del[0], n, err)
		}
		c.checkHeld(t, "after a wrong "+del[0].(string), key, "tok")
		if n, err := cl.Do(ctx, args("tok")...).Int(); err != nil || n != 1 {
			t.Fatalf("%v = %d, %v; want 1", del[0], n, err)
		}
		c.checkGone(t, "after "+del[0].(string), key, "tok")
	}

	key := uniqueKey("setifeq")
	cl.SetNX(ctx, key, "tok", 2*time.Second)
	if v, err := cl.Do(ctx, "SET", key, "tok", "IFEQ", "tok", "PX", "20000").Result(); err != nil || v != "OK" {
		t.Fatalf("SET IFEQ (extend) = %v, %v", v, err)
	}
	for i := range c.direct {
		waitFor(t, 2*time.Second, fmt.Sprintf("backend %d's PTTL after SET IFEQ to be about 20s", i), func() error {
			if p := c.eventuallyPTTL(i, key); p < 19*time.Second {
				return fmt.Errorf("PTTL %v", p)
			}
			return nil
		})
	}
	if _, err := cl.Do(ctx, "SET", key, "other", "IFEQ", "other", "PX", "20000").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("SET IFEQ with another value: %v; want nil", err)
	}
	if err := cl.Do(ctx, "SET", key, "new", "IFEQ", "tok", "PX", "20000").Err(); err == nil {
		t.Fatalf("SET IFEQ handing the lock to another value was accepted")
	}
	if err := cl.Do(ctx, "SET", key, "tok", "IFEQ", "tok").Err(); err == nil {
		t.Fatalf("SET IFEQ without an expiry was accepted")
	}
	if err := cl.Do(ctx, "SET", key, "tok", "IFEQ", "tok", "NX", "PX", "1").Err(); err == nil || err.Error() != "ERR syntax error" {
		t.Fatalf("SET IFEQ NX: %v; want syntax error", err)
	}
	if n, err := cl.Do(ctx, "DELEX", key).Int(); err != nil || n != 1 {
		t.Fatalf("DELEX without a condition = %d, %v", n, err)
	}
	c.checkGone(t, "after DELEX", key, "tok")
}

const incrScript = `local n = redis.call('incr', KEYS[1]) redis.call('pexpire', KEYS[1], 60000) return n`

// Scripts the proxy does not know are refused by default, with how to
// register them; with unknown_scripts: vote they run everywhere and the
// majority's reply comes back.
func TestUnknownScripts(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	err := cl.Eval(ctx, incrScript, []string{"n"}).Err()
	if err == nil || !strings.Contains(err.Error(), "unknown script") || !strings.Contains(err.Error(), "scripts:") {
		t.Fatalf("unknown script: %v; want a refusal saying how to register it", err)
	}
	if err := cl.ScriptLoad(ctx, `return redis.call('lpush', KEYS[1], 'x')`).Err(); err == nil {
		t.Fatalf("SCRIPT LOAD of a script calling a command outside the allow-list accepted")
	}
	for i, d := range c.direct {
		if n, _ := d.Exists(ctx, "n").Result(); n != 0 {
			t.Fatalf("a refused script ran on backend %d", i)
		}
	}

	v := newCluster(t, 3, func(cfg *config.Config) { cfg.UnknownScripts = "vote" })
	vc := v.client(2)
	for want := int64(1); want <= 3; want++ {
		if n, err := vc.Eval(ctx, incrScript, []string{"n"}).Int64(); err != nil || n != want {
			t.Fatalf("voted script = %d, %v; want %d", n, err, want)
		}
	}
	sha, err := vc.ScriptLoad(ctx, incrScript).Result()
	if err != nil {
		t.Fatalf("SCRIPT LOAD under the vote policy: %v", err)
	}
	if n, err := vc.EvalSha(ctx, sha, []string{"n"}).Int64(); err != nil || n != 4 {
		t.Fatalf("EVALSHA under the vote policy = %d, %v", n, err)
	}
	// Backends that disagree give no majority answer: an error, not a guess.
	v.direct[0].Set(ctx, "m", 10, 0)
	v.direct[1].Set(ctx, "m", 20, 0)
	if err := vc.Eval(ctx, incrScript, []string{"m"}).Err(); err == nil || !strings.Contains(err.Error(), "no majority") {
		t.Fatalf("disagreeing backends: %v; want an error", err)
	}
}

// An operator registers a script of their own in the configuration; it is
// recognised in any formatting and obeys the quorum.
func TestConfiguredScript(t *testing.T) {
	one := 1
	two := 2
	c := newCluster(t, 5, func(cfg *config.Config) {
		cfg.Scripts = []config.ScriptConfig{{
			Name:     "our acquire (seconds)",
			Text:     "if redis.call('set', KEYS[1], ARGV[2], 'NX', 'EX', ARGV[1]) then return 1 end return 0",
			Role:     "acquire",
			TokenArg: &two,
			TTLArg:   &one,
			TTLUnit:  "s",
			Granted:  []string{"int:1"},
			Refused:  []string{"int:0"},
			Success:  "int:1",
			Failure:  "int:0",
		}}
	})
	ctx := context.Background()
	cl := c.client(2)
	variant := "if redis.call(\"SET\", KEYS[1], ARGV[2], \"NX\", \"EX\", ARGV[1]) then\n  return 1 -- got it\nend\nreturn 0"
	key := uniqueKey("ours")
	if n, err := cl.Eval(ctx, variant, []string{key}, 30, "tok").Int(); err != nil || n != 1 {
		t.Fatalf("configured acquire = %d, %v; want 1", n, err)
	}
	c.checkHeld(t, "after the configured acquire", key, "tok")
	if n, err := cl.Eval(ctx, variant, []string{key}, 30, "other").Int(); err != nil || n != 0 {
		t.Fatalf("second configured acquire = %d, %v; want 0", n, err)
	}
	c.checkGone(t, "after the refused configured acquire", key, "other")
	if n, err := cl.Eval(ctx, variant, []string{key}, 3600, "x").Int(); err == nil {
		t.Fatalf("a TTL above max_ttl was accepted (%d)", n)
	}
}
