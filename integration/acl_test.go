package integration

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// Users with Redis ACL rules: one team cannot lock, read or force-unlock
// another team's keys, a user runs only the commands its rules allow, and
// every refusal is worded as a real redis-server with the same rules words
// it (a reference server gets the same users through ACL SETUSER and the
// same commands).
func TestUsersWithACLRules(t *testing.T) {
	users := []config.UserConfig{
		{Name: "orders", Password: "o-pass", Rules: "on ~orders:* %R~shared:* %W~drop:* resetchannels -@all +@read +@write +@scripting -del +acl|whoami +ping"},
		{Name: "oncall", Password: "c-pass", Rules: "on allkeys allcommands -fence"},
		{Name: "gone", Password: "g-pass", Rules: "off ~* +@all"},
	}
	c := newCluster(t, 3, func(cfg *config.Config) { cfg.Users = users })
	ref := startRedis(t, 1)[0]
	ctx := context.Background()
	for _, u := range users {
		args := []string{"ACL", "SETUSER", u.Name, ">" + u.Password}
		if _, err := ref.Do(append(args, strings.Fields(u.Rules)...)...); err != nil {
			t.Fatalf("reference ACL SETUSER %s: %v", u.Name, err)
		}
	}
	as := func(addr, user, pass string) *redis.Client {
		cl := redis.NewClient(&redis.Options{Addr: addr, Username: user, Password: pass, Protocol: 2, MaxRetries: -1, DisableIdentity: true})
		t.Cleanup(func() { cl.Close() })
		return cl
	}
	proxyOrders, refOrders := as(c.app.Addr(), "orders", "o-pass"), as(ref.Addr, "orders", "o-pass")
	proxyOncall := as(c.app.Addr(), "oncall", "c-pass")

	// What the proxy answers and what Redis answers must both succeed, or
	// fail with the same error.
	same := func(args ...any) {
		t.Helper()
		_, perr := proxyOrders.Do(ctx, args...).Result()
		_, rerr := refOrders.Do(ctx, args...).Result()
		if perr == redis.Nil {
			perr = nil
		}
		if rerr == redis.Nil {
			rerr = nil
		}
		switch {
		case (perr == nil) != (rerr == nil):
			t.Errorf("%v: the proxy says %v, redis-server says %v", args, perr, rerr)
		case perr != nil && perr.Error() != rerr.Error():
			t.Errorf("%v: the proxy says %q, redis-server says %q", args, perr, rerr)
		}
	}
	for _, args := range [][]any{
		{"SET", "orders:o1", "tok", "NX", "PX", "30000"},   // its own key
		{"GET", "orders:o1"},                               // reads it
		{"SET", "payments:p1", "tok", "NX", "PX", "30000"}, // another team's key
		{"GET", "payments:p1"},
		{"PTTL", "payments:p1"},
		{"EVAL", seedRelease, "1", "payments:p1", "tok"},
		{"SET", "shared:s1", "tok", "NX", "PX", "30000"}, // read-only keys
		{"GET", "shared:s1"},
		{"SET", "drop:d1", "tok", "NX", "PX", "30000"}, // write-only keys
		{"GET", "drop:d1"},
		{"EXISTS", "drop:d1", "shared:s1"}, // a look: any permission will do
		{"EXISTS", "payments:p1"},
		{"DEL", "orders:o1"},   // a command it lacks
		{"CLIENT", "ID"},       // a subcommand it lacks
		{"CONFIG", "GET", "x"}, // an admin one
		{"PING"},
		{"ACL", "WHOAMI"},
	} {
		same(args...)
	}
	if who, err := proxyOrders.Do(ctx, "ACL", "WHOAMI").Text(); err != nil || who != "orders" {
		t.Errorf("ACL WHOAMI = %q, %v; want orders", who, err)
	}
	// A lock script is checked as EVAL with its keys, not by the commands
	// in its text (Redis checks those as they run): orders, without DEL,
	// releases its own lock.
	mustDo(t, proxyOrders, 1, "EVAL", seedRelease, "1", "orders:o1", "tok")

	// Another team's lock: orders can neither take nor force it; oncall
	// (every command but FENCE) can force it open.
	mustDo(t, proxyOncall, "OK", "SET", "payments:p2", "pay-tok", "NX", "PX", "30000")
	if err := proxyOrders.Do(ctx, "DEL", "payments:p2").Err(); err == nil || !strings.HasPrefix(err.Error(), "NOPERM") {
		t.Errorf("orders DEL payments:p2 = %v; want NOPERM", err)
	}
	if err := proxyOncall.Do(ctx, "FENCE", "payments:p2", "pay-tok").Err(); err == nil || err.Error() != "NOPERM this user has no permissions to run the 'fence' command" {
		t.Errorf("oncall FENCE = %v; want NOPERM for fence", err)
	}
	mustDo(t, proxyOncall, 1, "DEL", "payments:p2")

	// A user that is off cannot log in, as on Redis.
	for _, addr := range []string{c.app.Addr(), ref.Addr} {
		if err := as(addr, "gone", "g-pass").Ping(ctx).Err(); err == nil || !strings.HasPrefix(err.Error(), "WRONGPASS") {
			t.Errorf("AUTH as a user that is off at %s: %v; want WRONGPASS", addr, err)
		}
	}

	// A rule the proxy does not serve is a configuration mistake, named.
	bad := config.Default()
	bad.Users = []config.UserConfig{{Name: "x", Password: "p", Rules: "~* +@lock"}}
	if _, err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "users[0].rules") || !strings.Contains(err.Error(), "+@lock") {
		t.Errorf("a rule with an unknown category: %v; want an error naming users[0].rules and the rule", err)
	}
}
