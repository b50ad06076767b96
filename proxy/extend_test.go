package proxy

import (
	"bufio"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// pipeline sends the commands in one write through a client of s and
// returns their replies.
func pipeline(t *testing.T, s *Server, cmds ...[]string) []resp.Value {
	t.Helper()
	var b []byte
	for _, args := range cmds {
		b = resp.AppendArrayHeader(b, len(args))
		for _, a := range args {
			b = resp.AppendBulkString(b, a)
		}
	}
	conn := &wholeConn{data: b}
	c := newClient(s, conn)
	c.serve()
	rd := resp.NewReader(bufio.NewReader(&conn.out), resp.ReaderLimits{})
	var out []resp.Value
	for range cmds {
		v, err := rd.Read()
		if err != nil {
			t.Fatalf("no reply to command %d: %v", len(out), err)
		}
		out = append(out, v)
	}
	return out
}

// An extend-or-acquire followed, in the same pipeline, by the release of
// the same lock leaves the key free: the extend's second step (sent once
// its success leaves, so after the release) never takes a free key.
func TestPipelinedReleaseAfterExtendOrAcquireStaysReleased(t *testing.T) {
	s, m := modelServer(3)
	eoa := `local v = redis.call("get", KEYS[1])
if v == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end
if v == false then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) and 1 or 0 end
return 0`
	m.set([]int{0, 1, 2}, "k", "tok", 5000)
	r := pipeline(t, s,
		evalArgs(eoa, []string{"k"}, "tok", "20000"),
		evalArgs(releaseText, []string{"k"}, "tok"))
	if r[0].String() != ":1" || r[1].String() != ":1" {
		t.Fatalf("extend-or-acquire, release = %v, %v; want :1, :1", r[0], r[1])
	}
	if nodes, pttls := m.held("k", "tok"); len(nodes) != 0 {
		t.Fatalf("the released lock is held again on %v (PTTL %v)", nodes, pttls)
	}
}

// An extend-or-acquire to a TTL shorter than what its lock has left sets
// the TTL as asked once it succeeded (its second step).
func TestExtendOrAcquireShortensOnceItSucceeded(t *testing.T) {
	s, m := modelServer(3)
	eoa := `local v = redis.call("get", KEYS[1])
if v == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) end
if v == false then return redis.call("set", KEYS[1], ARGV[1], "PX", ARGV[2]) and 1 or 0 end
return 0`
	m.set([]int{0, 1, 2}, "k", "tok", 20000)
	if v := do(t, s, evalArgs(eoa, []string{"k"}, "tok", "5000")...); v.String() != ":1" {
		t.Fatalf("extend-or-acquire = %v; want :1", v)
	}
	if nodes, pttls := m.held("k", "tok"); len(nodes) != 3 || pttls[0] != 5000 || pttls[1] != 5000 || pttls[2] != 5000 {
		t.Fatalf("the lock is on %v with PTTL %v; want on every node with 5000", nodes, pttls)
	}
}

// A lock acquired again with the same token behind its extend and release
// in one pipeline keeps the TTL its acquisition set: the extend's second
// step, sent once the extend's reply leaves, finds its nonce gone (the
// release and the acquisition cleared it) and does nothing.
func TestPipelinedReacquireAfterExtendKeepsItsTTL(t *testing.T) {
	s, m := modelServer(3)
	extend := `if redis.call("get", KEYS[1]) == ARGV[1] then return redis.call("pexpire", KEYS[1], ARGV[2]) else return 0 end`
	acquire := `return redis.call("set", KEYS[1], ARGV[1], "NX", "PX", ARGV[2])`
	m.set([]int{0, 1, 2}, "k", "tok", 20000)
	r := pipeline(t, s,
		evalArgs(extend, []string{"k"}, "tok", "5000"),
		evalArgs(releaseText, []string{"k"}, "tok"),
		evalArgs(acquire, []string{"k"}, "tok", "30000"))
	if r[0].String() != ":1" || r[1].String() != ":1" || r[2].String() != "+OK" {
		t.Fatalf("extend, release, acquire = %v; want :1, :1, +OK", r)
	}
	if nodes, pttls := m.held("k", "tok"); len(nodes) != 3 || pttls[0] != 30000 || pttls[1] != 30000 || pttls[2] != 30000 {
		t.Fatalf("the new lock is on %v with PTTL %v; want on every node with the 30000 it was granted", nodes, pttls)
	}
}
