package integration

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// A grant the proxy takes back when its reply leaves (a pipelined SET NX
// whose validity fell below min_validity while it waited behind a slower
// command) is undone on the masters by the proxy's own connections, which
// the masters do not report to it. A tracking client that read the key
// while the grant stood must still be told when the undo removes it, or its
// cache goes on saying that a lock nobody holds is held.
func TestTrackedKeyIsInvalidatedWhenAGrantIsUndone(t *testing.T) {
	c := newCluster(t, 3, backendTimeout(400*time.Millisecond), func(cfg *config.Config) {
		cfg.MinValidity = time.Second
	})
	tr := trackingClient(t, c.app.Addr())
	key, other := uniqueKey("undone"), uniqueKey("slow")
	tr.must("(nil)", "GET", key)

	if err := c.servers[2].Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			c.servers[2].Resume()
		}
	}()
	// PTTL waits for every master, so for the hung one's timeout; the SET
	// before it is granted at once with 1.3 s of validity, but less than the
	// 1 s min_validity is left when its reply may leave: it is answered nil
	// and undone, well before the key would expire.
	acq, err := net.Dial("tcp", c.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer acq.Close()
	if _, err := acq.Write(resp.AppendCommand(resp.AppendCommand(nil, "SET", key, "A", "NX", "PX", "1300"), "PTTL", other)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	// Meanwhile the grant stands on a majority: the tracking client reads
	// it, and caches it.
	tr.must(`"A"`, "GET", key)
	acq.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 64)
	n, _ := acq.Read(buf)
	if !strings.HasPrefix(string(buf[:n]), "$-1\r\n") {
		t.Fatalf("the pipelined SET NX PX 1300 answered %q; want nil (less than min_validity was left)", buf[:n])
	}
	if h := c.eventuallyHolders(key, "A", 0); len(h) != 0 {
		t.Fatalf("the revoked grant was not undone: masters %v hold its token", h)
	}
	c.servers[2].Resume()
	resumed = true
	if !tr.invalidation(key, 3*time.Second) && !tr.invalidation("*", 0) {
		t.Fatalf("no invalidation of %s after the grant the client read was undone: its cache still says the lock is held", key)
	}
	tr.must("(nil)", "GET", key)
}

// A release answered as failed (two of three masters hung past the
// timeout) that those masters run when they resume has freed the lock on
// all of them, through the proxy's own connections, which the masters do
// not report to it. A tracking client that cached the holder must be told.
func TestTrackedKeyIsInvalidatedByAFailedReleaseThatTookEffect(t *testing.T) {
	c := newCluster(t, 3, backendTimeout(100*time.Millisecond))
	ctx := context.Background()
	tr := trackingClient(t, c.app.Addr())
	key := uniqueKey("late-release")
	if ok, err := c.client(2).SetNX(ctx, key, "tok", 30*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	tr.must(`"tok"`, "GET", key)

	for _, i := range []int{1, 2} {
		if err := c.servers[i].Pause(); err != nil {
			t.Fatal(err)
		}
	}
	n, err := c.client(2).Eval(ctx, seedRelease, []string{key}, "tok").Int64()
	c.servers[1].Resume()
	c.servers[2].Resume()
	if err == nil && n == 1 {
		t.Fatalf("the release with two of three masters hung answered 1; want a failure (the case under test)")
	}
	if h := c.eventuallyHolders(key, "tok", 0); len(h) != 0 {
		t.Fatalf("the resumed masters did not run the release: masters %v hold the token", h)
	}
	if !tr.invalidation(key, 3*time.Second) && !tr.invalidation("*", 0) {
		t.Fatalf("no invalidation of %s after the release freed it on every master: the client's cache still says it is held", key)
	}
	tr.must("(nil)", "GET", key)
}

// A grant is told to the clients tracking its key as soon as the masters
// hold it, not when its reply leaves: a SET NX pipelined before a BLPOP
// that waits seconds holds the lock on a majority all that time, and a
// cached nil must not say it is free.
func TestTrackedKeyIsInvalidatedWhenTheGrantIsMadeNotWhenItsReplyLeaves(t *testing.T) {
	c := newCluster(t, 3)
	tr := trackingClient(t, c.app.Addr())
	key, sig := uniqueKey("pipelined-grant"), uniqueKey("signal")
	tr.must("(nil)", "GET", key)

	acq, err := net.Dial("tcp", c.app.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer acq.Close()
	if _, err := acq.Write(resp.AppendCommand(resp.AppendCommand(nil, "SET", key, "A", "NX", "PX", "10000"), "BLPOP", sig, "3")); err != nil {
		t.Fatal(err)
	}
	if h := c.eventuallyHolders(key, "A", 3); len(h) != 3 {
		t.Fatalf("masters %v hold the grant; want all three", h)
	}
	if !tr.invalidation(key, time.Second) && !tr.invalidation("*", 0) {
		t.Fatalf("no invalidation of %s within a second of every master holding it: the client's cache says the lock is free", key)
	}
	tr.must(`"A"`, "GET", key)
}

// Invalidations redirected to a client go as Redis sends them: a RESP3
// client gets the invalidate push, a RESP2 client only when it subscribed
// (a __redis__:invalidate message); a RESP2 client that did not subscribe
// gets nothing, for anything written to it would be read as the reply to
// its next command.
func TestRedirectedInvalidationsNeverReachARESP2ClientAsAReply(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	target := dialRESP(t, c.app.Addr())
	id := target.do("CLIENT", "ID").String()[1:]
	r3 := dialRESP(t, c.app.Addr())
	if v := r3.do("HELLO", "3"); v.Kind == resp.KindError {
		t.Fatalf("HELLO 3: %v", v)
	}
	id3 := r3.do("CLIENT", "ID").String()[1:]

	tr := dialRESP(t, c.app.Addr())
	tr.must("+OK", "CLIENT", "TRACKING", "ON", "REDIRECT", id)
	tr3 := dialRESP(t, c.app.Addr())
	tr3.must("+OK", "CLIENT", "TRACKING", "ON", "REDIRECT", id3)
	key := uniqueKey("redirect-resp2")
	tr.must("(nil)", "GET", key)
	tr3.must("(nil)", "GET", key)
	if ok, err := c.client(2).SetNX(ctx, key, "t", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	v, push, err := r3.read(3 * time.Second)
	if err != nil || !push || v.String() != `["invalidate" ["`+key+`"]]` {
		t.Fatalf("the RESP3 target got %v (push %v, %v); want the invalidate push, as Redis sends it", v, push, err)
	}
	time.Sleep(200 * time.Millisecond)
	// The RESP2 target's next reply is its own.
	target.must(`"t"`, "GET", key)
	target.must(`"t"`, "GET", key)
}
