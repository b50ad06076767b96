package integration

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// churnDuration is how long TestTrackingChurn runs: long enough for the
// race detector to see tracking settings change while invalidations of
// other clients' writes are being sent.
const churnDuration = 20 * time.Second

// churnConn is a raw connection for the churn's goroutines: its commands
// report errors instead of failing the test from a goroutine, and it skips
// the pushes (invalidations) that arrive between replies.
type churnConn struct {
	c  net.Conn
	br *bufio.Reader
	rd *resp.Reader
}

func dialChurn(addr string) (*churnConn, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return nil, err
	}
	br := bufio.NewReader(c)
	return &churnConn{c: c, br: br, rd: resp.NewReader(br, resp.ReaderLimits{})}, nil
}

// do sends a command and returns its reply; an error reply is an error.
func (x *churnConn) do(args ...string) (resp.Value, error) {
	x.c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := x.c.Write(resp.AppendCommand(nil, args...)); err != nil {
		return resp.Value{}, err
	}
	for {
		b, err := x.br.Peek(1)
		if err != nil {
			return resp.Value{}, err
		}
		v, err := x.rd.Read()
		if err != nil {
			return resp.Value{}, err
		}
		if b[0] == '>' {
			continue
		}
		if v.Kind == resp.KindError {
			return v, fmt.Errorf("%v: %s", args, v.Str)
		}
		return v, nil
	}
}

// drain reads and drops everything until the connection is closed (a
// subscriber of redirected invalidations).
func (x *churnConn) drain() {
	x.c.SetReadDeadline(time.Time{})
	for {
		if _, err := x.rd.Read(); err != nil {
			return
		}
	}
}

// Client-side caching under churn, with the race detector: tracking clients
// (RESP3 pushes, BCAST, NOLOOP, OPTIN, RESP2 with REDIRECT) turn tracking on
// and off, switch protocol, disconnect while tracking, and close the
// targets they redirect to, while other clients take and release the keys
// they track, so invalidations are sent while the settings they read
// change. A field read across goroutines without an owner is a reported
// race (or a nil tracking state, a panic); afterwards a new tracking client
// is still told of a change.
func TestTrackingChurn(t *testing.T) {
	c := newCluster(t, 3)
	addr := c.app.Addr()
	waitInvalidations(t)
	keys := make([]string, 4)
	for i := range keys {
		keys[i] = uniqueKey(fmt.Sprintf("churn%d", i))
	}
	ctx, cancel := context.WithTimeout(context.Background(), churnDuration)
	defer cancel()
	var wg sync.WaitGroup
	run := func(name string, f func(i int) error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				if err := f(i); err != nil && ctx.Err() == nil {
					t.Errorf("%s: %v", name, err)
					return
				}
			}
		}()
	}

	// Lockers: every grant and release invalidates a tracked key.
	for l := 0; l < 3; l++ {
		cl := c.client(2)
		run(fmt.Sprintf("locker %d", l), func(i int) error {
			k, tok := keys[(i+l)%len(keys)], fmt.Sprintf("tok-%d-%d", l, i)
			ok, err := cl.SetNX(context.Background(), k, tok, 5*time.Second).Result()
			if err != nil || !ok {
				return err
			}
			return cl.Eval(context.Background(), seedRelease, []string{k}, tok).Err()
		})
	}

	// RESP3 trackers: on with each mode (twice in a row for some), read,
	// switch protocol, off, on again, and leave while tracking.
	modes := [][]string{nil, {"NOLOOP"}, {"BCAST"}, {"BCAST", "PREFIX", "churn", "NOLOOP"}, {"OPTIN"}, {"OPTOUT"}}
	for tr := 0; tr < 3; tr++ {
		run(fmt.Sprintf("tracker %d", tr), func(i int) error {
			x, err := dialChurn(addr)
			if err != nil {
				return err
			}
			defer x.c.Close()
			if _, err := x.do("HELLO", "3"); err != nil {
				return err
			}
			for round := 0; round < 4; round++ {
				mode := modes[(i+round+tr)%len(modes)]
				on := append([]string{"CLIENT", "TRACKING", "ON"}, mode...)
				if _, err := x.do(on...); err != nil {
					return err
				}
				if len(mode) < 2 && round%2 == 0 {
					// On again in the same mode: the options are set
					// anew, the keys tracked stay (a prefix given again
					// would overlap itself).
					if _, err := x.do(on...); err != nil {
						return err
					}
				}
				for _, k := range keys {
					if _, err := x.do("GET", k); err != nil {
						return err
					}
				}
				if _, err := x.do("HELLO", fmt.Sprint(2+(round+1)%2)); err != nil {
					return err
				}
				if _, err := x.do("SET", keys[round], "mine", "NX", "PX", "1000"); err != nil {
					return err
				}
				if round < 3 { // another mode needs tracking off first, as on Redis
					if _, err := x.do("CLIENT", "TRACKING", "OFF"); err != nil {
						return err
					}
				}
			}
			return nil // closed while tracking
		})
	}

	// Redirecting trackers: the target subscribes to __redis__:invalidate
	// and is closed while the tracker still points to it.
	for r := 0; r < 2; r++ {
		run(fmt.Sprintf("redirector %d", r), func(i int) error {
			target, err := dialChurn(addr)
			if err != nil {
				return err
			}
			defer target.c.Close()
			if r == 1 {
				if _, err := target.do("HELLO", "3"); err != nil {
					return err
				}
			}
			id, err := target.do("CLIENT", "ID")
			if err != nil {
				return err
			}
			// In RESP3 the confirmation is a push: drain reads it.
			if _, err := target.c.Write(resp.AppendCommand(nil, "SUBSCRIBE", "__redis__:invalidate")); err != nil {
				return err
			}
			drained := make(chan struct{})
			go func() { defer close(drained); target.drain() }()
			defer func() { target.c.Close(); <-drained }()
			x, err := dialChurn(addr)
			if err != nil {
				return err
			}
			defer x.c.Close()
			opts := []string{"CLIENT", "TRACKING", "ON", "REDIRECT", fmt.Sprint(id.Int)}
			if i%2 == 1 {
				opts = append(opts, "BCAST")
			}
			if _, err := x.do(opts...); err != nil {
				return err
			}
			for round := 0; round < 3; round++ {
				for _, k := range keys {
					if _, err := x.do("GET", k); err != nil {
						return err
					}
				}
				if round == 1 {
					target.c.Close() // the tracker still redirects to it
					<-drained
				}
			}
			if i%3 == 0 {
				_, err = x.do("CLIENT", "TRACKING", "OFF")
			}
			return err
		})
	}
	wg.Wait()

	// The proxy still serves tracking clients. The change is made on a
	// master directly: its invalidation is forwarded whether or not a
	// majority counts (a stall of the shared machine during the churn can
	// quarantine the masters, rightly).
	tr := trackingClient(t, addr)
	k := uniqueKey("churn-after")
	tr.must("(nil)", "GET", k)
	if err := c.direct[0].Set(context.Background(), k, "t", 10*time.Second).Err(); err != nil {
		t.Fatal(err)
	}
	if !tr.invalidation(k, 3*time.Second) {
		t.Fatal("no invalidation after the churn")
	}
}
