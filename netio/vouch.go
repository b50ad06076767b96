package netio

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Vouching for brand-new masters. A master no proxy has used cannot be
// told from one that lost everything, so its first use waits the ceiling
// (max_ttl + drift). An operator who knows the masters are brand new may
// vouch for them: every master of every backend (each shard of a Redis
// Cluster, each group's master) is checked first, and only when none holds
// a key or a marker that shows use (a grant recorded, a loss other than
// its first sight) is each marker written as if the hold had passed. The
// risk is the operator's: masters that did lose locks which other masters
// still hold would count at once. The upgrade's old Redis is never vouched
// for.

//go:embed vouch.lua
var vouchLua []byte

var vouchScript = resp.NewScript(vouchLua)

// ErrVouchRefused is returned when some master is not brand new.
var ErrVouchRefused = errors.New("vouch refused")

// vouchRun runs the vouch script on the link's master, in the given mode,
// and says why not when it refuses.
func (l *Link) vouchRun(ctx context.Context, mode string) error {
	l.mu.Lock()
	up, key := l.conn != nil && l.ready, l.mkey
	sepoch := ""
	if l.follower != nil {
		sepoch = strconv.FormatInt(l.follower.connEpoch, 10)
	}
	l.mu.Unlock()
	if !up {
		return fmt.Errorf("%s is not connected: %w", l.opt.Addr, ErrVouchRefused)
	}
	cluster := ""
	if l.opt.ClusterNode {
		cluster = "1"
	}
	cmd := resp.AppendCommand(nil, "EVALSHA", vouchScript.Sha, "1", key, mode,
		strconv.FormatInt(l.opt.Restart.Hold.Milliseconds(), 10), cluster, sepoch)
	ch := make(chan Result, 1)
	deadline := time.Now().Add(l.opt.DialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	l.Send(cmd, vouchScript, resultChan(ch), 0, deadline)
	r := <-ch
	switch {
	case r.Err != nil:
		return fmt.Errorf("%s: %w", l.opt.Addr, r.Err)
	case r.V.Kind == resp.KindError:
		return fmt.Errorf("%s: %s", l.opt.Addr, r.V.Str)
	case r.V.Kind != resp.KindArray || len(r.V.Elems) != 2:
		return fmt.Errorf("%s: unexpected reply %s", l.opt.Addr, r.V.String())
	case r.V.Elems[0].Int != 1:
		return fmt.Errorf("%s: %s: %w", l.opt.Addr, r.V.Elems[1].Str, ErrVouchRefused)
	}
	if mode == "write" {
		l.check() // the link reads the vouched marker now
	}
	return nil
}

// resultChan receives one result.
type resultChan chan Result

func (c resultChan) Receive(_ int, r Result) { c <- r }

// Vouch vouches for every master of every backend as brand new, or
// refuses (ErrVouchRefused) naming each master that is not, writing
// nothing then. It returns how many masters it vouched for.
func (p *Pool) Vouch(ctx context.Context) (int, error) {
	var links []*Link
	for i, l := range p.links {
		if l != nil {
			links = append(links, l)
		} else {
			links = append(links, p.clusters[i].shardLinks()...)
		}
	}
	if len(links) == 0 {
		return 0, fmt.Errorf("no backend: %w", ErrVouchRefused)
	}
	for _, l := range links {
		if !l.markerRule() {
			return 0, fmt.Errorf("restart_quarantine is off or the backends are embedded: nothing to vouch for: %w", ErrVouchRefused)
		}
	}
	var refusals []error
	for _, l := range links {
		if err := l.vouchRun(ctx, "check"); err != nil {
			refusals = append(refusals, err)
		}
	}
	if len(refusals) > 0 {
		return 0, errors.Join(refusals...)
	}
	for i, l := range links {
		if err := l.vouchRun(ctx, "write"); err != nil {
			return i, err
		}
	}
	return len(links), nil
}
