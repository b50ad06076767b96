package integration

import (
	"context"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
)

// reentrant returns the texts of the reentrant lock's take and release.
func reentrant(t *testing.T) (enter, exit string) {
	t.Helper()
	return counted(t, "take or enter again").Text, counted(t, "leave once").Text
}

// setHolds puts on each master the owner's count of holds (0: no lock).
func (c *cluster) setHolds(t *testing.T, key, owner string, counts []int64, pttl time.Duration) {
	ctx := context.Background()
	for i, n := range counts {
		d := c.direct[i]
		d.Del(ctx, key)
		if n > 0 {
			if err := d.HSet(ctx, key, owner, n).Err(); err != nil {
				t.Fatal(err)
			}
			d.PExpire(ctx, key, pttl)
		}
	}
}

// holds reads each master's count of the owner's holds (0: no lock, -1:
// another owner's).
func (c *cluster) holds(key, owner string) []int64 {
	ctx := context.Background()
	out := make([]int64, len(c.direct))
	for i, d := range c.direct {
		fields, err := d.HGetAll(ctx, key).Result()
		switch {
		case err != nil && err != redis.Nil:
			out[i] = -1
		case len(fields) == 0:
		case len(fields) != 1 || fields[owner] == "":
			out[i] = -1
		default:
			out[i], _ = strconv.ParseInt(fields[owner], 10, 64)
		}
	}
	return out
}

// eventuallyHolds waits until the masters count want (a repair is sent as
// the reply leaves, and may land just after it).
func (c *cluster) eventuallyHolds(key, owner string, want []int64) []int64 {
	deadline := time.Now().Add(3 * time.Second)
	for {
		got := c.holds(key, owner)
		if fmt.Sprint(got) == fmt.Sprint(want) || time.Now().After(deadline) {
			return got
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// loneRedis is a client of a redis-server of its own: one Redis, to
// compare the proxy's answers with.
func loneRedis(t *testing.T) *redis.Client {
	t.Helper()
	lone := redis.NewClient(&redis.Options{Addr: startRedis(t, 1)[0].Addr, Protocol: 2})
	t.Cleanup(func() { lone.Close() })
	return lone
}

// replyOf is a reply as the tests compare it: nil, an error's text, or
// the value.
func replyOf(v any, err error) string {
	if err == redis.Nil {
		return "nil"
	}
	if err != nil {
		return "error " + err.Error()
	}
	return fmt.Sprint(v)
}

// A reentrant lock (a hash whose one field is its owner and counts its
// holds, as Redisson's RLock keeps it) through the proxy over five
// masters, as on one Redis: each hold counts on every master, a release
// takes one off while holds are left and re-arms the lock, the last one
// frees it, and another owner is refused throughout. Every step's reply
// is compared with a lone Redis's, and every master read after it.
func TestReentrantLockThroughProxy(t *testing.T) {
	enter, exit := reentrant(t)
	c := newCluster(t, 5)
	lone := loneRedis(t)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("reentrant")
	const owner, other = "6f1c2e7a-52b8-4a42:41", "9d0b7c11-0e4f-4c55:7"
	for _, st := range []struct {
		name, text, who string
		holds           int64
	}{
		{"take", enter, owner, 1},
		{"enter again", enter, owner, 2},
		{"enter a third time", enter, owner, 3},
		{"another owner", enter, other, 3},
		{"release one hold", exit, owner, 2},
		{"another owner's release", exit, other, 2},
		{"release another", exit, owner, 1},
		{"another owner again", enter, other, 1},
		{"release the last", exit, owner, 0},
		{"release when not held", exit, owner, 0},
		{"now another owner takes it", enter, other, 0},
	} {
		want := replyOf(lone.Eval(ctx, st.text, []string{key}, 30000, st.who).Result())
		got := replyOf(cl.Eval(ctx, st.text, []string{key}, 30000, st.who).Result())
		if st.who == other && want != "nil" && want != "0" {
			// Another owner's refusal answers the holder's PTTL: compare
			// its presence, not its value.
			if n, err := strconv.Atoi(got); err != nil || n <= 0 || n > 30000 {
				t.Fatalf("%s: the proxy answered %s, one Redis %s", st.name, got, want)
			}
		} else if got != want {
			t.Fatalf("%s: the proxy answered %s, one Redis %s", st.name, got, want)
		}
		wantHolds := []int64{st.holds, st.holds, st.holds, st.holds, st.holds}
		if st.name == "now another owner takes it" {
			wantHolds = []int64{-1, -1, -1, -1, -1}
		}
		if h := c.eventuallyHolds(key, owner, wantHolds); fmt.Sprint(h) != fmt.Sprint(wantHolds) {
			t.Fatalf("%s: the masters count %v, want %v", st.name, h, wantHolds)
		}
		if st.holds > 0 {
			for i, p := range c.pttls(key) {
				if p < 25*time.Second || p > 30*time.Second {
					t.Fatalf("%s: master %d PTTL %v", st.name, i, p)
				}
			}
		}
		t.Logf("%s: %s", st.name, got)
	}
}

// A reentrant lock whose scripts write a fixed TTL rather than one from
// an argument, and a take with a TTL argument left by a release that
// re-arms to a fixed one: each step answers as on a lone Redis, and a
// release of one hold leaves the lock held, re-armed, on every master.
// A release that takes one hold off is never run as one that frees the
// lock, whatever TTL it re-arms to.
func TestReentrantLockWithAFixedTTL(t *testing.T) {
	enter, _ := reentrant(t)
	enterFixed := counted(t, "take or enter again for a fixed 30 s").Text
	exitFixed := counted(t, "leave once, re-arming for a fixed 30 s").Text
	c := newCluster(t, 5)
	lone := loneRedis(t)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("reentrant-fixed")
	const owner, other = "6f1c2e7a-52b8-4a42:41", "9d0b7c11-0e4f-4c55:7"
	for _, st := range []struct {
		name, text string
		args       []any
		holds      int64
		pttl       time.Duration // the PTTL every master shows after it (0: not checked)
	}{
		{"take for 5 s", enter, []any{5000, owner}, 1, 5 * time.Second},
		{"enter again for 5 s", enter, []any{5000, owner}, 2, 5 * time.Second},
		{"release one hold, re-armed for 30 s", exitFixed, []any{owner}, 1, 30 * time.Second},
		{"another owner, for a fixed 30 s", enterFixed, []any{other}, 1, 0},
		{"enter again for a fixed 30 s", enterFixed, []any{owner}, 2, 30 * time.Second},
		{"release one hold", exitFixed, []any{owner}, 1, 30 * time.Second},
		{"release the last", exitFixed, []any{owner}, 0, 0},
		{"release when not held", exitFixed, []any{owner}, 0, 0},
	} {
		want := replyOf(lone.Eval(ctx, st.text, []string{key}, st.args...).Result())
		got := replyOf(cl.Eval(ctx, st.text, []string{key}, st.args...).Result())
		if strings.HasPrefix(st.name, "another owner") {
			// Refused, answering the holder's PTTL: compare its presence.
			if n, err := strconv.Atoi(got); err != nil || n <= 0 || n > 30000 {
				t.Fatalf("%s: the proxy answered %s, one Redis %s", st.name, got, want)
			}
		} else if got != want {
			t.Fatalf("%s: the proxy answered %s, one Redis %s", st.name, got, want)
		}
		wantHolds := []int64{st.holds, st.holds, st.holds, st.holds, st.holds}
		if h := c.eventuallyHolds(key, owner, wantHolds); fmt.Sprint(h) != fmt.Sprint(wantHolds) {
			t.Fatalf("%s: the masters count %v, want %v", st.name, h, wantHolds)
		}
		if st.pttl > 0 {
			for i, p := range c.pttls(key) {
				if p < st.pttl-5*time.Second || p > st.pttl {
					t.Fatalf("%s: master %d PTTL %v, want about %v", st.name, i, p, st.pttl)
				}
			}
		}
		t.Logf("%s: %s", st.name, got)
	}
}

// Masters that disagree on the count after partial failures: a release
// answers as the majority counts (never "released" while a majority still
// counts holds), and the minority is repaired to the majority's count;
// another owner never gets a lock a majority still counts.
func TestReentrantCountsFollowTheMajority(t *testing.T) {
	enter, exit := reentrant(t)
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)
	const owner = "6f1c2e7a-52b8-4a42:41"
	for _, tc := range []struct {
		name   string
		text   string
		before []int64
		reply  string
		after  []int64
	}{
		// Two masters missed an entry: after one release three still count
		// a hold, so the lock is held; the two have nothing to repair.
		{"a majority still counts", exit, []int64{1, 1, 2, 2, 2}, "0", []int64{0, 0, 1, 1, 1}},
		// Two masters count one more than the rest: repaired to the
		// majority's count.
		{"a minority counts more", exit, []int64{3, 3, 2, 2, 2}, "0", []int64{1, 1, 1, 1, 1}},
		// Only two would still count: released, and the lock deleted there.
		{"a minority still counts", exit, []int64{2, 2, 1, 1, 1}, "1", []int64{0, 0, 0, 0, 0}},
		// An entry where two masters lost the lock: taken there, and
		// repaired to the majority's count.
		{"an entry where two lost it", enter, []int64{1, 1, 1, 0, 0}, "nil", []int64{2, 2, 2, 2, 2}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := uniqueKey("reentrant")
			c.setHolds(t, key, owner, tc.before, 20*time.Second)
			if got := replyOf(cl.Eval(ctx, tc.text, []string{key}, 30000, owner).Result()); got != tc.reply {
				t.Fatalf("reply %s, want %s", got, tc.reply)
			}
			if h := c.eventuallyHolds(key, owner, tc.after); fmt.Sprint(h) != fmt.Sprint(tc.after) {
				t.Fatalf("the masters count %v, want %v", h, tc.after)
			}
			if tc.reply == "0" {
				// Held: another owner is refused, and nothing of its
				// attempt stays on the masters where the lock was free.
				if got := replyOf(cl.Eval(ctx, enter, []string{key}, 30000, "another:1").Result()); got == "nil" {
					t.Fatalf("another owner took a lock a majority holds")
				}
				if h := c.eventuallyHolds(key, owner, tc.after); fmt.Sprint(h) != fmt.Sprint(tc.after) {
					t.Fatalf("after another owner's attempt the masters count %v, want %v", h, tc.after)
				}
			}
		})
	}
}

// A reentrant lock under partial failures, at random: two owners take,
// enter again and release through the proxy while, before some steps, one
// master's count is made to differ from the others' (an op it missed, or
// ran twice). Whatever the order: another owner never gets the lock while
// its holder counts holds, a holder's count is on a majority of masters
// whenever it believes it holds the lock, and a release answers "released"
// only when a majority no longer counts.
func TestReentrantLockUnderPartialFailures(t *testing.T) {
	enter, exit := reentrant(t)
	c := newCluster(t, 5)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("reentrant")
	owners := []string{"6f1c2e7a-52b8-4a42:41", "9d0b7c11-0e4f-4c55:7"}
	believed := []int64{0, 0} // each owner's count of holds, from the replies
	rng := rand.New(rand.NewSource(31))
	steps, perturbed := 300, 0
	if testing.Short() {
		steps = 80
	}
	for step := 0; step < steps; step++ {
		if rng.Intn(3) == 0 && agreed(c, key, owners) {
			// One master's count off by one for an owner that holds it
			// (while the masters agree: one op missed or run twice at a
			// time, as one master's failure gives).
			m := c.direct[rng.Intn(5)]
			for _, o := range owners {
				if n, err := m.HGet(ctx, key, o).Int64(); err == nil {
					if rng.Intn(2) == 0 && n > 1 {
						m.HIncrBy(ctx, key, o, -1)
					} else {
						m.HIncrBy(ctx, key, o, 1)
					}
					perturbed++
				}
			}
		}
		who := rng.Intn(2)
		o := owners[who]
		if rng.Intn(2) == 0 || believed[who] == 0 {
			got := replyOf(cl.Eval(ctx, enter, []string{key}, 30000, o).Result())
			if got == "nil" {
				if believed[1-who] > 0 {
					t.Fatalf("step %d: %s took the lock while %s counts %d holds", step, o, owners[1-who], believed[1-who])
				}
				believed[who]++
			}
		} else {
			switch got := replyOf(cl.Eval(ctx, exit, []string{key}, 30000, o).Result()); got {
			case "0":
				believed[who]--
				if believed[who] <= 0 {
					t.Fatalf("step %d: still held after %s's last hold: the masters count holds it never took", step, o)
				}
			case "1":
				believed[who] = 0
				if n := countingMasters(c, key, o); n >= 3 {
					t.Fatalf("step %d: released while %d masters still count %s's holds", step, n, o)
				}
			default:
				believed[who] = 0
			}
		}
		for i, o := range owners {
			if believed[i] > 0 {
				if n := countingMasters(c, key, o); n < 3 {
					t.Fatalf("step %d: %s believes it holds the lock, %d masters count it", step, o, n)
				}
			}
		}
	}
	t.Logf("%d steps, %d counts perturbed", steps, perturbed)
}

// countingMasters is how many masters count a hold of owner's.
func countingMasters(c *cluster, key, owner string) int {
	n := 0
	for _, h := range c.holds(key, owner) {
		if h > 0 {
			n++
		}
	}
	return n
}

// agreed reports whether every master that holds the lock counts the same
// holds.
func agreed(c *cluster, key string, owners []string) bool {
	for _, o := range owners {
		var seen int64
		for _, h := range c.holds(key, o) {
			if h > 0 && seen > 0 && h != seen {
				return false
			}
			if h > 0 {
				seen = h
			}
		}
	}
	return true
}

// A read-write lock's write lock (Redisson's RReadWriteLock: "mode" =
// "write" beside its writer's field), and a hash lock's release called
// with the writer's field as its token that frees only a lock of one field:
// through the proxy the write lock stays held on every master, as on one
// Redis, and another writer is refused as there. Only a hash extend reads
// a write lock as its writer's lock; a release never acts on it.
func TestHashReleaseSparesAWriteLockAsOnOneRedis(t *testing.T) {
	rw := redissonRW(t)
	const release = `if redis.call('hlen', KEYS[1]) ~= 1 or redis.call('hexists', KEYS[1], ARGV[1]) == 0 then return 'not-held' end
if redis.call('hincrby', KEYS[1], ARGV[1], -1) == 0 then
  redis.call('del', KEYS[1])
  return 'released'
end
return 'held'`
	c := newCluster(t, 5)
	lone := loneRedis(t)
	ctx := context.Background()
	cl := c.client(2)
	key := uniqueKey("rw-hash-release")
	const writer, other = "6f1c2e7a-52b8-4a42:41:write", "9d0b7c11-0e4f-4c55:7:write"
	write := func(r *redis.Client, who string) string {
		return replyOf(r.Eval(ctx, rw[classify.RWWriteAcquire], []string{key}, 30000, who).Result())
	}
	if got, want := write(cl, writer), write(lone, writer); got != want || got != "nil" {
		t.Fatalf("write lock: the proxy answered %s, one Redis %s", got, want)
	}
	want := replyOf(lone.Eval(ctx, release, []string{key}, writer).Result())
	got := replyOf(cl.Eval(ctx, release, []string{key}, writer).Result())
	if got != want {
		t.Fatalf("release with the writer's field: the proxy answered %s, one Redis %s", got, want)
	}
	for i, d := range c.direct {
		if h := d.HGetAll(ctx, key).Val(); h["mode"] != "write" || h[writer] != "1" {
			t.Fatalf("master %d holds %v after the release, want the write lock", i, h)
		}
	}
	got, want = write(cl, other), write(lone, other)
	if (got == "nil") != (want == "nil") {
		t.Fatalf("another writer: the proxy answered %s, one Redis %s", got, want)
	}
}
