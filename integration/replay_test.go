package integration

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Libraries whose runtime is not on this machine (RedLock.net, pottery,
// redlock-py, aioredlock) are replayed: their scripts byte for byte (from
// proxy/script/lua, whose SHA1s match CLIENTS.md) in the call sequences
// they use (proxy/script/lua/NOTES.md), checked on the backends.

// libScript reads a library's exact script bytes and checks its sha1.
func libScript(t *testing.T, file, sha string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "proxy", "script", "lua", file))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha1.Sum(b)
	if got := hex.EncodeToString(sum[:]); got != sha {
		t.Fatalf("%s: sha1 %s; CLIENTS.md says %s", file, got, sha)
	}
	return string(b)
}

// do sends a raw command and returns its reply or error.
func do(cl *redis.Client, args ...any) (any, error) {
	return cl.Do(context.Background(), args...).Result()
}

func mustDo(t *testing.T, want any, cl *redis.Client, args ...any) {
	t.Helper()
	got, err := do(cl, args...)
	if err != nil {
		t.Fatalf("%v: error %v; want %v", short(args), err, want)
	}
	if got != want {
		t.Fatalf("%v = %#v; want %#v", short(args), got, want)
	}
}

// short abbreviates scripts in failure messages.
func short(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		if s, ok := a.(string); ok && len(s) > 40 {
			a = s[:20] + "..."
		}
		out[i] = a
	}
	return out
}

func TestReplayRedLockNet(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	for _, build := range []struct{ suffix, release, extend string }{
		{"", "18b2a577dbe847b16bebde190d69a1613d68e60e", "9f614a785a5f9ae8c6396c6b4bf94d2087342603"},
		{"-crlf", "cb0427378f700ddb2f0e9394dbb0a40bd6dba04a", "3e7c6bf3e080bb97a92e77362149c26252b98212"},
	} {
		t.Run("build"+build.suffix, func(t *testing.T) {
			unlock := libScript(t, "redlocknet-2.3-release"+build.suffix+".lua", build.release)
			extend := libScript(t, "redlocknet-2.3-extend"+build.suffix+".lua", build.extend)
			cl := c.client(2)
			key := "redlock:" + uniqueKey("order")
			guid := "3f2504e0-4f89-11d3-9a0c-0305e82c3301"

			// Acquire: StringSet(key, guid, 30s, When.NotExists).
			mustDo(t, "OK", cl, "SET", key, guid, "EX", "30", "NX")
			c.checkHeld(t, "after acquire", key, guid)
			if _, err := do(cl, "SET", key, "other-guid", "EX", "30", "NX"); !errors.Is(err, redis.Nil) {
				t.Fatalf("a second acquire: %v; want nil", err)
			}
			c.checkHeld(t, "after the refused acquire", key, guid)

			// First script call on an endpoint: SCRIPT LOAD pipelined with EVAL.
			pipe := cl.Pipeline()
			load := pipe.ScriptLoad(ctx, extend)
			first := pipe.Eval(ctx, extend, []string{key}, guid, 30000)
			if _, err := pipe.Exec(ctx); err != nil {
				t.Fatalf("SCRIPT LOAD + EVAL extend: %v", err)
			}
			if load.Val() != build.extend || first.Val() != int64(1) {
				t.Fatalf("SCRIPT LOAD = %s, EVAL extend = %v; want %s, 1", load.Val(), first.Val(), build.extend)
			}
			// Then EVALSHA, from its extend timer.
			mustDo(t, int64(1), cl, "EVALSHA", build.extend, 1, key, guid, 30000)
			mustDo(t, int64(-1), cl, "EVALSHA", build.extend, 1, key, "other-guid", 30000)
			c.checkHeld(t, "after a conflicting extend", key, guid)

			// Release at Dispose.
			pipe = cl.Pipeline()
			pipe.ScriptLoad(ctx, unlock)
			rel := pipe.Eval(ctx, unlock, []string{key}, guid)
			if _, err := pipe.Exec(ctx); err != nil || rel.Val() != int64(1) {
				t.Fatalf("release = %v, %v; want 1", rel.Val(), err)
			}
			c.checkGone(t, "after release", key, guid)
			mustDo(t, int64(0), cl, "EVALSHA", build.release, 1, key, guid)

			// Its extend re-creates a missing key: the lock is held again.
			mustDo(t, int64(1), cl, "EVALSHA", build.extend, 1, key, guid, 30000)
			c.checkHeld(t, "after extend of a missing key", key, guid)
			mustDo(t, int64(1), cl, "EVALSHA", build.release, 1, key, guid)
			c.checkGone(t, "after the last release", key, guid)
		})
	}
}

func TestReplayPottery(t *testing.T) {
	c := newCluster(t, 5)
	ttlScript := libScript(t, "pottery-3-ttl.lua", "f5f7bd3a3aa4a63c507c1155c5ea1219b350d992")
	extend := libScript(t, "pottery-3-extend.lua", "ba015a80261b616e7a62d35df0b8e3edbe6c9414")
	release := libScript(t, "pottery-3-release.lua", "a4aada0b36710970eedaaaeec4a6b7d8c78c4f80")
	cl := c.client(2)
	key := "redlock:" + uniqueKey("printer")
	uuid := "6f1c2e7a-52b8-4a42-9a53-8f1b8e8b9a11"

	// redis-py's Script: EVALSHA; on NOSCRIPT, SCRIPT LOAD then EVALSHA.
	evalsha := func(script, sha string, args ...any) (any, error) {
		a := append([]any{"EVALSHA", sha, 1, key}, args...)
		v, err := do(cl, a...)
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			if got, err := do(cl, "SCRIPT", "LOAD", script); err != nil || got != sha {
				t.Fatalf("SCRIPT LOAD = %v, %v; want %s", got, err, sha)
			}
			v, err = do(cl, a...)
		}
		return v, err
	}

	mustDo(t, "OK", cl, "SET", key, uuid, "PX", 10000, "NX") // redis-py writes PX before NX
	c.checkHeld(t, "after acquire", key, uuid)
	if _, err := do(cl, "SET", key, "other", "PX", 10000, "NX"); !errors.Is(err, redis.Nil) {
		t.Fatalf("second acquire: %v; want nil", err)
	}
	ttl, err := evalsha(ttlScript, "f5f7bd3a3aa4a63c507c1155c5ea1219b350d992", uuid)
	if err != nil || ttl.(int64) <= 9000 || ttl.(int64) > 10000 {
		t.Fatalf("ttl-query = %v, %v; want the validity just under 10000 ms", ttl, err)
	}
	if v, err := evalsha(ttlScript, "f5f7bd3a3aa4a63c507c1155c5ea1219b350d992", "other"); err != nil || v != int64(0) {
		t.Fatalf("ttl-query with another uuid = %v, %v; want 0", v, err)
	}
	if v, err := evalsha(extend, "ba015a80261b616e7a62d35df0b8e3edbe6c9414", uuid, 20000); err != nil || v != int64(1) {
		t.Fatalf("extend = %v, %v; want 1", v, err)
	}
	if v, err := evalsha(extend, "ba015a80261b616e7a62d35df0b8e3edbe6c9414", "other", 20000); err != nil || v != int64(0) {
		t.Fatalf("extend with another uuid = %v, %v; want 0", v, err)
	}
	if p := c.eventuallyPTTL(4, key); p < 19*time.Second {
		t.Fatalf("after extend PTTL = %v; want about 20s", p)
	}
	if v, err := evalsha(release, "a4aada0b36710970eedaaaeec4a6b7d8c78c4f80", "other"); err != nil || v != int64(0) {
		t.Fatalf("release with another uuid = %v, %v; want 0", v, err)
	}
	c.checkHeld(t, "after a wrong release", key, uuid)
	if v, err := evalsha(release, "a4aada0b36710970eedaaaeec4a6b7d8c78c4f80", uuid); err != nil || v != int64(1) {
		t.Fatalf("release = %v, %v; want 1", v, err)
	}
	c.checkGone(t, "after release", key, uuid)
	if v, err := evalsha(ttlScript, "f5f7bd3a3aa4a63c507c1155c5ea1219b350d992", uuid); err != nil || v != int64(0) {
		t.Fatalf("ttl-query after release = %v, %v; want 0", v, err)
	}
}

func TestReplayRedlockPy(t *testing.T) {
	c := newCluster(t, 3)
	unlock := libScript(t, "redlockpy-release.lua", "4e92fdc63815b3a0a2dd1c1df3694de73607c88d")
	cl := c.client(2)
	key, val := uniqueKey("res"), "b'\\x8f\\x01'-token"
	mustDo(t, "OK", cl, "SET", key, val, "PX", 5000, "NX")
	c.checkHeld(t, "after acquire", key, val)
	if _, err := do(cl, "SET", key, "x", "PX", 5000, "NX"); !errors.Is(err, redis.Nil) {
		t.Fatalf("second acquire: %v; want nil", err)
	}
	mustDo(t, int64(0), cl, "EVAL", unlock, 1, key, "x")
	c.checkHeld(t, "after a wrong release", key, val)
	mustDo(t, int64(1), cl, "EVAL", unlock, 1, key, val) // plain EVAL every time
	c.checkGone(t, "after release", key, val)
}

func TestReplayAioredlock(t *testing.T) {
	c := newCluster(t, 5)
	acquire := libScript(t, "aioredlock-0.7-acquire.lua", "c75a9bf1538efcdb1f383acc3e273c5089d57e58")
	release := libScript(t, "aioredlock-0.7-release.lua", "241e4ca540a1cc4ec1f32d9eb9f879e607d7e6e5")
	ttlScript := libScript(t, "aioredlock-0.7-ttl.lua", "f908d3f43dbcabc68fc0c9ecaf1fa4a285ecdb0a")
	cl := c.client(2)
	// At connect: SCRIPT LOAD of all three; then only EVALSHA.
	shas := map[string]string{}
	for name, s := range map[string]string{"acquire": acquire, "release": release, "ttl": ttlScript} {
		v, err := do(cl, "SCRIPT", "LOAD", s)
		if err != nil {
			t.Fatalf("SCRIPT LOAD %s: %v", name, err)
		}
		shas[name] = v.(string)
	}
	key, uuid := uniqueKey("resource"), "0b0c6f5e-2a51-4f44-8f0f-7f4b1b0e9d7a"
	mustDo(t, "OK", cl, "EVALSHA", shas["acquire"], 1, key, uuid, 10000)
	c.checkHeld(t, "after lock", key, uuid)
	_, err := do(cl, "EVALSHA", shas["acquire"], 1, key, "other", 10000)
	if err == nil || !strings.Contains(err.Error(), "ERROR") {
		t.Fatalf("lock by another: %v; want the script's ERROR reply", err)
	}
	c.checkGone(t, "after the refused lock", key, "other")
	c.checkHeld(t, "after the refused lock", key, uuid)
	// extend is the same script with the same uuid.
	mustDo(t, "OK", cl, "EVALSHA", shas["acquire"], 1, key, uuid, 20000)
	ttl, err := do(cl, "EVALSHA", shas["ttl"], 1, key, uuid)
	if err != nil || ttl.(int64) < 18 || ttl.(int64) > 20 {
		t.Fatalf("ttl-query = %v, %v; want about 20 (seconds)", ttl, err)
	}
	if _, err := do(cl, "EVALSHA", shas["ttl"], 1, key, "other"); err == nil || !strings.Contains(err.Error(), "ERROR") {
		t.Fatalf("ttl-query by another: %v; want ERROR", err)
	}
	if _, err := do(cl, "EVALSHA", shas["release"], 1, key, "other"); err == nil || !strings.Contains(err.Error(), "ERROR") {
		t.Fatalf("release by another: %v; want ERROR", err)
	}
	c.checkHeld(t, "after a wrong release", key, uuid)
	mustDo(t, int64(1), cl, "EVALSHA", shas["release"], 1, key, uuid)
	c.checkGone(t, "after release", key, uuid)
	mustDo(t, "OK", cl, "EVALSHA", shas["release"], 1, key, uuid) // already gone: OK
}

// @sesamecare-oss/redlock's scripts SELECT the database given in ARGV[1];
// the proxy serves database 0 only (its undo and reads work there), so
// another database is refused rather than locked where nothing can see it.
func TestSesameDatabaseArgument(t *testing.T) {
	c := newCluster(t, 3)
	acquire := libScript(t, "sesamecare-1.4-acquire.lua", "1b77b94aa78451d55dfa97e18819bfbfc596cb5b")
	cl := c.client(2)
	key := uniqueKey("sesame-db")
	if _, err := do(cl, "EVAL", acquire, 1, key, "3", "tok", 5000); err == nil || !strings.Contains(err.Error(), "database 0") {
		t.Fatalf("acquire in database 3: %v; want a refusal naming database 0", err)
	}
	mustDo(t, int64(1), cl, "EVAL", acquire, 1, key, "0", "tok", 5000)
	c.checkHeld(t, "after the acquire in database 0", key, "tok")
}
