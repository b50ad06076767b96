// Package respconn gives tests a connection to a real redis-server of
// their own, started on a free loopback port and stopped when the test
// ends.
//
// It promises: every command is answered with Redis's decoded reply
// within five seconds, or the test fails there.
package respconn

import (
	"bufio"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// Conn is one connection to a test's redis-server.
type Conn struct {
	t  testing.TB
	c  net.Conn
	rd *resp.Reader
}

// Start starts a redis-server for t and connects to it.
func Start(t testing.TB) *Conn {
	t.Helper()
	s, err := redisproc.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	c, err := net.Dial("tcp", s.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &Conn{t: t, c: c, rd: resp.NewReader(bufio.NewReader(c), resp.ReaderLimits{})}
}

// Do sends one command and returns its reply.
func (r *Conn) Do(args ...string) resp.Value {
	r.t.Helper()
	b := resp.AppendArrayHeader(nil, len(args))
	for _, a := range args {
		b = resp.AppendBulkString(b, a)
	}
	r.c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := r.c.Write(b); err != nil {
		r.t.Fatal(err)
	}
	v, err := r.rd.Read()
	if err != nil {
		r.t.Fatal(err)
	}
	return v
}

// Eval runs a script text with keys and argv.
func (r *Conn) Eval(text string, keys, argv []string) resp.Value {
	r.t.Helper()
	a := append([]string{"EVAL", text, strconv.Itoa(len(keys))}, keys...)
	return r.Do(append(a, argv...)...)
}

// Canonical renders a value with fields and members sorted.
func Canonical(typ string, v resp.Value) string {
	switch typ {
	case "string":
		return strconv.Quote(string(v.Str))
	case "hash":
		var pairs []string
		for i := 0; i+1 < len(v.Elems); i += 2 {
			pairs = append(pairs, string(v.Elems[i].Str)+"="+string(v.Elems[i+1].Str))
		}
		slices.Sort(pairs)
		return strings.Join(pairs, ",")
	case "set":
		var ms []string
		for _, e := range v.Elems {
			ms = append(ms, string(e.Str))
		}
		slices.Sort(ms)
		return strings.Join(ms, ",")
	case "zset":
		return v.String() // ZRANGE's own order
	}
	return ""
}
