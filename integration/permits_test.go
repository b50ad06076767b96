package integration

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// Semaphores kept as a count of free permits beside a set of permit ids
// scored with their deadlines (Redisson's RPermitExpirableSemaphore; the
// scripts here are the project's own with that behaviour, the library runs
// in TestJavaRedissonThroughProxy): through the proxy the set-up stores the
// limit on each master, and a permit is a slot (proxy/kind_sem.go).

// permitsKeys are the count and the deadlines of the semaphore name.
func permitsKeys(name string) []string { return []string{name, name + ":timeout"} }

// permitsAcquire takes a permit id with a lease through cl: true if it
// got one.
func permitsAcquire(t *testing.T, cl *redis.Client, name, id string, lease time.Duration) bool {
	t.Helper()
	now := time.Now().UnixMilli()
	v, err := cl.Eval(context.Background(), libscripts.PermitsAcquire, permitsKeys(name), id, now+lease.Milliseconds(), now).Result()
	switch {
	case err == redis.Nil:
		return false
	case err != nil:
		t.Fatalf("acquire of %s by %s: %v", name, id, err)
	case v != "OK":
		t.Fatalf("acquire of %s by %s: %v; want OK or nil", name, id, v)
	}
	return true
}

// The case a plain majority gets wrong, for a semaphore whose limit was
// set up once: three masters, a limit of 2, three clients each refused by
// a different master. The control keeps the count on each master (the
// library's own way) and takes a permit where 2 of 3 masters gave one:
// three holders. Through the proxy the first two hold permits, the third
// is refused and its partial acquire undone, and a permit whose lease
// ended is given again.
func TestPermitsThreeClientsEachRefusedByOneMaster(t *testing.T) {
	relays, addrs, relayed := relayEach(t, startRedis(t, 3))
	direct := directClients(t, addrs)
	const lease = 20 * time.Second

	t.Run("control: a plain majority", func(t *testing.T) {
		name := uniqueKey("permits-plain")
		conns := plainConns(t, relayed)
		for i, c := range conns {
			if err := c.Eval(context.Background(), libscripts.PermitsSetup, permitsKeys(name), 2).Err(); err != nil {
				t.Fatalf("set-up on master %d: %v", i, err)
			}
		}
		plain := func(id string) bool {
			granted := 0
			now := time.Now().UnixMilli()
			for _, c := range conns {
				if v, err := c.Eval(context.Background(), libscripts.PermitsAcquire, permitsKeys(name), id, now+lease.Milliseconds(), now).Result(); err == nil && v == "OK" {
					granted++
				}
			}
			return granted >= 2
		}
		var got []bool
		cutOff(relays[2], func() { got = append(got, plain("client-1")) })
		cutOff(relays[0], func() { got = append(got, plain("client-2")) })
		got = append(got, plain("client-3"))
		requireThreePlainHolders(t, direct, name+":timeout", got)
	})

	t.Run("through the proxy", func(t *testing.T) {
		a, _ := startApp(t, relayed, func(c *config.Config) { c.BackendTimeout = 300 * time.Millisecond })
		cl := proxyClient(t, a.Addr(), 2)
		name := uniqueKey("permits-slots")
		mustDo(t, cl, 1, "EVAL", libscripts.PermitsSetup, 2, name, name+":timeout", 2)
		mustDo(t, cl, 0, "EVAL", libscripts.PermitsSetup, 2, name, name+":timeout", 3)
		for i, d := range direct {
			if n, _ := d.Exists(context.Background(), name).Result(); n != 0 {
				t.Fatalf("master %d keeps a count under the name; the proxy keeps a limit of its own", i)
			}
		}
		partition := func(m int, fn func()) { cutOffUntilBack(t, a, relays[m], m, fn) }
		var got []bool
		partition(2, func() { got = append(got, permitsAcquire(t, cl, name, "client-1", lease)) })
		partition(0, func() { got = append(got, permitsAcquire(t, cl, name, "client-2", lease)) })
		got = append(got, permitsAcquire(t, cl, name, "client-3", lease))
		t.Logf("after the three: %s", describeSem(t, direct, name))
		if !got[0] || !got[1] {
			t.Fatalf("the first two clients got %v; want both admitted (each lost one master of three)", got[:2])
		}
		if got[2] {
			t.Fatalf("client-3 was admitted: %s", describeSem(t, direct, name))
		}
		if h := semHolders(t, direct, name); len(h) != 2 || h["client-1"] == h["client-2"] {
			t.Fatalf("holders %v; want client-1 and client-2 on two slots: %s", h, describeSem(t, direct, name))
		}
		mustDo(t, cl, 0, "EVAL", libscripts.PermitsAvailable, 2, name, name+":timeout")
		// The partial acquire is undone where it took a slot.
		waitFor(t, 5*time.Second, "client-3's failed attempt to be undone", func() error {
			for i, d := range direct {
				if _, ok := semPermits(t, d, name)["client-3"]; ok {
					return fmt.Errorf("master %d still holds a slot for it: %s", i, describeSem(t, direct, name))
				}
			}
			return nil
		})
		// A release frees its slot everywhere; a release of a permit not
		// held answers 0.
		mustDo(t, cl, 1, "EVAL", libscripts.PermitsRelease, 2, name, name+":timeout", "client-1")
		mustDo(t, cl, 0, "EVAL", libscripts.PermitsRelease, 2, name, name+":timeout", "client-1")
		mustDo(t, cl, 1, "EVAL", libscripts.PermitsAvailable, 2, name, name+":timeout")
		// A permit with a short lease expires and its slot is given again.
		if !permitsAcquire(t, cl, name, "short", 300*time.Millisecond) {
			t.Fatalf("a free permit was refused: %s", describeSem(t, direct, name))
		}
		if permitsAcquire(t, cl, name, "client-3", lease) {
			t.Fatalf("a third holder of a limit-2 semaphore: %s", describeSem(t, direct, name))
		}
		time.Sleep(500 * time.Millisecond)
		if !permitsAcquire(t, cl, name, "client-3", lease) {
			t.Fatalf("the expired permit's slot was not given again: %s", describeSem(t, direct, name))
		}
		if h := semHolders(t, direct, name); len(h) != 2 {
			t.Fatalf("holders %v; want client-2 and client-3", h)
		}
		// Without a lease (a deadline centuries ahead) a permit is refused.
		now := time.Now().UnixMilli()
		mustDo(t, cl, errorPrefix("ERR redlock-proxy: a semaphore's permits need a TTL above 0"),
			"EVAL", libscripts.PermitsAcquire, 2, name, name+":timeout", "forever", strconv.FormatInt(922337203685477, 10), now)
	})
}

// Over five masters with two of them down, a semaphore set up before
// keeps its limit: two holders, never three.
func TestPermitsMinorityDown(t *testing.T) {
	c := newCluster(t, 5)
	cl := c.client(2)
	name := uniqueKey("permits-five")
	mustDo(t, cl, 1, "EVAL", libscripts.PermitsSetup, 2, name, name+":timeout", 2)
	c.servers[3].Stop()
	c.servers[4].Stop()
	if !permitsAcquire(t, cl, name, "a", 10*time.Second) || !permitsAcquire(t, cl, name, "b", 10*time.Second) {
		t.Fatalf("two permits of two with two masters of five down were refused: %s", describeSem(t, c.direct[:3], name))
	}
	if permitsAcquire(t, cl, name, "c", 10*time.Second) {
		t.Fatalf("a third holder: %s", describeSem(t, c.direct[:3], name))
	}
	mustDo(t, cl, 0, "EVAL", libscripts.PermitsAvailable, 2, name, name+":timeout")
	mustDo(t, cl, 1, "EVAL", libscripts.PermitsRelease, 2, name, name+":timeout", "a")
	if !permitsAcquire(t, cl, name, "c", 10*time.Second) {
		t.Fatalf("a released permit was refused: %s", describeSem(t, c.direct[:3], name))
	}
}

// A semaphore set up with a limit of 2 keeps it while its masters restart
// empty one after another, each counting again before the next goes. After
// each restart an application starts with a new setting and asks for a
// limit of 5: one Redis answers 0 (already set up) and keeps 2, and so does
// the proxy. The restarted master holds no limit; a set-up that writes its
// 5 there and stays, refused, would have a majority storing 5 after the
// second restart, and five holders of a semaphore whose one successful
// set-up said 2.
func TestPermitsLimitOutlivesMastersRestartedOneByOne(t *testing.T) {
	waits(t)
	c := newCluster(t, 3, func(cfg *config.Config) { cfg.MaxTTL = 2 * time.Second; cfg.BackendTimeout = 300 * time.Millisecond })
	cl := c.client(2)
	name := uniqueKey("permits-restarts")
	mustDo(t, cl, 1, "EVAL", libscripts.PermitsSetup, 2, name, name+":timeout", 2)
	for _, m := range []int{1, 2} {
		c.restartEmpty(m)
		waitFor(t, 20*time.Second, fmt.Sprintf("master %d to count again", m), func() error { return holds(c.counting(m)) })
		mustDo(t, cl, 0, "EVAL", libscripts.PermitsSetup, 2, name, name+":timeout", 5)
		t.Logf("after master %d restarted and a set-up of 5, the limits stored: %v", m, semLimits(t, c.direct, name))
	}
	var held []string
	for i := 0; i < 5; i++ {
		id := fmt.Sprintf("holder-%d", i)
		if permitsAcquire(t, cl, name, id, 1500*time.Millisecond) {
			held = append(held, id)
		}
	}
	if len(held) != 2 {
		t.Fatalf("holders %v of a semaphore set up with a limit of 2 (want two); limits stored %v", held, semLimits(t, c.direct, name))
	}
}

// A set-up refused where no limit reaches a majority (one master stores
// 2, one none, one is down) takes back the limit it wrote: left there, it
// would count toward a majority storing it once another master lost what
// it had.
func TestPermitsRefusedSetupTakesItsLimitBack(t *testing.T) {
	c := newCluster(t, 3, func(cfg *config.Config) { cfg.BackendTimeout = 300 * time.Millisecond })
	cl := c.client(2)
	name := uniqueKey("permits-takeback")
	k := string(keyslot.Companion(nil, "redlock-proxy:semlimit:", []byte(name)))
	if err := c.direct[0].Set(context.Background(), k, "2", 0).Err(); err != nil {
		t.Fatal(err)
	}
	c.servers[2].Stop()
	mustDo(t, cl, 0, "EVAL", libscripts.PermitsSetup, 2, name, name+":timeout", 5)
	waitFor(t, 5*time.Second, "the refused set-up's limit to be taken back", func() error {
		if l := semLimits(t, c.direct[:2], name); l[0] != "2" || l[1] != "" {
			return fmt.Errorf("limits stored %v; want [2 none]", l)
		}
		return nil
	})
}

// semLimits reads the limit each master stores for the semaphore name
// ("" where it has none).
func semLimits(t *testing.T, direct []*redis.Client, name string) []string {
	t.Helper()
	k := string(keyslot.Companion(nil, "redlock-proxy:semlimit:", []byte(name)))
	out := make([]string, len(direct))
	for i, d := range direct {
		v, err := d.Get(context.Background(), k).Result()
		if err != nil && err != redis.Nil {
			t.Fatalf("GET %s on master %d: %v", k, i, err)
		}
		out[i] = v
	}
	return out
}
