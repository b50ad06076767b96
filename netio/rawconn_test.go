//go:build linux

package netio

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

// tcpPair returns both ends of a loopback TCP connection, the first one
// wrapped by Raw.
func tcpPair(t *testing.T) (net.Conn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	peer := <-accepted
	if peer == nil {
		t.Fatal("accept failed")
	}
	rc := Raw(c)
	if _, ok := rc.(*RawConn); !ok {
		t.Fatalf("Raw of a TCP connection is %T", rc)
	}
	t.Cleanup(func() { rc.Close(); peer.Close() })
	return rc, peer
}

// Bytes go both ways intact, also when a write fills the socket's buffer
// and has to wait for the peer to read.
func TestRawConnCarriesBytesBothWays(t *testing.T) {
	rc, peer := tcpPair(t)
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB: more than the socket buffers hold
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(io.LimitReader(peer, int64(len(big))))
		got <- b
	}()
	if n, err := rc.Write(big); err != nil || n != len(big) {
		t.Fatalf("write: %d, %v", n, err)
	}
	if b := <-got; !bytes.Equal(b, big) {
		t.Fatalf("peer read %d bytes, not what was written", len(b))
	}
	go peer.Write(big)
	b, err := io.ReadAll(io.LimitReader(rc, int64(len(big))))
	if err != nil || !bytes.Equal(b, big) {
		t.Fatalf("read %d bytes, %v", len(b), err)
	}
}

// A read waits for data; the peer's close is io.EOF.
func TestRawConnReadWaitsThenEOF(t *testing.T) {
	rc, peer := tcpPair(t)
	go func() {
		time.Sleep(20 * time.Millisecond)
		peer.Write([]byte("+OK\r\n"))
		peer.Close()
	}()
	buf := make([]byte, 64)
	n, err := rc.Read(buf)
	if err != nil || string(buf[:n]) != "+OK\r\n" {
		t.Fatalf("read %q, %v", buf[:n], err)
	}
	if n, err := rc.Read(buf); n != 0 || err != io.EOF {
		t.Fatalf("after the peer closed: %d, %v; want io.EOF", n, err)
	}
}

// Deadlines are the descriptor's: a read past its deadline is a timeout
// (net.Error), as is a write that cannot complete in time.
func TestRawConnDeadlines(t *testing.T) {
	rc, _ := tcpPair(t)
	rc.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := rc.Read(make([]byte, 16))
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past the deadline: %v; want a timeout", err)
	}
	if ne, ok := err.(net.Error); !ok || !ne.Timeout() {
		t.Fatalf("read past the deadline: %T is not itself a timeout net.Error", err)
	}
	if !errors.Is(err, os.ErrDeadlineExceeded) || strings.Count(err.Error(), "tcp") != 1 {
		t.Fatalf("read past the deadline: %q; want one read error around os.ErrDeadlineExceeded, as net.Conn gives", err)
	}
	rc.SetWriteDeadline(time.Now().Add(50 * time.Millisecond))
	big := make([]byte, 64<<20) // the peer never reads
	n, err := rc.Write(big)
	if !errors.As(err, &ne) || !ne.Timeout() || n >= len(big) {
		t.Fatalf("write the peer does not read: %d bytes, %v; want a timeout", n, err)
	}
}

// Close wakes a waiting read, which reports net.ErrClosed.
func TestRawConnCloseWakesRead(t *testing.T) {
	rc, _ := tcpPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := rc.Read(make([]byte, 16))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond)
	rc.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after close: %v; want net.ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("close did not wake the read")
	}
	if _, err := rc.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("write after close: %v; want net.ErrClosed", err)
	}
}

// Reads and writes allocate nothing.
func TestRawConnDoesNotAllocate(t *testing.T) {
	rc, peer := tcpPair(t)
	msg := []byte("*1\r\n$4\r\nPING\r\n")
	buf := make([]byte, 64)
	pbuf := make([]byte, 64)
	allocs := testing.AllocsPerRun(100, func() {
		rc.Write(msg)
		peer.Read(pbuf)
		peer.Write(msg)
		rc.Read(buf)
	})
	if allocs > 0 {
		t.Fatalf("%.1f allocations per round trip", allocs)
	}
}

// Connections that are not plain TCP are left as they are.
func TestRawLeavesOtherConnsAlone(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	if Raw(a) != a {
		t.Fatal("Raw wrapped a net.Pipe")
	}
}
