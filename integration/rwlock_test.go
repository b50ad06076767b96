package integration

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/faultnet"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/jarscripts"
)

// Redisson's RReadWriteLock scripts, their exact text read from the
// installed jar, over five real masters behind fault relays: the decision
// paths of the read-write lock kind (proxy's kind_rw.go) under partial
// failures. TestJavaRedissonThroughProxy runs Redisson itself.

// redissonRW returns Redisson's read-write lock scripts by role, from the
// jar on integration/java's class path (./test.sh's mvn step writes it).
func redissonRW(t *testing.T) map[classify.RWRole]string {
	t.Helper()
	jar, err := jarscripts.FindJar(filepath.Join("java", "target", "classpath.txt"), "redisson-3")
	if err != nil {
		t.Fatalf("Redisson's jar (run ./test.sh's mvn step once): %v", err)
	}
	out := map[classify.RWRole]string{}
	for _, class := range []string{"org/redisson/RedissonReadLock.class", "org/redisson/RedissonWriteLock.class", "org/redisson/renewal/ReadLockTask.class"} {
		texts, err := jarscripts.Strings(jar, class, "")
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range texts {
			if !strings.Contains(s, "redis.call") {
				continue
			}
			for _, l := range classify.RWLayouts() {
				if classify.RWRecognize([]byte(s), l) == "" {
					if out[l.Role] != "" {
						t.Fatalf("two %s scripts in %s", l.Role, jar)
					}
					out[l.Role] = s
				}
			}
		}
	}
	for _, l := range classify.RWLayouts() {
		if out[l.Role] == "" {
			t.Fatalf("no script of %s recognized in %s", l.Role, jar)
		}
	}
	return out
}

// rwRig is five masters behind relays, a proxy over the relays (a short
// backend timeout: a black-holed master times out), and Redisson's calls.
type rwRig struct {
	t       *testing.T
	scripts map[classify.RWRole]string
	relays  []*faultnet.Relay
	direct  []*redis.Client
	app     *app.App
	cl      *redis.Client
	addrs   []string // the relays'
}

func newRWRig(t *testing.T) *rwRig {
	r := &rwRig{t: t, scripts: redissonRW(t)}
	var addrs []string
	r.relays, addrs, r.addrs = relayEach(t, startRedis(t, 5))
	r.direct = directClients(t, addrs)
	r.app, _ = startApp(t, r.addrs, func(c *config.Config) { c.BackendTimeout = 300 * time.Millisecond })
	r.cl = proxyClient(t, r.app.Addr(), 2)
	return r
}

// partition black-holes masters ms while fn runs, drops what they were
// sent, and waits until the proxy is connected to them again.
func (r *rwRig) partition(ms []int, fn func()) {
	r.t.Helper()
	before := make([]uint64, len(ms))
	for i, m := range ms {
		before[i] = r.app.Pool().Health()[m].Connects
		r.relays[m].BlackHole(true)
	}
	fn()
	for _, m := range ms {
		r.relays[m].Cut()
		r.relays[m].BlackHole(false)
	}
	for i, m := range ms {
		waitFor(r.t, 10*time.Second, fmt.Sprintf("master %d to reconnect", m), func() error {
			if h := r.app.Pool().Health()[m]; h.Connects == before[i] || !h.Up {
				return fmt.Errorf("%+v", h)
			}
			return nil
		})
	}
}

// waiter subscribes to key's release messages through a second proxy over
// the same masters, as a Redisson waiter does.
func (r *rwRig) waiter(key string) *redis.PubSub {
	r.t.Helper()
	other, _ := startApp(r.t, r.addrs, func(c *config.Config) { c.BackendTimeout = 300 * time.Millisecond })
	sub := proxyClient(r.t, other.Addr(), 2).Subscribe(context.Background(), "redisson_rwlock:{"+key+"}")
	r.t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(context.Background()); err != nil {
		r.t.Fatal(err)
	}
	return sub
}

// quiet returns the message sub gets within a second, or nil.
func quiet(sub *redis.PubSub) *redis.Message {
	select {
	case m := <-sub.Channel():
		return m
	case <-time.After(time.Second):
		return nil
	}
}

func leaseOf(key, holder string, i int) string {
	return fmt.Sprintf("{%s}:%s:rwlock_timeout:%d", key, holder, i)
}

// read, write and unlockRead call Redisson's scripts as Redisson does:
// nil is a grant (or, for an unlock, "not held"), a number the holder's PTTL
// (or 0/1: still locked, freed).
func (r *rwRig) read(key, holder string, ttlMs int64) string {
	return replyOf(r.cl.Eval(context.Background(), r.scripts[classify.RWReadAcquire],
		[]string{key, fmt.Sprintf("{%s}:%s:rwlock_timeout", key, holder)}, ttlMs, holder, holder+":write").Result())
}

func (r *rwRig) write(key, writer string, ttlMs int64) string {
	return replyOf(r.cl.Eval(context.Background(), r.scripts[classify.RWWriteAcquire], []string{key}, ttlMs, writer).Result())
}

func (r *rwRig) unlockRead(key, holder, latch string) string {
	return replyOf(r.cl.Eval(context.Background(), r.scripts[classify.RWReadRelease],
		[]string{key, "redisson_rwlock:{" + key + "}", fmt.Sprintf("{%s}:%s:rwlock_timeout", key, holder), "{" + key + "}", latch},
		0, holder, "publish", 20000).Result())
}

// state is what master i holds under key: its hash, as "field=value ...".
func (r *rwRig) state(i int, key string) string {
	h, err := r.direct[i].HGetAll(context.Background(), key).Result()
	if err != nil {
		return "error: " + err.Error()
	}
	return fmt.Sprint(h)
}

// expect waits until every master holds what want gives for it.
func (r *rwRig) expect(step, key string, want func(i int) string) {
	r.t.Helper()
	waitFor(r.t, 5*time.Second, step, func() error {
		for i := range r.direct {
			if got, w := r.state(i, key), want(i); got != w {
				return fmt.Errorf("master %d holds %s, want %s", i, got, w)
			}
		}
		return nil
	})
}

// A read grant that fails is undone where it took a hold, and only its own
// hold goes: another reader's hold and lease stay. Masters 0 and 1 hold
// reader A's read lock, masters 2 to 4 a writer's lock; reader B gets
// holds on 0 and 1 only, is refused, and its undo takes B's hold and lease
// off them, leaving A's.
func TestRWReadUndoLeavesOtherReaders(t *testing.T) {
	r := newRWRig(t)
	ctx := context.Background()
	key := uniqueKey("rw-undo")
	for i, d := range r.direct {
		if i < 2 {
			d.HSet(ctx, key, "mode", "read", "reader-a", 1)
			d.Set(ctx, leaseOf(key, "reader-a", 1), 1, 20*time.Second)
		} else {
			d.HSet(ctx, key, "mode", "write", "writer-w:write", 1)
		}
		d.PExpire(ctx, key, 20*time.Second)
	}
	if got := r.read(key, "reader-b", 10000); got == "nil" {
		t.Fatalf("reader B was granted a lock a writer holds on a majority")
	}
	r.expect("B's undo", key, func(i int) string {
		if i < 2 {
			return "map[mode:read reader-a:1]"
		}
		return "map[mode:write writer-w:write:1]"
	})
	for i, d := range r.direct {
		if n := d.Exists(ctx, leaseOf(key, "reader-b", 1)).Val(); n != 0 {
			t.Errorf("master %d keeps the undone read hold's lease", i)
		}
		if pt := d.PTTL(ctx, leaseOf(key, "reader-a", 1)).Val(); i < 2 && pt < 15*time.Second {
			t.Errorf("master %d: reader A's lease has %v left, want its 20 s", i, pt)
		}
	}
}

// A writer needs a majority without readers. Reader R holds on a bare
// majority (masters 0 to 2: 3 and 4 were cut off from its grant); with 0
// and 1 cut off in turn, a writer finds 3 and 4 free and master 2 held:
// two grants of five, refused, and undone on 3 and 4.
func TestRWWriterRefusedByAReaderOnABareMajority(t *testing.T) {
	r := newRWRig(t)
	key := uniqueKey("rw-bare")
	r.partition([]int{3, 4}, func() {
		if got := r.read(key, "reader-r", 20000); got != "nil" {
			t.Fatalf("reader R on three masters of five: %s", got)
		}
	})
	r.expect("R on a bare majority", key, func(i int) string {
		if i < 3 {
			return "map[mode:read reader-r:1]"
		}
		return "map[]"
	})
	var got string
	r.partition([]int{0, 1}, func() { got = r.write(key, "writer-w:write", 20000) })
	if got == "nil" {
		t.Fatalf("a writer got the lock reader R holds on a majority")
	}
	r.expect("the writer's undo", key, func(i int) string {
		if i < 3 {
			return "map[mode:read reader-r:1]"
		}
		return "map[]"
	})
}

// A read unlock that only a minority ran frees nothing: the client is told
// the lock was not its own (Redisson's nil), no waiter is woken, and a
// writer is still refused by the majority that holds the read.
func TestRWReleaseAMinoritySawKeepsTheLock(t *testing.T) {
	r := newRWRig(t)
	key := uniqueKey("rw-minority")
	if got := r.read(key, "reader-a", 20000); got != "nil" {
		t.Fatalf("reader A: %s", got)
	}
	sub := r.waiter(key)
	var got string
	r.partition([]int{2, 3, 4}, func() { got = r.unlockRead(key, "reader-a", "latch:"+key) })
	if got != "nil" {
		t.Fatalf("an unlock two masters of five ran answered %s, want nil", got)
	}
	if m := quiet(sub); m != nil {
		t.Fatalf("a waiter was woken by a release no majority made: %v", m)
	}
	if got := r.write(key, "writer-w:write", 20000); got == "nil" {
		t.Fatalf("a writer got the lock after an unlock only two masters of five ran")
	}
	r.expect("the read lock on the majority", key, func(i int) string {
		if i < 2 {
			return "map[]"
		}
		return "map[mode:read reader-a:1]"
	})
}

// A release's message is published only when a majority freed the lock.
// Reader B holds on masters 2 to 4 only (0 and 1 were cut off from its
// grant), reader A on all five; A's unlock frees the lock on 0 and 1 and
// leaves B's on the majority: A is told the lock is still locked (0), a
// waiter through the other proxy is not woken, and a writer is refused.
func TestRWUnlockThatFreesAMinorityWakesNoOne(t *testing.T) {
	r := newRWRig(t)
	key := uniqueKey("rw-notice")
	sub := r.waiter(key)
	if got := r.read(key, "reader-a", 20000); got != "nil" {
		t.Fatalf("reader A: %s", got)
	}
	r.partition([]int{0, 1}, func() {
		if got := r.read(key, "reader-b", 20000); got != "nil" {
			t.Fatalf("reader B on three masters of five: %s", got)
		}
	})
	if got := r.unlockRead(key, "reader-a", "latch:"+key); got != "0" {
		t.Fatalf("A's unlock beside B's read on a majority answered %s, want 0 (still locked)", got)
	}
	if m := quiet(sub); m != nil {
		t.Fatalf("a waiter was woken while reader B holds the lock on a majority: %v", m)
	}
	if got := r.write(key, "writer-w:write", 20000); got == "nil" {
		t.Fatalf("a writer got the lock reader B holds on a majority")
	}
	if got := r.unlockRead(key, "reader-b", "latch:b:"+key); got != "1" {
		t.Fatalf("B's unlock answered %s, want 1 (freed)", got)
	}
	select {
	case <-sub.Channel():
	case <-time.After(5 * time.Second):
		t.Fatalf("the last reader's unlock woke no waiter")
	}
}
