package proxy

import (
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// LOCKINFO key: who holds a lock, for an operator. It reads the lock and
// its FENCE state on every backend and answers, as a map (a flat array in
// RESP2):
//   - holder: the token a majority holds (GET's answer), or nil;
//   - validity_ms: the holder's remaining validity (PTTL's answer), -2
//     when no majority holds the key, -1 when it has no expiry;
//   - fence: the fencing number a majority of the backends accepted for
//     the holder's grant, or nil when FENCE has not numbered it (FENCE
//     key token is the authority: it answers it, or numbers the grant);
//   - backends: for each backend, its address, whether its answers count,
//     and what it holds: value, PTTL, the fencing number it accepted for
//     that value, or the error that kept it from answering.
//
// It is a read, as of when the backends answered; it changes nothing.

// kv is one pair of a map reply: a value, or one already encoded (raw).
type kv struct {
	k   string
	v   resp.Value
	raw []byte
}

// appendMap encodes pairs as a RESP3 map, or a flat array in RESP2.
func appendMap(b []byte, pairs []kv, resp3 bool) []byte {
	b = resp.AppendMapHeader(b, len(pairs), resp3)
	for _, p := range pairs {
		b = resp.AppendBulkString(b, p.k)
		if p.raw != nil {
			b = append(b, p.raw...)
		} else {
			b = appendReply(b, p.v, resp3)
		}
	}
	return b
}

func handleLockInfo(c *client, args [][]byte) {
	s := c.s
	key := args[1]
	n := s.be.N()
	b := resp.AppendArrayHeader(nil, 6)
	b = resp.AppendBulkString(b, "EVALSHA")
	b = resp.AppendBulkString(b, lockInfoScript.Sha)
	b = resp.AppendBulkString(b, "2")
	b = resp.AppendBulk(b, key)
	b = resp.AppendBulk(b, keyslot.Companion(nil, fenceStatePrefix, key))
	b = resp.AppendBulkInt(b, int64(s.cfg.Limits.MaxToken))
	backends, cmds := make([]int, n), make([][]byte, n)
	for i := range backends {
		backends[i], cmds[i] = i, b
	}
	t1 := time.Now()
	res := s.call(backends, cmds, lockInfoScript)

	type held struct {
		value, fenceTok []byte
		fence           uint64
		ok              bool
	}
	hs := make([]quorum.Holding, n)
	fs := make([]held, n)
	health := s.be.Health()
	resp3 := c.resp3.Load()
	var per []byte
	per = resp.AppendArrayHeader(per, n)
	for i, r := range res {
		pairs := []kv{{k: "addr", v: resp.BulkValue([]byte(health[i].Addr))}, {k: "counts", v: boolInt(r.Err == nil && r.Counts)}}
		e := r.V.Elems
		switch {
		case r.Err != nil:
			pairs = append(pairs, kv{k: "error", v: resp.BulkValue([]byte(r.Err.Error()))})
		case r.V.Kind == resp.KindError:
			pairs = append(pairs, kv{k: "error", v: r.V})
		case r.V.Kind != resp.KindArray || len(e) != 6:
			pairs = append(pairs, kv{k: "error", v: resp.BulkValue([]byte(msgInvalidReply))})
		default:
			h := quorum.Holding{Answered: true, Counts: r.Counts, Exists: e[0].Kind == resp.KindBulk, Value: e[0].Str}
			h.PTTL = time.Duration(e[1].Int) * time.Millisecond
			if e[1].Int == -1 {
				h.PTTL = quorum.NoExpiry
			}
			hs[i] = h
			value := resp.Nil
			switch {
			case h.Exists:
				value = resp.BulkValue(h.Value)
			case e[5].Int > 0:
				value = resp.BulkValue([]byte("(a value of " + strconv.FormatInt(e[5].Int, 10) + " bytes, longer than max_token)"))
			}
			pairs = append(pairs, kv{k: "value", v: value}, kv{k: "pttl_ms", v: resp.IntValue(e[1].Int)})
			fence := resp.Nil
			if h.Exists && string(e[2].Str) == string(h.Value) {
				if v, err := strconv.ParseUint(string(e[4].Str), 10, 64); err == nil && v > 0 {
					fs[i] = held{value: h.Value, fenceTok: e[2].Str, fence: v, ok: true}
					fence = resp.IntValue(int64(v))
				}
			}
			pairs = append(pairs, kv{k: "fence", v: fence})
		}
		per = appendMap(per, pairs, resp3)
	}

	holder, validity, fence := resp.Nil, resp.IntValue(-2), resp.Nil
	if v, rem, ok := quorum.MajorityRemaining(n, hs); ok {
		holder = resp.BulkValue(v)
		validity = resp.IntValue(int64(s.cfg.Timing.RemainingValidity(rem, time.Since(t1)) / time.Millisecond))
		if rem == quorum.NoExpiry {
			validity = resp.IntValue(-1)
		}
		if num, ok := majorityFence(n, func(i int) (uint64, bool) {
			return fs[i].fence, fs[i].ok && hs[i].Counts && string(fs[i].value) == string(v)
		}); ok {
			fence = resp.IntValue(int64(num))
		}
	}
	c.replyRaw(appendMap(nil, []kv{
		{k: "key", v: resp.BulkValue(key)}, {k: "holder", v: holder}, {k: "validity_ms", v: validity},
		{k: "fence", v: fence}, {k: "backends", raw: per},
	}, resp3))
}

// majorityFence is the fencing number a majority of n backends accepted for
// the holder's grant (at(i) gives backend i's, when it counts).
func majorityFence(n int, at func(i int) (uint64, bool)) (uint64, bool) {
	votes := map[uint64]int{}
	for i := 0; i < n; i++ {
		if v, ok := at(i); ok {
			votes[v]++
			if votes[v] >= quorum.Majority(n) {
				return v, true
			}
		}
	}
	return 0, false
}

func boolInt(b bool) resp.Value {
	if b {
		return resp.IntValue(1)
	}
	return resp.IntValue(0)
}
