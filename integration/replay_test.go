package integration

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/script"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// Libraries whose runtime is not on this machine (RedLock.net, pottery,
// redlock-py, aioredlock) are replayed in the call sequences they use,
// checked on the backends: with scripts of the same behaviour in their
// style (internal/testkit/libscripts), and, by EVALSHA, with the SHA1s of their
// real scripts, which the proxy knows as library facts before it has seen
// their text.

// style returns a style script by library and name.
func style(t *testing.T, library, name string) libscripts.Script {
	t.Helper()
	for _, s := range libscripts.Styles() {
		if strings.HasPrefix(s.Library, library) && s.Name == name {
			return s
		}
	}
	t.Fatalf("no style script %s %s", library, name)
	return libscripts.Script{}
}

// do sends a raw command and returns its reply or error.
func do(cl *redis.Client, args ...any) (any, error) {
	return cl.Do(context.Background(), args...).Result()
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
	unlock := style(t, "RedLock.net", "Unlock.lua")
	extend := style(t, "RedLock.net", "Extend.lua")
	// The real scripts' SHA1s (LF and CRLF builds) are library facts.
	for _, build := range []struct{ name, release, extend string }{
		{"style", "", ""},
		{"LF", "18b2a577dbe847b16bebde190d69a1613d68e60e", "9f614a785a5f9ae8c6396c6b4bf94d2087342603"},
		{"CRLF", "cb0427378f700ddb2f0e9394dbb0a40bd6dba04a", "3e7c6bf3e080bb97a92e77362149c26252b98212"},
	} {
		t.Run(build.name, func(t *testing.T) {
			cl := c.client(2)
			key := "redlock:" + uniqueKey("order")
			guid := "3f2504e0-4f89-11d3-9a0c-0305e82c3301"

			// Acquire: StringSet(key, guid, 30s, When.NotExists).
			mustDo(t, cl, "OK", "SET", key, guid, "EX", "30", "NX")
			c.checkHeld(t, "after acquire", key, guid)
			if _, err := do(cl, "SET", key, "other-guid", "EX", "30", "NX"); !errors.Is(err, redis.Nil) {
				t.Fatalf("a second acquire: %v; want nil", err)
			}
			c.checkHeld(t, "after the refused acquire", key, guid)

			extendSha, releaseSha := build.extend, build.release
			if build.name == "style" {
				// First script call on an endpoint: SCRIPT LOAD pipelined
				// with EVAL; then EVALSHA.
				pipe := cl.Pipeline()
				load := pipe.ScriptLoad(ctx, extend.Text)
				first := pipe.Eval(ctx, extend.Text, []string{key}, guid, 30000)
				if _, err := pipe.Exec(ctx); err != nil || first.Val() != int64(1) {
					t.Fatalf("SCRIPT LOAD + EVAL extend = %v, %v; want 1", first.Val(), err)
				}
				extendSha = load.Val()
				pipe = cl.Pipeline()
				rl := pipe.ScriptLoad(ctx, unlock.Text)
				if _, err := pipe.Exec(ctx); err != nil {
					t.Fatalf("SCRIPT LOAD release: %v", err)
				}
				releaseSha = rl.Val()
			}
			// EVALSHA from its extend timer.
			mustDo(t, cl, 1, "EVALSHA", extendSha, 1, key, guid, 30000)
			mustDo(t, cl, -1, "EVALSHA", extendSha, 1, key, "other-guid", 30000)
			c.checkHeld(t, "after a conflicting extend", key, guid)

			// Release at Dispose.
			mustDo(t, cl, 1, "EVALSHA", releaseSha, 1, key, guid)
			c.checkGone(t, "after release", key, guid)
			mustDo(t, cl, 0, "EVALSHA", releaseSha, 1, key, guid)

			// Its extend re-creates a missing key: the lock is held again.
			mustDo(t, cl, 1, "EVALSHA", extendSha, 1, key, guid, 30000)
			c.checkHeld(t, "after extend of a missing key", key, guid)
			mustDo(t, cl, 1, "EVALSHA", releaseSha, 1, key, guid)
			c.checkGone(t, "after the last release", key, guid)
		})
	}
}

func TestReplayPottery(t *testing.T) {
	c := newCluster(t, 5)
	for _, build := range []struct{ name, ttl, extend, release string }{
		{"real sha1s", "f5f7bd3a3aa4a63c507c1155c5ea1219b350d992", "ba015a80261b616e7a62d35df0b8e3edbe6c9414", "a4aada0b36710970eedaaaeec4a6b7d8c78c4f80"},
		{"style", "", "", ""},
	} {
		t.Run(build.name, func(t *testing.T) {
			cl := c.client(2)
			key := "redlock:" + uniqueKey("printer")
			uuid := "6f1c2e7a-52b8-4a42-9a53-8f1b8e8b9a11"
			shaOf := func(real, name string) string {
				if real != "" {
					return real
				}
				s := style(t, "pottery", name)
				return script.Sha1([]byte(s.Text))
			}
			ttlSha, extendSha, releaseSha := shaOf(build.ttl, "acquired script"), shaOf(build.extend, "extend script"), shaOf(build.release, "release script")
			loaded := 0
			// redis-py's Script: EVALSHA; on NOSCRIPT, SCRIPT LOAD then
			// EVALSHA. (The real SHA1s are facts: no NOSCRIPT for them.)
			evalsha := func(sha string, args ...any) (any, error) {
				a := append([]any{"EVALSHA", sha, 1, key}, args...)
				v, err := do(cl, a...)
				if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
					text := ""
					for _, n := range []string{"acquired script", "extend script", "release script"} {
						if s := style(t, "pottery", n); script.Sha1([]byte(s.Text)) == sha {
							text = s.Text
						}
					}
					if got, err := do(cl, "SCRIPT", "LOAD", text); err != nil || got != sha {
						t.Fatalf("SCRIPT LOAD = %v, %v; want %s", got, err, sha)
					}
					loaded++
					v, err = do(cl, a...)
				}
				return v, err
			}

			mustDo(t, cl, "OK", "SET", key, uuid, "PX", 10000, "NX") // redis-py writes PX before NX
			c.checkHeld(t, "after acquire", key, uuid)
			if _, err := do(cl, "SET", key, "other", "PX", 10000, "NX"); !errors.Is(err, redis.Nil) {
				t.Fatalf("second acquire: %v; want nil", err)
			}
			ttl, err := evalsha(ttlSha, uuid)
			if err != nil || ttl.(int64) <= 9000 || ttl.(int64) > 10000 {
				t.Fatalf("ttl-query = %v, %v; want the validity just under 10000 ms", ttl, err)
			}
			if v, err := evalsha(ttlSha, "other"); err != nil || v != int64(0) {
				t.Fatalf("ttl-query with another uuid = %v, %v; want 0", v, err)
			}
			if v, err := evalsha(extendSha, uuid, 20000); err != nil || v != int64(1) {
				t.Fatalf("extend = %v, %v; want 1", v, err)
			}
			if v, err := evalsha(extendSha, "other", 20000); err != nil || v != int64(0) {
				t.Fatalf("extend with another uuid = %v, %v; want 0", v, err)
			}
			if p := c.eventuallyPTTL(4, key); p < 19*time.Second {
				t.Fatalf("after extend PTTL = %v; want about 20s", p)
			}
			if v, err := evalsha(releaseSha, "other"); err != nil || v != int64(0) {
				t.Fatalf("release with another uuid = %v, %v; want 0", v, err)
			}
			c.checkHeld(t, "after a wrong release", key, uuid)
			if v, err := evalsha(releaseSha, uuid); err != nil || v != int64(1) {
				t.Fatalf("release = %v, %v; want 1", v, err)
			}
			c.checkGone(t, "after release", key, uuid)
			if v, err := evalsha(ttlSha, uuid); err != nil || v != int64(0) {
				t.Fatalf("ttl-query after release = %v, %v; want 0", v, err)
			}
			if build.ttl != "" && loaded != 0 {
				t.Fatalf("the real SHA1s needed %d SCRIPT LOADs; the facts should have answered", loaded)
			}
			if build.ttl == "" && loaded != 3 {
				t.Fatalf("the style scripts were loaded %d times; want 3 (each once, on NOSCRIPT)", loaded)
			}
		})
	}
}

func TestReplayRedlockPy(t *testing.T) {
	c := newCluster(t, 5)
	unlock := style(t, "redlock-py", "unlock_script")
	cl := c.client(2)
	key, val := uniqueKey("res"), "b'\\x8f\\x01'-token"
	mustDo(t, cl, "OK", "SET", key, val, "PX", 5000, "NX")
	c.checkHeld(t, "after acquire", key, val)
	if _, err := do(cl, "SET", key, "x", "PX", 5000, "NX"); !errors.Is(err, redis.Nil) {
		t.Fatalf("second acquire: %v; want nil", err)
	}
	mustDo(t, cl, 0, "EVAL", unlock.Text, 1, key, "x")
	c.checkHeld(t, "after a wrong release", key, val)
	mustDo(t, cl, 1, "EVAL", unlock.Text, 1, key, val) // plain EVAL every time
	c.checkGone(t, "after release", key, val)
}

func TestReplayAioredlock(t *testing.T) {
	c := newCluster(t, 5)
	cl := c.client(2)
	// At connect: SCRIPT LOAD of all three; then only EVALSHA. Both the
	// style scripts and the real scripts' SHA1s (facts) work.
	for _, build := range []string{"style", "real sha1s"} {
		t.Run(build, func(t *testing.T) {
			shas := map[string]string{
				"acquire": "c75a9bf1538efcdb1f383acc3e273c5089d57e58", "release": "241e4ca540a1cc4ec1f32d9eb9f879e607d7e6e5",
				"ttl": "f908d3f43dbcabc68fc0c9ecaf1fa4a285ecdb0a",
			}
			if build == "style" {
				for name, script := range map[string]string{"acquire": "SET_LOCK_SCRIPT", "release": "UNSET_LOCK_SCRIPT", "ttl": "GET_LOCK_TTL_SCRIPT"} {
					v, err := do(cl, "SCRIPT", "LOAD", style(t, "aioredlock", script).Text)
					if err != nil {
						t.Fatalf("SCRIPT LOAD %s: %v", name, err)
					}
					shas[name] = v.(string)
				}
			}
			key, uuid := uniqueKey("resource"), "0b0c6f5e-2a51-4f44-8f0f-7f4b1b0e9d7a"
			mustDo(t, cl, "OK", "EVALSHA", shas["acquire"], 1, key, uuid, 10000)
			c.checkHeld(t, "after lock", key, uuid)
			_, err := do(cl, "EVALSHA", shas["acquire"], 1, key, "other", 10000)
			if err == nil || err.Error() != "ERR ERROR" {
				t.Fatalf("lock by another: %v; want the script's ERROR reply as Redis 7 sends it", err)
			}
			c.checkGone(t, "after the refused lock", key, "other")
			c.checkHeld(t, "after the refused lock", key, uuid)
			// extend is the same script with the same uuid.
			mustDo(t, cl, "OK", "EVALSHA", shas["acquire"], 1, key, uuid, 20000)
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
			mustDo(t, cl, 1, "EVALSHA", shas["release"], 1, key, uuid)
			c.checkGone(t, "after release", key, uuid)
			mustDo(t, cl, "OK", "EVALSHA", shas["release"], 1, key, uuid) // already gone: OK
		})
	}
}

// @sesamecare-oss/redlock's scripts SELECT the database given in ARGV[1];
// the proxy serves database 0 only (its undo and reads work there), so
// another database is refused rather than locked where nothing can see it.
func TestSesameDatabaseArgument(t *testing.T) {
	c := newCluster(t, 3)
	dir, _ := filepath.Abs("node")
	scripts, err := libscripts.Node(dir)
	if err != nil {
		t.Fatal(err)
	}
	var acquire string
	for _, s := range scripts {
		if s.Name == "acquireLock" {
			acquire = s.Text
		}
	}
	cl := c.client(2)
	key := uniqueKey("sesame-db")
	if _, err := do(cl, "EVAL", acquire, 1, key, "3", "tok", 5000); err == nil || !strings.Contains(err.Error(), "database 0") {
		t.Fatalf("acquire in database 3: %v; want a refusal naming database 0", err)
	}
	mustDo(t, cl, 1, "EVAL", acquire, 1, key, "0", "tok", 5000)
	c.checkHeld(t, "after the acquire in database 0", key, "tok")
}
