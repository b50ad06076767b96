package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// counted returns one of libscripts.Reentrant by name.
func counted(t *testing.T, name string) libscripts.Counted {
	t.Helper()
	for _, s := range libscripts.Reentrant() {
		if s.Name == name {
			return s
		}
	}
	t.Fatalf("no script %q", name)
	return libscripts.Counted{}
}

// noticeScript returns the reentrant release that publishes when it frees
// its lock.
func noticeScript(t *testing.T) libscripts.Counted { return counted(t, "leave once, telling waiters") }

// received collects the messages of one subscription.
func received(t *testing.T, ps *redis.PubSub) <-chan *redis.Message {
	out := make(chan *redis.Message, 16)
	go func() {
		for m := range ps.Channel() {
			out <- m
		}
		close(out)
	}()
	return out
}

// none asserts that no message arrives within d.
func none(t *testing.T, what string, ch <-chan *redis.Message, d time.Duration) {
	t.Helper()
	select {
	case m := <-ch:
		t.Fatalf("%s: a message arrived: %v", what, m)
	case <-time.After(d):
	}
}

// wakeRig is two proxies over five masters, a client of the first (the
// holder's), and a lock key with its channel.
type wakeRig struct {
	c            *cluster
	other        string // the second proxy's address
	holder       *redis.Client
	key, channel string
}

func newWakeRig(t *testing.T) wakeRig {
	c := newCluster(t, 5)
	key := uniqueKey("wake")
	return wakeRig{c: c, other: startSecondProxy(t, c), holder: c.client(2), key: key, channel: "redlock-channel:{" + key + "}"}
}

// subscribe opens a subscription through the second proxy and returns
// its messages.
func (w wakeRig) subscribe(t *testing.T, proto int, open func(*redis.Client) *redis.PubSub) <-chan *redis.Message {
	ps := open(proxyClient(t, w.other, proto))
	t.Cleanup(func() { ps.Close() })
	if _, err := ps.Receive(context.Background()); err != nil {
		t.Fatal(err)
	}
	return received(t, ps)
}

// expectMessage waits for one message and checks its channel (unless
// empty) and payload; it returns how long it took.
func expectMessage(t *testing.T, what string, ch <-chan *redis.Message, channel, payload string) time.Duration {
	t.Helper()
	start := time.Now()
	select {
	case m := <-ch:
		if channel != "" && m.Channel != channel || m.Payload != payload {
			t.Fatalf("%s: got %q on %q, want %q on %q", what, m.Payload, m.Channel, payload, channel)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no message", what)
	}
	return time.Since(start)
}

// Wake-ups without polling: waiters subscribed through one proxy
// (SUBSCRIBE to the lock's channel, PSUBSCRIBE to a pattern of it) get the
// release's message once, when the last hold is released through another
// proxy, over five real masters; a release that leaves holds publishes
// nothing; a client's PUBLISH straight on the masters, and a release
// notice that only a minority of masters delivered, wake no one; a notice
// that a majority delivered does. The hand-off time (the release's call
// until the waiter has the message) is logged.
func TestReleaseWakesWaitersThroughAnyProxy(t *testing.T) {
	enter, _ := reentrant(t)
	rel := noticeScript(t)
	w := newWakeRig(t)
	ctx := context.Background()
	const owner = "6f1c2e7a-52b8-4a42:41"
	msgs := w.subscribe(t, 2, func(cl *redis.Client) *redis.PubSub { return cl.Subscribe(ctx, w.channel) })
	pmsgs := w.subscribe(t, 3, func(cl *redis.Client) *redis.PubSub { return cl.PSubscribe(ctx, "redlock-channel:*") })

	eval := func(text string, keys []string, argv ...string) string {
		args := make([]any, len(argv))
		for i, a := range argv {
			args[i] = a
		}
		return replyOf(w.holder.Eval(ctx, text, keys, args...).Result())
	}
	release := func() string { return eval(rel.Text, []string{w.key, w.channel}, rel.Argv...) }
	for i := 0; i < 2; i++ {
		if got := eval(enter, []string{w.key}, "30000", owner); got != "nil" {
			t.Fatalf("take %d: %s", i, got)
		}
	}
	if got := release(); got != "0" {
		t.Fatalf("release with a hold left: %s", got)
	}
	none(t, "a release that leaves a hold", msgs, 300*time.Millisecond)

	start := time.Now()
	if got := release(); got != "1" {
		t.Fatalf("the last release: %s", got)
	}
	expectMessage(t, "SUBSCRIBE", msgs, w.channel, rel.Argv[0])
	t.Logf("SUBSCRIBE waiter through the other proxy woken %v after the release began", time.Since(start))
	expectMessage(t, "PSUBSCRIBE", pmsgs, w.channel, rel.Argv[0])
	t.Logf("PSUBSCRIBE waiter through the other proxy woken %v after the release began", time.Since(start))
	none(t, "the same release again", msgs, 300*time.Millisecond)

	// A client's PUBLISH straight on every master's lock channel is not a
	// release.
	for _, d := range w.c.direct {
		d.Publish(ctx, w.channel, "0")
	}
	none(t, "a direct PUBLISH", msgs, 300*time.Millisecond)

	// A notice that only two of five masters delivered wakes no one; once
	// a third delivers it, it does, once.
	notice := fmt.Sprintf("%s 0 %d %s%s", "minority-1", len(w.channel), w.channel, "0")
	for _, d := range w.c.direct[:2] {
		d.Publish(ctx, netio.ReleaseChannel, notice)
	}
	none(t, "a notice two masters delivered", msgs, 300*time.Millisecond)
	w.c.direct[2].Publish(ctx, netio.ReleaseChannel, notice)
	expectMessage(t, "a notice a majority delivered", msgs, w.channel, "0")
	for _, d := range w.c.direct[3:] {
		d.Publish(ctx, netio.ReleaseChannel, notice)
	}
	none(t, "the same notice from more masters", msgs, 300*time.Millisecond)

	// A forced unlock that publishes (a delete with a notice) wakes them
	// too.
	force := counted(t, "force the lock free, telling waiters")
	if got := eval(enter, []string{w.key}, "30000", owner); got != "nil" {
		t.Fatalf("take again: %s", got)
	}
	if got := eval(force.Text, []string{w.key, w.channel}, force.Argv...); got != "1" {
		t.Fatalf("forced unlock: %s", got)
	}
	expectMessage(t, "a forced unlock", msgs, w.channel, "0")
}

// The release notice of SPUBLISH reaches SSUBSCRIBE waiters, and clients
// cannot PUBLISH through the proxy.
func TestShardReleaseWakesShardWaiters(t *testing.T) {
	enter, _ := reentrant(t)
	rel := noticeScript(t)
	w := newWakeRig(t)
	ctx := context.Background()
	msgs := w.subscribe(t, 3, func(cl *redis.Client) *redis.PubSub { return cl.SSubscribe(ctx, w.channel) })
	if got := replyOf(w.holder.Eval(ctx, enter, []string{w.key}, 30000, "6f1c2e7a-52b8-4a42:41").Result()); got != "nil" {
		t.Fatalf("take: %s", got)
	}
	args := []any{rel.Argv[0], rel.Argv[1], rel.Argv[2], "spublish"}
	start := time.Now()
	if got := replyOf(w.holder.Eval(ctx, rel.Text, []string{w.key, w.channel}, args...).Result()); got != "1" {
		t.Fatalf("release: %s", got)
	}
	expectMessage(t, "SSUBSCRIBE", msgs, w.channel, "0")
	t.Logf("SSUBSCRIBE waiter woken %v after the release began", time.Since(start))
	if err := w.holder.Publish(ctx, w.channel, "x").Err(); err == nil || !strings.Contains(err.Error(), "PUBLISH") {
		t.Fatalf("a client's PUBLISH: %v", err)
	}
}

// A string lock's release that publishes its key's name (Spring's pub/sub
// lock does) wakes a waiter on the channel through another proxy, with
// the key's name.
func TestReleaseMessageNamesItsKey(t *testing.T) {
	rel := counted(t, "release, telling waiters its key")
	w := newWakeRig(t)
	ctx := context.Background()
	msgs := w.subscribe(t, 2, func(cl *redis.Client) *redis.PubSub { return cl.Subscribe(ctx, rel.Argv[1]) })
	if err := w.holder.SetNX(ctx, w.key, rel.Argv[0], 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if got := replyOf(w.holder.Eval(ctx, rel.Text, []string{w.key}, rel.Argv[0], rel.Argv[1]).Result()); got != "1" {
		t.Fatalf("release: %s", got)
	}
	expectMessage(t, "release", msgs, rel.Argv[1], w.key)
	if got := replyOf(w.holder.Eval(ctx, rel.Text, []string{w.key}, rel.Argv[0], rel.Argv[1]).Result()); got != "nil" {
		t.Fatalf("release of a free lock: %s", got)
	}
	none(t, "a release that freed nothing", msgs, 300*time.Millisecond)
}
