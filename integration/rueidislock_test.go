package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"
	"github.com/redis/rueidis/rueidislock"
)

// rueidislock (the lock of rueidis), unchanged, against one lone Redis and
// through the proxy over five masters, with its defaults, KeyMajority 1,
// FallbackSETPX and client-side caching off. Its acquire is SET NX PXAT
// (SET NX PX with FallbackSETPX) and its extend PEXPIREAT, in scripts. A
// lock is KeyMajority*2-1 keys, rueidislock:<i>:<name>, of which it needs
// KeyMajority; after each step the same checks run on every master.
//
// With caching on, rueidislock learns that a lock was released or lost
// from client-side caching invalidations (CLIENT TRACKING): the cases
// named "(invalidations)" need them through the proxy too.

type rueidislockConfig struct {
	name     string
	majority int32
	setpx    bool
	nocache  bool
	// lostWake: rueidislock can lose a waiter's wake-up in this
	// configuration, on one Redis as through the proxy, so the waiter case
	// does not run. With KeyMajority 1, a failed try starts the key's
	// monitoring goroutine before it counts the failure; when that
	// goroutine runs first, it sees no failure, takes the waiter's gate out
	// of the locker's map, and the invalidation of the release then finds
	// no gate to wake (rueidis v1.0.79, lock.go's try). The invalidations
	// through the proxy are proven by the other configurations' waiters.
	lostWake bool
}

var rueidislockConfigs = []rueidislockConfig{
	{name: "defaults"},
	{name: "KeyMajority=1", majority: 1, lostWake: true},
	{name: "FallbackSETPX", setpx: true},
	{name: "FallbackSETPX, caching disabled", setpx: true, nocache: true},
	{name: "caching disabled", nocache: true},
}

func (rc rueidislockConfig) keyMajority() int32 {
	if rc.majority == 0 {
		return 2
	}
	return rc.majority
}

func (rc rueidislockConfig) locker(t *testing.T, addr string, validity time.Duration) rueidislock.Locker {
	t.Helper()
	l, err := rueidislock.NewLocker(rueidislock.LockerOption{
		ClientOption:  rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: rc.nocache},
		KeyMajority:   rc.majority,
		KeyValidity:   validity,
		FallbackSETPX: rc.setpx,
	})
	if err != nil {
		t.Fatalf("rueidislock.NewLocker at %s: %v", addr, err)
	}
	t.Cleanup(l.Close)
	return l
}

// keys are the keys of lock name.
func (rc rueidislockConfig) keys(name string) []string {
	var out []string
	for i := int32(0); i < rc.keyMajority()*2-1; i++ {
		out = append(out, "rueidislock:"+strconv.Itoa(int(i))+":"+name)
	}
	return out
}

// lockHeld checks that at least need of the keys are each held by a
// majority of the masters with one value and a PTTL in (0, validity], and
// returns the value of each key held so.
func (lt lockTarget) lockHeld(keys []string, need int, validity time.Duration) (map[string]string, error) {
	held := map[string]string{}
	var last error
	for _, k := range keys {
		counts := map[string]int{}
		for i, s := range lt.state(k) {
			if s.err != nil {
				return nil, fmt.Errorf("master %d: %w", i, s.err)
			}
			if s.value == "" {
				continue
			}
			if s.pttl <= 0 || s.pttl > validity {
				return nil, fmt.Errorf("master %d holds %s with PTTL %v; want (0, %v]", i, k, s.pttl, validity)
			}
			counts[s.value]++
		}
		for v, n := range counts {
			if n >= lt.majority() {
				held[k] = v
			}
		}
		if _, ok := held[k]; !ok {
			last = fmt.Errorf("%s is held by no majority (%v)", k, counts)
		}
	}
	if len(held) < need {
		return nil, fmt.Errorf("%d of the lock's keys held by a majority; want %d: %v", len(held), need, last)
	}
	return held, nil
}

// lockGone checks that no master holds any of the keys.
func (lt lockTarget) lockGone(keys []string) error {
	for _, k := range keys {
		if err := lt.nowhere(k, ""); err != nil {
			return err
		}
	}
	return nil
}

// dropOnMajority deletes the keys on a majority of the masters, behind
// the lock's back: the lock is lost.
func (lt lockTarget) dropOnMajority(t *testing.T, keys []string) {
	t.Helper()
	for _, m := range lt.masters[:lt.majority()] {
		if err := m.Del(context.Background(), keys...).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// hold takes a free lock with a locker of its own, and waits until a
// majority of the masters hold it.
func (rc rueidislockConfig) hold(t *testing.T, lt lockTarget, validity time.Duration) (keys []string, ctx context.Context, cancel context.CancelFunc) {
	t.Helper()
	l := rc.locker(t, lt.addr, validity)
	name := uniqueKey("rueidislock")
	ctx, cancel, err := l.TryWithContext(context.Background(), name)
	if err != nil {
		t.Fatalf("TryWithContext of a free lock: %v", err)
	}
	t.Cleanup(cancel)
	keys = rc.keys(name)
	if err := lt.eventually(func() error { _, err := lt.lockHeld(keys, int(rc.keyMajority()), validity); return err }); err != nil {
		t.Fatalf("after acquire: %v", err)
	}
	return keys, ctx, cancel
}

func TestRueidislockAgainstLoneRedis(t *testing.T) {
	waits(t)
	testRueidislock(t, func(t *testing.T) lockTarget { return loneTarget(t) })
}

func TestRueidislockThroughProxy(t *testing.T) {
	waits(t)
	testRueidislock(t, proxyTarget)
}

func testRueidislock(t *testing.T, target func(*testing.T) lockTarget) {
	for _, rc := range rueidislockConfigs {
		t.Run(rc.name, func(t *testing.T) {
			lt := target(t)
			need := int(rc.keyMajority())

			t.Run("acquire, refused while held, release, re-acquire", func(t *testing.T) {
				const validity = 5 * time.Second
				l := rc.locker(t, lt.addr, validity)
				name := uniqueKey("rueidislock")
				keys := rc.keys(name)
				ctx, cancel, err := l.TryWithContext(context.Background(), name)
				if err != nil {
					t.Fatalf("TryWithContext of a free lock: %v", err)
				}
				var first map[string]string
				if err := lt.eventually(func() (err error) { first, err = lt.lockHeld(keys, need, validity); return err }); err != nil {
					t.Fatalf("after acquire: %v", err)
				}
				other := rc.locker(t, lt.addr, validity)
				if _, _, err := other.TryWithContext(context.Background(), name); !errors.Is(err, rueidislock.ErrNotLocked) {
					t.Fatalf("TryWithContext of a held lock: %v; want ErrNotLocked", err)
				}
				if err := lt.eventually(func() error {
					now, err := lt.lockHeld(keys, need, validity)
					for k, v := range first {
						if err == nil && now[k] != v {
							err = fmt.Errorf("%s now holds %q, not the holder's %q", k, now[k], v)
						}
					}
					return err
				}); err != nil {
					t.Fatalf("after the refused attempt: %v", err)
				}
				if ctx.Err() != nil {
					t.Fatalf("the holder's context ended after a refused attempt: %v", ctx.Err())
				}
				cancel()
				if err := lt.eventually(func() error { return lt.lockGone(keys) }); err != nil {
					t.Fatalf("after release by cancel: %v", err)
				}
				ctx2, cancel2, err := other.TryWithContext(context.Background(), name)
				if err != nil {
					t.Fatalf("TryWithContext after the release: %v", err)
				}
				if err := lt.eventually(func() error { _, err := lt.lockHeld(keys, need, validity); return err }); err != nil {
					t.Fatalf("after re-acquire: %v", err)
				}
				if ctx2.Err() != nil {
					t.Fatalf("re-acquired lock's context: %v", ctx2.Err())
				}
				cancel2()
				if err := lt.eventually(func() error { return lt.lockGone(keys) }); err != nil {
					t.Fatalf("after the second release: %v", err)
				}
			})

			t.Run("auto-extension over several validities", func(t *testing.T) {
				const validity = 1200 * time.Millisecond
				keys, ctx, _ := rc.hold(t, lt, validity)
				var first map[string]string
				for end := time.Now().Add(4 * validity); time.Now().Before(end); time.Sleep(validity / 3) {
					if ctx.Err() != nil {
						t.Fatalf("the lock's context ended while it was being extended: %v", ctx.Err())
					}
					held, err := lt.lockHeld(keys, need, validity)
					if err != nil {
						t.Fatalf("while held: %v", err)
					}
					for k, v := range first {
						if held[k] != "" && held[k] != v {
							t.Fatalf("%s changed hands while held: %q then %q", k, v, held[k])
						}
					}
					if first == nil {
						first = held
					}
				}
			})

			lostWithin := 2 * time.Second // the extend interval (validity/2) and some slack
			lostCase := "context cancelled soon after the lock is lost on a majority"
			if !rc.nocache {
				lostWithin = 700 * time.Millisecond // an invalidation, not the next extend
				lostCase += " (invalidations)"
			}
			t.Run(lostCase, func(t *testing.T) {
				const validity = 3 * time.Second
				keys, ctx, _ := rc.hold(t, lt, validity)
				lost := time.Now()
				lt.dropOnMajority(t, keys)
				select {
				case <-ctx.Done():
					t.Logf("context cancelled %v after the lock was lost", time.Since(lost).Round(time.Millisecond))
				case <-time.After(lostWithin):
					t.Fatalf("the lock's context was still live %v after the lock was lost on a majority", lostWithin)
				}
			})

			if rc.lostWake {
				return // see rueidislockConfig.lostWake
			}
			wakeCase := "a waiter gets the lock soon after the release"
			if !rc.nocache {
				wakeCase = "a waiter woken by the release without polling (invalidations)"
			}
			t.Run(wakeCase, func(t *testing.T) {
				const validity = 5 * time.Second
				holder := rc.locker(t, lt.addr, validity)
				waiter := rc.locker(t, lt.addr, validity)
				name := uniqueKey("rueidislock")
				keys := rc.keys(name)
				_, release, err := holder.TryWithContext(context.Background(), name)
				if err != nil {
					t.Fatalf("TryWithContext: %v", err)
				}
				type got struct {
					at     time.Time
					cancel context.CancelFunc
					err    error
				}
				wctx, wcancel := context.WithTimeout(context.Background(), 4*time.Second)
				defer wcancel()
				done := make(chan got, 1)
				go func() {
					_, c, err := waiter.WithContext(wctx, name)
					done <- got{time.Now(), c, err}
				}()
				select {
				case g := <-done:
					t.Fatalf("WithContext returned while the lock was held: %v", g.err)
				case <-time.After(500 * time.Millisecond):
				}
				released := time.Now()
				release()
				g := <-done
				if g.err != nil {
					t.Fatalf("the waiter did not get the lock (%v after the release): %v", time.Since(released).Round(time.Millisecond), g.err)
				}
				defer g.cancel()
				if d := g.at.Sub(released); d > time.Second {
					t.Fatalf("the waiter got the lock %v after the release; want within a second", d)
				}
				if err := lt.eventually(func() error { _, err := lt.lockHeld(keys, need, validity); return err }); err != nil {
					t.Fatalf("after the waiter got it: %v", err)
				}
			})
		})
	}
}
