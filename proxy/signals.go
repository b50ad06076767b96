package proxy

import (
	"strconv"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Signal lists (spec.Notice with List: python-redis-lock's release
// pushes an element onto "lock-signal:<name>" and its waiters take it with
// BLPOP). The masters never hold the list: a release's signal is a release
// notice (cmds_pubsub.go), published by the proxy that decided the release
// and delivered by every proxy once a majority of masters delivered it.
// BLPOP on a key waits for such a signal: every waiter on the key when it
// arrives is woken with [key, element] (on one Redis one waiter takes the
// element and the others wait on; a waiter that loses the race for the
// lock waits again), and a signal no one waited for is kept for its TTL
// (the release's PEXPIRE of the list), for the first BLPOP to come. No
// signal within the timeout answers nil, as Redis does; a BLPOP without a
// timeout waits at most max_ttl (every lock it may wait for has expired by
// then) and is then answered nil.

var signalCommands = []*commandDef{
	{name: "blpop", arity: -3, flags: []string{"write", "blocking"}, first: 1, last: -2, step: 1, fn: handleBLPop},
}

// signals are the BLPOP waiters and the signals kept for waiters to come.
type signals struct {
	mu      sync.Mutex
	waiters map[string][]*signalWait
	kept    map[string]keptSignal
	closed  bool // shutting down: every wait ends at once
	blocked int  // the waits registered (INFO's blocked_clients)
}

type keptSignal struct {
	value []byte
	until time.Time
}

// maxKeptSignals bounds the signals kept: past it the expired ones go,
// then all (a waiter that comes later waits for the next release, or its
// timeout, as one that came after the signal expired would).
const maxKeptSignals = 1 << 16

// signalWait is one BLPOP: it signals its client's done once, with the
// signal taken or none.
type signalWait struct {
	keys  [][]byte
	done  chan<- struct{}
	timer *time.Timer
	fired bool
	// key and value: the signal taken (key nil: none).
	key, value []byte
}

func handleBLPop(c *client, args [][]byte) {
	secs, err := strconv.ParseFloat(string(args[len(args)-1]), 64)
	switch {
	case err != nil || secs != secs || secs > 1e12:
		c.replyErr(msgTimeoutNotFloat)
		return
	case secs < 0:
		c.replyErr(msgTimeoutNegative)
		return
	}
	timeout := time.Duration(secs * float64(time.Second))
	if timeout == 0 || timeout > c.s.cfg.MaxTTL {
		timeout = c.s.cfg.MaxTTL
	}
	c.reserve(1)
	w := &signalWait{done: c.done}
	for _, k := range args[1 : len(args)-1] {
		w.keys = append(w.keys, append([]byte(nil), k...))
	}
	c.slots = append(c.slots, slot{wait: w, resp3: c.resp3.Load()})
	c.inflight++
	c.s.signals.wait(w, timeout)
}

// wait takes a kept signal of one of w's keys, in order, or registers w
// until a signal, its timeout or shutdown.
func (ss *signals) wait(w *signalWait, timeout time.Duration) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	now := time.Now()
	for _, k := range w.keys {
		if s, ok := ss.kept[string(k)]; ok {
			delete(ss.kept, string(k))
			if now.Before(s.until) {
				ss.fireLocked(w, k, s.value)
				return
			}
		}
	}
	if ss.closed {
		ss.fireLocked(w, nil, nil)
		return
	}
	if ss.waiters == nil {
		ss.waiters = map[string][]*signalWait{}
	}
	for _, k := range w.keys {
		ss.waiters[string(k)] = append(ss.waiters[string(k)], w)
	}
	ss.blocked++
	w.timer = time.AfterFunc(timeout, func() {
		ss.mu.Lock()
		defer ss.mu.Unlock()
		ss.fireLocked(w, nil, nil)
	})
}

// fireLocked ends a wait with the signal of key (nil: none), once.
func (ss *signals) fireLocked(w *signalWait, key, value []byte) {
	if w.fired {
		return
	}
	w.fired, w.key, w.value = true, key, value
	if w.timer != nil {
		w.timer.Stop()
		ss.blocked--
	}
	for _, k := range w.keys {
		ws := ss.waiters[string(k)]
		for i, x := range ws {
			if x == w {
				ws = append(ws[:i], ws[i+1:]...)
				break
			}
		}
		if len(ws) == 0 {
			delete(ss.waiters, string(k))
		} else {
			ss.waiters[string(k)] = ws
		}
	}
	w.done <- struct{}{}
}

// deliver gives a release's signal to every waiter on key, or keeps it
// for ttl for the first to come.
func (ss *signals) deliver(key, value []byte, ttl time.Duration) {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if ws := ss.waiters[string(key)]; len(ws) > 0 {
		for _, w := range append([]*signalWait(nil), ws...) {
			ss.fireLocked(w, key, value)
		}
		return
	}
	if ttl <= 0 {
		return
	}
	now := time.Now()
	if ss.kept == nil {
		ss.kept = map[string]keptSignal{}
	}
	if len(ss.kept) >= maxKeptSignals {
		for k, s := range ss.kept {
			if !now.Before(s.until) {
				delete(ss.kept, k)
			}
		}
		if len(ss.kept) >= maxKeptSignals {
			clear(ss.kept)
		}
	}
	ss.kept[string(key)] = keptSignal{value: append([]byte(nil), value...), until: now.Add(ttl)}
}

// blockedClients is how many clients wait in BLPOP.
func (ss *signals) blockedClients() int {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	return ss.blocked
}

// close ends every wait (shutdown): answered nil.
func (ss *signals) close() {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	ss.closed = true
	for _, ws := range ss.waiters {
		for _, w := range append([]*signalWait(nil), ws...) {
			ss.fireLocked(w, nil, nil)
		}
	}
}

// appendWaitReply encodes BLPOP's reply: [key, element], or the null
// array.
func appendWaitReply(b []byte, w *signalWait, resp3 bool) []byte {
	if w.key == nil {
		return resp.AppendNullArray(b, resp3)
	}
	b = resp.AppendArrayHeader(b, 2)
	b = resp.AppendBulk(b, w.key)
	return resp.AppendBulk(b, w.value)
}
