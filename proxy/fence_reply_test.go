package proxy

import (
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/netio"
)

// chosenFenceBackends answers like healthy masters on which a grant's
// fencing number was chosen earlier and whose lock has little TTL left;
// every other read is answered only after slow.
type chosenFenceBackends struct {
	n    int
	left time.Duration // the lock's PTTL on every master
	slow time.Duration
}

func (f chosenFenceBackends) N() int { return f.n }

func (f chosenFenceBackends) Send(node int, cmd []byte, sc *resp.Script, rcv netio.Receiver, tag int, deadline time.Time, flags netio.SendFlags) {
	if sc == fencePrepare {
		bulk := func(s string) resp.Value { return resp.BulkValue([]byte(s)) }
		rcv.Receive(tag, netio.Result{Counts: true, V: resp.Value{Kind: resp.KindArray, Elems: []resp.Value{
			resp.IntValue(1), resp.IntValue(f.left.Milliseconds()), resp.IntValue(1), bulk(""),
			bulk(pad20(7)), bulk(pad20(42)), bulk(pad20(42)), resp.IntValue(time.Now().UnixMilli()),
		}}})
		return
	}
	time.AfterFunc(f.slow, func() {
		rcv.Receive(tag, netio.Result{Counts: true, V: resp.Value{Kind: resp.KindArray, Elems: []resp.Value{resp.Nil, resp.IntValue(-2)}}})
	})
}

func (f chosenFenceBackends) Undo(node int, u netio.UndoCmd, rcv netio.Receiver, tag int) {
	rcv.Receive(tag, netio.Result{V: resp.IntValue(0), Counts: true})
}

func (f chosenFenceBackends) Veto() (netio.Health, bool) { return netio.Health{}, false }
func (f chosenFenceBackends) Health() []netio.Health     { return make([]netio.Health, f.n) }

// wholeConn hands a client its whole input in one read, so that every
// command in it is one pipelined batch.
type wholeConn struct {
	fakeConn
	data []byte
}

func (c *wholeConn) Read(p []byte) (int, error) {
	if len(c.data) == 0 {
		return 0, io.EOF
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

var _ net.Conn = (*wholeConn)(nil)

// Replies leave in order and validity is judged when a reply leaves: a
// FENCE number decided while its lock had 60 ms of validity, whose reply
// then waits 150 ms behind a slower read of the same pipeline, is for a
// lock whose validity is over when it leaves. docs/fencing.md: nil once
// the validity is gone.
func TestPipelinedFenceIsJudgedWhenItsReplyLeaves(t *testing.T) {
	run := func(slow time.Duration) (first string, elapsed time.Duration) {
		s := New(Config{Logger: discardLogger()}, chosenFenceBackends{n: 3, left: 60 * time.Millisecond, slow: slow})
		conn := &wholeConn{data: []byte("FENCE k tok\r\nPTTL other\r\n")}
		start := time.Now()
		newClient(s, conn).serve()
		out := conn.out.String()
		if !strings.HasSuffix(out, ":-2\r\n") {
			t.Fatalf("output %q: want the PTTL's -2 last", out)
		}
		return strings.SplitAfter(out, "\r\n")[0], time.Since(start)
	}
	// The control: when nothing holds the reply back, the lock's number.
	if first, _ := run(0); first != ":42\r\n" {
		t.Fatalf("control: FENCE answered %q with nothing holding its reply back; want :42", first)
	}
	first, elapsed := run(150 * time.Millisecond)
	if elapsed < 150*time.Millisecond {
		t.Fatalf("the pipeline was answered in %v: the slow read did not hold the FENCE reply back, the test proves nothing", elapsed)
	}
	if first != "$-1\r\n" {
		t.Fatalf("FENCE answered %q after its lock's validity ran out while the reply waited; want nil", first)
	}
}
