package proxy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"net"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// ---- driving the reader the way client.serve does ----

// driveResult is what the connection loop would see: the commands, then
// the error that ended it (nil at a clean EOF), and whether bytes were left
// unparsed at EOF.
type driveResult struct {
	cmds     [][]string
	err      error
	leftover bool
	fills    int
}

// drive runs r like client.serve: next() until it returns nil, then fill().
func drive(r *reader) driveResult {
	var res driveResult
	for {
		for {
			args, err := r.next()
			if err != nil {
				res.err = err
				return res
			}
			if args == nil {
				break
			}
			cmd := make([]string, len(args))
			for i, a := range args {
				cmd[i] = string(a)
			}
			res.cmds = append(res.cmds, cmd)
		}
		res.fills++
		if res.fills > 10_000_000 {
			panic("reader does not make progress")
		}
		if err := r.fill(); err != nil {
			if err != io.EOF {
				res.err = err
			}
			res.leftover = r.buffered()
			return res
		}
	}
}

// chunkReader returns its data in chunks of random sizes in [1, max].
type chunkReader struct {
	data []byte
	rnd  *rand.Rand
	max  int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := min(1+c.rnd.Intn(c.max), len(p), len(c.data))
	copy(p, c.data[:n])
	c.data = c.data[n:]
	return n, nil
}

// chunkings are the ways a byte stream may arrive.
func chunkings(in string) map[string]func() io.Reader {
	m := map[string]func() io.Reader{
		"whole":  func() io.Reader { return strings.NewReader(in) },
		"1-byte": func() io.Reader { return iotest.OneByteReader(strings.NewReader(in)) },
	}
	for _, max := range []int{3, 17, 4000} {
		for seed := int64(1); seed <= 2; seed++ {
			m[fmt.Sprintf("random<=%d/%d", max, seed)] = func() io.Reader {
				return &chunkReader{data: []byte(in), rnd: rand.New(rand.NewSource(seed)), max: max}
			}
		}
	}
	if len(in) > 20_000 { // one byte at a time is slow for no extra insight
		delete(m, "1-byte")
	}
	return m
}

func runReader(src io.Reader, lim Limits, authed bool) driveResult {
	lim.defaults()
	r := newReader(src, &lim)
	r.authed = authed
	return drive(r)
}

// ---- unit tables ----

func bulks(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

func cmds(c ...[]string) [][]string { return c }
func cmd(args ...string) []string   { return args }

type readerCase struct {
	name     string
	in       string
	lim      Limits
	unauthed bool
	want     [][]string
	err      error // a ProtocolError (compared by text) or errCommandTooBig
	leftover bool
}

func readerCases() []readerCase {
	many := func(n int) []string {
		a := make([]string, n)
		for i := range a {
			a[i] = "a"
		}
		return a
	}
	return []readerCase{
		{name: "multibulk", in: bulks("SET", "k", "v"), want: cmds(cmd("SET", "k", "v"))},
		{name: "binary bulk", in: "*2\r\n$4\r\nECHO\r\n$6\r\na\r\n\x00\xff\n\r\n", want: cmds(cmd("ECHO", "a\r\n\x00\xff\n"))},
		{name: "empty bulk", in: bulks("ECHO", ""), want: cmds(cmd("ECHO", ""))},
		{
			name: "pipelined",
			in:   bulks("PING") + bulks("ECHO", "hello") + "PING\r\n" + bulks("SET", "k", "v", "NX", "PX", "100") + "GET k\n",
			want: cmds(cmd("PING"), cmd("ECHO", "hello"), cmd("PING"), cmd("SET", "k", "v", "NX", "PX", "100"), cmd("GET", "k")),
		},
		{
			// Redis takes the two bytes after the data as CRLF without looking.
			name: "bulk terminator not checked",
			in:   "*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n",
			want: cmds(cmd("PING"), cmd("PING")),
		},
		{
			name: "empty commands ignored",
			in:   "\r\n\n   \r\n\t\r\n*0\r\n*-1\r\n*-5\r\n" + bulks("PING") + "*0\r\n\r\n",
			want: cmds(cmd("PING")),
		},
		{name: "inline", in: "SET k v\r\n", want: cmds(cmd("SET", "k", "v"))},
		{name: "inline LF only", in: "SET k v\nGET k\n", want: cmds(cmd("SET", "k", "v"), cmd("GET", "k"))},
		{name: "inline spaces", in: "  SET \t k   v  \r\n", want: cmds(cmd("SET", "k", "v"))},
		{
			name: "inline quotes and escapes",
			in:   `set "a b" 'c d' "\x41\x4a" "\x4g" "a\nb\r\t\b\a\"\\\q" 'it\'s' 'a\nb' a\nb "" ''` + "\r\n",
			want: cmds(cmd("set", "a b", "c d", "AJ", "x4g", "a\nb\r\t\b\a\"\\q", "it's", `a\nb`, `a\nb`, "", "")),
		},
		{name: "inline \\v and \\f stay in a token", in: "a\vb c\fd\r\n", want: cmds(cmd("a\vb", "c\fd"))},
		{name: "inline CR splits", in: "a\rb\r\n", want: cmds(cmd("a", "b"))},
		{name: "inline of MaxInline bytes", in: strings.Repeat("a", 64<<10) + "\r\n", want: cmds(cmd(strings.Repeat("a", 64<<10)))},
		{name: "MaxArgs args", in: bulks(many(4096)...), want: cmds(many(4096))},
		{name: "MaxBulk bytes", in: bulks("ECHO", strings.Repeat("x", 512<<10)), want: cmds(cmd("ECHO", strings.Repeat("x", 512<<10)))},
		{name: "incomplete at EOF", in: "*2\r\n$3\r\nfoo\r\n$3\r\nba", leftover: true},
		{name: "incomplete inline at EOF", in: bulks("PING") + "PING", want: cmds(cmd("PING")), leftover: true},
		{name: "long count line is incomplete, not too big", in: "*" + strings.Repeat("1", 64<<10-1), leftover: true},

		// Protocol errors.
		{name: "mbulk non-numeric", in: "*abc\r\n", err: errInvalidMultibulk},
		{name: "mbulk empty", in: "*\r\n", err: errInvalidMultibulk},
		{name: "mbulk plus sign", in: "*+1\r\n", err: errInvalidMultibulk},
		{name: "mbulk leading zero", in: "*01\r\n", err: errInvalidMultibulk},
		{name: "mbulk space", in: "*1 \r\n", err: errInvalidMultibulk},
		{name: "mbulk > 2^31-1", in: "*2147483648\r\n", err: errInvalidMultibulk},
		{name: "mbulk int64 max", in: "*9223372036854775807\r\n", err: errInvalidMultibulk},
		{name: "mbulk overflow", in: "*92233720368547758070\r\n", err: errInvalidMultibulk},
		{name: "mbulk > MaxArgs", in: "*4097\r\n", err: errInvalidMultibulk},
		{name: "mbulk > custom MaxArgs", in: bulks("a", "b", "c"), lim: Limits{MaxArgs: 2}, err: errInvalidMultibulk},
		{name: "bulk -1", in: "*1\r\n$-1\r\n", err: errInvalidBulk},
		{name: "bulk non-numeric", in: "*1\r\n$abc\r\n", err: errInvalidBulk},
		{name: "bulk empty", in: "*1\r\n$\r\n", err: errInvalidBulk},
		{name: "bulk int64 max", in: "*1\r\n$9223372036854775807\r\n", err: errInvalidBulk},
		{name: "bulk > MaxBulk", in: "*1\r\n$524289\r\n", err: errInvalidBulk},
		{name: "second bulk bad", in: "*2\r\n$3\r\nGET\r\n$x\r\n", err: errInvalidBulk},
		{name: "expected $ got +", in: "*1\r\n+OK\r\n", err: ProtocolError("expected '$', got '+'")},
		{name: "expected $ got :", in: "*2\r\n$1\r\na\r\n:1\r\n", err: ProtocolError("expected '$', got ':'")},
		{name: "expected $ got *", in: "*2\r\n$1\r\na\r\n*1\r\n$4\r\nPING\r\n", err: ProtocolError("expected '$', got '*'")},
		{name: "expected $ got CR", in: "*1\r\n\r\n", err: ProtocolError("expected '$', got ' '")},
		{name: "expected $ got LF", in: "*1\r\n\n\r\n", err: ProtocolError("expected '$', got ' '")},
		{name: "expected $ got 0xff", in: "*1\r\n\xff\r\n", err: ProtocolError("expected '$', got '\xff'")},
		{name: "not $ waits for its line", in: "*1\r\n+OK", leftover: true},
		{name: "too big inline", in: strings.Repeat("a", 64<<10+1), err: errTooBigInline},
		{name: "too big inline, line too long", in: strings.Repeat("a", 64<<10+1) + "\r\n", err: errTooBigInline},
		{name: "too big inline custom", in: "PING PING PING\r\n", lim: Limits{MaxInline: 5}, err: errTooBigInline},
		{name: "unbalanced double", in: "set \"a b\r\n", err: errUnbalancedQuotes},
		{name: "closing quote then text", in: "set \"a\"b c\r\n", err: errUnbalancedQuotes},
		{name: "unbalanced single", in: "set 'a b\r\n", err: errUnbalancedQuotes},
		{name: "closing single then text", in: "set 'a'b\r\n", err: errUnbalancedQuotes},
		{name: "lone quote", in: "\"\r\n", err: errUnbalancedQuotes},
		{name: "escaped closing quote", in: "set \"a\\\"\r\n", err: errUnbalancedQuotes},
		{name: "inline > MaxArgs", in: "a b c\r\n", lim: Limits{MaxArgs: 2}, err: errInvalidMultibulk},
		{name: "too big mbulk count", in: "*" + strings.Repeat("1", 64<<10), err: errTooBigMbulkCount},
		{name: "too big bulk count", in: "*1\r\n$" + strings.Repeat("1", 64<<10), err: errTooBigBulkCount},
		{name: "too big bulk count after an arg", in: "*2\r\n$1\r\na\r\n$" + strings.Repeat("1", 64<<10), err: errTooBigBulkCount},
		{name: "not $ and no CR is a too big count", in: "*1\r\n+" + strings.Repeat("1", 64<<10), err: errTooBigBulkCount},

		// MaxCommandBytes.
		{name: "bulk header beyond max_command_bytes", in: "*1\r\n$2000\r\n", lim: Limits{MaxCommandBytes: 1024}, err: errCommandTooBig},
		{name: "args beyond max_command_bytes", in: bulks("SET", strings.Repeat("k", 500), strings.Repeat("v", 500)), lim: Limits{MaxCommandBytes: 1024}, err: errCommandTooBig},
		{name: "many small args beyond max_command_bytes", in: bulks(many(100)...), lim: Limits{MaxCommandBytes: 200}, err: errCommandTooBig},
		{name: "exactly max_command_bytes", in: bulks("SET", strings.Repeat("k", 50)), lim: Limits{MaxCommandBytes: len(bulks("SET", strings.Repeat("k", 50)))}, want: cmds(cmd("SET", strings.Repeat("k", 50)))},
		{name: "one byte over max_command_bytes", in: bulks("SET", strings.Repeat("k", 51)), lim: Limits{MaxCommandBytes: len(bulks("SET", strings.Repeat("k", 50)))}, err: errCommandTooBig},
		{name: "inline beyond max_command_bytes", in: strings.Repeat("a", 200) + "\r\n", lim: Limits{MaxCommandBytes: 100, MaxInline: 1000}, err: errCommandTooBig},
		{name: "inline at max_command_bytes", in: strings.Repeat("a", 99) + "\n", lim: Limits{MaxCommandBytes: 100, MaxInline: 1000}, want: cmds(cmd(strings.Repeat("a", 99)))},

		// Before AUTH.
		{name: "unauth args ok", in: bulks(many(10)...), unauthed: true, want: cmds(many(10))},
		{name: "unauth multibulk", in: "*11\r\n", unauthed: true, err: errUnauthMultibulk},
		{name: "unauth multibulk > MaxArgs", in: "*5000\r\n", unauthed: true, err: errUnauthMultibulk},
		{name: "unauth multibulk > 2^31-1 is invalid", in: "*2147483648\r\n", unauthed: true, err: errInvalidMultibulk},
		{name: "unauth bulk ok", in: bulks("AUTH", strings.Repeat("p", 16384)), unauthed: true, want: cmds(cmd("AUTH", strings.Repeat("p", 16384)))},
		{name: "unauth bulk", in: "*2\r\n$4\r\nAUTH\r\n$16385\r\n", unauthed: true, err: errUnauthBulk},
		{name: "unauth bulk > MaxBulk is invalid", in: "*1\r\n$524289\r\n", unauthed: true, err: errInvalidBulk},
		{name: "unauth bulk int64 max is invalid", in: "*1\r\n$9223372036854775807\r\n", unauthed: true, err: errInvalidBulk},
		{name: "unauth custom limits", in: bulks("a", "b", "c"), lim: Limits{PreAuthArgs: 2}, unauthed: true, err: errUnauthMultibulk},
		{name: "unauth inline has no arg limit", in: strings.Repeat("a ", 11) + "\r\n", unauthed: true, want: cmds(many(11))},
		{name: "authed after AUTH: 11 args", in: bulks(many(11)...), want: cmds(many(11))},
	}
}

func sameErr(got, want error) bool {
	if got == nil || want == nil {
		return got == want
	}
	return got.Error() == want.Error() && reflect.TypeOf(got) == reflect.TypeOf(want)
}

func TestReaderTable(t *testing.T) {
	for _, tc := range readerCases() {
		for how, src := range chunkings(tc.in) {
			t.Run(tc.name+"/"+how, func(t *testing.T) {
				res := runReader(src(), tc.lim, !tc.unauthed)
				if !sameErr(res.err, tc.err) {
					t.Fatalf("error %v (%T), want %v", res.err, res.err, tc.err)
				}
				if tc.err == nil {
					if !reflect.DeepEqual(res.cmds, tc.want) {
						t.Fatalf("commands\n%q\nwant\n%q", trunc(res.cmds), trunc(tc.want))
					}
					if res.leftover != tc.leftover {
						t.Fatalf("leftover %v, want %v", res.leftover, tc.leftover)
					}
				} else if !reflect.DeepEqual(res.cmds, tc.want) {
					// Commands before the error still run.
					t.Fatalf("commands before the error %q, want %q", trunc(res.cmds), trunc(tc.want))
				}
			})
		}
	}
}

func trunc(c [][]string) string {
	s := fmt.Sprintf("%q", c)
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// Commands before a protocol error are delivered, then the error.
func TestReaderCommandsBeforeError(t *testing.T) {
	in := bulks("PING") + "ECHO a\r\n" + "*1\r\n$-1\r\n" + bulks("PING")
	for how, src := range chunkings(in) {
		res := runReader(src(), Limits{}, true)
		if !sameErr(res.err, errInvalidBulk) || !reflect.DeepEqual(res.cmds, cmds(cmd("PING"), cmd("ECHO", "a"))) {
			t.Errorf("%s: got %q, %v", how, res.cmds, res.err)
		}
	}
}

func TestProtocolErrorText(t *testing.T) {
	if got := errInvalidBulk.Error(); got != "Protocol error: invalid bulk length" {
		t.Fatalf("Error() = %q", got)
	}
}

// A hostile header must fail at once: no allocation sized by the header,
// no waiting for (or reading) the data it announces, no loop.
func TestReaderHostileHeaderFailsFast(t *testing.T) {
	cases := []struct {
		in       string
		unauthed bool
		err      error
	}{
		{"*1\r\n$9223372036854775807\r\n", false, errInvalidBulk},
		{"*1\r\n$9223372036854775807\r\n", true, errInvalidBulk},
		{"*9223372036854775807\r\n", false, errInvalidMultibulk},
		{"*2147483647\r\n", false, errInvalidMultibulk},
		{"*2147483647\r\n", true, errUnauthMultibulk},
		{"*1\r\n$2147483647\r\n", false, errInvalidBulk},
		{"*1\r\n$536870912\r\n", false, errInvalidBulk},
		{"*1\r\n$524288\r\n", false, errCommandTooBig}, // a MaxBulk argument does not fit 1 KiB
		{"*1\r\n$16385\r\n", true, errUnauthBulk},
	}
	for _, tc := range cases {
		lim := Limits{MaxCommandBytes: 1024}
		if tc.err != errCommandTooBig {
			lim = Limits{}
		}
		lim.defaults()
		// The header, then an endless stream of data.
		src := &endless{head: []byte(tc.in)}
		r := newReader(src, &lim)
		r.authed = !tc.unauthed
		res := drive(r)
		if !sameErr(res.err, tc.err) {
			t.Fatalf("%q: error %v, want %v", tc.in, res.err, tc.err)
		}
		if res.fills != 1 || len(r.buf) != readChunk {
			t.Fatalf("%q: %d fills, buffer %d bytes: want 1 fill and the initial %d bytes", tc.in, res.fills, len(r.buf), readChunk)
		}
		// Parsing the header allocates nothing.
		allocs := testing.AllocsPerRun(100, func() {
			r.start = 0
			if _, err := r.next(); err != tc.err {
				panic(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("%q: %v allocations per parse", tc.in, allocs)
		}
	}
}

// endless returns head, then 'x' bytes forever.
type endless struct{ head []byte }

func (e *endless) Read(p []byte) (int, error) {
	n := copy(p, e.head)
	e.head = e.head[n:]
	for i := n; i < len(p); i++ {
		p[i] = 'x'
	}
	return len(p), nil
}

// A slow client announcing a large (allowed) argument makes the buffer grow
// only as its bytes actually arrive.
func TestReaderBufferGrowsWithData(t *testing.T) {
	lim := Limits{}
	lim.defaults()
	in := "*1\r\n$500000\r\n" + strings.Repeat("x", 1000)
	r := newReader(strings.NewReader(in), &lim)
	r.authed = true
	res := drive(r)
	if res.err != nil || len(res.cmds) != 0 || !res.leftover {
		t.Fatalf("got %+v", res)
	}
	if len(r.buf) != readChunk {
		t.Fatalf("buffer grew to %d bytes for %d bytes of input", len(r.buf), len(in))
	}
}

// ---- splitArgs ----

func TestSplitArgs(t *testing.T) {
	cases := []struct {
		line string
		want []string
		err  error
	}{
		{"", nil, nil},
		{"   \t ", nil, nil},
		{"a", []string{"a"}, nil},
		{"  a  b  ", []string{"a", "b"}, nil},
		{`"a b" c`, []string{"a b", "c"}, nil},
		{`"\x41\x62\x7A\xff"`, []string{"Abz\xff"}, nil},
		{`"\x4"`, []string{"x4"}, nil},
		{`"\n\r\t\b\a\\\"\'\z"`, []string{"\n\r\t\b\a\\\"'z"}, nil},
		{`'\x41 \n \\ \''`, []string{`\x41 \n \\ '`}, nil},
		{`a\x41"b"`, []string{`a\x41b`}, nil}, // a quote inside a bare token opens a quoted part
		{`""`, []string{""}, nil},
		{`"" ''`, []string{"", ""}, nil},
		{`"a"` + "\t" + `'b'`, []string{"a", "b"}, nil},
		{"\"a\"\v", []string{"a"}, nil},
		{"a\vb\fc", []string{"a\vb\fc"}, nil},
		{"\va\f", []string{"a\f"}, nil},
		{`"a`, nil, errUnbalancedQuotes},
		{`'a`, nil, errUnbalancedQuotes},
		{`"a"b`, nil, errUnbalancedQuotes},
		{`'a'b`, nil, errUnbalancedQuotes},
		{`"a\"`, nil, errUnbalancedQuotes},
		{`"a\`, nil, errUnbalancedQuotes},
		{`'a\'`, nil, errUnbalancedQuotes},
	}
	for _, tc := range cases {
		got, err := splitArgs([]byte(tc.line), nil, 100)
		if err != tc.err {
			t.Errorf("splitArgs(%q) error %v, want %v", tc.line, err, tc.err)
			continue
		}
		if tc.err != nil {
			continue
		}
		var gs []string
		for _, a := range got {
			gs = append(gs, string(a))
		}
		if !reflect.DeepEqual(gs, tc.want) {
			t.Errorf("splitArgs(%q) = %q, want %q", tc.line, gs, tc.want)
		}
	}
	if _, err := splitArgs([]byte("a b c"), nil, 2); err != errInvalidMultibulk {
		t.Errorf("3 args with max 2: %v", err)
	}
	if got, err := splitArgs([]byte("a b"), nil, 2); err != nil || len(got) != 2 {
		t.Errorf("2 args with max 2: %q %v", got, err)
	}
}

// ---- golden comparison with a real Redis ----

// startRedis starts a real redis-server (redisproc.Start) for the
// comparisons with Redis's own wording, and returns its address. A missing
// binary fails the test: these comparisons are the evidence that the proxy
// words things as Redis does.
func startRedis(t *testing.T, extra ...string) string {
	t.Helper()
	s, err := redisproc.Start(t.TempDir(), extra...)
	if err != nil {
		t.Fatalf("%v: run the README's test command, ./test.sh, which installs redis-server", err)
	}
	t.Cleanup(s.Stop)
	return s.Addr
}

// redisErr is an error reply, without its '-'.
type redisErr string

func isRedisErr(v any, prefix string) bool {
	e, ok := v.(redisErr)
	return ok && strings.HasPrefix(string(e), prefix)
}

// readReply reads one RESP2 reply: string (simple), redisErr, int64,
// []byte (bulk, nil for a null), []any (nil for a null array).
func readReply(br *bufio.Reader) (any, error) {
	line, err := br.ReadBytes('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("bad reply line %q", line)
	}
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return redisErr(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return []byte(nil), nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(br, b); err != nil {
			return nil, err
		}
		return b[:n], nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return []any(nil), nil
		}
		a := make([]any, n)
		for i := range a {
			if a[i], err = readReply(br); err != nil {
				return nil, err
			}
		}
		return a, nil
	}
	return nil, fmt.Errorf("bad reply line %q", line)
}

// redisRaw sends raw bytes on a fresh connection and returns every reply
// until Redis closes the connection.
func redisRaw(t *testing.T, addr string, in []byte) []any {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	go c.Write(in) // a protocol error may close the connection before all is read
	br := bufio.NewReader(c)
	var replies []any
	for {
		v, err := readReply(br)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				t.Fatalf("%q: Redis neither replied a protocol error nor closed (replies so far %q)", short(in), replies)
			}
			return replies // EOF or reset: Redis closed the connection
		}
		replies = append(replies, v)
	}
}

// redisProtocolError returns the text of Redis's protocol error reply, as
// our ProtocolError.Error() words it, or "" if Redis had none.
func redisProtocolError(replies []any) string {
	for _, v := range replies {
		if isRedisErr(v, "ERR Protocol error: ") {
			return strings.TrimPrefix(string(v.(redisErr)), "ERR ")
		}
	}
	return ""
}

func short(b []byte) string {
	if len(b) > 80 {
		return string(b[:80]) + fmt.Sprintf("...(%d bytes)", len(b))
	}
	return string(b)
}

// goldenLimits are our limits set to Redis 7's defaults (no argument count
// limit, proto-max-bulk-len 512 MiB, 64 KiB inline, 10 arguments and 16 KiB
// before AUTH), so that the same input must give the same error.
var goldenLimits = Limits{
	MaxArgs:         1<<31 - 1,
	MaxBulk:         512 << 20,
	MaxInline:       64 << 10,
	MaxCommandBytes: 1 << 40,
	PreAuthArgs:     10,
	PreAuthBulk:     16 << 10,
}

const quitCmd = "*1\r\n$4\r\nQUIT\r\n"

// Each input either makes Redis reply a protocol error and close, or ends
// with QUIT so that Redis closes. Inputs a protocol error ends are not
// followed by more bytes, so Redis reads them all before closing.
var goldenProtocolInputs = []string{
	"*abc\r\n",
	"*\r\n",
	"*+1\r\n",
	"*01\r\n",
	"*1 \r\n",
	"*-\r\n",
	"*2147483648\r\n",
	"*9223372036854775807\r\n",
	"*9223372036854775808\r\n",
	"*92233720368547758070\r\n",
	"*1\r\n$-1\r\n",
	"*1\r\n$abc\r\n",
	"*1\r\n$\r\n",
	"*1\r\n$01\r\n",
	"*1\r\n$9223372036854775807\r\n",
	"*1\r\n$536870913\r\n",
	"*1\r\n+OK\r\n",
	"*1\r\n:1\r\n",
	"*2\r\n$1\r\na\r\n*1\r\n",
	"*1\r\n\r\n",
	"*1\r\n\n\r\n",
	"*1\r\n\xff\r\n",
	"*1\r\nx\r\n",
	"set \"a b\r\n",
	"set \"a\"b c\r\n",
	"set 'a b\r\n",
	"set 'a'b\r\n",
	"\"\r\n",
	"set \"a\\\"\r\n",
	"set \"a\\\r\n",
	"PING\r\nset \"a\r\n",
	strings.Repeat("a", 64<<10+1),
	"*" + strings.Repeat("1", 64<<10),
	"*1\r\n$" + strings.Repeat("1", 64<<10),
	"*1\r\n+" + strings.Repeat("1", 64<<10),
	"*2\r\n$1\r\na\r\n$" + strings.Repeat("1", 64<<10),
	"*" + strings.Repeat("1", 64<<10-2) + "\r\n", // long but complete: invalid, not too big
	// No protocol error: our reader must not find one either.
	"*0\r\n*-1\r\n\r\n" + quitCmd,
	"*1\r\n$4\r\nPINGxx" + quitCmd,
	"PING \"a b\" 'c'\r\n" + quitCmd,
	"PING a\vb\r\n" + quitCmd,
}

// Before AUTH (Redis with requirepass).
var goldenUnauthInputs = []string{
	"*11\r\n",
	"*5000\r\n",
	"*2147483648\r\n",
	"*abc\r\n",
	"*1\r\n$16385\r\n",
	"*1\r\n$-1\r\n",
	"*1\r\n$536870913\r\n",
	"*1\r\n$9223372036854775807\r\n",
	"*1\r\n+OK\r\n",
	"*10\r\n" + strings.Repeat("$1\r\na\r\n", 10) + quitCmd,
	"*1\r\n$16384\r\n" + strings.Repeat("a", 16384) + "\r\n" + quitCmd,
	strings.Repeat("a ", 20) + "\r\n" + quitCmd, // inline: no pre-auth limit
}

func TestReaderGoldenRedis(t *testing.T) {
	t.Run("authed", func(t *testing.T) {
		compareProtocolErrors(t, startRedis(t), goldenProtocolInputs, true)
	})
	t.Run("unauthed", func(t *testing.T) {
		compareProtocolErrors(t, startRedis(t, "--requirepass", "golden-secret"), goldenUnauthInputs, false)
	})
}

func compareProtocolErrors(t *testing.T, addr string, inputs []string, authed bool) {
	for _, in := range inputs {
		want := redisProtocolError(redisRaw(t, addr, []byte(in)))
		for how, src := range chunkings(in) {
			res := runReader(src(), goldenLimits, authed)
			got := ""
			if res.err != nil {
				var pe ProtocolError
				if !errors.As(res.err, &pe) {
					t.Errorf("%q (%s): non-protocol error %v; Redis: %q", short([]byte(in)), how, res.err, want)
					continue
				}
				got = res.err.Error()
			}
			if got != want {
				t.Errorf("%q (%s): reader error %q, Redis %q", short([]byte(in)), how, got, want)
			}
		}
	}
}

// splitArgs against Redis's own sdssplitargs: Redis echoes the tokens of an
// inline EVAL "return ARGV" 0 <line>.
func TestSplitArgsGoldenRedis(t *testing.T) {
	addr := startRedis(t)
	lines := []string{
		`a b c`,
		`"a b" 'c d' e`,
		`"\x41\x4a\x7a\xFF" "\x4" "\x" "\xZZ"`,
		`"\n\r\t\b\a\\\"\'\z\0"`,
		`'\x41 \n \\ \'' 'it\'s'`,
		`a\x41"b" c'd'`,
		`"" '' ""`,
		"a\vb c\fd",
		"\va\f\t\"b\"\v",
		"a\rb",
		"  x   \t  y  ",
		"\"a\"\t'b'",
		"caf\xc3\xa9 \xff\xfe",
		`"a`,
		`'a`,
		`"a"b`,
		`'a'b`,
		`"a\"`,
		`'a\'`,
	}
	for _, line := range lines {
		replies := redisRaw(t, addr, []byte(`EVAL "return ARGV" 0 `+line+"\r\n"+"QUIT\r\n"))
		if len(replies) == 0 {
			t.Fatalf("%q: no reply", line)
		}
		var want []string
		wantErr := ""
		switch v := replies[0].(type) {
		case []any:
			for _, e := range v {
				want = append(want, string(e.([]byte)))
			}
		case redisErr:
			wantErr = strings.TrimPrefix(string(v), "ERR ")
		default:
			t.Fatalf("%q: reply %q", line, v)
		}
		args, err := splitArgs([]byte(line), nil, 1000)
		if wantErr != "" {
			if err == nil || err.Error() != wantErr {
				t.Errorf("%q: splitArgs error %v, Redis %q", line, err, wantErr)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: splitArgs error %v, Redis split it into %q", line, err, want)
			continue
		}
		var got []string
		for _, a := range args {
			got = append(got, string(a))
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%q: splitArgs %q, Redis %q", line, got, want)
		}
	}
}

// A multibulk command arriving in pieces is parsed once: headers already
// read are not read again on the next fill (as Redis keeps multibulklen),
// so a client trickling a many-argument command costs linear work.
func TestReaderResumesMultibulk(t *testing.T) {
	lim := Limits{}
	lim.defaults()
	pr, pw := io.Pipe()
	r := newReader(pr, &lim)
	r.authed = true
	feed := func(s string) {
		go pw.Write([]byte(s))
		if err := r.fill(); err != nil {
			t.Fatal(err)
		}
	}
	feed("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1")
	if args, err := r.next(); args != nil || err != nil {
		t.Fatalf("next = %q, %v; want more input needed", args, err)
	}
	if r.mbCount != 3 || len(r.spans) != 2 {
		t.Fatalf("state after 2 of 3 arguments: count %d, %d spans", r.mbCount, len(r.spans))
	}
	// Spoil the headers already parsed: a parser starting over would fail.
	r.buf[r.start] = '!'
	r.buf[r.start+4] = '+'
	feed("\r\nv\r\n")
	args, err := r.next()
	if err != nil || len(args) != 3 || string(args[0]) != "SET" || string(args[1]) != "k" || string(args[2]) != "v" {
		t.Fatalf("next = %q, %v", args, err)
	}
	if r.mbCount != 0 {
		t.Fatalf("state not reset: count %d", r.mbCount)
	}
	// The next command parses from scratch.
	feed("PING\r\n")
	if args, err := r.next(); err != nil || len(args) != 1 || string(args[0]) != "PING" {
		t.Fatalf("next = %q, %v", args, err)
	}
}
