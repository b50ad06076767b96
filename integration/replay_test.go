package integration

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// Libraries whose runtime is not on this machine (RedLock.net) are
// replayed in the call sequences they use, checked on the backends: with
// scripts of the same behaviour in their style
// (internal/testkit/libscripts), and, by EVALSHA, with the SHA1s of their
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
