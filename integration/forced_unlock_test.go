package integration

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// A DEL that forces a held lock open leaves a trace: one WARN line with
// the key, the holder's token, and the address and user of the client that
// forced it, and a count in INFO stats and /metrics. A DEL of a free key
// leaves neither.
func TestForcedUnlockLeavesATrace(t *testing.T) {
	servers := startRedis(t, 3)
	logs := &syncBuffer{}
	a := startLogged(t, []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}, logs, func(c *config.Config) {
		c.Users = []config.UserConfig{{Name: "app", Password: "apppass"}, {Name: "ops", Password: "opspass"}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Pool().WaitUp(ctx, 3); err != nil {
		t.Fatal(err)
	}
	app := dialRESP(t, a.Addr())
	app.must("+OK", "AUTH", "app", "apppass")
	key := uniqueKey("forced")
	app.must("+OK", "SET", key, "tok-holder", "NX", "PX", "30000")

	op := dialRESP(t, a.Addr())
	op.must("+OK", "AUTH", "ops", "opspass")
	op.must("+OK", "CLIENT", "SETNAME", "oncall")
	op.must(":0", "DEL", uniqueKey("forced-free"))
	op.must(":1", "DEL", key)

	line := waitLog(t, logs, "forced unlock", 3*time.Second)
	for _, want := range []string{"level=WARN", "key=" + key, "token=tok-holder", "client=" + op.c.LocalAddr().String(), "user=ops", "client_name=oncall"} {
		if !strings.Contains(line, want) {
			t.Errorf("the forced unlock's log line lacks %q: %s", want, line)
		}
	}
	if n := strings.Count(logs.String(), "forced unlock"); n != 1 {
		t.Errorf("%d forced unlock lines; want 1 (a DEL of a free key forces nothing):\n%s", n, logs.String())
	}
	if info := string(op.do("INFO", "stats").Str); !strings.Contains(info, "forced_unlocks:1\r\n") {
		t.Errorf("INFO stats = %s; want forced_unlocks:1", info)
	}
	if _, m := httpGet(t, "http://"+a.AdminAddr()+"/metrics"); !strings.Contains(m, "redlock_proxy_forced_unlocks_total 1\n") {
		t.Errorf("/metrics lacks redlock_proxy_forced_unlocks_total 1")
	}
}
