package integration

import (
	"context"
	"testing"
	"time"
)

// CLIENT TRACKING ON sent again while tracking changes the options, as on
// Redis, but keeps what the client tracks: its cached keys are still
// invalidated, and BCAST prefixes add up. Switching BCAST or OPTIN/OPTOUT
// mode, or a prefix overlapping another, is refused with Redis's errors.
func TestTrackingOnAgainKeepsWhatIsTracked(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	other := c.client(2)

	tr := trackingClient(t, c.app.Addr())
	k := uniqueKey("tracked-before")
	tr.must("(nil)", "GET", k)
	tr.must("+OK", "CLIENT", "TRACKING", "ON", "NOLOOP")
	if ok, err := other.SetNX(ctx, k, "t", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	if !tr.invalidation(k, 3*time.Second) {
		t.Fatalf("no invalidation of %s, read before CLIENT TRACKING ON was sent again: the client's cache still says the lock is free", k)
	}
	tr.must("-ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.", "CLIENT", "TRACKING", "ON", "BCAST")

	a, b := uniqueKey("bcast-a"), uniqueKey("bcast-b")
	bc := trackingClient(t, c.app.Addr(), "BCAST", "PREFIX", a)
	bc.must("+OK", "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", b)
	bc.must(`["flags" ["on" "bcast"] "redirect" :0 "prefixes" ["`+a+`" "`+b+`"]]`, "CLIENT", "TRACKINGINFO")
	if ok, err := other.SetNX(ctx, a+":x", "t", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	if !bc.invalidation(a+":x", 3*time.Second) {
		t.Fatalf("BCAST: no invalidation under the first prefix after a second was added")
	}
	bc.must("-ERR Prefix '"+a+"x' overlaps with an existing prefix '"+a+"'. Prefixes for a single client must not overlap.", "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", a+"x")
	bc.must("-ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.", "CLIENT", "TRACKING", "ON")

	o := dialRESP(t, c.app.Addr())
	o.must("-ERR Prefix 'p' overlaps with another provided prefix 'pq'. Prefixes for a single client must not overlap.", "CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "p", "PREFIX", "pq")
	o.must("+OK", "CLIENT", "TRACKING", "ON", "OPTIN")
	o.must("-ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.", "CLIENT", "TRACKING", "ON", "OPTOUT")
	o.must("+OK", "CLIENT", "CACHING", "YES")
	o.must(`["flags" ["on" "optin" "caching-yes"] "redirect" :0 "prefixes" []]`, "CLIENT", "TRACKINGINFO")
	o.must(`["flags" ["on" "optin"] "redirect" :0 "prefixes" []]`, "CLIENT", "TRACKINGINFO")
	o.must("+OK", "CLIENT", "TRACKING", "OFF")
	o.must("+OK", "CLIENT", "TRACKING", "ON")
	o.must("-ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.", "CLIENT", "CACHING", "YES")
	o.must("-ERR syntax error", "CLIENT", "TRACKING", "OFF", "GARBAGE")
	o.must("-ERR wrong number of arguments for 'client|tracking' command", "CLIENT", "TRACKING")
	o.must("-ERR wrong number of arguments for 'client|caching' command", "CLIENT", "CACHING")
	o.must("-ERR wrong number of arguments for 'client|trackinginfo' command", "CLIENT", "TRACKINGINFO", "x")
	o.must("-ERR wrong number of arguments for 'client|getredir' command", "CLIENT", "GETREDIR", "x")

	// REDIRECT to its own id, as on Redis: a RESP2 client that then
	// subscribes gets its invalidations as messages.
	self := dialRESP(t, c.app.Addr())
	id := self.do("CLIENT", "ID").String()[1:]
	self.must("+OK", "CLIENT", "TRACKING", "ON", "REDIRECT", id)
	self.must(":"+id, "CLIENT", "GETREDIR")
	ks := uniqueKey("self-redirect")
	self.must("(nil)", "GET", ks)
	self.must(`["subscribe" "__redis__:invalidate" :1]`, "SUBSCRIBE", "__redis__:invalidate")
	if ok, err := other.SetNX(ctx, ks, "t", 10*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX = %v, %v", ok, err)
	}
	if !self.invalidationMessage(ks, 3*time.Second) {
		t.Fatal("a RESP2 client tracking with REDIRECT to itself, then subscribed, got no invalidation message")
	}
}
