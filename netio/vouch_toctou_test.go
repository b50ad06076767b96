package netio

import (
	"bufio"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// A master that VOUCH's check found brand new, and that then served a
// grant and restarted empty before VOUCH's write reached it, is not brand
// new: the write must refuse it, as the check would have while the grant
// was on it.
func TestVouchWriteRefusesAMasterUsedAndRestartedSinceItsCheck(t *testing.T) {
	s, err := redisproc.Start(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	do := func(args ...string) resp.Value {
		t.Helper()
		c, err := net.DialTimeout("tcp", s.Addr, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write(resp.AppendCommand(nil, args...)); err != nil {
			t.Fatal(err)
		}
		v, err := resp.NewReader(bufio.NewReader(c), resp.ReaderLimits{}).Read()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const mkey, hold = "redlock-proxy:marker", "60000"
	run := ""
	marker := func() resp.Value { // a proxy's periodic check
		v := do("EVAL", string(markerLua), "1", mkey, hold, "0", run, "", "", "0", "", "", "")
		run = string(v.Elems[5].Str)
		return v
	}
	vouch := func(mode, seen string) resp.Value {
		return do("EVAL", string(vouchLua), "1", mkey, mode, hold, "", "", seen)
	}
	marker() // first sight: a "new" record
	checked := vouch("check", "")
	if checked.Elems[0].Int != 1 {
		t.Fatalf("check of a brand-new master: %v", checked)
	}
	seen := string(checked.Elems[2].Str)
	// Between VOUCH's check and its write: a grant, its continuity
	// count on the marker, and a restart that loses both.
	do("SET", "lock", "tok", "PX", "60000")
	do("HSET", mkey, "c:proxy2", "1")
	if v := vouch("check", ""); v.Elems[0].Int != 0 {
		t.Fatalf("check of a used master: %v; want refused", v)
	}
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	m := marker() // the proxy that saw the grant checks the new run
	t.Logf("marker after the restart: change %q why %q", m.Elems[1].Str, m.Elems[14].Str)
	if v := vouch("write", seen); v.Elems[0].Int == 1 {
		t.Fatalf("write vouched for a master that was used and lost its data since the check")
	} else if !strings.Contains(string(v.Elems[1].Str), "restarted or its marker changed since VOUCH checked it") {
		t.Fatalf("write refused a master restarted since the check with %q; want the reason", v.Elems[1].Str)
	}

}
