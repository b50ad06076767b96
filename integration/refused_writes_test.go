package integration

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// A master that refuses writes (out of memory under noeviction) cannot
// record its marker or pass a continuity check: its votes stop counting,
// the others go on granting, the log says why in one line (not one per
// reconnect), and once it accepts writes again it counts at once, with
// nothing recorded as lost.
func TestMasterThatRefusesWritesIsLoggedOnceAndCountsAgain(t *testing.T) {
	servers := startRedis(t, 3)
	addrs := addrsOf(servers)
	var logs syncBuffer
	a := startLogged(t, addrs, &logs, func(cfg *config.Config) {
		cfg.MaxTTL = 2 * time.Second
	})
	waitLog(t, &logs, "quorum: 3 of 3 backends count, 2 needed; locks are granted", 10*time.Second)
	cl := proxyClient(t, a.Addr(), 2)
	ctx := context.Background()
	full := redis.NewClient(&redis.Options{Addr: servers[2].Addr})
	defer full.Close()
	if err := full.ConfigSet(ctx, "maxmemory-policy", "noeviction").Err(); err != nil {
		t.Fatal(err)
	}
	if err := full.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil { // below what it uses: every write is refused
		t.Fatal(err)
	}
	t.Cleanup(func() { full.ConfigSet(context.Background(), "maxmemory", "0") })

	// Locks go on through the other two, whatever state the refusing one
	// is in, for a few seconds of reconnects.
	for end := time.Now().Add(4 * time.Second); time.Now().Before(end); {
		if ok, err := cl.SetNX(ctx, uniqueKey("oom"), "t", 2*time.Second).Result(); !ok || err != nil {
			t.Fatalf("SET NX with one master out of memory = %v, %v; want OK", ok, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	line := waitLog(t, &logs, "backend unusable", 5*time.Second)
	if !strings.Contains(line, "addr="+servers[2].Addr) || !strings.Contains(line, "the master refuses writes: its memory is over maxmemory") {
		t.Errorf("unusable line %q; want the out-of-memory master, and why", line)
	}
	if strings.Contains(line, "@user_script") {
		t.Errorf("unusable line %q names a script line", line)
	}
	if n := countLines(&logs, "backend unusable"); n != 1 {
		t.Errorf("%d 'backend unusable' lines in 4 s; want one (a repeat is logged once a minute):\n%s", n, logs.String())
	}

	if err := full.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
		t.Fatal(err)
	}
	key := uniqueKey("oom")
	waitFor(t, 10*time.Second, "the master to count again", func() error {
		if ok, err := cl.SetNX(ctx, key, "t", time.Second).Result(); !ok || err != nil {
			return err
		}
		defer cl.Del(ctx, key)
		if v, _ := full.Get(ctx, key).Result(); v != "t" {
			return errors.New("the lock is not on the master that refused writes")
		}
		return nil
	})
	info, err := cl.Info(ctx, "proxy").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\n") {
		if strings.HasPrefix(l, "backend2:") && (!strings.Contains(l, "losses=0") || !strings.Contains(l, "quarantine_left_ms=0")) {
			t.Errorf("INFO proxy %q; want no loss and no quarantine for a master that only refused writes", l)
		}
	}
}
