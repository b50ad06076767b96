package proxy

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/netio"
)

// vouchBackends answer VOUCH with a set outcome.
type vouchBackends struct {
	fakeBackends
	n   int
	err error
}

func (v vouchBackends) Vouch(context.Context) (int, error) { return v.n, v.err }

// VOUCH answers OK only when every master counts; a refusal says nothing
// was written, and a vouch that wrote markers but did not finish says so,
// never that nothing was written.
func TestVouchRepliesSayWhatWasWritten(t *testing.T) {
	incomplete := fmt.Errorf("3 masters vouched for, but not all count yet: 127.0.0.1:7001 is down: EOF: %w", netio.ErrVouchIncomplete)
	for _, c := range []struct {
		name string
		be   vouchBackends
		want string
	}{
		{"every master counts", vouchBackends{n: 3}, "+OK"},
		{"refused", vouchBackends{err: fmt.Errorf("127.0.0.1:7001: it holds 1 keys: %w", netio.ErrVouchRefused)},
			"-ERR redlock-proxy: VOUCH refused, nothing written: 127.0.0.1:7001: it holds 1 keys"},
		{"incomplete", vouchBackends{n: 3, err: incomplete},
			"-ERR redlock-proxy: VOUCH incomplete: 3 masters vouched for, but not all count yet: 127.0.0.1:7001 is down"},
		{"a refusal after some were written", vouchBackends{n: 1, err: errors.Join(netio.ErrVouchIncomplete, netio.ErrVouchRefused)},
			"-ERR redlock-proxy: VOUCH incomplete: "},
	} {
		c.be.fakeBackends.n = 3
		s := New(Config{Logger: discardLogger()}, c.be)
		got := do(t, s, "VOUCH").String()
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: VOUCH = %q; want %q...", c.name, got, c.want)
		}
		if strings.Contains(got, "nothing written") && strings.Contains(got, "incomplete") {
			t.Errorf("%s: VOUCH = %q says both", c.name, got)
		}
	}
}
