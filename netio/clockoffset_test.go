package netio

import (
	"bufio"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// slowTimeBackend is a RESP server on the proxy's own clock whose first
// TIME of each connection is answered only after delay, as a master that
// was hung when the connection opened answers once it resumes: it reads
// its clock when it runs the command, at the end of the delay.
func slowTimeBackend(t *testing.T, delay time.Duration) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				rd := resp.NewReader(bufio.NewReader(c), resp.ReaderLimits{})
				for {
					v, err := rd.Read()
					if err != nil || v.Kind != resp.KindArray || len(v.Elems) == 0 {
						return
					}
					var out string
					switch strings.ToUpper(string(v.Elems[0].Str)) {
					case "TIME":
						time.Sleep(delay)
						now := time.Now()
						sec, usec := strconv.FormatInt(now.Unix(), 10), strconv.Itoa(now.Nanosecond()/1000)
						out = "*2\r\n$" + strconv.Itoa(len(sec)) + "\r\n" + sec + "\r\n$" + strconv.Itoa(len(usec)) + "\r\n" + usec + "\r\n"
					case "CLIENT":
						info := "id=7 addr=127.0.0.1:1 name=redlock-proxy"
						out = "$" + strconv.Itoa(len(info)) + "\r\n" + info + "\r\n"
					case "PING":
						out = "+PONG\r\n"
					default:
						out = "+OK\r\n"
					}
					if _, err := c.Write([]byte(out)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String()
}

// The master's clock offset, which dates a kept undo's "reply left" instant
// on the master's clock, must never be taken later than it is: a later
// instant would have the undo delete a same-token retry's copy granted
// after the reply. A TIME answered late (a master hung while the connection
// opened) says only that the master read its clock somewhere between the
// send and the reply, so the offset is taken at the reply's end of that
// span, not in its middle.
func TestClockOffsetIsNeverOverstatedByASlowTimeReply(t *testing.T) {
	addr := slowTimeBackend(t, time.Second)
	l := startLink(t, Options{Addr: addr, InProcess: true, DialTimeout: 5 * time.Second, DeadAfter: 5 * time.Second})
	l.mu.Lock()
	offset, known := l.clockOffset, l.clockKnown
	l.mu.Unlock()
	if !known {
		t.Fatal("the clock offset is not known after the identity check")
	}
	// The backend shares the proxy's clock: the true offset is 0.
	if offset > time.Millisecond {
		t.Fatalf("clock offset = %v after a TIME answered a second late; the true offset is 0, and a larger one dates a kept undo's reply instant too late", offset)
	}
}
