package resp

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// Value constructors that keep tables short.
func simple(s string) Value { return Value{Kind: KindSimple, Str: []byte(s)} }
func errv(s string) Value   { return Value{Kind: KindError, Str: []byte(s)} }
func bulk(s string) Value   { return Value{Kind: KindBulk, Str: []byte(s)} }
func arr(e ...Value) Value {
	if e == nil {
		e = []Value{}
	}
	return Value{Kind: KindArray, Elems: e}
}

func newReader(s string, lim ReaderLimits) *Reader {
	return NewReader(bufio.NewReader(strings.NewReader(s)), lim)
}

// readOne decodes the first reply of s with lim.
func readOne(s string, lim ReaderLimits) (Value, error) { return newReader(s, lim).Read() }

func TestReadReplies(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want Value
	}{
		// RESP2
		{"simple OK", "+OK\r\n", OK},
		{"simple", "+PONG\r\n", simple("PONG")},
		{"simple empty", "+\r\n", simple("")},
		{"simple with spaces", "+hello world\r\n", simple("hello world")},
		{"simple with lone CR", "+a\rb\r\n", simple("a\rb")},
		{"error", "-ERR unknown command 'FOO'\r\n", errv("ERR unknown command 'FOO'")},
		{"error NOSCRIPT", "-NOSCRIPT No matching script. Please use EVAL.\r\n", errv("NOSCRIPT No matching script. Please use EVAL.")},
		{"error empty", "-\r\n", errv("")},
		{"int zero", ":0\r\n", IntValue(0)},
		{"int one", ":1\r\n", IntValue(1)},
		{"int negative", ":-2\r\n", IntValue(-2)},
		{"int max", ":9223372036854775807\r\n", IntValue(math.MaxInt64)},
		{"int min", ":-9223372036854775808\r\n", IntValue(math.MinInt64)},
		{"bulk", "$3\r\nabc\r\n", bulk("abc")},
		{"bulk empty", "$0\r\n\r\n", bulk("")},
		{"bulk binary with CRLF", "$6\r\na\r\nb\x00\xff\r\n", bulk("a\r\nb\x00\xff")},
		{"bulk two-digit length", "$10\r\n0123456789\r\n", bulk("0123456789")},
		{"nil bulk", "$-1\r\n", Nil},
		{"nil array", "*-1\r\n", Nil},
		{"empty array", "*0\r\n", arr()},
		{"array", "*2\r\n$3\r\nfoo\r\n:42\r\n", arr(bulk("foo"), IntValue(42))},
		{"array with nil", "*3\r\n$1\r\na\r\n$-1\r\n+OK\r\n", arr(bulk("a"), Nil, OK)},
		{"array with error", "*2\r\n-ERR x\r\n:1\r\n", arr(errv("ERR x"), IntValue(1))},
		{"nested", "*2\r\n*2\r\n:1\r\n:2\r\n*1\r\n*0\r\n", arr(arr(IntValue(1), IntValue(2)), arr(arr()))},
		{"nested nil array", "*2\r\n*-1\r\n*1\r\n$-1\r\n", arr(Nil, arr(Nil))},
		{"get+pttl script reply", "*2\r\n$5\r\ntoken\r\n:9981\r\n", arr(bulk("token"), IntValue(9981))},

		// RESP3
		{"null", "_\r\n", Nil},
		{"true", "#t\r\n", IntValue(1)},
		{"false", "#f\r\n", IntValue(0)},
		{"double", ",3.14\r\n", bulk("3.14")},
		{"double inf", ",-inf\r\n", bulk("-inf")},
		{"double exponent", ",1.5e10\r\n", bulk("1.5e10")},
		{"big number", "(3492890328409238509324850943850943825024385\r\n", bulk("3492890328409238509324850943850943825024385")},
		{"verbatim", "=15\r\ntxt:Some string\r\n", bulk("txt:Some string")},
		{"verbatim empty", "=0\r\n\r\n", bulk("")},
		{"map", "%2\r\n+first\r\n:1\r\n+second\r\n:2\r\n", arr(simple("first"), IntValue(1), simple("second"), IntValue(2))},
		{"map empty", "%0\r\n", arr()},
		{"map nested", "%1\r\n$1\r\nk\r\n%1\r\n+a\r\n_\r\n", arr(bulk("k"), arr(simple("a"), Nil))},
		{"set", "~3\r\n:1\r\n:2\r\n:3\r\n", arr(IntValue(1), IntValue(2), IntValue(3))},
		{"push", ">2\r\n+message\r\n$2\r\nhi\r\n", arr(simple("message"), bulk("hi"))},
		{"array of RESP3", "*4\r\n_\r\n#t\r\n,0.5\r\n~1\r\n:7\r\n", arr(Nil, IntValue(1), bulk("0.5"), arr(IntValue(7)))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newReader(tc.in, ReaderLimits{})
			got, err := r.Read()
			if err != nil {
				t.Fatalf("Read(%q) error: %v", tc.in, err)
			}
			if !got.Equal(tc.want) {
				t.Errorf("Read(%q) = %v (kind %d), want %v (kind %d)", tc.in, got, got.Kind, tc.want, tc.want.Kind)
			}
			if _, err := r.Read(); err != io.EOF {
				t.Errorf("Read(%q) left input behind: next Read error %v, want io.EOF", tc.in, err)
			}
		})
	}
}

func TestReadOK(t *testing.T) {
	v, err := readOne("+OK\r\n", ReaderLimits{})
	if err != nil || !v.IsOK() {
		t.Fatalf("Read(+OK) = %v, %v; want OK", v, err)
	}
	for _, in := range []string{"+ok\r\n", "+OKAY\r\n", "$2\r\nOK\r\n", "-OK\r\n"} {
		v, err := readOne(in, ReaderLimits{})
		if err != nil || v.IsOK() {
			t.Errorf("Read(%q) = %v, %v; IsOK must be false", in, v, err)
		}
	}
}

func TestReadSequence(t *testing.T) {
	in := "+OK\r\n:1\r\n$-1\r\n*1\r\n$1\r\nx\r\n-ERR e\r\n"
	want := []Value{OK, IntValue(1), Nil, arr(bulk("x")), errv("ERR e")}
	r := newReader(in, ReaderLimits{})
	for i, w := range want {
		got, err := r.Read()
		if err != nil || !got.Equal(w) {
			t.Fatalf("reply %d = %v, %v; want %v", i, got, err, w)
		}
	}
	if _, err := r.Read(); err != io.EOF {
		t.Errorf("Read at end of stream: %v, want io.EOF", err)
	}
}

func TestReaderBuffered(t *testing.T) {
	r := newReader(":1\r\n:22\r\n", ReaderLimits{})
	if _, err := r.Read(); err != nil {
		t.Fatal(err)
	}
	if got := r.Buffered(); got != len(":22\r\n") {
		t.Errorf("Buffered() = %d after the first reply, want %d", got, len(":22\r\n"))
	}
}

// Decoded values own their memory: reading on (with a tiny buffer that is
// constantly overwritten) never changes a value already returned.
func TestReadValuesDoNotAliasBuffer(t *testing.T) {
	var in strings.Builder
	var want []Value
	for i := range 50 {
		s := fmt.Sprintf("v%03d", i)
		in.WriteString("+" + s + "\r\n-E" + s + "\r\n$4\r\n" + s + "\r\n,1." + s[1:] + "\r\n")
		want = append(want, simple(s), errv("E"+s), bulk(s), bulk("1."+s[1:]))
	}
	r := NewReader(bufio.NewReaderSize(strings.NewReader(in.String()), 16), ReaderLimits{})
	var got []Value
	for range want {
		v, err := r.Read()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, v)
	}
	for i := range want {
		if !got[i].Equal(want[i]) {
			t.Fatalf("value %d = %v after reading on, want %v", i, got[i], want[i])
		}
	}
}

func nested(depth int) string {
	return strings.Repeat("*1\r\n", depth) + ":1\r\n"
}

func nestedValue(depth int) Value {
	v := IntValue(1)
	for range depth {
		v = arr(v)
	}
	return v
}

func TestReadLimits(t *testing.T) {
	for _, tc := range []struct {
		name string
		lim  ReaderLimits
		in   string
		want Value // zero Kind: a protocol error
	}{
		{"bulk at limit", ReaderLimits{MaxBulk: 3}, "$3\r\nabc\r\n", bulk("abc")},
		{"bulk over limit", ReaderLimits{MaxBulk: 3}, "$4\r\nabcd\r\n", Value{}},
		{"verbatim over limit", ReaderLimits{MaxBulk: 3}, "=8\r\ntxt:abcd\r\n", Value{}},
		{"nil bulk under any limit", ReaderLimits{MaxBulk: 1}, "$-1\r\n", Nil},
		{"array at limit", ReaderLimits{MaxElems: 2}, "*2\r\n:1\r\n:2\r\n", arr(IntValue(1), IntValue(2))},
		{"array over limit", ReaderLimits{MaxElems: 2}, "*3\r\n:1\r\n:2\r\n:3\r\n", Value{}},
		{"nested array over limit", ReaderLimits{MaxElems: 2}, "*1\r\n*3\r\n:1\r\n:2\r\n:3\r\n", Value{}},
		{"set over limit", ReaderLimits{MaxElems: 2}, "~3\r\n:1\r\n:2\r\n:3\r\n", Value{}},
		{"push over limit", ReaderLimits{MaxElems: 2}, ">3\r\n:1\r\n:2\r\n:3\r\n", Value{}},
		{"map counts keys and values", ReaderLimits{MaxElems: 2}, "%1\r\n:1\r\n:2\r\n", arr(IntValue(1), IntValue(2))},
		{"map over limit", ReaderLimits{MaxElems: 3}, "%2\r\n:1\r\n:2\r\n:3\r\n:4\r\n", Value{}},
		{"depth at limit", ReaderLimits{MaxDepth: 3}, nested(3), nestedValue(3)},
		{"depth over limit", ReaderLimits{MaxDepth: 3}, nested(4), Value{}},
		{"empty array too deep", ReaderLimits{MaxDepth: 1}, "*1\r\n*0\r\n", Value{}},
		{"nil array at any depth", ReaderLimits{MaxDepth: 1}, "*1\r\n*-1\r\n", arr(Nil)},
		{"map depth", ReaderLimits{MaxDepth: 1}, "%1\r\n:1\r\n~0\r\n", Value{}},
		{"default depth 8", ReaderLimits{}, nested(8), nestedValue(8)},
		{"default depth 9", ReaderLimits{}, nested(9), Value{}},
		{"default elems", ReaderLimits{}, "*1048577\r\n", Value{}},
		{"default bulk", ReaderLimits{}, "$67108865\r\n", Value{}},
		{"default elems, map", ReaderLimits{}, "%524289\r\n", Value{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := readOne(tc.in, tc.lim)
			if tc.want.Kind == KindInvalid {
				if !errors.Is(err, ErrProtocol) {
					t.Errorf("Read(%q) with %+v = %v, %v; want an error wrapping ErrProtocol", tc.in, tc.lim, got, err)
				}
				return
			}
			if err != nil || !got.Equal(tc.want) {
				t.Errorf("Read(%q) with %+v = %v, %v; want %v", tc.in, tc.lim, got, err, tc.want)
			}
		})
	}
}

// allocated returns how many bytes f allocated on the heap.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A length header announcing a huge reply fails without allocating what it
// announces, whatever the limits (a backend, or anything that took its
// address, must not be able to crash or stall the proxy with one line).
func TestReadHugeHeaders(t *testing.T) {
	const budget = 64 << 10
	for _, in := range []string{
		"$9223372036854775807\r\n",
		"=9223372036854775807\r\n",
		"*9223372036854775807\r\n",
		"~9223372036854775807\r\n",
		">9223372036854775807\r\n",
		"%4611686018427387903\r\n", // doubled: 2^63-2 elements
		"$9223372036854775808\r\n", // overflows int64
		"*9223372036854775808\r\n",
		"$99999999999999999999999\r\n",
		"*1\r\n*1\r\n$9223372036854775807\r\n",
	} {
		for _, lim := range []ReaderLimits{{}, {MaxBulk: 1 << 30, MaxElems: 1 << 30, MaxDepth: 100}} {
			var err error
			n := allocated(func() { _, err = readOne(in, lim) })
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("Read(%q) with %+v: error %v, want one wrapping ErrProtocol", in, lim, err)
			}
			if n > budget {
				t.Errorf("Read(%q) with %+v allocated %d bytes, want at most %d", in, lim, n, budget)
			}
		}
	}
}

// An array header within the limits but with no elements behind it allocates
// only a small initial slice, not the announced size.
func TestReadArrayHeaderAllocatesLazily(t *testing.T) {
	for _, in := range []string{"*1048576\r\n", "~1048576\r\n", "%524288\r\n", "*1048576\r\n:1\r\n:2\r\n"} {
		var err error
		n := allocated(func() { _, err = readOne(in, ReaderLimits{}) })
		if !errors.Is(err, io.EOF) {
			t.Errorf("Read(%q): error %v, want io.EOF (the stream ends)", in, err)
		}
		if n > 64<<10 {
			t.Errorf("Read(%q) allocated %d bytes for an announced array of 2^20 elements", in, n)
		}
	}
}

func TestReadMalformed(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
	}{
		{"empty line", "\r\n"},
		{"LF only", "+OK\n"},
		{"LF only, empty", "\n"},
		{"CR in place of CRLF", "+OK\r:1\n"},
		{"unknown type", "?x\r\n"},
		{"attribute type unsupported", "|1\r\n+a\r\n+b\r\n+c\r\n"},
		{"inline text", "hello\r\n"},
		{"int empty", ":\r\n"},
		{"int letters", ":abc\r\n"},
		{"int plus", ":+1\r\n"},
		{"int leading zero", ":01\r\n"},
		{"int space", ": 1\r\n"},
		{"int trailing space", ":1 \r\n"},
		{"int minus zero", ":-0\r\n"},
		{"int overflow", ":9223372036854775808\r\n"},
		{"int underflow", ":-9223372036854775809\r\n"},
		{"int float", ":1.0\r\n"},
		{"bulk no length", "$\r\n"},
		{"bulk bad length", "$abc\r\n"},
		{"bulk length -2", "$-2\r\n"},
		{"bulk length plus", "$+1\r\na\r\n"},
		{"bulk length leading zero", "$01\r\na\r\n"},
		{"bulk not terminated", "$3\r\nabcXY"},
		{"bulk LF only terminator", "$3\r\nabc\n\r\n"},
		{"bulk CR without LF", "$3\r\nabc\rX:1\r\n"},
		{"bulk too long for its length", "$2\r\nabc\r\n"},
		{"verbatim bad length", "=x\r\n"},
		{"array no length", "*\r\n"},
		{"array bad length", "*x\r\n"},
		{"array length -2", "*-2\r\n"},
		{"map length -2", "%-2\r\n"},
		{"set bad length", "~1a\r\n"},
		{"bad element", "*2\r\n:1\r\n?\r\n"},
		{"bad nested element", "*1\r\n*1\r\n:x\r\n"},
		{"line too long", "+" + strings.Repeat("x", 5000) + "\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := readOne(tc.in, ReaderLimits{})
			if !errors.Is(err, ErrProtocol) {
				t.Errorf("Read(%q) = %v, %v; want an error wrapping ErrProtocol", tc.in, v, err)
			}
		})
	}
}

// A stream that ends early is a stream error, returned as is: the reader
// cannot tell a truncated reply from one whose end has not arrived.
func TestReadTruncated(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want error
	}{
		{"", io.EOF},
		{"+OK", io.EOF},
		{"+OK\r", io.EOF},
		{":12", io.EOF},
		{"$3\r\n", io.EOF},
		{"$3\r\nab", io.ErrUnexpectedEOF},
		{"$3\r\nabc", io.ErrUnexpectedEOF},
		{"$3\r\nabc\r", io.ErrUnexpectedEOF},
		{"*2\r\n:1\r\n", io.EOF},
		{"*1\r\n$3\r\na", io.ErrUnexpectedEOF},
	} {
		_, err := readOne(tc.in, ReaderLimits{})
		if !errors.Is(err, tc.want) || errors.Is(err, ErrProtocol) {
			t.Errorf("Read(%q): error %v, want %v (and not a protocol error)", tc.in, err, tc.want)
		}
	}
}

type failingReader struct{ err error }

func (f failingReader) Read([]byte) (int, error) { return 0, f.err }

func TestReadStreamErrorPassedThrough(t *testing.T) {
	boom := errors.New("connection reset")
	r := NewReader(bufio.NewReader(failingReader{boom}), ReaderLimits{})
	if _, err := r.Read(); !errors.Is(err, boom) || errors.Is(err, ErrProtocol) {
		t.Errorf("Read over a failing stream: %v, want %v as is", err, boom)
	}
	r = NewReader(bufio.NewReader(io.MultiReader(strings.NewReader("$5\r\nab"), failingReader{boom})), ReaderLimits{})
	if _, err := r.Read(); !errors.Is(err, boom) {
		t.Errorf("Read of a bulk cut by a failing stream: %v, want %v", err, boom)
	}
}

func TestParseInt(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int64
		ok   bool
	}{
		{"0", 0, true},
		{"1", 1, true},
		{"9", 9, true},
		{"10", 10, true},
		{"-1", -1, true},
		{"-10", -10, true},
		{"1234567890", 1234567890, true},
		{"9223372036854775807", math.MaxInt64, true},
		{"-9223372036854775808", math.MinInt64, true},
		{"9223372036854775806", math.MaxInt64 - 1, true},
		{"-9223372036854775807", math.MinInt64 + 1, true},

		{"", 0, false},
		{"-", 0, false},
		{"+", 0, false},
		{"+1", 0, false},
		{"-0", 0, false},
		{"00", 0, false},
		{"01", 0, false},
		{"-01", 0, false},
		{"007", 0, false},
		{" 1", 0, false},
		{"1 ", 0, false},
		{"1\t", 0, false},
		{"1\r", 0, false},
		{"1\x00", 0, false},
		{"--1", 0, false},
		{"1-", 0, false},
		{"1e3", 0, false},
		{"1.5", 0, false},
		{"0x10", 0, false},
		{"1_000", 0, false},
		{"abc", 0, false},
		{"9223372036854775808", 0, false},
		{"-9223372036854775809", 0, false},
		{"18446744073709551615", 0, false},
		{"18446744073709551616", 0, false},
		{"18446744073709551619", 0, false},
		{"-18446744073709551616", 0, false},
		{"99999999999999999999", 0, false},
		{"100000000000000000000", 0, false},
		{"-99999999999999999999", 0, false},
		{"000000000000000000001", 0, false},
	} {
		got, ok := ParseInt([]byte(tc.in))
		if ok != tc.ok || got != tc.want {
			t.Errorf("ParseInt(%q) = %d, %v; want %d, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

// parseIntOracle is string2ll's contract restated: s is accepted iff it is
// the canonical decimal form of an int64 (which excludes "+", leading zeros,
// spaces and "-0").
func parseIntOracle(s string) (int64, bool) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || strconv.FormatInt(n, 10) != s {
		return 0, false
	}
	return n, true
}

func TestParseIntProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	// Every int64's canonical form parses back.
	for range 100000 {
		n := int64(rng.Uint64()) >> rng.IntN(64)
		s := strconv.FormatInt(n, 10)
		if got, ok := ParseInt([]byte(s)); !ok || got != n {
			t.Fatalf("ParseInt(%q) = %d, %v; want %d, true", s, got, ok, n)
		}
	}
	// Random near-numbers agree with the oracle.
	const alphabet = "0123456789-+ 0123456789"
	for range 200000 {
		b := make([]byte, rng.IntN(23))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		if rng.IntN(2) == 0 && len(b) > 0 { // make canonical-looking input common
			b[0] = "-123456789"[rng.IntN(10)]
		}
		got, ok := ParseInt(b)
		want, wantOK := parseIntOracle(string(b))
		if ok != wantOK || got != want {
			t.Fatalf("ParseInt(%q) = %d, %v; want %d, %v", b, got, ok, want, wantOK)
		}
	}
}

func FuzzParseInt(f *testing.F) {
	for _, s := range []string{"0", "-0", "+1", "01", "9223372036854775807", "-9223372036854775808", "9223372036854775808", "18446744073709551616", " 1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got, ok := ParseInt([]byte(s))
		want, wantOK := parseIntOracle(s)
		if ok != wantOK || got != want {
			t.Errorf("ParseInt(%q) = %d, %v; want %d, %v", s, got, ok, want, wantOK)
		}
	})
}

// appendValue encodes v in RESP2 (an error with a line feed, which only a
// RESP3 blob error can carry, as one), the inverse of Reader.
func appendValue(b []byte, v Value) []byte {
	switch v.Kind {
	case KindSimple:
		return append(append(append(b, '+'), v.Str...), '\r', '\n')
	case KindError:
		if bytes.IndexByte(v.Str, '\n') >= 0 { // only a RESP3 blob error can carry it
			b = append(strconv.AppendInt(append(b, '!'), int64(len(v.Str)), 10), '\r', '\n')
			return append(append(b, v.Str...), '\r', '\n')
		}
		return append(append(append(b, '-'), v.Str...), '\r', '\n')
	case KindInt:
		return append(strconv.AppendInt(append(b, ':'), v.Int, 10), '\r', '\n')
	case KindBulk:
		return AppendBulk(b, v.Str)
	case KindNil:
		return append(b, "$-1\r\n"...)
	case KindArray:
		b = AppendArrayHeader(b, len(v.Elems))
		for _, e := range v.Elems {
			b = appendValue(b, e)
		}
		return b
	}
	panic("appendValue: invalid kind")
}

// fuzzLimits are small enough that a whole fuzz run stays fast, and large
// enough that allocating an announced size (rather than what arrives) shows.
var fuzzLimits = ReaderLimits{MaxBulk: 1 << 16, MaxElems: 1 << 16, MaxDepth: 8}

// checkDecoded verifies the limits hold for a decoded value.
func checkDecoded(t *testing.T, v Value, depth int) {
	t.Helper()
	switch v.Kind {
	case KindSimple, KindError, KindInt, KindNil:
	case KindBulk:
		if len(v.Str) > fuzzLimits.MaxBulk {
			t.Fatalf("bulk of %d bytes decoded with MaxBulk %d", len(v.Str), fuzzLimits.MaxBulk)
		}
	case KindArray:
		if len(v.Elems) > fuzzLimits.MaxElems {
			t.Fatalf("array of %d elements decoded with MaxElems %d", len(v.Elems), fuzzLimits.MaxElems)
		}
		if depth >= fuzzLimits.MaxDepth {
			t.Fatalf("array at depth %d decoded with MaxDepth %d", depth, fuzzLimits.MaxDepth)
		}
		for _, e := range v.Elems {
			checkDecoded(t, e, depth+1)
		}
	default:
		t.Fatalf("decoded a value of invalid kind %d", v.Kind)
	}
}

// FuzzReader feeds arbitrary bytes to the Reader: it must never panic, only
// fail with a stream error or one wrapping ErrProtocol, decode only values
// within its limits, allocate in proportion to the input (plus at most one
// bulk buffer within MaxBulk), and decode values that survive a RESP2 round
// trip.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"+OK\r\n",
		"-ERR x\r\n:1\r\n$3\r\nabc\r\n$-1\r\n*-1\r\n",
		"*2\r\n*1\r\n$0\r\n\r\n:-9223372036854775808\r\n",
		"%1\r\n+k\r\n~2\r\n#t\r\n,1.5\r\n",
		"=15\r\ntxt:Some string\r\n(12345678901234567890\r\n>1\r\n_\r\n",
		"$65536\r\n",
		"*65536\r\n",
		"*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n",
		":01\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var vals []Value
		var err error
		r := NewReader(bufio.NewReaderSize(bytes.NewReader(data), 4096), fuzzLimits)
		n := allocated(func() {
			// Every reply takes at least 3 bytes, so the stream must end.
			for range len(data)/3 + 1 {
				var v Value
				if v, err = r.Read(); err != nil {
					return
				}
				vals = append(vals, v)
			}
		})
		if err == nil {
			t.Fatalf("decoded %d replies from %d bytes without reaching the end", len(vals), len(data))
		}
		if err != io.EOF && err != io.ErrUnexpectedEOF && !errors.Is(err, ErrProtocol) {
			t.Fatalf("Read error %v (%T) is neither a stream end nor a protocol error", err, err)
		}
		// Arrays cost up to 64 elements (4 KiB) from a header of 5 bytes.
		if budget := uint64(1024*len(data) + 2*(fuzzLimits.MaxBulk+2) + 4096 + 256<<10); n > budget {
			t.Fatalf("decoding %d bytes allocated %d bytes, budget %d", len(data), n, budget)
		}
		for _, v := range vals {
			checkDecoded(t, v, 0)
			enc := appendValue(nil, v)
			back, err := NewReader(bufio.NewReader(bytes.NewReader(enc)), fuzzLimits).Read()
			if err != nil || !back.Equal(v) {
				t.Fatalf("round trip of %v through %q = %v, %v", v, enc, back, err)
			}
		}
	})
}
