package integration

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/netio"
)

// BLPOP on a release's signal list (a release that pushes onto a list, as
// python-redis-lock's does), through two proxies over five masters: every
// waiter on the key when the release is decided is woken once, through
// either proxy; a waiter that comes after the release takes the signal
// within its TTL, one after that waits; without a release the timeout
// answers nil. A signal that only a minority of masters delivered (a
// notice published straight on two masters) wakes no one, one that three
// delivered does: the control that shows the majority rule at work.
func TestReleaseSignalsBLPOPWaiters(t *testing.T) {
	release := counted(t, "release, signalling a waiter on a list").Text
	c := newCluster(t, 5)
	other, _ := startApp(t, c.addrs())
	ctx := context.Background()
	via := []*redis.Client{c.client(2), proxyClient(t, other.Addr(), 3)}
	key := uniqueKey("signalled")
	signal := "signal:{" + key + "}"
	take := func(owner string) {
		t.Helper()
		if ok := via[0].SetNX(ctx, key, owner, 20*time.Second).Val(); !ok {
			t.Fatalf("SET NX for %s refused", owner)
		}
	}
	unlock := func(owner string) {
		t.Helper()
		if got := replyOf(via[1].Eval(ctx, release, []string{key, signal}, owner, 1500).Result()); got != "0" {
			t.Fatalf("release: %s", got)
		}
	}
	type woken struct {
		v   []string
		err error
		at  time.Time
	}
	wait := func(cl *redis.Client, timeout time.Duration) <-chan woken {
		ch := make(chan woken, 1)
		go func() {
			// A client of its own: BLPOP blocks its connection.
			b := redis.NewClient(&redis.Options{Addr: cl.Options().Addr, Protocol: cl.Options().Protocol, ReadTimeout: -1})
			defer b.Close()
			v, err := b.BLPop(ctx, timeout, signal).Result()
			ch <- woken{v, err, time.Now()}
		}()
		return ch
	}
	noSignalFor := func(ch <-chan woken, d time.Duration) {
		t.Helper()
		select {
		case w := <-ch:
			t.Fatalf("a waiter woke without a release: %v %v", w.v, w.err)
		case <-time.After(d):
		}
	}

	// Three waiters, through both proxies: each woken once by one release.
	take("client-9")
	ws := []<-chan woken{wait(via[0], 10*time.Second), wait(via[1], 10*time.Second), wait(via[0], 10*time.Second)}
	noSignalFor(ws[0], 300*time.Millisecond)
	if info := via[0].Info(ctx, "clients").Val(); !strings.Contains(info, "blocked_clients:2\r\n") {
		t.Fatalf("INFO clients with two waiters in BLPOP:\n%s", info)
	}
	released := time.Now()
	unlock("client-9")
	for i, ch := range ws {
		select {
		case w := <-ch:
			if w.err != nil || len(w.v) != 2 || w.v[0] != signal || w.v[1] != "released" {
				t.Fatalf("waiter %d: %v, %v", i, w.v, w.err)
			}
			t.Logf("waiter %d woken %v after the release", i, w.at.Sub(released))
		case <-time.After(5 * time.Second):
			t.Fatalf("waiter %d was not woken", i)
		}
	}
	// Nothing left for a waiter that comes now: the release's waiters took it.
	late := wait(via[1], time.Second)
	if w := <-late; w.err != redis.Nil {
		t.Fatalf("a waiter after the signal was taken: %v, %v; want nil at its timeout", w.v, w.err)
	}

	// No waiter: the signal is kept for its TTL (1500 ms) for the first to
	// come (each proxy keeps it for its own waiters).
	take("client-10")
	unlock("client-10")
	time.Sleep(200 * time.Millisecond)
	start := time.Now()
	if v, err := via[0].BLPop(ctx, 5*time.Second, signal).Result(); err != nil || v[1] != "released" || time.Since(start) > time.Second {
		t.Fatalf("a waiter after a release within its TTL: %v, %v after %v", v, err, time.Since(start))
	}
	if _, err := via[0].BLPop(ctx, time.Second, signal).Result(); err != redis.Nil {
		t.Fatalf("a second waiter after one release: %v; want nil, the first took it", err)
	}
	take("client-11")
	unlock("client-11")
	time.Sleep(1700 * time.Millisecond)
	if _, err := via[0].BLPop(ctx, time.Second, signal).Result(); err != redis.Nil {
		t.Fatalf("a waiter after the signal's TTL: %v; want nil", err)
	}

	// A notice that two masters delivered wakes no one; three do.
	ch := wait(via[0], 10*time.Second)
	noSignalFor(ch, 300*time.Millisecond)
	notice := "forged-1 2 " + strconv.Itoa(len(signal)) + " " + signal + "1500 forged"
	for _, i := range []int{0, 1} {
		c.direct[i].Publish(ctx, netio.ReleaseChannel, notice)
	}
	noSignalFor(ch, time.Second)
	c.direct[2].Publish(ctx, netio.ReleaseChannel, notice)
	select {
	case w := <-ch:
		if w.err != nil || w.v[1] != "forged" {
			t.Fatalf("after a majority delivered the notice: %v, %v", w.v, w.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a notice three masters delivered did not wake the waiter")
	}

	// Redis's errors for a timeout that is none.
	for arg, want := range map[string]string{"x": "ERR timeout is not a float or out of range", "-1": "ERR timeout is negative"} {
		if err := via[0].Do(ctx, "BLPOP", signal, arg).Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("BLPOP %s %s: %v, want %q", signal, arg, err, want)
		}
	}
	for i, d := range c.direct {
		if n := d.Exists(ctx, signal).Val(); n != 0 {
			t.Fatalf("master %d holds the signal list", i)
		}
	}
}
