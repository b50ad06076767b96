//go:build linux

package netio

import (
	"io"
	"net"
	"os"
	"syscall"
	"unsafe"
)

// RawConn is a TCP connection whose reads and writes are made directly on
// its non-blocking socket (syscall.RawSyscall inside the descriptor's
// RawConn), waiting through the runtime's poller only when the socket is
// not ready, exactly as net.Conn does. What it leaves out is the runtime's
// blocking-syscall bookkeeping around each call: a read or write on a
// non-blocking socket cannot block, so there is nothing for the scheduler
// to hand off, and the runtime's monitor no longer takes the processor
// away from a goroutine that is in a socket write for a few microseconds
// (on a busy proxy that churned threads on every such write).
//
// Deadlines, Close and the errors a deadline or a closed connection give
// behave as on the wrapped connection: they are the descriptor's own.
type RawConn struct {
	net.Conn
	rc syscall.RawConn

	// Scratch for the read and write closures, made once so that a call
	// allocates nothing. A connection has at most one reader and one
	// writer at a time.
	rp      []byte
	rn      int
	rerr    syscall.Errno
	readFn  func(fd uintptr) bool
	wp      []byte
	wn      int
	werr    syscall.Errno
	writeFn func(fd uintptr) bool
}

// Raw wraps c in a RawConn when it is a plain TCP connection, and returns
// it unchanged otherwise (TLS, or a test's wrapper).
func Raw(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	r := &RawConn{Conn: c, rc: rc}
	r.readFn = r.readOnce
	r.writeFn = r.writeSome
	return r
}

func (r *RawConn) readOnce(fd uintptr) bool {
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, fd, uintptr(unsafe.Pointer(&r.rp[0])), uintptr(len(r.rp)))
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false // wait until readable
		}
		r.rn, r.rerr = int(n), e
		return true
	}
}

// Read reads what the socket holds, waiting for it to be readable first
// when it holds nothing.
func (r *RawConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.rp, r.rn, r.rerr = p, 0, 0
	err := r.rc.Read(r.readFn)
	r.rp = nil
	switch {
	case err != nil:
		return 0, r.opErr("read", err)
	case r.rerr != 0:
		return 0, r.opErr("read", os.NewSyscallError("read", r.rerr))
	case r.rn == 0:
		return 0, io.EOF
	}
	return r.rn, nil
}

func (r *RawConn) writeSome(fd uintptr) bool {
	for r.wn < len(r.wp) {
		n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, fd, uintptr(unsafe.Pointer(&r.wp[r.wn])), uintptr(len(r.wp)-r.wn))
		switch e {
		case 0:
			r.wn += int(n)
		case syscall.EINTR:
		case syscall.EAGAIN:
			return false // wait until writable
		default:
			r.werr = e
			return true
		}
	}
	return true
}

// Write writes all of p, waiting for the socket to be writable whenever
// its buffer is full.
func (r *RawConn) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	r.wp, r.wn, r.werr = p, 0, 0
	err := r.rc.Write(r.writeFn)
	n := r.wn
	r.wp = nil
	switch {
	case err != nil:
		return n, r.opErr("write", err)
	case r.werr != 0:
		return n, r.opErr("write", os.NewSyscallError("write", r.werr))
	}
	return n, nil
}

// opErr reports err as net.Conn does: one *net.OpError of the read or the
// write, around the cause (a deadline, a closed connection, an errno).
// The RawConn's own errors already come as an OpError of its "raw-read"
// or "raw-write": only their cause is kept.
func (r *RawConn) opErr(op string, err error) error {
	if oe, ok := err.(*net.OpError); ok {
		err = oe.Err
	}
	return &net.OpError{Op: op, Net: "tcp", Source: r.LocalAddr(), Addr: r.RemoteAddr(), Err: err}
}
