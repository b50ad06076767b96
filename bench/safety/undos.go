package safety

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

// The undo nemeses: a master's script cache emptied under load (an undo
// that meets NOSCRIPT must be sent again, not dropped), and a proxy shut
// down while a majority of masters hangs (the undos it could not run are
// ghost locks it must report, by key).

// scheduleScriptFlush returns a schedule that, every 0.3-0.6s under load,
// empties the script cache of every master (SCRIPT FLUSH, directly; in
// every other cycle of a random majority or more) twenty times, 20-50ms apart. After each flush the
// probe (alone on its proxy) acquires a fresh key at once: its grants on
// the flushed masters count only once their continuity check, which met
// NOSCRIPT, was sent again with its script; an acquisition answered nil
// is undone on every master, where the undo may meet NOSCRIPT too and must
// be sent again with its script. Which of its scripts a link believes loaded when
// a flush comes changes from one acquisition to the next, hence twenty in a
// row. After the undo time the masters are read directly: no token of an
// acquire answered nil may be on a majority. After each of those
// acquisitions, the scripts flushed again, the probe acquires a key that
// a majority holds for someone else (contendedProbe): answered nil, its
// undo on the others meets the emptied cache, and its token must then be
// on no master at all. The probe's proxy is first
// made to load its scripts on every link (a grant, a release, and an
// acquisition undone after a flush of every master).
//
// With oldUndo (the control), the probe's acquire is made instead by a
// harness client that acts as a proxy whose undo gives up at NOSCRIPT: it
// sets the key on every master directly, does not count the flushed ones,
// answers nil, and sends its undo once as EVALSHA.
func scheduleScriptFlush(oldUndo bool) func(ctx context.Context, e *Env) {
	return func(ctx context.Context, e *Env) {
		n, k := e.C.NumBackends(), e.C.Majority()
		all := e.pick(n)
		p := e.probe()
		defer p.Close()
		if !oldUndo {
			if l, out := p.Acquire("probe:warm", time.Second); out == OK {
				p.Release(l)
			}
			e.flushScripts(all)
			l, out := p.Acquire("probe:warm-undo", time.Second)
			e.Logf("the probe's proxy loads its scripts: SET probe:warm-undo %s after SCRIPT FLUSH on every master answered %v", l.Token, out)
		}
		noscript := e.noscripts(all)
		var refused []Lease // the contended probes' acquisitions, answered nil
		for c := 0; sleepCtx(ctx, e.Between(300*time.Millisecond, 600*time.Millisecond)); c++ {
			if e.Left() < undoWithin+500*time.Millisecond {
				break
			}
			for r := 0; r < flushRounds && ctx.Err() == nil; r++ {
				if r > 0 {
					e.hold(ctx, e.Between(20*time.Millisecond, 50*time.Millisecond))
				}
				ms := all
				if c%2 == 1 {
					ms = e.pick(k + e.Intn(n-k+1))
				}
				if oldUndo {
					// As the old proxy had: the undo script loaded on every master.
					for _, i := range all {
						e.C.Server(i).Do("SCRIPT", "LOAD", ReleaseScript)
					}
				}
				e.flushScripts(ms)
				e.Logf("SCRIPT FLUSH on masters %v", ms)
				if oldUndo {
					e.oldUndoAcquire(ctx, ms, flushRounds*c+r)
				} else {
					e.probeAcquire(p, flushRounds*c+r)
					e.flushScripts(ms)
					e.Logf("SCRIPT FLUSH on masters %v", ms)
					refused = append(refused, e.contendedProbe(ctx, p, flushRounds*c+r))
				}
			}
			e.hold(ctx, undoWithin)
			e.Snapshot(fmt.Sprintf("%v after SCRIPT FLUSH on masters, %d times", undoWithin, flushRounds))
			for _, l := range refused {
				if l.Token == "" {
					continue
				}
				if h := e.holders(ctx, all, l.Key, l.Token); len(h) > 0 {
					e.Problemf("ghost: the probe's refused acquisition of %s (%s) is still on masters %v %v after its answer: its undo did not run", l.Key, l.Token, h, undoWithin)
				}
			}
			refused = refused[:0]
		}
		e.Logf("the masters answered NOSCRIPT %d times during the cycles", e.noscripts(all)-noscript)
	}
}

// contendedProbe has the probe acquire a fresh key that a majority of the
// masters hold for someone else (set on them directly): it is granted on
// the others only and answered nil, and its undo there, right after a
// flush, meets NOSCRIPT unless it carries its script or is sent again. It
// returns the refused lease (no token when the acquire was not refused),
// whose token must be on no master once the undo time has passed.
func (e *Env) contendedProbe(ctx context.Context, p *Client, n int) Lease {
	key := fmt.Sprintf("probe:held:%d", n)
	ttl := e.C.Config.MaxTTL
	held := e.pick(e.C.Majority())
	for _, i := range held {
		rdb := direct(e.C.Server(i).Addr)
		err := rdb.Set(ctx, key, "someone-else", ttl).Err()
		rdb.Close()
		if err != nil {
			e.Logf("probe: SET %s on master %d directly FAILED: %v", key, i, err)
		}
	}
	l, out := p.Acquire(key, ttl)
	e.Logf("probe: SET %s %s NX PX %d, held by someone else on masters %v, answered %v", key, l.Token, ttl.Milliseconds(), held, out)
	if out != Refused {
		return Lease{}
	}
	return l
}

// flushRounds is how many flushes, each followed by an acquisition, a
// cycle of scheduleScriptFlush makes.
const flushRounds = 20

// flushScripts empties the script cache of masters ms (SCRIPT FLUSH,
// directly), all at once.
func (e *Env) flushScripts(ms []int) {
	var wg sync.WaitGroup
	for _, i := range ms {
		wg.Add(1)
		go func() { // one per master, waited for here
			defer wg.Done()
			if r, err := e.C.Server(i).Do("SCRIPT", "FLUSH"); err != nil || r != "OK" {
				e.Logf("SCRIPT FLUSH on master %d FAILED: %q, %v", i, r, err)
			}
		}()
	}
	wg.Wait()
}

// noscripts is how many NOSCRIPT errors masters ms have answered so far
// (INFO errorstats).
func (e *Env) noscripts(ms []int) int {
	total := 0
	for _, i := range ms {
		st, err := infoFields(context.Background(), e.C.Server(i).Addr, "errorstats")
		if err != nil {
			continue
		}
		// errorstat_NOSCRIPT:count=3
		if v, ok := strings.CutPrefix(st["errorstat_NOSCRIPT"], "count="); ok {
			n, _ := strconv.Atoi(v)
			total += n
		}
	}
	return total
}

// oldUndoID is the client id of oldUndoAcquire's acquisitions.
const oldUndoID = 41000

// oldUndoAcquire acts as a proxy whose undo gives up at NOSCRIPT: it sets
// a fresh key on every master directly (SET NX PX), counts none of the
// masters in flushed (their scripts were just flushed), answers nil, and
// undoes on every master with one EVALSHA of the release script, giving up
// at NOSCRIPT. It records the acquire, answered nil, in the history.
func (e *Env) oldUndoAcquire(ctx context.Context, flushed []int, n int) {
	key, token := fmt.Sprintf("oldundo:%d", n), fmt.Sprintf("old-%d", n)
	ttl := e.C.Config.MaxTTL
	skip := map[int]bool{}
	for _, i := range flushed {
		skip[i] = true
	}
	op := Op{Client: oldUndoID, Proxy: -1, Key: key, Token: token, Kind: Acquire, TTL: ttl, Call: time.Now()}
	op.ValidUntil = op.Call.Add(ttl - Drift(ttl))
	counted := 0
	var gave []int
	for i := 0; i < e.C.NumBackends(); i++ {
		rdb := direct(e.C.Server(i).Addr)
		ok, err := rdb.SetNX(ctx, key, token, ttl).Result()
		rdb.Close()
		if err == nil && ok && !skip[i] {
			counted++
		}
	}
	op.Outcome = Refused
	if counted >= e.C.Majority() {
		op.Outcome = OK // too few masters flushed to leave a partial acquisition
	}
	sha := releaseSHA()
	for i := 0; op.Outcome == Refused && i < e.C.NumBackends(); i++ {
		rdb := direct(e.C.Server(i).Addr)
		err := rdb.EvalSha(ctx, sha, []string{key}, token).Err()
		rdb.Close()
		if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
			gave = append(gave, i)
		}
	}
	op.Return = time.Now()
	e.H.AddOps(op)
	e.Logf("a proxy whose undo gives up at NOSCRIPT: SET %s %s NX PX %d on every master directly, %d counted: answered %v; its undo met NOSCRIPT on masters %v and was not sent again",
		key, token, ttl.Milliseconds(), counted, op.Outcome, gave)
}

// releaseSHA is the SHA1 of ReleaseScript, as EVALSHA names it.
func releaseSHA() string { return sandbox.Sha1([]byte(ReleaseScript)) }

// scheduleShutdownHang returns a schedule that stops a proxy while a
// majority of masters hangs: the masters are stopped (SIGSTOP), the probe
// (alone on its proxy) acquires a fresh key (answered nil: the hung
// masters do not answer), and the probe's proxy is stopped with a short
// shutdown_grace, before the masters continue. The undos of the hung
// masters cannot run: when the masters continue they run the probe's SET,
// and the token stays on a majority, a ghost lock nobody holds. The proxy
// must report it: its Run ends with ErrUndosPending and its WARN names the
// key. The ghost checker must then find exactly the reported keys; a ghost
// the proxy did not report is a violation. The probe's proxy is started
// again (fresh) after each cycle.
//
// With silent (the control), what the proxy reported is dropped, as a
// proxy that said all was well would leave it: the ghost checker must
// report the ghost as a violation.
func scheduleShutdownHang(silent bool) func(ctx context.Context, e *Env) {
	return func(ctx context.Context, e *Env) {
		k := e.C.Majority()
		slot := e.ProbeSlot
		if slot < 0 {
			e.Problemf("the shutdown schedule needs a probe slot")
			return
		}
		p := e.probe()
		defer p.Close()
		for c := 0; sleepCtx(ctx, e.Between(300*time.Millisecond, 600*time.Millisecond)); c++ {
			if e.Left() < time.Second+undoWithin {
				return
			}
			if !e.C.waitSlotCounting(ctx, slot, 2*e.C.Hold()+5*time.Second) {
				e.Logf("the probe's proxy %d does not count every master; no shutdown this time", slot)
				continue
			}
			ms := e.pick(k)
			for _, i := range ms {
				e.Pause(i)
			}
			from := time.Now()
			e.probeAcquire(p, c)
			left, runErr := e.C.StopProxyReporting(slot)
			e.Logf("proxy %d (the probe's) stopped while masters %v hang: its Run returned %v; the undos it reported left: %q", slot, ms, runErr, left)
			if silent {
				e.Logf("the report is dropped, as a proxy that exits 0 and names no key would leave it")
			} else {
				e.reportUndos(left, runErr)
			}
			to := time.Now()
			for _, i := range ms {
				e.Resume(i)
			}
			e.NoMajority(from, to, fmt.Sprintf("masters %v hung", ms))
			e.RestartProxy(slot)
			e.hold(ctx, undoWithin)
			e.Snapshot(fmt.Sprintf("%v after masters %v continued, the probe's proxy stopped meanwhile", undoWithin, ms))
		}
	}
}

// reportUndos records the keys of the undos a stopped proxy reported left
// pending (its WARN's undos), and checks that its Run said so.
func (e *Env) reportUndos(left []string, runErr error) {
	keys := map[string]int{}
	for _, l := range left {
		for k, n := range parseLeftUndos(l) {
			keys[k] += n
		}
	}
	switch {
	case len(keys) > 0 && !errors.Is(runErr, app.ErrUndosPending):
		e.Problemf("a proxy logged undos left pending (%q) but its Run returned %v, not ErrUndosPending (exit status 3)", left, runErr)
	case len(keys) == 0 && errors.Is(runErr, app.ErrUndosPending):
		e.Problemf("a proxy's Run returned %v but its WARN named no key", runErr)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.reported == nil {
		e.reported = map[string]int{}
	}
	for k, n := range keys {
		e.reported[k] += n
	}
}

// reportedUndos returns, per key, on how many masters the proxies reported
// its undo left pending at their shutdown.
func (e *Env) reportedUndos() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make(map[string]int, len(e.reported))
	for k, n := range e.reported {
		out[k] = n
	}
	return out
}

// parseLeftUndos reads the undos attribute of the proxy's shutdown WARN:
// "backend 1 (addr): \"key\"; backend 2 (addr): \"key\" \"key2\"; and 3
// more", and counts the masters each key was left on.
func parseLeftUndos(s string) map[string]int {
	out := map[string]int{}
	for _, item := range strings.Split(s, "; ") {
		_, keys, ok := strings.Cut(item, "): ")
		if !ok {
			continue
		}
		for rest := strings.TrimSpace(keys); rest != ""; rest = strings.TrimSpace(rest) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				break
			}
			if k, err := strconv.Unquote(q); err == nil {
				out[k]++
			}
			rest = rest[len(q):]
		}
	}
	return out
}

// leftUndos collects what one proxy logged, at its shutdown, as undos
// left pending: the undos attribute of its WARN (see app.Run).
type leftUndos struct {
	mu    sync.Mutex
	lines []string
}

func (l *leftUndos) add(s string) {
	l.mu.Lock()
	l.lines = append(l.lines, s)
	l.mu.Unlock()
}

func (l *leftUndos) get() []string {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// leftUndosHandler hands every record to the proxy's log handler, and
// keeps the undos attribute of any record that has one.
type leftUndosHandler struct {
	slog.Handler
	left *leftUndos
}

func (h leftUndosHandler) Handle(ctx context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "undos" {
			h.left.add(a.Value.String())
		}
		return true
	})
	return h.Handler.Handle(ctx, r)
}

func (h leftUndosHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return leftUndosHandler{h.Handler.WithAttrs(as), h.left}
}

func (h leftUndosHandler) WithGroup(name string) slog.Handler {
	return leftUndosHandler{h.Handler.WithGroup(name), h.left}
}
