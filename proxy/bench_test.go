package proxy

import (
	"bytes"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

var setCmd = []byte("*6\r\n$3\r\nSET\r\n$14\r\nlock:orders:42\r\n$36\r\n3f2504e0-4f89-11d3-9a0c-0305e82c3301\r\n$2\r\nNX\r\n$2\r\nPX\r\n$5\r\n30000\r\n")

// Parsing a client's SET NX PX from the connection buffer.
func BenchmarkParseSetCommand(b *testing.B) {
	b.ReportAllocs()
	lim := Limits{}
	lim.defaults()
	rd := newReader(bytes.NewReader(nil), &lim)
	rd.authed = true
	now := time.Now()
	for i := 0; i < b.N; i++ {
		rd.buf = append(rd.buf[:0], setCmd...)
		rd.start, rd.end = 0, len(setCmd)
		args, err := rd.next()
		if err != nil || len(args) != 6 {
			b.Fatal(err)
		}
		if _, msg := parseSet(args, now, time.Minute); msg != "" {
			b.Fatal(msg)
		}
	}
}

// A whole lock command through the front end: parse, fan out to five
// (in-process, instant) backends, decide, encode the reply.
func BenchmarkSetThroughFrontEnd(b *testing.B) {
	b.ReportAllocs()
	s := New(Config{Logger: discardLogger()}, fakeBackends{n: 5})
	conn := &fakeConn{in: bytes.NewReader(nil)}
	c := newClient(s, conn)
	for i := 0; i < b.N; i++ {
		conn.in.Reset(setCmd)
		conn.out.Reset()
		c.rd.start, c.rd.end = 0, 0
		if err := c.rd.fill(); err != nil {
			b.Fatal(err)
		}
		for !bytes.HasSuffix(c.rd.buf[:c.rd.end], []byte("30000\r\n")) {
			c.rd.fill()
		}
		args, _ := c.rd.next()
		c.exec(args)
		c.flush()
		if conn.out.String() != "+OK\r\n" {
			b.Fatalf("reply %q", conn.out.String())
		}
	}
}

func BenchmarkAppendReply(b *testing.B) {
	b.ReportAllocs()
	buf := make([]byte, 0, 64)
	v := resp.IntValue(1)
	for i := 0; i < b.N; i++ {
		buf = appendReply(buf[:0], resp.OK, false)
		buf = appendReply(buf, v, false)
		buf = appendReply(buf, resp.Nil, true)
	}
}

// The compare-and-delete release most libraries send, and its sha1.
const benchRelease = "if redis.call(\"get\",KEYS[1]) == ARGV[1] then\n    return redis.call(\"del\",KEYS[1])\nelse\n    return 0\nend"

// runCommands feeds cmd through a client of s once per iteration and
// checks the reply.
func runCommands(b *testing.B, s *Server, cmd []byte, want string) {
	conn := &fakeConn{in: bytes.NewReader(nil)}
	c := newClient(s, conn)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		conn.in.Reset(cmd)
		conn.out.Reset()
		c.rd.start, c.rd.end = 0, 0
		var args [][]byte
		for args == nil {
			if err := c.rd.fill(); err != nil {
				b.Fatal(err)
			}
			args, _ = c.rd.next()
		}
		c.exec(args)
		c.flush()
		if conn.out.String() != want {
			b.Fatalf("reply %q, want %q", conn.out.String(), want)
		}
	}
}

func evalCmd(name string, script []byte, rest ...string) []byte {
	b := resp.AppendArrayHeader(nil, 2+len(rest))
	b = resp.AppendBulkString(b, name)
	b = resp.AppendBulk(b, script)
	for _, a := range rest {
		b = resp.AppendBulkString(b, a)
	}
	return b
}

// constBackends answer every command with the same reply, at no cost:
// what a benchmark of the front end's own work needs.
type constBackends struct {
	n int
	v resp.Value
}

func (f constBackends) N() int { return f.n }
func (f constBackends) Send(node int, cmd []byte, sc *resp.Script, rcv netio.Receiver, tag int, deadline time.Time, flags netio.SendFlags) {
	rcv.Receive(tag, netio.Result{V: f.v, Counts: true})
}
func (f constBackends) Undo(node int, u netio.UndoCmd, rcv netio.Receiver, tag int) {
	rcv.Receive(tag, netio.Result{V: f.v, Counts: true})
}
func (f constBackends) Veto() (netio.Health, bool) { return netio.Health{}, false }
func (f constBackends) Health() []netio.Health     { return make([]netio.Health, f.n) }

// EVALSHA of a release the proxy already knows: a map lookup, then the
// fan-out to five in-process backends that answer the reference release
// at once (the key held by the caller, deleted).
func BenchmarkEvalShaKnownRelease(b *testing.B) {
	s := New(Config{Logger: discardLogger()}, constBackends{n: 5, v: resp.IntValue(1 + 2*int64(spec.CaseOwn))})
	sha := resp.NewScript([]byte(benchRelease)).Sha
	conn := &fakeConn{in: bytes.NewReader(evalCmd("SCRIPT", []byte("LOAD"), benchRelease))}
	newClient(s, conn).serve()
	if conn.out.String() != "$40\r\n"+sha+"\r\n" {
		b.Fatalf("SCRIPT LOAD: %q", conn.out.String())
	}
	runCommands(b, s, evalCmd("EVALSHA", []byte(sha), "1", "lock:orders:42", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"), ":1\r\n")
}

// EVAL of the same script: the body is hashed on every call.
func BenchmarkEvalKnownRelease(b *testing.B) {
	s := New(Config{Logger: discardLogger()}, fakeBackends{n: 5})
	runCommands(b, s, evalCmd("EVAL", []byte(benchRelease), "1", "lock:orders:42", "3f2504e0-4f89-11d3-9a0c-0305e82c3301"), ":1\r\n")
}
