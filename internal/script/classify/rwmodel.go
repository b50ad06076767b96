package classify

import (
	"maps"
	"strconv"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

// rwModel is what each read-write lock role does to a probe state, as
// Redisson's RReadWriteLock keeps the lock (the reference a script is
// compared with, RWRecognize):
//
//   - read acquire: a free lock becomes a read lock with the caller's
//     hold; a read lock, or a write lock the caller's writer holds, gets
//     one more hold; each hold gets a lease for the TTL, and the lock lives
//     at least as long. Answers nil; elsewhere the lock's PTTL, changing
//     nothing.
//   - write acquire: a free lock becomes the caller's write lock for the
//     TTL; the caller's write lock is entered again, living the TTL longer.
//     Answers as the read acquire.
//   - read release: takes off the caller's last read hold and its lease;
//     the lock lives as long as the longest lease left, and is deleted (a
//     message published) when none is left and no write lock stays.
//     Answers 1 when it freed the lock, 0 when it is still held, nil when
//     the caller held nothing.
//   - write release: takes off one of the caller's write holds; at the
//     last, the lock turns to read where the caller's read holds are
//     left, or is deleted (a message published). Answers 1 when its
//     write lock is gone, 0 when write holds are left, nil otherwise.
//   - renewal, per lock and holder: where the holder holds the lock,
//     re-arms the lock and every read hold's lease for the TTL and answers
//     1; elsewhere 0.
//
// A release that finds its latch answers the number there, changing
// nothing; one that acts records its answer there.
func rwModel(role RWRole, c rwCall, n rwNames, in *sandbox.State) rwOutcome {
	st := in.Clone()
	m := &rwm{st: st}
	lock := c.keys[0]
	switch role {
	case RWReadAcquire:
		return rwOutcome{m.readAcquire(lock, c.keys[1], n.a, n.aw, n.ttl), st}
	case RWWriteAcquire:
		return rwOutcome{m.writeAcquire(lock, n.aw, n.ttl), st}
	case RWReadRelease:
		return rwOutcome{m.readRelease(c, n.a), st}
	case RWWriteRelease:
		return rwOutcome{m.writeRelease(c, n.aw, n.ttl), st}
	case RWReadRenew:
		out := resp.Value{Kind: resp.KindArray}
		for i := 0; i < len(c.keys); i += 2 {
			out.Elems = append(out.Elems, m.renew(c.keys[i], c.keys[i+1], c.argv[1+i/2], n.ttl))
		}
		return rwOutcome{out, st}
	}
	return rwOutcome{resp.Nil, st}
}

// rwm applies the model's steps to a state.
type rwm struct{ st *sandbox.State }

func (m *rwm) hash(lock string) (map[string]string, bool) {
	it, ok := m.st.Lookup(lock)
	if !ok || it.Type != sandbox.TypeHash {
		return nil, false
	}
	return it.Hash, true
}

func (m *rwm) put(lock string, h map[string]string, at int64) {
	m.st.Keys[lock] = sandbox.Item{Type: sandbox.TypeHash, Hash: h, At: at}
}

func (m *rwm) set(k, v string, ms int64) {
	m.st.Keys[k] = sandbox.Item{Type: sandbox.TypeString, Value: v, At: m.st.Now + ms}
}

func (m *rwm) expire(k string, ms int64) {
	if it, ok := m.st.Lookup(k); ok {
		it.At = m.st.Now + ms
		m.st.Keys[k] = it
	}
}

func (m *rwm) publish(c rwCall) {
	m.st.Published = append(m.st.Published, sandbox.Message{Channel: c.keys[1], Payload: rwMsg})
}

func count(h map[string]string, f string) int {
	n, _ := strconv.Atoi(h[f])
	return n
}

func (m *rwm) readAcquire(lock, own, a, aw string, ttl int64) resp.Value {
	h, ok := m.hash(lock)
	if !ok {
		m.put(lock, map[string]string{"mode": "read", a: "1"}, m.st.Now+ttl)
		m.set(own+":1", "1", ttl)
		return resp.Nil
	}
	left := m.st.PTTL(lock)
	if _, w := h[aw]; h["mode"] != "read" && (h["mode"] != "write" || !w) {
		return resp.IntValue(left)
	}
	h = maps.Clone(h)
	i := count(h, a) + 1
	h[a] = strconv.Itoa(i)
	m.put(lock, h, m.st.Now+max(left, ttl))
	m.set(own+":"+strconv.Itoa(i), "1", ttl)
	return resp.Nil
}

func (m *rwm) writeAcquire(lock, aw string, ttl int64) resp.Value {
	h, ok := m.hash(lock)
	if !ok {
		m.put(lock, map[string]string{"mode": "write", aw: "1"}, m.st.Now+ttl)
		return resp.Nil
	}
	left := m.st.PTTL(lock)
	if _, w := h[aw]; h["mode"] != "write" || !w {
		return resp.IntValue(left)
	}
	h = maps.Clone(h)
	h[aw] = strconv.Itoa(count(h, aw) + 1)
	m.put(lock, h, m.st.Now+left+ttl)
	return resp.Nil
}

// latched answers a release from its latch, or records the release's
// answer there.
func (m *rwm) latched(c rwCall) (resp.Value, bool) {
	if it, ok := m.st.Lookup(c.latch); ok {
		n, _ := strconv.ParseInt(it.Value, 10, 64)
		return resp.IntValue(n), true
	}
	return resp.Value{}, false
}

func (m *rwm) latch(c rwCall, v string) {
	ms, _ := strconv.ParseInt(rwLatchTTL, 10, 64)
	m.set(c.latch, v, ms)
}

func (m *rwm) readRelease(c rwCall, a string) resp.Value {
	if v, ok := m.latched(c); ok {
		return v
	}
	lock, own, all := c.keys[0], c.keys[2], c.keys[3]
	h, ok := m.hash(lock)
	if !ok {
		m.publish(c)
		m.latch(c, "1")
		return resp.Nil
	}
	if _, held := h[a]; !held {
		return resp.Nil
	}
	h = maps.Clone(h)
	n := count(h, a) - 1
	if n == 0 {
		delete(h, a)
	} else {
		h[a] = strconv.Itoa(n)
	}
	m.put(lock, h, m.st.Keys[lock].At)
	delete(m.st.Keys, own+":"+strconv.Itoa(n+1))
	if len(h) > 1 {
		longest := int64(-3)
		for f := range h {
			if k, err := strconv.Atoi(h[f]); err == nil {
				for i := k; i >= 1; i-- {
					longest = max(longest, m.st.PTTL(rwLease(all, f, i)))
				}
			}
		}
		if longest > 0 {
			m.expire(lock, longest)
			m.latch(c, "0")
			return resp.IntValue(0)
		}
		if h["mode"] == "write" {
			m.latch(c, "0")
			return resp.IntValue(0)
		}
	}
	delete(m.st.Keys, lock)
	m.publish(c)
	m.latch(c, "1")
	return resp.IntValue(1)
}

func (m *rwm) writeRelease(c rwCall, aw string, ttl int64) resp.Value {
	if v, ok := m.latched(c); ok {
		return v
	}
	lock := c.keys[0]
	h, ok := m.hash(lock)
	if !ok {
		m.publish(c)
		m.latch(c, "1")
		return resp.Nil
	}
	if _, held := h[aw]; h["mode"] != "write" || !held {
		return resp.Nil
	}
	h = maps.Clone(h)
	if n := count(h, aw) - 1; n > 0 {
		h[aw] = strconv.Itoa(n)
		m.put(lock, h, m.st.Now+ttl)
		m.latch(c, "0")
		return resp.IntValue(0)
	}
	delete(h, aw)
	if len(h) == 1 {
		delete(m.st.Keys, lock)
		m.publish(c)
	} else {
		h["mode"] = "read"
		m.put(lock, h, m.st.Keys[lock].At)
	}
	m.latch(c, "1")
	return resp.IntValue(1)
}

func (m *rwm) renew(lock, prefix, holder string, ttl int64) resp.Value {
	h, ok := m.hash(lock)
	if !ok {
		return resp.IntValue(0)
	}
	if _, held := h[holder]; !held {
		return resp.IntValue(0)
	}
	m.expire(lock, ttl)
	for f := range h {
		if k, err := strconv.Atoi(h[f]); err == nil {
			for i := k; i >= 1; i-- {
				m.expire(rwLease(prefix, f, i), ttl)
			}
		}
	}
	return resp.IntValue(1)
}
