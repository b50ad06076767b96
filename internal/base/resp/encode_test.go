package resp

import (
	"bufio"
	"bytes"
	"math"
	"math/rand/v2"
	"strconv"
	"testing"
)

func TestAppendArrayHeader(t *testing.T) {
	for _, tc := range []struct {
		n    int
		want string
	}{
		{0, "*0\r\n"},
		{1, "*1\r\n"},
		{9, "*9\r\n"},
		{10, "*10\r\n"},
		{123, "*123\r\n"},
		{-1, "*-1\r\n"},
		{math.MaxInt64, "*9223372036854775807\r\n"},
	} {
		if got := string(AppendArrayHeader(nil, tc.n)); got != tc.want {
			t.Errorf("AppendArrayHeader(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestAppendBulk(t *testing.T) {
	for _, tc := range []struct {
		in, want string
	}{
		{"", "$0\r\n\r\n"},
		{"a", "$1\r\na\r\n"},
		{"abc", "$3\r\nabc\r\n"},
		{"a\r\nb", "$4\r\na\r\nb\r\n"},
		{"\x00\xff", "$2\r\n\x00\xff\r\n"},
		{"0123456789", "$10\r\n0123456789\r\n"},
	} {
		if got := string(AppendBulk(nil, []byte(tc.in))); got != tc.want {
			t.Errorf("AppendBulk(%q) = %q, want %q", tc.in, got, tc.want)
		}
		if got := string(AppendBulkString(nil, tc.in)); got != tc.want {
			t.Errorf("AppendBulkString(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := string(AppendBulk(nil, nil)); got != "$0\r\n\r\n" {
		t.Errorf("AppendBulk(nil) = %q, want an empty bulk", got)
	}
}

func TestAppendBulkInt(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "$1\r\n0\r\n"},
		{7, "$1\r\n7\r\n"},
		{10, "$2\r\n10\r\n"},
		{30000, "$5\r\n30000\r\n"},
		{-1, "$2\r\n-1\r\n"},
		{math.MaxInt64, "$19\r\n9223372036854775807\r\n"},
		{math.MinInt64, "$20\r\n-9223372036854775808\r\n"},
	} {
		if got := string(AppendBulkInt(nil, tc.n)); got != tc.want {
			t.Errorf("AppendBulkInt(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestAppendCommand(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "*0\r\n"},
		{[]string{"PING"}, "*1\r\n$4\r\nPING\r\n"},
		{[]string{"SET", "lock", "tok", "NX", "PX", "30000"},
			"*6\r\n$3\r\nSET\r\n$4\r\nlock\r\n$3\r\ntok\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n"},
		{[]string{"GET", ""}, "*2\r\n$3\r\nGET\r\n$0\r\n\r\n"},
	} {
		if got := string(AppendCommand(nil, tc.args...)); got != tc.want {
			t.Errorf("AppendCommand(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// Every Append function appends: what is already in the buffer stays.
func TestAppendKeepsPrefix(t *testing.T) {
	const prefix = "*1\r\n$4\r\nPING\r\n"
	for name, f := range map[string]func([]byte) []byte{
		"AppendArrayHeader": func(b []byte) []byte { return AppendArrayHeader(b, 2) },
		"AppendBulk":        func(b []byte) []byte { return AppendBulk(b, []byte("x")) },
		"AppendBulkString":  func(b []byte) []byte { return AppendBulkString(b, "x") },
		"AppendBulkInt":     func(b []byte) []byte { return AppendBulkInt(b, 12) },
		"AppendCommand":     func(b []byte) []byte { return AppendCommand(b, "GET", "k") },
	} {
		alone := string(f(nil))
		if got := string(f([]byte(prefix))); got != prefix+alone {
			t.Errorf("%s after a prefix = %q, want %q", name, got, prefix+alone)
		}
	}
}

// Encoding into a buffer with room allocates nothing (the package promise).
func TestAppendAllocationFree(t *testing.T) {
	buf := make([]byte, 0, 1024)
	val := []byte("value")
	args := []string{"SET", "k", "v", "NX", "PX", "30000"}
	for name, f := range map[string]func(){
		"AppendArrayHeader small": func() { AppendArrayHeader(buf, 3) },
		"AppendArrayHeader large": func() { AppendArrayHeader(buf, 123456) },
		"AppendBulk":              func() { AppendBulk(buf, val) },
		"AppendBulkString":        func() { AppendBulkString(buf, "value") },
		"AppendBulkInt":           func() { AppendBulkInt(buf, math.MinInt64) },
		"AppendCommand":           func() { AppendCommand(buf, args...) },
		"AppendInt":               func() { AppendInt(buf, -42) },
		"AppendBulkHeader":        func() { AppendBulkHeader(buf, 17) },
		"AppendMapHeader":         func() { AppendMapHeader(buf, 7, true) },
		"AppendPushHeader":        func() { AppendPushHeader(buf, 3, true) },
		"AppendNull":              func() { AppendNull(buf, true) },
		"AppendError":             func() { AppendError(buf, "ERR x") },
	} {
		if n := testing.AllocsPerRun(100, f); n != 0 {
			t.Errorf("%s allocated %v times per call with capacity to spare, want 0", name, n)
		}
	}
}

// Commands built by the encoders decode back to the same arguments.
func TestAppendRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(51, 52))
	var stream []byte
	var want [][]string
	var ints []int64
	for range 500 {
		args := make([]string, rng.IntN(8))
		for i := range args {
			b := make([]byte, rng.IntN(40))
			for j := range b {
				b[j] = "ab\r\n\x00$*:-+0123456789"[rng.IntN(20)]
			}
			args[i] = string(b)
		}
		stream = AppendCommand(stream, args...)
		want = append(want, args)

		// The same shape built piecewise, with an integer argument.
		n := int64(rng.Uint64()) >> rng.IntN(64)
		stream = AppendArrayHeader(stream, 3)
		stream = AppendBulkString(stream, "PEXPIRE")
		stream = AppendBulk(stream, []byte("k"))
		stream = AppendBulkInt(stream, n)
		want = append(want, []string{"PEXPIRE", "k", strconv.FormatInt(n, 10)})
		ints = append(ints, n)
	}
	r := NewReader(bufio.NewReaderSize(bytes.NewReader(stream), 64), ReaderLimits{})
	for i, args := range want {
		v, err := r.Read()
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		if v.Kind != KindArray || len(v.Elems) != len(args) {
			t.Fatalf("command %d = %v, want %d bulks %q", i, v, len(args), args)
		}
		for j, a := range args {
			if e := v.Elems[j]; e.Kind != KindBulk || string(e.Str) != a {
				t.Fatalf("command %d argument %d = %v, want bulk %q", i, j, e, a)
			}
		}
		if i%2 == 1 {
			n, ok := ParseInt(v.Elems[2].Str)
			if !ok || n != ints[i/2] {
				t.Fatalf("command %d: AppendBulkInt(%d) read back as %q (ParseInt %d, %v)", i, ints[i/2], v.Elems[2].Str, n, ok)
			}
		}
	}
	if r.Buffered() != 0 {
		t.Errorf("%d bytes left after the last command", r.Buffered())
	}
}

// The RESP3 headers, and the RESP2 forms Redis sends instead.
func TestAppendRESP3Forms(t *testing.T) {
	for _, c := range []struct {
		name, got, want string
	}{
		{"map", string(AppendMapHeader(nil, 7, true)), "%7\r\n"},
		{"map as RESP2", string(AppendMapHeader(nil, 7, false)), "*14\r\n"},
		{"push", string(AppendPushHeader(nil, 12, true)), ">12\r\n"},
		{"push as RESP2", string(AppendPushHeader(nil, 3, false)), "*3\r\n"},
		{"null", string(AppendNull(nil, true)), "_\r\n"},
		{"null as RESP2", string(AppendNull(nil, false)), "$-1\r\n"},
		{"null array", string(AppendNullArray(nil, true)), "_\r\n"},
		{"null array as RESP2", string(AppendNullArray(nil, false)), "*-1\r\n"},
		{"bulk in parts", string(append(append(AppendBulkHeader([]byte("x"), 12), "hello, world"...), "\r\n"...)), "x$12\r\nhello, world\r\n"},
		{"error", string(AppendError(nil, "ERR two\nlines")), "-ERR two lines\r\n"},
		{"simple", string(AppendSimple(nil, []byte("OK"))), "+OK\r\n"},
		{"int", string(AppendInt(nil, -42)), ":-42\r\n"},
	} {
		if c.got != c.want {
			t.Errorf("%s = %q, want %q", c.name, c.got, c.want)
		}
	}
}
