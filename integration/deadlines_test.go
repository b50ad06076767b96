package integration

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// The time forms of lock scripts, judged against real time: over generated
// deadlines (passed, now, near, far, beyond max_ttl), the same commands go
// to one lone Redis and through the proxy over five masters, and the
// proxy's answer and what each master holds must match the lone Redis.
// Where the contract says otherwise, the test checks what it says:
//   - a deadline beyond max_ttl (counted from now) is refused with the
//     max_ttl error, and no master is written;
//   - an extend to a deadline already passed, or too near to leave any
//     validity, leaves the lock as it was and answers as failed (one Redis
//     deletes it, or soon lets it go: an extend never shortens a lock
//     through the proxy), and one to a nearer deadline than the lock has
//     keeps what the lock has;
//   - a grant with less time left than the drift allowance is answered as
//     refused (no validity), and holds nothing once the deadline passes.

// deadlineForm is a lock command taking a deadline.
type deadlineForm struct {
	name    string
	text    string // the script
	seconds bool   // the deadline is in seconds
	extend  bool   // it extends a lock held by the caller
}

func deadlineForms(t *testing.T) []deadlineForm {
	t.Helper()
	text := func(name string) string {
		s, err := libscripts.GoText(".", "github.com/redis/rueidis", "rueidislock/lock.go", name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	return []deadlineForm{
		{name: "SET NX PXAT (rueidislock acquire)", text: text("acqat")},
		{name: "PEXPIREAT (rueidislock extend)", text: text("extend"), extend: true},
		{name: "SET NX EXAT", text: `if redis.call("set", KEYS[1], ARGV[1], "NX", "EXAT", ARGV[2]) then return 1 end return 0`, seconds: true},
		{name: "EXPIREAT, answering TTL", text: `if redis.call("get", KEYS[1]) ~= ARGV[1] then return -3 end
redis.call("expireat", KEYS[1], ARGV[2])
return redis.call("ttl", KEYS[1])`, seconds: true, extend: true},
	}
}

func replyText(v any, err error) string {
	switch {
	case errors.Is(err, redis.Nil):
		return "nil"
	case err != nil:
		return "error: " + err.Error()
	}
	return fmt.Sprint(v)
}

func TestDeadlinesMatchALoneRedis(t *testing.T) {
	lone := loneTarget(t)
	lc := redis.NewClient(&redis.Options{Addr: lone.addr, Protocol: 2, MaxRetries: -1})
	t.Cleanup(func() { lc.Close() })
	c := newCluster(t, 5)
	pc := c.client(2)
	proxied := lockTarget{addr: c.app.Addr(), masters: c.direct}
	ctx := context.Background()
	const maxTTL = 5 * time.Minute // the proxy's default
	rng := rand.New(rand.NewSource(11))
	// The deadlines, from now: passed, now, within the drift allowance,
	// near and far, and beyond max_ttl.
	offsets := []time.Duration{-time.Hour, -10 * time.Second, -time.Second, -time.Millisecond, 0, 3 * time.Millisecond,
		maxTTL + time.Second, 90 * time.Second, 2 * time.Hour}
	for i := 0; i < 12; i++ {
		offsets = append(offsets, 2*time.Second+time.Duration(rng.Int63n(int64(50*time.Second))))
	}
	checked := map[string]int{}
	for _, f := range deadlineForms(t) {
		for _, held := range []string{"", "mine", "other"} {
			if held != "" && !f.extend && held == "mine" {
				continue
			}
			for _, off := range offsets {
				name := fmt.Sprintf("%s, key %s, deadline %v from now", f.name, map[string]string{"": "free", "mine": "held by the caller", "other": "held by another"}[held], off)
				key := uniqueKey("deadline")
				// Both start with the same lock, if any, for 30 s.
				for _, cl := range []*redis.Client{lc, pc} {
					switch held {
					case "mine":
						cl.SetNX(ctx, key, "tok", 30*time.Second)
					case "other":
						cl.SetNX(ctx, key, "someone", 30*time.Second)
					}
				}
				at := time.Now().Add(off)
				arg := strconv.FormatInt(at.UnixMilli(), 10)
				if f.seconds {
					arg = strconv.FormatInt(at.Unix(), 10)
				}
				want := replyText(lc.Eval(ctx, f.text, []string{key}, "tok", arg).Result())
				got := replyText(pc.Eval(ctx, f.text, []string{key}, "tok", arg).Result())
				if w, err1 := strconv.Atoi(want); err1 == nil && w > 1 {
					// A TTL in the reply: the proxy's is the validity left,
					// less drift, rounded down (one Redis rounds to nearest).
					if g, err2 := strconv.Atoi(got); err2 == nil && g <= w && g >= w-2 {
						got = want
					}
				}
				left := time.Until(at)
				if f.seconds {
					left = time.Until(time.Unix(at.Unix(), 0))
				}
				loneState := lone.state(key)[0]
				settle := func(check func() error) {
					t.Helper()
					waitFor(t, 2*time.Second, name+" to settle as on the lone Redis", func() error {
						if err := check(); err != nil {
							return fmt.Errorf("%w (lone Redis answered %s, holds %+v; the proxy answered %s)", err, want, loneState, got)
						}
						return nil
					})
				}
				// What each master holds, against what the lone Redis holds.
				masters := func(value string, lo, hi time.Duration) error {
					for i, s := range proxied.state(key) {
						if s.value != value || value != "" && (s.pttl <= lo || s.pttl > hi) {
							return fmt.Errorf("master %d holds %q with PTTL %v; want %q with PTTL in (%v, %v]", i, s.value, s.pttl, value, lo, hi)
						}
					}
					return nil
				}
				before := map[string]string{"": "", "mine": "tok", "other": "someone"}[held]
				switch {
				case left > maxTTL:
					// Beyond max_ttl, from now: refused, nothing written.
					if !strings.Contains(got, "exceeds max_ttl") {
						t.Fatalf("%s: the proxy answered %s; want the max_ttl refusal (lone Redis: %s)", name, got, want)
					}
					settle(func() error { return masters(before, 29*time.Second, 30*time.Second) })
					checked["beyond max_ttl"]++
				case f.extend && held == "mine" && left <= 50*time.Millisecond:
					// A passed deadline, or one too near to leave validity: one
					// Redis deletes the lock (or soon lets it go); the proxy
					// keeps it and answers as the extend failed.
					// Only a deadline passed before the lone Redis ran the
					// command is sure to have deleted it there: one a few
					// milliseconds ahead may still show with PTTL 0.
					if off <= 0 && loneState.value != "" {
						t.Fatalf("%s: the lone Redis still holds %+v", name, loneState)
					}
					if got != map[bool]string{false: "0", true: "-3"}[f.seconds] && got != "0" {
						t.Fatalf("%s: the proxy answered %s; want the extend's failure", name, got)
					}
					settle(func() error { return masters("tok", 29*time.Second, 30*time.Second) })
					checked["extend to a passed deadline"]++
				case got != want:
					// Only a grant without validity may differ: refused here,
					// and gone everywhere once its deadline passed.
					if left > 50*time.Millisecond || held != "" || f.extend {
						t.Fatalf("%s: the proxy answered %s, the lone Redis %s", name, got, want)
					}
					time.Sleep(max(left, 0) + 5*time.Millisecond)
					settle(func() error { return masters("", 0, 0) })
					checked["no validity left"]++
				default:
					// The same answer: each master holds what the lone Redis
					// holds, with the PTTL it has, less the moments between
					// (an extend to a nearer deadline shortens the lock once
					// it succeeded, by its second step, as one Redis does).
					p := loneState.pttl
					if loneState.value == "" || loneState.pttl < 50*time.Millisecond {
						// Nothing, or a key about to go (a deadline of now).
						time.Sleep(max(loneState.pttl, 0) + 5*time.Millisecond)
						settle(func() error { return masters("", 0, 0) })
					} else {
						settle(func() error { return masters(loneState.value, p-time.Second, p+300*time.Millisecond) })
					}
					checked["same as one Redis"]++
				}
			}
		}
	}
	t.Logf("cases: %v", checked)
	for _, k := range []string{"beyond max_ttl", "extend to a passed deadline", "same as one Redis"} {
		if checked[k] == 0 {
			t.Errorf("no case was %s", k)
		}
	}
}

// A plain SET NX with a deadline already passed is answered as one Redis
// answers it, OK where the key is free and nil where it is held, and
// writes nothing anywhere; SET IFEQ to a passed deadline fails and leaves
// the lock as it was, as every extend to a passed deadline does.
func TestPlainSetWithAPassedDeadline(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(2)
	free, held := uniqueKey("past-free"), uniqueKey("past-held")
	mustDo(t, cl, "OK", "SET", free, "tok", "NX", "PXAT", "1")
	mustDo(t, cl, "OK", "SET", free, "tok", "NX", "EXAT", "1")
	if h := c.holders(free, "tok"); len(h) != 0 {
		t.Fatalf("a SET NX of a passed deadline wrote the key on masters %v", h)
	}
	mustDo(t, cl, "OK", "SET", held, "holder", "NX", "PX", "10000")
	mustDo(t, cl, nil, "SET", held, "tok", "NX", "PXAT", "1")
	mustDo(t, cl, nil, "SET", held, "holder", "IFEQ", "holder", "PXAT", "1")
	c.checkPTTLs(t, "after SET NX and SET IFEQ of a passed deadline", held, "holder", 8*time.Second, 10*time.Second)
}
