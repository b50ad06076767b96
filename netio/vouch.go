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
// vouched record replaces the first sight's (quorum.Watch ends the hold
// that gave), and the vouch answers once every master counts. The risk is
// the operator's: masters that did lose locks which other masters still
// hold would count at once. The upgrade's old Redis is never vouched for.

//go:embed vouch.lua
var vouchLua []byte

var vouchScript = resp.NewScript(vouchLua)

// ErrVouchRefused is returned when some master is not brand new.
var ErrVouchRefused = errors.New("vouch refused")

// vouchRun runs the vouch script on the link's master, in the given mode,
// and says why not when it refuses. The check returns what it saw (the
// run and the marker's epoch), which the write is given: a master that
// restarted or took a new record in between is refused then.
func (l *Link) vouchRun(ctx context.Context, mode, seen string) (string, error) {
	l.mu.Lock()
	up, key := l.conn != nil && l.ready, l.mkey
	sepoch := ""
	if l.follower != nil {
		sepoch = strconv.FormatInt(l.follower.connEpoch, 10)
	}
	l.mu.Unlock()
	if !up {
		return "", fmt.Errorf("%s is not connected: %w", l.opt.Addr, ErrVouchRefused)
	}
	cluster := ""
	if l.opt.ClusterNode {
		cluster = "1"
	}
	cmd := resp.AppendCommand(nil, "EVALSHA", vouchScript.Sha, "1", key, mode,
		strconv.FormatInt(l.opt.Restart.Hold.Milliseconds(), 10), cluster, sepoch, seen)
	ch := make(chan Result, 1)
	deadline := time.Now().Add(l.opt.DialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	l.Send(cmd, vouchScript, resultChan(ch), 0, deadline)
	r := <-ch
	switch {
	case r.Err != nil:
		return "", fmt.Errorf("%s: %w", l.opt.Addr, r.Err)
	case r.V.Kind == resp.KindError:
		return "", fmt.Errorf("%s: %s", l.opt.Addr, r.V.Str)
	case r.V.Kind != resp.KindArray || len(r.V.Elems) < 2:
		return "", fmt.Errorf("%s: unexpected reply %s", l.opt.Addr, r.V.String())
	case r.V.Elems[0].Int != 1:
		return "", fmt.Errorf("%s: %s: %w", l.opt.Addr, r.V.Elems[1].Str, ErrVouchRefused)
	case len(r.V.Elems) != 3:
		return "", fmt.Errorf("%s: unexpected reply %s", l.opt.Addr, r.V.String())
	}
	return string(r.V.Elems[2].Str), nil
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
	seen := make([]string, len(links))
	for i, l := range links {
		var err error
		if seen[i], err = l.vouchRun(ctx, "check", ""); err != nil {
			refusals = append(refusals, err)
		}
	}
	if len(refusals) > 0 {
		return 0, errors.Join(refusals...)
	}
	for i, l := range links {
		if _, err := l.vouchRun(ctx, "write", seen[i]); err != nil {
			return i, incomplete{fmt.Errorf("%d of %d masters vouched for, then %w", i, len(links), err)}
		}
	}
	if err := countAll(ctx, links); err != nil {
		return len(links), incomplete{fmt.Errorf("%d masters vouched for, but not all count yet: %w", len(links), err)}
	}
	return len(links), nil
}

// ErrVouchIncomplete is returned (errors.Is) when some markers were
// written, but not all, or some master did not count before the vouch's
// time was up.
var ErrVouchIncomplete = errors.New("vouch incomplete")

// incomplete is an error of a vouch that wrote markers: its text is the
// error's, and it is ErrVouchIncomplete.
type incomplete struct{ err error }

func (e incomplete) Error() string        { return e.err.Error() }
func (e incomplete) Unwrap() error        { return e.err }
func (e incomplete) Is(target error) bool { return target == ErrVouchIncomplete }

// countAll waits until every link counts, or says which do not when ctx
// ends first. Each link reads its marker again (the vouched record ends
// its quarantine: quorum.Watch) and the reply is applied before the link
// is looked at, so a command sent once it returns finds every vouched
// master counting. One that does not count yet (its tables not yet vetted
// just after the start, its connection being opened again) is checked
// again soon.
func countAll(ctx context.Context, links []*Link) error {
	waiting := links
	for {
		applied := make([]chan struct{}, len(waiting))
		for i, l := range waiting {
			applied[i] = make(chan struct{})
			l.checkThen(applied[i])
		}
		for _, a := range applied {
			select {
			case <-a:
			case <-ctx.Done():
				return notCounting(waiting)
			}
		}
		var out []*Link
		for _, l := range waiting {
			if !l.Health().Counts(time.Now()) {
				out = append(out, l)
			}
		}
		if waiting = out; len(waiting) == 0 {
			return nil
		}
		select {
		case <-time.After(vetRetry):
		case <-ctx.Done():
			return notCounting(waiting)
		}
	}
}

// notCounting names each link that does not count, and what keeps it out
// (nil when every one counts).
func notCounting(links []*Link) error {
	var errs []error
	for _, l := range links {
		h := l.Health()
		switch s, _ := h.State(time.Now()); s {
		case StateCounting:
		case StateQuarantined:
			errs = append(errs, fmt.Errorf("%s is %s: %s", l.opt.Addr, s, h.QuarantineReason))
		case StateDown:
			errs = append(errs, fmt.Errorf("%s is %s: %s", l.opt.Addr, s, h.LastError))
		default:
			errs = append(errs, fmt.Errorf("%s is %s", l.opt.Addr, s))
		}
	}
	return errors.Join(errs...) // nil when they all came to count as the time was up
}
