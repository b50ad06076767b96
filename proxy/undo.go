package proxy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/netio"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// takeUndoLocked hands over the nodes to undo now, once every backend has
// been sent the command, so that on each the undo follows what it undoes.
// It allocates only when there is something to undo.
func (o *op) takeUndoLocked() []int {
	if !o.dispatched || o.undoCmd == nil {
		return nil
	}
	return o.undo.Take(nil)
}

// sendUndo runs compare-and-delete with this attempt's token on each node.
// It does not depend on the client: the backends deliver it even across a
// lost connection, after the command it undoes.
func (o *op) sendUndo(nodes []int) {
	if len(nodes) == 0 {
		return
	}
	sc, later := undoScript, undoLaterScript
	if o.undoSc != nil {
		sc, later = o.undoSc, o.laterSc
	}
	build := func(offset time.Duration, known bool) []byte {
		o.mu.Lock()
		settled := o.settledAt
		o.mu.Unlock()
		var at int64 // the master's clock when the reply could first leave
		switch {
		case settled.IsZero():
			at = undoAnyCopy // no reply yet: no retry can have been granted
		case known:
			// A little earlier than measured, so that a retry granted just
			// after the reply is never taken for this attempt.
			at = settled.Add(offset).Add(-2 * time.Millisecond).UnixMilli()
		}
		return laterForm(o.undoCmd, sc, later, at)
	}
	keys := undoKeyArgs(o.undoCmd)
	u := netio.UndoCmd{Now: o.undoCmd, NowScript: sc, Later: build, LaterScript: later, Keys: quotedKeys(keys), TTL: o.ttl}
	rcv := undoReceiver{s: o.e.stats}
	if t := o.e.track; t != nil && t.active.Load() > 0 {
		rcv.track, rcv.keys = t, keys
	}
	for _, n := range nodes {
		u.Via = o.viaOf(n)
		o.e.be.Undo(n, u, rcv, n)
	}
}

// setVia keeps where node ran the op (a Redis Cluster's shard), for its
// undo. Called with the op's lock held.
func (o *op) setVia(node int, v any) {
	if o.via == nil {
		o.via = make([]any, o.e.nodes())
	}
	o.via[node] = v
}

// viaOf is where node ran the op, or nil.
func (o *op) viaOf(node int) any {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.via == nil {
		return nil
	}
	return o.via[node]
}

// quotedKeys names an undo command's keys (undoKeyArgs), for the log.
func quotedKeys(keys [][]byte) string {
	if keys == nil {
		return "?"
	}
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(strconv.Quote(string(k)))
	}
	return b.String()
}

// undoKeyArgs returns the keys of an undo command (nil if it has none).
func undoKeyArgs(cmd []byte) [][]byte {
	v, err := resp.NewReader(bufio.NewReader(bytes.NewReader(cmd)), resp.ReaderLimits{}).Read()
	if err != nil || len(v.Elems) < 3 {
		return nil
	}
	n, _ := resp.ParseInt(v.Elems[2].Str)
	var keys [][]byte
	for i := 3; i < len(v.Elems) && int64(i-3) < n; i++ {
		keys = append(keys, v.Elems[i].Str)
	}
	return keys
}

// undoReceiver counts undo results and, when clients track keys, sends the
// invalidations of the keys undone. A tracking client may have read the
// grant while it stood on a majority, and the masters do not report the
// proxy's own writes (netio's tracking is NOLOOP): without these it would
// keep a lock nobody holds in its cache. Every result invalidates, the
// failures too: the undo may have run.
type undoReceiver struct {
	s     *stats
	track *tracker
	keys  [][]byte
}

func (u undoReceiver) Receive(node int, r netio.Result) {
	for _, k := range u.keys {
		u.track.invalidate(k, nil)
	}
	if u.s == nil {
		return
	}
	switch {
	case r.Err == nil && r.V.Kind == resp.KindInt:
		u.s.undone(UndoOK)
	case errors.Is(r.Err, netio.ErrExpired):
		u.s.undone(UndoExpired)
	default:
		u.s.undone(UndoFailed)
	}
}

// appendUndoCmd encodes EVALSHA of an undo script (sc): nkeys, the keys,
// one token for all or one per key, then the TTL, recentUndo and a place for
// the least age, in ms. The undo scripts and their later forms take the same
// arguments (the former ignore the last three), so the later form is this
// command with the other SHA1 and the age filled in (laterForm), built only
// when it is written.
func appendUndoCmd(dst []byte, sc *resp.Script, keys, tokens [][]byte, ttl time.Duration) []byte {
	dst = resp.AppendArrayHeader(dst, 6+len(keys)+len(tokens))
	dst = resp.AppendBulkString(dst, "EVALSHA")
	dst = resp.AppendBulkString(dst, sc.Sha)
	dst = resp.AppendBulkInt(dst, int64(len(keys)))
	for _, k := range keys {
		dst = resp.AppendBulk(dst, k)
	}
	for _, t := range tokens {
		dst = resp.AppendBulk(dst, t)
	}
	dst = resp.AppendBulkInt(dst, ttl.Milliseconds())
	dst = resp.AppendBulkInt(dst, recentUndo.Milliseconds())
	return resp.AppendBulkString(dst, undoAtZero)
}

// laterForm is cmd, an EVALSHA of now, as an EVALSHA of later, with its
// last argument, the master's clock (ms) before which a copy is this
// attempt's (see readyLocked), set to at.
func laterForm(cmd []byte, now, later *resp.Script, at int64) []byte {
	out := append([]byte(nil), cmd...)
	if i := bytes.Index(out, []byte(now.Sha)); i >= 0 {
		copy(out[i:], later.Sha)
	}
	copy(out[len(out)-2-len(undoAtZero):], fmt.Sprintf("%013d", max(0, min(at, undoAnyCopy))))
	return out
}

// undoAtZero holds the place of that instant in an undo command: thirteen
// digits, so the later form changes no length. undoAnyCopy is an instant
// after every copy.
const (
	undoAtZero  = "0000000000000"
	undoAnyCopy = 9_999_999_999_999
)

// recentUndo is how recently a key must have been set for a later undo to
// delete it: a resumed master runs the late SET and the undo queued on the
// new connection within a few milliseconds of each other.
const recentUndo = 10 * time.Millisecond
