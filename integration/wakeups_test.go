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

// noticeScript returns the reentrant release that publishes when it frees
// its lock, and its arguments.
func noticeScript(t *testing.T) libscripts.Counted {
	t.Helper()
	for _, s := range libscripts.Reentrant() {
		if s.Name == "leave once, telling waiters" {
			return s
		}
	}
	t.Fatal("no publishing release")
	return libscripts.Counted{}
}

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
	c := newCluster(t, 5)
	other := startSecondProxy(t, c)
	ctx := context.Background()
	holder := c.client(2)
	waiterConn := proxyClient(t, other, 2)
	waiter3 := proxyClient(t, other, 3)
	key := uniqueKey("wake")
	channel := "redlock-channel:{" + key + "}"
	const owner = "6f1c2e7a-52b8-4a42:41"

	sub := waiterConn.Subscribe(ctx, channel)
	t.Cleanup(func() { sub.Close() })
	psub := waiter3.PSubscribe(ctx, "redlock-channel:*")
	t.Cleanup(func() { psub.Close() })
	for _, ps := range []*redis.PubSub{sub, psub} {
		if _, err := ps.Receive(ctx); err != nil {
			t.Fatal(err)
		}
	}
	msgs, pmsgs := received(t, sub), received(t, psub)

	release := func() string {
		args := []any{}
		for _, a := range rel.Argv {
			args = append(args, a)
		}
		return replyOf(holder.Eval(ctx, rel.Text, []string{key, channel}, args...).Result())
	}
	for i := 0; i < 2; i++ {
		if got := replyOf(holder.Eval(ctx, enter, []string{key}, 30000, owner).Result()); got != "nil" {
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
	for _, w := range []struct {
		name string
		ch   <-chan *redis.Message
	}{{"SUBSCRIBE", msgs}, {"PSUBSCRIBE", pmsgs}} {
		select {
		case m := <-w.ch:
			if m.Channel != channel || m.Payload != rel.Argv[0] {
				t.Fatalf("%s: got %q on %q", w.name, m.Payload, m.Channel)
			}
			t.Logf("%s waiter through the other proxy woken %v after the release began", w.name, time.Since(start))
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no message after the release", w.name)
		}
	}
	none(t, "the same release again", msgs, 300*time.Millisecond)

	// A client's PUBLISH straight on every master's lock channel is not a
	// release.
	for _, d := range c.direct {
		d.Publish(ctx, channel, "0")
	}
	none(t, "a direct PUBLISH", msgs, 300*time.Millisecond)

	// A notice that only two of five masters delivered wakes no one; once
	// a third delivers it, it does, once.
	notice := func(id string) string {
		return fmt.Sprintf("%s 0 %d %s%s", id, len(channel), channel, "0")
	}
	for _, d := range c.direct[:2] {
		d.Publish(ctx, netio.ReleaseChannel, notice("minority-1"))
	}
	none(t, "a notice two masters delivered", msgs, 300*time.Millisecond)
	c.direct[2].Publish(ctx, netio.ReleaseChannel, notice("minority-1"))
	select {
	case m := <-msgs:
		if m.Payload != "0" {
			t.Fatalf("got %q", m.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a notice a majority delivered woke no one")
	}
	for _, d := range c.direct[3:] {
		d.Publish(ctx, netio.ReleaseChannel, notice("minority-1"))
	}
	none(t, "the same notice from more masters", msgs, 300*time.Millisecond)

	// A forced unlock that publishes (a delete with a notice) wakes them
	// too.
	var force libscripts.Counted
	for _, s := range libscripts.Reentrant() {
		if s.Name == "force the lock free, telling waiters" {
			force = s
		}
	}
	if got := replyOf(holder.Eval(ctx, enter, []string{key}, 30000, owner).Result()); got != "nil" {
		t.Fatalf("take again: %s", got)
	}
	if got := replyOf(holder.Eval(ctx, force.Text, []string{key, channel}, force.Argv[0]).Result()); got != "1" {
		t.Fatalf("forced unlock: %s", got)
	}
	select {
	case m := <-msgs:
		if m.Payload != "0" {
			t.Fatalf("got %q", m.Payload)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a forced unlock woke no one")
	}
}

// The release notice of SPUBLISH reaches SSUBSCRIBE waiters, and the
// pub/sub commands answer as Redis's do.
func TestShardReleaseWakesShardWaiters(t *testing.T) {
	enter, _ := reentrant(t)
	rel := noticeScript(t)
	c := newCluster(t, 5)
	other := startSecondProxy(t, c)
	ctx := context.Background()
	holder := c.client(2)
	w := proxyClient(t, other, 3)
	key := uniqueKey("wake")
	channel := "redlock-channel:{" + key + "}"
	ss := w.SSubscribe(ctx, channel)
	t.Cleanup(func() { ss.Close() })
	if _, err := ss.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := received(t, ss)
	const owner = "6f1c2e7a-52b8-4a42:41"
	if got := replyOf(holder.Eval(ctx, enter, []string{key}, 30000, owner).Result()); got != "nil" {
		t.Fatalf("take: %s", got)
	}
	args := []any{rel.Argv[0], rel.Argv[1], rel.Argv[2], "spublish"}
	start := time.Now()
	if got := replyOf(holder.Eval(ctx, rel.Text, []string{key, channel}, args...).Result()); got != "1" {
		t.Fatalf("release: %s", got)
	}
	select {
	case m := <-msgs:
		if m.Channel != channel || m.Payload != "0" {
			t.Fatalf("got %q on %q", m.Payload, m.Channel)
		}
		t.Logf("SSUBSCRIBE waiter woken %v after the release began", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}
	if err := holder.Publish(ctx, channel, "x").Err(); err == nil || !strings.Contains(err.Error(), "PUBLISH") {
		t.Fatalf("a client's PUBLISH: %v", err)
	}
}

// A string lock's release that publishes its key's name (Spring's pub/sub
// lock does) wakes a waiter on the channel through another proxy, with
// the key's name.
func TestReleaseMessageNamesItsKey(t *testing.T) {
	var rel libscripts.Counted
	for _, s := range libscripts.Reentrant() {
		if s.Name == "release, telling waiters its key" {
			rel = s
		}
	}
	c := newCluster(t, 5)
	other := startSecondProxy(t, c)
	ctx := context.Background()
	holder := c.client(2)
	w := proxyClient(t, other, 2)
	key := uniqueKey("wake")
	sub := w.Subscribe(ctx, rel.Argv[1])
	t.Cleanup(func() { sub.Close() })
	if _, err := sub.Receive(ctx); err != nil {
		t.Fatal(err)
	}
	msgs := received(t, sub)
	if err := holder.SetNX(ctx, key, rel.Argv[0], 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if got := replyOf(holder.Eval(ctx, rel.Text, []string{key}, rel.Argv[0], rel.Argv[1]).Result()); got != "1" {
		t.Fatalf("release: %s", got)
	}
	select {
	case m := <-msgs:
		if m.Payload != key {
			t.Fatalf("got %q, want the key's name %q", m.Payload, key)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no message")
	}
	if got := replyOf(holder.Eval(ctx, rel.Text, []string{key}, rel.Argv[0], rel.Argv[1]).Result()); got != "nil" {
		t.Fatalf("release of a free lock: %s", got)
	}
	none(t, "a release that freed nothing", msgs, 300*time.Millisecond)
}
