package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// fakeBackends answers at once, as healthy Redis masters would, so the
// front end can be fuzzed without a network. (The real behaviour is tested
// against real redis-server processes in integration/.)
type fakeBackends struct{ n int }

func (f fakeBackends) N() int { return f.n }

func (f fakeBackends) Send(node int, cmd []byte, sc *resp.Script, rcv netio.Receiver, tag int, deadline time.Time, flags netio.SendFlags) {
	v := resp.IntValue(1)
	switch {
	case spec.IsReference(sc):
		v = referenceHeld(cmd)
	case bytes.Contains(cmd, []byte("SET")):
		v = resp.OK
	case bytes.Contains(cmd, []byte("GET")):
		v = resp.BulkValue([]byte("tok"))
	case sc == getScript:
		v = resp.BulkValue([]byte("tok"))
	case sc == readScript:
		v = resp.Value{Kind: resp.KindArray, Elems: []resp.Value{resp.BulkValue([]byte("tok")), resp.IntValue(1000)}}
	}
	rcv.Receive(tag, netio.Result{V: v, Counts: true})
}

func (f fakeBackends) Undo(node int, u netio.UndoCmd, rcv netio.Receiver, tag int) {
	rcv.Receive(tag, netio.Result{V: resp.IntValue(1), Counts: true})
}

func (f fakeBackends) Veto() (netio.Health, bool) { return netio.Health{}, false }
func (f fakeBackends) Health() []netio.Health     { return make([]netio.Health, f.n) }

// releaseOneSha names the lean reference of a compact one-key release.
var releaseOneSha = (&spec.Class{Role: spec.RoleRelease, Layout: spec.Layout{Tokens: []int{0}}}).ReferenceFor(1, spec.CallArgs{}).Sha

// referenceHeld answers a reference script as a backend where every key
// holds the caller's token with 1000 ms left, and the role acted. It reads
// the command in place, without allocating (the benchmarks use it).
func referenceHeld(cmd []byte) resp.Value {
	nk, _ := resp.ParseInt(cmdArg(cmd, 2)) // lock keys and their companions
	argv := 3 + int(nk)
	// The one-key release is always compact; its first argument is the
	// ownership prefix, not the detail flag.
	if string(cmdArg(cmd, argv)) == "0" || string(cmdArg(cmd, 1)) == releaseOneSha {
		return resp.IntValue(1 + 2*int64(spec.CaseOwn))
	}
	nkeys, _ := resp.ParseInt(cmdArg(cmd, argv+6))
	out := resp.Value{Kind: resp.KindArray, Elems: []resp.Value{resp.IntValue(1)}}
	for k := int64(0); k < nkeys; k++ {
		tok := cmdArg(cmd, argv+8+int(k))
		out.Elems = append(out.Elems, resp.IntValue(int64(spec.CaseOwn)), resp.IntValue(1000), resp.BulkValue(tok), resp.IntValue(1000))
	}
	return out
}

// cmdArg returns element i of an encoded command (nil past its end).
func cmdArg(cmd []byte, i int) []byte {
	p := bytes.IndexByte(cmd, '\n') + 1
	for j := 0; p > 0 && p < len(cmd); j++ {
		e := bytes.IndexByte(cmd[p:], '\r')
		if e < 0 {
			return nil
		}
		n, _ := resp.ParseInt(cmd[p+1 : p+e])
		start := p + e + 2
		if j == i {
			return cmd[start : start+int(n)]
		}
		p = start + int(n) + 2
	}
	return nil
}

// fakeConn feeds a client input in small chunks and collects its output.
type fakeConn struct {
	in  *bytes.Reader
	out bytes.Buffer
}

func (c *fakeConn) Read(p []byte) (int, error) {
	if len(p) > 7 {
		p = p[:7] // split every command across reads
	}
	return c.in.Read(p)
}
func (c *fakeConn) Write(p []byte) (int, error)      { return c.out.Write(p) }
func (c *fakeConn) Close() error                     { return nil }
func (c *fakeConn) LocalAddr() net.Addr              { return &net.TCPAddr{} }
func (c *fakeConn) RemoteAddr() net.Addr             { return &net.TCPAddr{} }
func (c *fakeConn) SetDeadline(time.Time) error      { return nil }
func (c *fakeConn) SetReadDeadline(time.Time) error  { return nil }
func (c *fakeConn) SetWriteDeadline(time.Time) error { return nil }

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func fuzzServer() *Server {
	return New(Config{
		Logger:      discardLogger(),
		RequirePass: "",
		Limits:      Limits{MaxArgs: 64, MaxBulk: 4096, MaxInline: 4096, MaxCommandBytes: 16384},
	}, fakeBackends{n: 3})
}

// FuzzServerInput: any byte stream gets at most one reply per command it
// holds (and one protocol error), never a panic, and never makes the
// connection buffer more than its limits.
func FuzzServerInput(f *testing.F) {
	for _, s := range []string{
		"PING\r\n",
		"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n",
		"*6\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n$2\r\nNX\r\n$2\r\nPX\r\n$4\r\n1000\r\n",
		"SET k v NX PX 1000\r\nGET k\r\nPTTL k\r\nDEL k\r\nQUIT\r\n",
		"EVAL \"if redis.call('get',KEYS[1]) == ARGV[1] then return redis.call('del',KEYS[1]) else return 0 end\" 1 k v\r\n",
		"*9223372036854775807\r\n",
		"*1\r\n$9223372036854775807\r\n",
		"HELLO 3\r\nSET k v NX PX 5\r\nSUBSCRIBE c\r\nGET k\r\nRESET\r\n",
		"SET \"a\\x00b\" 'c' NX EX 1\r\n",
		"CLIENT SETNAME x\r\nCLIENT GETNAME\r\nCONFIG GET *\r\nINFO\r\nCOMMAND\r\n",
		"DELIFEQ k v\r\nDELEX k IFEQ v\r\nSET k v IFEQ v PX 100\r\n",
	} {
		f.Add([]byte(s))
	}
	s := fuzzServer()
	f.Fuzz(func(t *testing.T, in []byte) {
		conn := &fakeConn{in: bytes.NewReader(in)}
		c := newClient(s, conn)
		c.serve()
		if cap(c.rd.buf) > s.cfg.Limits.MaxCommandBytes+2*readChunk {
			t.Fatalf("read buffer grew to %d bytes (limit %d)", cap(c.rd.buf), s.cfg.Limits.MaxCommandBytes)
		}
		// Count the replies: every one is well formed.
		rd := resp.NewReader(bufio.NewReader(&conn.out), resp.ReaderLimits{})
		replies := 0
		for {
			_, err := rd.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("reply %d malformed: %v\noutput %q", replies, err, conn.out.String())
			}
			replies++
		}
		// A command needs at least one line end; a protocol error adds one
		// reply; QUIT's +OK belongs to its command. (P)SUBSCRIBE and
		// (P)UNSUBSCRIBE answer once per channel, as in Redis: each channel
		// is at least one byte of the input.
		max := bytes.Count(in, []byte("\n")) + 1
		if bytes.Contains(bytes.ToLower(in), []byte("subscribe")) {
			max += len(in)
		}
		if replies > max {
			t.Fatalf("%d replies for input with %d line ends: %q", replies, max-1, in)
		}
	})
}

// FuzzParseSet: the SET parser never panics, and what it accepts is a
// lock it can send: NX (or IFEQ), a positive TTL within max_ttl.
func FuzzParseSet(f *testing.F) {
	for _, s := range []string{
		"SET k v NX PX 1000", "SET k v nx ex 10", "SET k v PXAT 99999999999999 NX", "SET k v NX EX 9223372036854775807",
		"SET k v NX XX", "SET k v IFEQ v PX 10", "SET k v KEEPTTL NX", "SET k v GET NX PX 1",
	} {
		f.Add(s)
	}
	now := time.Unix(1_800_000_000, 0)
	f.Fuzz(func(t *testing.T, line string) {
		args := [][]byte{}
		for _, a := range strings.Fields(line) {
			args = append(args, []byte(a))
		}
		if len(args) < 3 {
			return
		}
		req, msg := parseSet(args, now, time.Minute)
		if msg != "" {
			if !strings.HasPrefix(msg, "ERR ") {
				t.Fatalf("error %q lacks Redis's ERR prefix", msg)
			}
			return
		}
		if (req.past && req.ttl != 0) || (!req.past && (req.ttl <= 0 || req.ttl > time.Minute)) {
			t.Fatalf("%q accepted with TTL %v (passed deadline: %v)", line, req.ttl, req.past)
		}
		lock := false
		for _, a := range args[3:] {
			lock = lock || is(a, "nx") || is(a, "ifeq")
		}
		if !lock {
			t.Fatalf("%q accepted without NX or IFEQ", line)
		}
	})
}
