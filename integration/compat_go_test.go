package integration

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/rueidis"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

// The Go lock libraries, unchanged, pointed at the proxy instead of one
// Redis. Every step is checked on the backends themselves.

// checkHeld asserts that a majority of the backends hold value under key
// (all running ones, eventually).
func (c *cluster) checkHeld(t *testing.T, step, key, value string) {
	t.Helper()
	h := c.holders(key, value)
	if len(h) < len(c.servers)/2+1 {
		t.Fatalf("%s: %q holds %q on backends %v; want a majority", step, key, value, h)
	}
}

// checkGone asserts that no backend holds value under key once the
// command's stragglers have landed.
func (c *cluster) checkGone(t *testing.T, step, key, value string) {
	t.Helper()
	if h := c.eventuallyHolders(key, value, 0); len(h) != 0 {
		t.Fatalf("%s: %q still holds %q on backends %v", step, key, value, h)
	}
}

func TestRedsync(t *testing.T) {
	c := newCluster(t, 5)
	for _, proto := range []int{2, 3} {
		for _, setNXOnExtend := range []bool{false, true} {
			t.Run(fmt.Sprintf("RESP%d/setNXOnExtend=%v", proto, setNXOnExtend), func(t *testing.T) {
				rs := redsync.New(goredis.NewPool(c.client(proto)))
				name := uniqueKey("redsync")
				opts := []redsync.Option{redsync.WithExpiry(8 * time.Second), redsync.WithTries(1)}
				if setNXOnExtend {
					opts = append(opts, redsync.WithSetNXOnExtend())
				}
				m := rs.NewMutex(name, opts...)
				if err := m.Lock(); err != nil {
					t.Fatalf("Lock: %v", err)
				}
				c.checkHeld(t, "after Lock", name, m.Value())

				other := rs.NewMutex(name, redsync.WithExpiry(8*time.Second), redsync.WithTries(1))
				err := other.Lock()
				if err == nil {
					t.Fatalf("a second mutex got the lock")
				}
				var taken *redsync.ErrTaken
				if !errors.Is(err, redsync.ErrFailed) && !errors.As(err, &taken) {
					t.Fatalf("second Lock: %v; want ErrFailed or ErrTaken", err)
				}
				c.checkGone(t, "after the refused Lock", name, other.Value())
				c.checkHeld(t, "after the refused Lock", name, m.Value())

				time.Sleep(50 * time.Millisecond)
				ok, err := m.Extend()
				if err != nil || !ok {
					t.Fatalf("Extend = %v, %v", ok, err)
				}
				for i := range c.direct {
					if p := c.eventuallyPTTL(i, name); p < 7900*time.Millisecond {
						t.Fatalf("after Extend backend %d PTTL = %v; want about 8s", i, p)
					}
				}

				ok, err = m.Unlock()
				if err != nil || !ok {
					t.Fatalf("Unlock = %v, %v", ok, err)
				}
				c.checkGone(t, "after Unlock", name, m.Value())
				if ok, err := m.Unlock(); ok || err == nil {
					t.Fatalf("second Unlock = %v, %v; want a failure", ok, err)
				}
				if ok, _ := m.Extend(); ok && !setNXOnExtend {
					t.Fatalf("Extend after Unlock succeeded")
				}
				if setNXOnExtend {
					// WithSetNXOnExtend re-takes a free lock: it is held again.
					c.checkHeld(t, "after Extend on a free lock (SetNX on extend)", name, m.Value())
					m.Unlock()
					c.checkGone(t, "after the last Unlock", name, m.Value())
				}
			})
		}
	}
}

func TestRedislock(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			locker := redislock.New(c.client(proto))
			key := uniqueKey("redislock")
			lock, err := locker.Obtain(ctx, key, 10*time.Second, nil)
			if err != nil {
				t.Fatalf("Obtain: %v", err)
			}
			c.checkHeld(t, "after Obtain", key, lock.Token()+lock.Metadata())

			if _, err := locker.Obtain(ctx, key, 10*time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
				t.Fatalf("second Obtain: %v; want ErrNotObtained", err)
			}
			c.checkHeld(t, "after the refused Obtain", key, lock.Token())

			ttl, err := lock.TTL(ctx)
			if err != nil || ttl <= 9*time.Second || ttl > 10*time.Second {
				t.Fatalf("TTL = %v, %v; want a validity just under 10s", ttl, err)
			}
			if err := lock.Refresh(ctx, 20*time.Second, nil); err != nil {
				t.Fatalf("Refresh: %v", err)
			}
			if ttl, _ := lock.TTL(ctx); ttl <= 19*time.Second {
				t.Fatalf("TTL after Refresh = %v; want about 20s", ttl)
			}
			if err := lock.Release(ctx); err != nil {
				t.Fatalf("Release: %v", err)
			}
			c.checkGone(t, "after Release", key, lock.Token())
			if err := lock.Release(ctx); !errors.Is(err, redislock.ErrLockNotHeld) {
				t.Fatalf("second Release: %v; want ErrLockNotHeld", err)
			}
			if err := lock.Refresh(ctx, time.Second, nil); !errors.Is(err, redislock.ErrNotObtained) {
				t.Fatalf("Refresh after Release: %v; want ErrNotObtained", err)
			}
			if ttl, err := lock.TTL(ctx); err != nil || ttl != 0 {
				t.Fatalf("TTL after Release = %v, %v; want 0", ttl, err)
			}

			// Re-obtaining with the same token (redislock's own feature) works.
			l1, err := locker.Obtain(ctx, key, 5*time.Second, &redislock.Options{Token: "fixed-token", Metadata: "a"})
			if err != nil {
				t.Fatalf("Obtain with a token: %v", err)
			}
			l2, err := locker.Obtain(ctx, key, 5*time.Second, &redislock.Options{Token: "fixed-token", Metadata: "b"})
			if err != nil {
				t.Fatalf("re-Obtain with the same token: %v", err)
			}
			c.checkHeld(t, "after re-Obtain", key, "fixed-tokenb")
			l1.Release(ctx) // its value is gone: not held
			if err := l2.Release(ctx); err != nil {
				t.Fatalf("Release of the re-obtained lock: %v", err)
			}
			c.checkGone(t, "after Release of the re-obtained lock", key, "fixed-tokenb")
		})
	}
}

// rueidis with its defaults: RESP3, client-side caching (CLIENT TRACKING ON
// OPTIN at connect), auto-pipelining.
func TestRueidisDefaults(t *testing.T) {
	c := newCluster(t, 5)
	ctx := context.Background()
	cl, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{c.app.Addr()}})
	if err != nil {
		t.Fatalf("rueidis.NewClient through the proxy: %v", err)
	}
	defer cl.Close()
	key := uniqueKey("rueidis")
	if err := cl.Do(ctx, cl.B().Set().Key(key).Value("tok").Nx().Px(10*time.Second).Build()).Error(); err != nil {
		t.Fatalf("SET NX PX: %v", err)
	}
	c.checkHeld(t, "after SET NX", key, "tok")
	err = cl.Do(ctx, cl.B().Set().Key(key).Value("other").Nx().Px(10*time.Second).Build()).Error()
	if !rueidis.IsRedisNil(err) {
		t.Fatalf("second SET NX: %v; want nil", err)
	}
	c.checkGone(t, "after the refused SET NX", key, "other")
	c.checkHeld(t, "after the refused SET NX", key, "tok")
	release := rueidis.NewLuaScript(seedRelease)
	if n, err := release.Exec(ctx, cl, []string{key}, []string{"other"}).AsInt64(); err != nil || n != 0 {
		t.Fatalf("release with another token = %d, %v", n, err)
	}
	c.checkHeld(t, "after a wrong release", key, "tok")
	if n, err := release.Exec(ctx, cl, []string{key}, []string{"tok"}).AsInt64(); err != nil || n != 1 {
		t.Fatalf("release = %d, %v", n, err)
	}
	c.checkGone(t, "after release", key, "tok")

	// Many concurrent lock cycles over its auto-pipelined connection.
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		go func(i int) {
			k := fmt.Sprintf("%s-%d", key, i)
			if err := cl.Do(ctx, cl.B().Set().Key(k).Value("t").Nx().Px(10*time.Second).Build()).Error(); err != nil {
				errs <- fmt.Errorf("SET %s: %w", k, err)
				return
			}
			n, err := release.Exec(ctx, cl, []string{k}, []string{"t"}).AsInt64()
			if err == nil && n != 1 {
				err = fmt.Errorf("release %s = %d", k, n)
			}
			errs <- err
		}(i)
	}
	for i := 0; i < 50; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// A script the proxy has seen keeps working by EVALSHA after a backend
// restarts (it forgot every script): the proxy loads it again.
func TestEvalShaSurvivesBackendRestart(t *testing.T) {
	// Quarantine off, so that the restarted backends' votes count and the
	// release below can only succeed if the script ran on them.
	c := newCluster(t, 3, func(cfg *config.Config) { cfg.RestartQuarantine = "off" })
	ctx := context.Background()
	cl := c.client(2)
	sha, err := cl.ScriptLoad(ctx, seedRelease).Result()
	if err != nil {
		t.Fatalf("SCRIPT LOAD: %v", err)
	}
	if sum := sandbox.Sha1([]byte(seedRelease)); sha != sum {
		t.Fatalf("SCRIPT LOAD = %s; want the script's own sha1 %s", sha, sum)
	}
	if ex, err := cl.ScriptExists(ctx, sha, "0000000000000000000000000000000000000000").Result(); err != nil || !ex[0] || ex[1] {
		t.Fatalf("SCRIPT EXISTS = %v, %v", ex, err)
	}
	for i := range c.servers {
		if err := c.servers[i].Restart(); err != nil {
			t.Fatal(err)
		}
	}
	// Let the links notice and redial.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	for {
		up := 0
		for _, h := range c.app.Pool().Health() {
			if h.Up && h.Connects >= 2 {
				up++
			}
		}
		if up == len(c.servers) {
			break
		}
		if wctx.Err() != nil {
			t.Fatalf("backends did not come back")
		}
		time.Sleep(10 * time.Millisecond)
	}
	key := uniqueKey("sha")
	if ok, err := cl.SetNX(ctx, key, "tok", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX after the restarts = %v, %v", ok, err)
	}
	n, err := cl.EvalSha(ctx, sha, []string{key}, "tok").Int()
	if err != nil || n != 1 {
		t.Fatalf("EVALSHA release after every backend restarted = %d, %v; want 1 (no NOSCRIPT)", n, err)
	}
	c.checkGone(t, "after EVALSHA release", key, "tok")
	if err := cl.EvalSha(ctx, "ffffffffffffffffffffffffffffffffffffffff", []string{key}).Err(); err == nil ||
		err.Error() != "NOSCRIPT No matching script. Please use EVAL." {
		t.Fatalf("EVALSHA of an unknown sha: %v; want Redis's NOSCRIPT", err)
	}
}
