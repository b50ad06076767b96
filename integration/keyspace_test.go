package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// redisCLI runs redis-cli against addr and returns its output.
func redisCLI(t *testing.T, addr string, args ...string) string {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	out, err := exec.Command("redis-cli", append([]string{"-h", host, "-p", port}, args...)...).CombinedOutput()
	if err != nil {
		t.Fatalf("redis-cli %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// sortedLines is the output's lines, sorted, without empty ones.
func sortedLines(s string) []string {
	out := strings.Fields(s)
	slices.Sort(out)
	return out
}

// scanAll walks SCAN through cl with the options given, checking that no
// key comes twice.
func scanAll(t *testing.T, cl *redis.Client, match string, count int64, typ string) []string {
	t.Helper()
	ctx := context.Background()
	var cursor uint64
	var out []string
	seen := map[string]bool{}
	for i := 0; ; i++ {
		var keys []string
		var err error
		if typ != "" {
			keys, cursor, err = cl.ScanType(ctx, cursor, match, count, typ).Result()
		} else {
			keys, cursor, err = cl.Scan(ctx, cursor, match, count).Result()
		}
		if err != nil {
			t.Fatalf("SCAN: %v", err)
		}
		for _, k := range keys {
			if seen[k] {
				t.Errorf("SCAN returned %s twice", k)
			}
			seen[k] = true
			out = append(out, k)
		}
		if cursor == 0 {
			break
		}
		if i > 10000 {
			t.Fatal("SCAN never ended")
		}
	}
	slices.Sort(out)
	return out
}

// SCAN (and redis-cli --scan), KEYS, DBSIZE, EXISTS, TYPE and INFO
// keyspace show the majority view: a key is there when a majority of the
// backends hold it with the same value. Keys on a minority, keys whose
// values differ and the proxy's own keys (markers, FENCE state) never
// show, nor do other types in the walks (SCAN, KEYS, DBSIZE); EXISTS and
// TYPE see a key of another type that a majority hold (a hash lock,
// whoever holds it). A backend that is down is passed over. Errors are
// worded as a real redis-server words them.
func TestKeyspaceShowsTheMajorityView(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(2)
	p := uniqueKey("ks")
	var locks []string
	for i := 0; i < 7; i++ {
		k := fmt.Sprintf("%s:lock%d", p, i)
		mustDo(t, cl, "OK", "SET", k, "tok", "NX", "PX", "60000")
		locks = append(locks, k)
	}
	// FENCE writes the proxy's own state beside the lock.
	if err := cl.Do(ctx, "FENCE", locks[0], "tok").Err(); err != nil {
		t.Fatalf("FENCE: %v", err)
	}
	direct := func(i int, args ...any) {
		t.Helper()
		if err := c.direct[i].Do(ctx, args...).Err(); err != nil {
			t.Fatalf("backend %d %v: %v", i, args, err)
		}
	}
	// A majority set directly, without TTL: it shows (expires does not
	// count it).
	direct(0, "SET", p+":direct", "d")
	direct(2, "SET", p+":direct", "d")
	want := append(slices.Clone(locks), p+":direct")
	slices.Sort(want)
	direct(0, "SET", p+":minority", "m", "PX", 60000)
	direct(0, "SET", p+":split", "a", "PX", 60000)
	direct(1, "SET", p+":split", "b", "PX", 60000)
	direct(1, "HSET", p+":hash", "f", "v")
	direct(2, "HSET", p+":hash", "f", "v")

	if got := sortedLines(redisCLI(t, c.app.Addr(), "--scan", "--pattern", p+":*")); !slices.Equal(got, want) {
		t.Errorf("redis-cli --scan --pattern %s:* = %v; want %v", p, got, want)
	}
	if got := scanAll(t, cl, "", 1, ""); !slices.Equal(got, want) {
		t.Errorf("SCAN COUNT 1 = %v; want %v", got, want)
	}
	if got := scanAll(t, cl, p+":lock*", 3, "string"); !slices.Equal(got, locks) {
		t.Errorf("SCAN MATCH %s:lock* TYPE string = %v; want %v", p, got, locks)
	}
	if got := scanAll(t, cl, "", 100, "hash"); len(got) != 0 {
		t.Errorf("SCAN TYPE hash = %v; want none (only strings are locks)", got)
	}
	if got := scanAll(t, cl, "redlock-proxy:*", 100, ""); len(got) != 0 {
		t.Errorf("SCAN MATCH redlock-proxy:* = %v; the proxy's own keys must not show", got)
	}
	keys, err := cl.Keys(ctx, "*").Result()
	if slices.Sort(keys); err != nil || !slices.Equal(keys, want) {
		t.Errorf("KEYS * = %v, %v; want %v", keys, err, want)
	}
	mustDo(t, cl, len(want), "DBSIZE")
	mustDo(t, cl, 4, "EXISTS", locks[0], locks[0], p+":direct", p+":minority", p+":split", p+":hash", p+":none")
	mustDo(t, cl, "string", "TYPE", locks[0])
	mustDo(t, cl, "hash", "TYPE", p+":hash")
	for _, k := range []string{p + ":minority", p + ":split", p + ":none"} {
		mustDo(t, cl, "none", "TYPE", k)
	}
	info, err := cl.Info(ctx, "keyspace").Result()
	if wantLine := fmt.Sprintf("db0:keys=%d,expires=%d,avg_ttl=", len(want), len(want)-1); err != nil || !strings.Contains(info, wantLine) {
		t.Errorf("INFO keyspace = %q, %v; want %s...", info, err, wantLine)
	}

	// Redis's own wording for bad arguments.
	for _, args := range [][]any{
		{"SCAN", "abc"}, {"SCAN", "0", "COUNT", "0"}, {"SCAN", "0", "COUNT", "x"}, {"SCAN", "0", "MATCH"},
		{"SCAN", "0", "FOO", "bar"}, {"DBSIZE", "x"}, {"EXISTS"}, {"TYPE"}, {"KEYS"}, {"TYPE", "a", "b"},
	} {
		_, real := c.direct[0].Do(ctx, args...).Result()
		_, got := cl.Do(ctx, args...).Result()
		if real == nil || got == nil || got.Error() != real.Error() {
			t.Errorf("%v through the proxy: %v; redis-server says %v", args, got, real)
		}
	}

	// With backend 0 down, what only backends 0 and 2 held is no longer
	// held by a majority that answers; the locks on all three still show.
	c.servers[0].Stop()
	if got := sortedLines(redisCLI(t, c.app.Addr(), "--scan", "--pattern", p+":*")); !slices.Equal(got, locks) {
		t.Errorf("with backend 0 down, redis-cli --scan = %v; want %v", got, locks)
	}
}

// LOCKINFO shows who holds a lock: the holder's token, its validity, its
// fencing number once FENCE numbered the grant, and what each backend
// holds, or why it did not answer.
func TestLockInfoShowsWhoHolds(t *testing.T) {
	c := newCluster(t, 3)
	ctx := context.Background()
	cl := c.client(3)
	k := uniqueKey("lockinfo")
	info := func() map[any]any {
		t.Helper()
		v, err := cl.Do(ctx, "LOCKINFO", k).Result()
		m, ok := v.(map[any]any)
		if err != nil || !ok {
			t.Fatalf("LOCKINFO = %#v, %v", v, err)
		}
		return m
	}
	backend := func(m map[any]any, i int) map[any]any {
		t.Helper()
		bs, _ := m["backends"].([]any)
		if len(bs) != 3 {
			t.Fatalf("LOCKINFO backends = %#v", m["backends"])
		}
		b, _ := bs[i].(map[any]any)
		return b
	}

	m := info()
	if m["holder"] != nil || m["validity_ms"] != int64(-2) || m["fence"] != nil {
		t.Errorf("LOCKINFO of a free key = %#v", m)
	}
	mustDo(t, cl, "OK", "SET", k, "tok-1", "NX", "PX", "30000")
	m = info()
	if v, _ := m["validity_ms"].(int64); m["holder"] != "tok-1" || v <= 0 || v > 30000 || m["fence"] != nil {
		t.Errorf("LOCKINFO of a lock never fenced = %#v", m)
	}
	num, err := cl.Do(ctx, "FENCE", k, "tok-1").Int64()
	if err != nil {
		t.Fatalf("FENCE: %v", err)
	}
	m = info()
	if m["fence"] != num {
		t.Errorf("LOCKINFO fence = %#v; FENCE said %d", m["fence"], num)
	}
	for i := 0; i < 3; i++ {
		b := backend(m, i)
		if p, _ := b["pttl_ms"].(int64); b["addr"] != c.servers[i].Addr || b["counts"] != int64(1) || b["value"] != "tok-1" || b["fence"] != num || p <= 0 {
			t.Errorf("LOCKINFO backend %d = %#v", i, b)
		}
	}

	// One backend holds another value, one is down: the majority view
	// needs both others, and each backend says what it holds.
	if err := c.direct[1].Set(ctx, k, "intruder", 30*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	c.servers[2].Stop()
	m = info()
	if m["holder"] != nil || m["validity_ms"] != int64(-2) || m["fence"] != nil {
		t.Errorf("LOCKINFO with no majority = %#v", m)
	}
	if b := backend(m, 1); b["value"] != "intruder" || b["fence"] != nil {
		t.Errorf("LOCKINFO backend 1 = %#v", b)
	}
	if b := backend(m, 2); b["counts"] != int64(0) || b["error"] == nil {
		t.Errorf("LOCKINFO of a stopped backend = %#v", b)
	}
	// RESP2: a flat array, as Redis sends maps there.
	flat, err := c.client(2).Do(ctx, "LOCKINFO", k).Slice()
	if err != nil || len(flat) != 10 || flat[0] != "key" || flat[2] != "holder" || flat[8] != "backends" {
		t.Errorf("LOCKINFO in RESP2 = %#v, %v", flat, err)
	}
}

// redis-cli --stat prints the proxy's numbers: the keys of the majority
// view, its own memory (never a sentinel), clients and requests.
func TestRedisCLIStat(t *testing.T) {
	c := newCluster(t, 3)
	cl := c.client(2)
	for i := 0; i < 4; i++ {
		mustDo(t, cl, "OK", "SET", uniqueKey("stat"), "tok", "NX", "PX", "60000")
	}
	host, port, _ := net.SplitHostPort(c.app.Addr())
	// stdbuf: redis-cli writes --stat through stdio, buffered on a pipe.
	cmd := exec.Command("stdbuf", "-oL", "redis-cli", "-h", host, "-p", port, "--stat", "-i", "0.2")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	sc := bufio.NewScanner(out)
	row := regexp.MustCompile(`^(\d+)\s+(\d+(?:\.\d+)?[BKMG])\s+(\d+)\s+(\d+)\s+(\d+) \(\+\d+\)\s+(\d+)\s*$`)
	rows := 0
	for sc.Scan() && rows < 3 {
		line := sc.Text()
		if strings.HasPrefix(line, "---") || strings.HasPrefix(line, "keys") {
			continue
		}
		m := row.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("redis-cli --stat printed %q; want keys, mem, clients, blocked, requests, connections", line)
		}
		if keys, _ := strconv.Atoi(m[1]); keys != 4 {
			t.Errorf("redis-cli --stat keys = %d; want 4: %q", keys, line)
		}
		rows++
	}
	if rows < 3 {
		t.Fatalf("redis-cli --stat printed %d rows: %v", rows, sc.Err())
	}
}

// Over Redis Cluster backends SCAN walks every shard of every cluster:
// redis-cli --scan and DBSIZE see each lock once, over all slots, and
// never the shards' markers or FENCE state; LOCKINFO reads the lock where
// its slot lives.
func TestKeyspaceOverClusterBackends(t *testing.T) {
	s := proxyOverClusters(t, startClusters(t, 3, 2))
	ctx := context.Background()
	cl := proxyClient(t, s.app.Addr(), 2)
	keys := keysOverAllSlots("kscl", 40)
	for _, k := range keys {
		mustDo(t, cl, "OK", "SET", k, "tok", "NX", "PX", "60000")
	}
	if err := cl.Do(ctx, "FENCE", keys[0], "tok").Err(); err != nil {
		t.Fatalf("FENCE: %v", err)
	}
	want := slices.Clone(keys)
	slices.Sort(want)
	if got := sortedLines(redisCLI(t, s.app.Addr(), "--scan")); !slices.Equal(got, want) {
		t.Errorf("redis-cli --scan over clusters = %v; want %v", got, want)
	}
	if got := scanAll(t, cl, "kscl*", 3, ""); !slices.Equal(got, want) {
		t.Errorf("SCAN MATCH kscl* COUNT 3 over clusters = %v; want %v", got, want)
	}
	mustDo(t, cl, len(keys), "DBSIZE")
	v, err := cl.Do(ctx, "LOCKINFO", keys[0]).Slice()
	if err != nil || len(v) != 10 || v[3] != "tok" || v[7] == nil {
		t.Errorf("LOCKINFO over clusters = %#v, %v; want holder tok and a fence", v, err)
	}
}
