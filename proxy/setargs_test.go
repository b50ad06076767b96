package proxy

import (
	"bufio"
	"fmt"
	"math/rand"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"
)

func setArgs(s ...string) [][]byte {
	a := make([][]byte, len(s))
	for i := range s {
		a[i] = []byte(s[i])
	}
	return a
}

func TestParseSetUnit(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_123)
	nowS := now.Unix()
	nowMs := now.UnixMilli()
	i := func(n int64) string { return strconv.FormatInt(n, 10) }
	cases := []struct {
		args   []string
		maxTTL time.Duration
		ttl    time.Duration
		msg    string
	}{
		{[]string{"SET", "k", "v", "NX", "EX", "10"}, 0, 10 * time.Second, ""},
		{[]string{"set", "k", "v", "nx", "ex", "10"}, 0, 10 * time.Second, ""},
		{[]string{"SET", "k", "v", "Px", "1500", "nX"}, 0, 1500 * time.Millisecond, ""},
		{[]string{"SET", "k", "v", "NX", "PX", "1"}, 0, time.Millisecond, ""},
		{[]string{"SET", "k", "v", "NX", "NX", "PX", "1"}, 0, time.Millisecond, ""},
		{[]string{"SET", "k", "v", "NX", "EX", "10", "EX", "20"}, 0, 20 * time.Second, ""}, // Redis: the last EX counts
		{[]string{"SET", "k", "v", "NX", "PX", "10", "PX", "20"}, 0, 20 * time.Millisecond, ""},
		{[]string{"SET", "k", "v", "NX", "EXAT", i(nowS + 30)}, 0, time.Duration((nowS+30)*1000-nowMs) * time.Millisecond, ""},
		{[]string{"SET", "k", "v", "NX", "PXAT", i(nowMs + 5000)}, 0, 5 * time.Second, ""},
		{[]string{"SET", "k", "v", "NX", "PXAT", i(nowMs + 1)}, 0, time.Millisecond, ""},
		{[]string{"SET", "k", "v", "NX", "PX", "9223372036854"}, 0, 9223372036854 * time.Millisecond, ""}, // the longest time.Duration
		{[]string{"SET", "k", "v", "NX", "PX", "9223372036855"}, 0, 0, msgTTLTooLong(9223372036855, 9223372036854)},
		{[]string{"SET", "k", "v", "NX", "PX", "9223370000000000000"}, 0, 0, msgTTLTooLong(9223370000000000000, 9223372036854)},
		{[]string{"SET", "k", "v", "NX", "PX", "10000"}, 10 * time.Second, 10 * time.Second, ""},
		{[]string{"SET", "k", "v", "NX", "EX", "10"}, 10 * time.Second, 10 * time.Second, ""},
		{[]string{"SET", "k", "v", "NX", "PXAT", i(nowMs + 10000)}, 10 * time.Second, 10 * time.Second, ""},

		// The proxy's own refusals.
		{[]string{"SET", "k", "v", "NX", "PX", "10001"}, 10 * time.Second, 0, msgTTLTooLong(10001, 10000)},
		{[]string{"SET", "k", "v", "NX", "EX", "11"}, 10 * time.Second, 0, msgTTLTooLong(11000, 10000)},
		{[]string{"SET", "k", "v", "NX", "EXAT", i(nowS + 3600)}, 10 * time.Second, 0, msgTTLTooLong((nowS+3600)*1000-nowMs, 10000)},
		{[]string{"SET", "k", "v", "NX", "PXAT", i(nowMs)}, 0, 0, ""},
		{[]string{"SET", "k", "v", "NX", "PXAT", i(nowMs - 1)}, 0, 0, ""},
		{[]string{"SET", "k", "v", "NX", "PXAT", "1"}, 0, 0, ""},
		{[]string{"SET", "k", "v", "NX", "EXAT", "1"}, 0, 0, ""},
		{[]string{"SET", "k", "v", "NX", "EXAT", i(nowS)}, 0, 0, ""}, // nowS*1000 <= nowMs
		{[]string{"SET", "k", "v"}, 0, 0, msgSetNeedsNX},
		{[]string{"SET", "k", "v", "PX", "100"}, 0, 0, msgSetNeedsNX},
		{[]string{"SET", "k", "v", "XX", "PX", "100"}, 0, 0, msgSetNeedsNX},
		{[]string{"SET", "k", "v", "NX"}, 0, 0, msgSetNeedsExpiry},
		{[]string{"SET", "k", "v", "NX", "KEEPTTL"}, 0, 0, msgSetNeedsExpiry},
		{[]string{"SET", "k", "v", "NX", "PX", "100", "GET"}, 0, 0, msgSetNoGet},
		{[]string{"SET", "k", "v", "GET"}, 0, 0, msgSetNoGet},

		// Redis's errors come first, in Redis's order.
		{[]string{"SET", "k", "v", "NX", "XX", "PX", "100"}, 0, 0, msgSyntax},
		{[]string{"SET", "k", "v", "XX", "NX"}, 0, 0, msgSyntax},
		{[]string{"SET", "k", "v", "NX", "PX"}, 0, 0, msgSyntax},
		{[]string{"SET", "k", "v", "NX", "EX", "10", "PX", "100"}, 0, 0, msgSyntax},
		{[]string{"SET", "k", "v", "NX", "KEEPTTL", "PX", "100"}, 0, 0, msgSyntax},
		{[]string{"SET", "k", "v", "NX", "PX", "100", "KEEPTTL"}, 0, 0, msgSyntax},
		{[]string{"SET", "k", "v", "NX", "PX", "abc", "FOO"}, 0, 0, msgSyntax},
		{[]string{"SET", "k", "v", "NXX", "PX", "100"}, 0, 0, msgSyntax},
		{[]string{"SET", "k", "v", "NX", "PX", "abc"}, 0, 0, msgNotInteger},
		{[]string{"SET", "k", "v", "NX", "PX", "1.5"}, 0, 0, msgNotInteger},
		{[]string{"SET", "k", "v", "NX", "PX", "NX"}, 0, 0, msgNotInteger},
		{[]string{"SET", "k", "v", "NX", "PX", "9223372036854775808"}, 0, 0, msgNotInteger},
		{[]string{"SET", "k", "v", "PX", "abc", "GET"}, 0, 0, msgNotInteger},
		{[]string{"SET", "k", "v", "NX", "PX", "0"}, 0, 0, msgInvalidExpireSet},
		{[]string{"SET", "k", "v", "NX", "EX", "-1"}, 0, 0, msgInvalidExpireSet},
		{[]string{"SET", "k", "v", "XX", "EX", "0", "GET"}, 0, 0, msgInvalidExpireSet},
		{[]string{"SET", "k", "v", "NX", "EX", "9223372036854776"}, 0, 0, msgInvalidExpireSet},
		{[]string{"SET", "k", "v", "NX", "EX", "9223372036854775"}, 0, 0, msgInvalidExpireSet}, // overflows when now is added
		{[]string{"SET", "k", "v", "NX", "PX", "9223372036854775807"}, 0, 0, msgInvalidExpireSet},
		{[]string{"SET", "k", "v", "NX", "EXAT", "9223372036854776"}, 0, 0, msgInvalidExpireSet},
	}
	for _, tc := range cases {
		req, msg := parseSet(setArgs(tc.args...), now, tc.maxTTL)
		if msg != tc.msg {
			t.Errorf("%q (max %v): %q, want %q", tc.args, tc.maxTTL, msg, tc.msg)
			continue
		}
		if msg != "" {
			continue
		}
		if req.ttl != tc.ttl || string(req.key) != tc.args[1] || string(req.value) != tc.args[2] {
			t.Errorf("%q: %+v, want ttl %v", tc.args, req, tc.ttl)
		}
	}
}

// expectProxyRule is the proxy's rule for a SET Redis accepts: only
// SET key value NX with PX, EX, PXAT or EXAT, without GET, expiring in the
// future and within maxTTL. It returns the refusal, or the TTL.
func expectProxyRule(args []string, now time.Time, maxTTL time.Duration) (time.Duration, string) {
	var nx, get bool
	unit := ""
	var val int64
	for j := 3; j < len(args); j++ {
		switch o := strings.ToUpper(args[j]); o {
		case "NX":
			nx = true
		case "GET":
			get = true
		case "EX", "PX", "EXAT", "PXAT":
			unit = o
			val, _ = strconv.ParseInt(args[j+1], 10, 64)
			j++
		}
	}
	switch {
	case get:
		return 0, msgSetNoGet
	case !nx:
		return 0, msgSetNeedsNX
	case unit == "":
		return 0, msgSetNeedsExpiry
	}
	var ms int64
	switch unit {
	case "EX":
		ms = val * 1000
	case "PX":
		ms = val
	case "EXAT":
		ms = val*1000 - now.UnixMilli()
	case "PXAT":
		ms = val - now.UnixMilli()
	}
	switch {
	case ms <= 0:
		return 0, "" // a passed deadline: answered as one Redis, holding nothing
	case maxTTL > 0 && ms > maxTTL.Milliseconds():
		return 0, msgTTLTooLong(ms, maxTTL.Milliseconds())
	}
	return time.Duration(ms) * time.Millisecond, ""
}

// redisClient is a tiny RESP client for the golden comparisons.
type redisClient struct {
	t  *testing.T
	c  net.Conn
	br *bufio.Reader
}

func dialRedis(t *testing.T, addr string) *redisClient {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &redisClient{t: t, c: c, br: bufio.NewReader(c)}
}

func (rc *redisClient) do(args ...string) any {
	rc.t.Helper()
	rc.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := rc.c.Write([]byte(bulks(args...))); err != nil {
		rc.t.Fatalf("%q: %v", args, err)
	}
	v, err := readReply(rc.br)
	if err != nil {
		rc.t.Fatalf("%q: %v", args, err)
	}
	return v
}

// setGoldenCases are SET argument lists after "SET key value".
func setGoldenCases(now time.Time) [][]string {
	future := strconv.FormatInt(now.Unix()+600, 10)
	futureMs := strconv.FormatInt(now.UnixMilli()+600_000, 10)
	groups := [][]string{
		{"NX"}, {"XX"}, {"GET"}, {"KEEPTTL"},
		{"EX", "10"}, {"PX", "1500"}, {"EXAT", future}, {"PXAT", futureMs},
	}
	var out [][]string
	// Every ordered choice of up to three distinct groups.
	var rec func(prefix []string, used int, depth int)
	rec = func(prefix []string, used int, depth int) {
		out = append(out, append([]string(nil), prefix...))
		if depth == 3 {
			return
		}
		for g := range groups {
			if used&(1<<g) == 0 {
				rec(append(append([]string(nil), prefix...), groups[g]...), used|1<<g, depth+1)
			}
		}
	}
	rec(nil, 0, 0)
	// The same in mixed case.
	rnd := rand.New(rand.NewSource(7))
	n := len(out)
	for _, c := range out[:n] {
		m := make([]string, len(c))
		for i, w := range c {
			b := []byte(w)
			for j := range b {
				if rnd.Intn(2) == 0 {
					b[j] = strings.ToLower(string(b[j]))[0]
				}
			}
			m[i] = string(b)
		}
		out = append(out, m)
	}
	// Repeats and values.
	out = append(out,
		[]string{"NX", "NX", "PX", "100"},
		[]string{"XX", "XX"},
		[]string{"GET", "GET", "NX", "PX", "1"},
		[]string{"KEEPTTL", "KEEPTTL", "NX"},
		[]string{"NX", "EX", "10", "EX", "20"},
		[]string{"NX", "PX", "10", "PX", "abc"},
		[]string{"NX", "PX", "abc", "PX", "10"},
		[]string{"NX", "EXAT", future, "EXAT", future},
		[]string{"NX", "PXAT", futureMs, "PXAT", "0"},
		[]string{"NX", "EX"},
		[]string{"NX", "PX"},
		[]string{"PX", "NX"},
		[]string{"NX", "EXAT"},
		[]string{"PXAT"},
		[]string{"EX", "10", "NX", "XX"},
		[]string{"FOO"},
		[]string{"NX", "NXX"},
		[]string{"NX", "PX", "100", "EXTRA"},
		[]string{"NX", "PX", "abc", "FOO"},
		[]string{"NX", "PX", "100", "KEEPTTL"},
		[]string{"NX", ""},
		[]string{"NX", "PXAT", "1"},
		[]string{"NX", "EXAT", "1"},
	)
	for _, opt := range []string{"EX", "PX", "EXAT", "PXAT"} {
		for _, v := range []string{
			"0", "-1", "-9223372036854775808", "1", "abc", "", "1.5", "+1", "01", " 1", "1 ", "0x10",
			"9223372036854775807", "9223372036854775808", "92233720368547758070",
			"9223372036854775", "9223372036854776", "9223300000000000", "9223372036854",
			"9223300000000000000", "3600", "3600000", "86400000",
		} {
			out = append(out, []string{"NX", opt, v}, []string{opt, v, "NX"}, []string{opt, v})
		}
	}
	return out
}

// Whenever Redis refuses a SET, parseSet refuses it with the same words;
// whenever Redis takes it, parseSet takes it or refuses it for the proxy's
// own documented reason.
func TestParseSetGoldenRedis(t *testing.T) {
	rc := dialRedis(t, startRedis(t))
	const maxTTL = time.Hour
	var redisErrors, accepted, refused int
	defer func() {
		t.Logf("%d SETs: Redis refused %d; of the rest the proxy took %d and refused %d", redisErrors+accepted+refused, redisErrors, accepted, refused)
		if redisErrors == 0 || accepted == 0 || refused == 0 {
			t.Errorf("the cases should exercise every outcome")
		}
	}()
	for i, opts := range setGoldenCases(time.Now()) {
		args := append([]string{"SET", fmt.Sprintf("golden:set:%d", i), "token"}, opts...)
		reply := rc.do(args...)
		now := time.Now()
		req, msg := parseSet(setArgs(args...), now, maxTTL)
		if e, ok := reply.(redisErr); ok {
			redisErrors++
			if msg != string(e) {
				t.Errorf("%q: parseSet %q, Redis %q", opts, msg, e)
			}
			continue
		}
		ttl, want := expectProxyRule(args, now, maxTTL)
		if msg != want {
			t.Errorf("%q: Redis took it (%q); parseSet %q, want %q", opts, reply, msg, want)
			continue
		}
		if msg != "" {
			refused++
		} else {
			accepted++
			// Accepted: the TTL is the one Redis set (read later, so no
			// longer).
			if req.ttl != ttl {
				t.Errorf("%q: ttl %v, want %v", opts, req.ttl, ttl)
			}
			pttl, ok := rc.do("PTTL", args[1]).(int64)
			// -2: already expired (PX 1); -1 would be no expiry at all.
			if !ok || pttl == -1 || pttl > ttl.Milliseconds() {
				t.Errorf("%q: Redis PTTL %v, proxy ttl %v", opts, pttl, ttl)
			}
		}
	}
}

// msgUnknownCommand against Redis's reply to commands it lacks.
func TestUnknownCommandGoldenRedis(t *testing.T) {
	rc := dialRedis(t, startRedis(t))
	long := strings.Repeat("x", 200)
	cases := [][]string{
		{"NOSUCHCMD"},
		{"nosuchcmd", "a"},
		{"NoSuchCmd", "a", "b", "c"},
		{long},
		{long, long},
		{"foo", strings.Repeat("a", 127), "b"},
		{"foo", strings.Repeat("a", 125), "b", "c"},
		{"foo", strings.Repeat("a", 126), "b", "c"},
		{"foo", strings.Repeat("a", 60), strings.Repeat("b", 60), strings.Repeat("c", 60), "d"},
		{"foo", "", "", ""},
		{"foo", strings.Repeat("é", 100)},
		{strings.Repeat("é", 100), "é"},
		{"foo", "\xff\xfe", "a\r\nb"},
		{"foo\r\nbar", "x\ny"},
		{"foo", "a\x00b", "c"},
		{"foo\x00bar", "\x00"},
		{""},
	}
	for _, args := range cases {
		reply := rc.do(args...)
		e, ok := reply.(redisErr)
		if !ok {
			t.Fatalf("%q: Redis replied %q", args, reply)
		}
		if got := msgUnknownCommand(setArgs(args...)); got != string(e)+unknownCommandHint {
			t.Errorf("%q:\nproxy %q\nwant Redis's %q, then the hint", args, got, e)
		}
	}
	// msgUnknownSubcommand quotes client input the same way.
	for _, sub := range []string{"nosuch", long, strings.Repeat("é", 100), "a\r\nb", "a\x00b"} {
		reply := rc.do("CLIENT", sub)
		e, ok := reply.(redisErr)
		if !ok {
			t.Fatalf("CLIENT %q: Redis replied %q", sub, reply)
		}
		if got := msgUnknownSubcommand(sub, "CLIENT"); got != string(e) {
			t.Errorf("CLIENT %q:\nproxy %q\nRedis %q", sub, got, e)
		}
	}
}
