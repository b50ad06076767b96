package integration

import (
	"bufio"
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// respConn is a raw RESP connection that tells pushes (RESP3 '>') from
// replies.
type respConn struct {
	t      *testing.T
	c      net.Conn
	br     *bufio.Reader
	rd     *resp.Reader
	pushes []resp.Value
}

func dialRESP(t *testing.T, addr string) *respConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	br := bufio.NewReader(c)
	return &respConn{t: t, c: c, br: br, rd: resp.NewReader(br, resp.ReaderLimits{})}
}

// read returns the next frame and whether it is a push.
func (r *respConn) read(timeout time.Duration) (resp.Value, bool, error) {
	r.c.SetReadDeadline(time.Now().Add(timeout))
	b, err := r.br.Peek(1)
	if err != nil {
		return resp.Value{}, false, err
	}
	v, err := r.rd.Read()
	return v, b[0] == '>', err
}

// do sends a command and returns its reply, keeping pushes that come first.
func (r *respConn) do(args ...string) resp.Value {
	r.t.Helper()
	r.c.SetWriteDeadline(time.Now().Add(time.Second))
	if _, err := r.c.Write(resp.AppendCommand(nil, args...)); err != nil {
		r.t.Fatal(err)
	}
	for {
		v, push, err := r.read(5 * time.Second)
		if err != nil {
			r.t.Fatalf("%v: %v", args, err)
		}
		if !push {
			return v
		}
		r.pushes = append(r.pushes, v)
	}
}

// must sends a command whose reply must read as want (Value.String).
func (r *respConn) must(want string, args ...string) {
	r.t.Helper()
	if v := r.do(args...); v.String() != want {
		r.t.Fatalf("%v = %v; want %s", args, v, want)
	}
}

// invalidation waits for an invalidation of key (or of every key, when key
// is "*") among the pushes, for at most d; it reports whether one came.
func (r *respConn) invalidation(key string, d time.Duration) bool {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for {
		for i, p := range r.pushes {
			if isInvalidation(p, key) {
				r.pushes = append(r.pushes[:i], r.pushes[i+1:]...)
				return true
			}
		}
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		v, push, err := r.read(left)
		if err != nil {
			return false
		}
		if push {
			r.pushes = append(r.pushes, v)
		}
	}
}

// isInvalidation reports whether v is an invalidation push (or a message of
// __redis__:invalidate) naming key, or of every key for "*".
func isInvalidation(v resp.Value, key string) bool {
	var keys resp.Value
	switch {
	case len(v.Elems) == 2 && string(v.Elems[0].Str) == "invalidate":
		keys = v.Elems[1]
	case len(v.Elems) == 3 && string(v.Elems[0].Str) == "message" && string(v.Elems[1].Str) == "__redis__:invalidate":
		keys = v.Elems[2]
	default:
		return false
	}
	if keys.Kind == resp.KindNil {
		return key == "*"
	}
	for _, k := range keys.Elems {
		if string(k.Str) == key {
			return true
		}
	}
	return false
}

// trackingClient is a RESP3 connection to addr with CLIENT TRACKING ON and
// the options given.
func trackingClient(t *testing.T, addr string, opts ...string) *respConn {
	t.Helper()
	waitInvalidations(t)
	r := dialRESP(t, addr)
	if v := r.do("HELLO", "3"); v.Kind == resp.KindError {
		t.Fatalf("HELLO 3: %v", v)
	}
	r.must("+OK", append([]string{"CLIENT", "TRACKING", "ON"}, opts...)...)
	return r
}

// waitInvalidations waits until every proxy's connections for the
// backends' invalidations are up: the one coming up invalidates every key,
// which would hide what a test looks for.
func waitInvalidations(t *testing.T) {
	t.Helper()
	waitFor(t, 10*time.Second, "the invalidation connections to come up", func() error {
		up := true
		appsMu.Lock()
		for a := range apps {
			for _, h := range a.Pool().Health() {
				up = up && h.Invalidations
			}
		}
		appsMu.Unlock()
		return holds(up)
	})
}

// A client that tracks a key it read is told when the key changes: by
// another client of the proxy, by itself (without NOLOOP), through another
// proxy, and when the lock expires on the masters.
func TestTrackedKeysAreInvalidatedWhateverChangesThem(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	other := c.client(2)
	viaSecond := proxyClient(t, startSecondProxy(t, c), 2)
	tr := trackingClient(t, c.app.Addr())

	// Another client of the same proxy takes the lock.
	k1 := uniqueKey("track-other-client")
	tr.must("(nil)", "GET", k1)
	if ok, err := other.SetNX(ctx, k1, "tok", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	if !tr.invalidation(k1, 3*time.Second) {
		t.Fatalf("no invalidation of %s after another client took the lock", k1)
	}

	// Its own release.
	tr.must(`"tok"`, "GET", k1)
	tr.must(":1", "EVAL", seedRelease, "1", k1, "tok")
	if !tr.invalidation(k1, 3*time.Second) {
		t.Fatalf("no invalidation of %s after its own release", k1)
	}

	// Another proxy takes it.
	k2 := uniqueKey("track-other-proxy")
	tr.must("(nil)", "GET", k2)
	if ok, err := viaSecond.SetNX(ctx, k2, "tok", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX through the second proxy = %v, %v", ok, err)
	}
	if !tr.invalidation(k2, 3*time.Second) {
		t.Fatalf("no invalidation of %s after another proxy took the lock", k2)
	}

	// The lock expires on the masters.
	k3 := uniqueKey("track-expiry")
	if ok, err := other.SetNX(ctx, k3, "tok", 300*time.Millisecond).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	tr.must(`"tok"`, "GET", k3)
	if !tr.invalidation(k3, 5*time.Second) {
		t.Fatalf("no invalidation of %s after the lock expired", k3)
	}
	// A refused acquire changes nothing: no invalidation (a waiter woken by
	// every refusal would spin).
	k4 := uniqueKey("track-refused")
	if ok, err := other.SetNX(ctx, k4, "holder", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	tr.must(`"holder"`, "GET", k4)
	if ok, _ := other.SetNX(ctx, k4, "waiter", 10*time.Second).Result(); ok {
		t.Fatal("a held lock was granted")
	}
	if tr.invalidation(k4, 300*time.Millisecond) {
		t.Fatalf("an invalidation of %s after a refused acquire, which changed nothing", k4)
	}

	// A key read by a script the masters have not seen yet: the proxy
	// loads it first, and the key must still be tracked (CLIENT CACHING YES
	// goes right before the script, not before its loading).
	k5 := uniqueKey("track-script-read")
	read := "return redis.call('GET', KEYS[1]) -- " + k5
	tr.must("(nil)", "EVAL", read, "1", k5)
	if ok, err := viaSecond.SetNX(ctx, k5, "tok", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX through the second proxy = %v, %v", ok, err)
	}
	if !tr.invalidation(k5, 3*time.Second) {
		t.Fatalf("no invalidation of %s read by a new script after another proxy took the lock", k5)
	}
}

// NOLOOP spares a client the invalidations of its own writes; OPTIN tracks
// only after CLIENT CACHING YES; BCAST sends every change under a prefix.
func TestTrackingModes(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	other := c.client(2)

	noloop := trackingClient(t, c.app.Addr(), "NOLOOP")
	k := uniqueKey("noloop")
	noloop.must("(nil)", "GET", k)
	noloop.must("+OK", "SET", k, "mine", "NX", "PX", "10000")
	if noloop.invalidation(k, 300*time.Millisecond) {
		t.Fatal("NOLOOP: an invalidation of the client's own write")
	}
	noloop.must(`"mine"`, "GET", k)
	if ok, _ := other.Do(ctx, "EVAL", seedRelease, "1", k, "mine").Int(); ok != 1 {
		t.Fatal("release by another client failed")
	}
	if !noloop.invalidation(k, 3*time.Second) {
		t.Fatal("NOLOOP: no invalidation of another client's write")
	}

	optin := trackingClient(t, c.app.Addr(), "OPTIN")
	a, b := uniqueKey("optin-untracked"), uniqueKey("optin-tracked")
	optin.must("(nil)", "GET", a)
	optin.must("+OK", "CLIENT", "CACHING", "YES")
	optin.must("(nil)", "GET", b)
	for _, key := range []string{a, b} {
		if ok, err := other.SetNX(ctx, key, "t", 10*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX = %v, %v", ok, err)
		}
	}
	if !optin.invalidation(b, 3*time.Second) {
		t.Fatal("OPTIN: no invalidation of a key read after CLIENT CACHING YES")
	}
	if optin.invalidation(a, 300*time.Millisecond) {
		t.Fatal("OPTIN: an invalidation of a key read without CLIENT CACHING YES")
	}

	prefix := uniqueKey("bcast")
	bcast := trackingClient(t, c.app.Addr(), "BCAST", "PREFIX", prefix)
	key := prefix + ":x"
	if ok, err := other.SetNX(ctx, key, "t", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	if !bcast.invalidation(key, 3*time.Second) {
		t.Fatal("BCAST: no invalidation of a key under the prefix")
	}
}

// A RESP2 client tracks with REDIRECT to a connection subscribed to
// __redis__:invalidate, which receives the invalidations as messages.
func TestTrackingRedirectToASubscriber(t *testing.T) {
	c := newCluster(t, 3)
	sub := dialRESP(t, c.app.Addr())
	id := sub.do("CLIENT", "ID")
	if v := sub.do("SUBSCRIBE", "__redis__:invalidate"); !strings.Contains(v.String(), "subscribe") {
		t.Fatalf("SUBSCRIBE = %v", v)
	}
	tr := dialRESP(t, c.app.Addr())
	tr.must("+OK", "CLIENT", "TRACKING", "ON", "REDIRECT", id.String()[1:])
	k := uniqueKey("redirect")
	tr.must("(nil)", "GET", k)
	if ok, err := c.client(2).SetNX(context.Background(), k, "t", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	if !sub.invalidationMessage(k, 3*time.Second) {
		t.Fatal("the subscriber got no invalidation message")
	}
	// Redis's own errors for the options it refuses.
	tr.must("-ERR The client ID you want redirect to does not exist", "CLIENT", "TRACKING", "ON", "REDIRECT", "999999")
	tr.must("-ERR You can't use both OPTIN and OPTOUT", "CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT")
}

// invalidationMessage waits for a __redis__:invalidate message (RESP2, so
// not a push) naming key.
func (r *respConn) invalidationMessage(key string, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		v, _, err := r.read(time.Until(deadline))
		if err != nil {
			return false
		}
		if isInvalidation(v, key) {
			return true
		}
	}
	return false
}

// A backend connection lost may have lost invalidations: every key of every
// tracking client is invalidated.
func TestTrackingBackendConnectionLostInvalidatesEverything(t *testing.T) {
	c := newCluster(t, 3)
	tr := trackingClient(t, c.app.Addr())
	k := uniqueKey("lost")
	tr.must("(nil)", "GET", k)
	if _, err := c.servers[0].Do("CLIENT", "KILL", "TYPE", "normal"); err != nil {
		t.Fatal(err)
	}
	if !tr.invalidation("*", 5*time.Second) {
		t.Fatal("no invalidation of every key after a backend's connections were killed")
	}
}
