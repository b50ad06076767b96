package classify

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

// A read-write lock script is recognized by what it does: run in the
// sandbox on a battery of probe states of a lock (its hash and the leases
// of its read holds), in the call layout of one role, each probe's reply,
// end state and messages must be those of a model of the role, in Redisson's
// keeping (rwModel). The runs may use the keys named after the lock's
// lease prefix (the leases; the masters are independent servers, so every
// key of a call lives on each), and HKEYS, answered in two orders: a
// script whose outcome depends on the server's hash-table order differs
// in one of them. The probes use names and values of their own (two sets
// of them); the call's own names are checked against the layout
// (RWLock.Fits).

// Probe names: the caller (holder a, writer aw) and another (b, bw).
const (
	rwProbeLock = "redlock-proxy-probe-rw"
	rwProbeNow  = int64(1_700_000_000_000)
	rwLockLeft  = 20_000 // the probe lock's PTTL
	rwLatchLeft = 5_000
	rwMsg       = "0"
	rwLatchTTL  = "20000"
)

// rwNames is one set of probe values.
type rwNames struct {
	a, aw, b, bw string
	ttl          int64
}

var rwNameSets = []rwNames{
	{a: "probe-a:1", aw: "probe-a:1:write", b: "probe-b:7", bw: "probe-b:7:write", ttl: 30_000},
	{a: "c0ffee:42", aw: "c0ffee:42:write", b: "decaf:3", bw: "decaf:3:write", ttl: 9_000},
}

// rwProbe is one probe state: the lock's hash (nil: missing), its read
// holds' leases as holder -> PTTL of each hold (0: expired), and for a
// release a latch there.
type rwProbe struct {
	name   string
	hash   map[string]string
	leases map[string][]int64
	latch  string
}

// rwProbes builds the battery of role for names n. Every holder's count
// is 1 in the renewal's probes: Redisson's renewal names the lease of a
// holder's second hold after KEYS[3], not the lock's prefix.
func rwProbes(n rwNames, role RWRole) []rwProbe {
	ps := []rwProbe{
		{name: "a free lock"},
		{name: "another's read hold", hash: map[string]string{"mode": "read", n.b: "1"}, leases: map[string][]int64{n.b: {12_000}}},
		{name: "the caller's and another's read holds", hash: map[string]string{"mode": "read", n.a: "1", n.b: "1"}, leases: map[string][]int64{n.a: {15_000}, n.b: {12_000}}},
		{name: "the caller's read hold beside another's expired one", hash: map[string]string{"mode": "read", n.a: "1", n.b: "1"}, leases: map[string][]int64{n.a: {15_000}, n.b: {0}}},
		{name: "the caller's read hold", hash: map[string]string{"mode": "read", n.a: "1"}, leases: map[string][]int64{n.a: {15_000}}},
		{name: "another's write lock", hash: map[string]string{"mode": "write", n.bw: "1"}},
		{name: "the caller's write lock", hash: map[string]string{"mode": "write", n.aw: "1"}},
		{name: "the caller's write lock and its read hold", hash: map[string]string{"mode": "write", n.aw: "1", n.a: "1"}, leases: map[string][]int64{n.a: {15_000}}},
		{name: "another's write lock and its read hold", hash: map[string]string{"mode": "write", n.bw: "1", n.b: "1"}, leases: map[string][]int64{n.b: {15_000}}},
	}
	if role == RWReadRenew {
		return ps
	}
	ps = append(ps,
		rwProbe{name: "the caller's two read holds", hash: map[string]string{"mode": "read", n.a: "2"}, leases: map[string][]int64{n.a: {15_000, 18_000}}},
		rwProbe{name: "the caller's write lock entered twice", hash: map[string]string{"mode": "write", n.aw: "2"}})
	if role == RWReadRelease || role == RWWriteRelease {
		ps = append(ps, rwProbe{name: "a release's latch", hash: map[string]string{"mode": "read", n.a: "1"}, leases: map[string][]int64{n.a: {15_000}}, latch: "0"})
	}
	return ps
}

// rwCall is a probe call in a role's layout: its keys and arguments, the
// lease prefixes it may build keys from, and its latch key ("" for none).
type rwCall struct {
	keys, argv []string
	prefixes   []string
	latch      string
}

func rwProbeCall(l *RWLock, n rwNames) rwCall {
	p := RWLeasePrefix([]byte(rwProbeLock))
	ttl := strconv.FormatInt(n.ttl, 10)
	c := rwCall{prefixes: []string{p}}
	switch l.Role {
	case RWReadAcquire:
		c.keys, c.argv = []string{rwProbeLock, p + ":" + n.a + ":rwlock_timeout"}, []string{ttl, n.a, n.aw}
	case RWWriteAcquire:
		c.keys, c.argv = []string{rwProbeLock}, []string{ttl, n.aw}
	case RWReadRelease:
		c.latch = p + ":probe-latch"
		c.keys = []string{rwProbeLock, "redisson_rwlock:" + p, p + ":" + n.a + ":rwlock_timeout", p, c.latch}
		c.argv = []string{rwMsg, n.a, "PUBLISH", rwLatchTTL}
	case RWWriteRelease:
		c.latch = p + ":probe-latch"
		c.keys = []string{rwProbeLock, "redisson_rwlock:" + p, c.latch}
		c.argv = []string{rwMsg, ttl, n.aw, "PUBLISH", rwLatchTTL}
	case RWReadRenew:
		// One lock a call: Redisson's renewal names every pair's first
		// leases after the first pair's prefix.
		c.keys, c.argv = []string{rwProbeLock, p}, []string{ttl, n.a}
	}
	return c
}

// rwState lays a probe out in the model, at lock (with its lease prefix).
func rwState(st *sandbox.State, lock string, pr rwProbe) {
	if pr.hash == nil {
		return
	}
	st.Keys[lock] = sandbox.Item{Type: sandbox.TypeHash, Hash: maps.Clone(pr.hash), At: st.Now + rwLockLeft}
	p := RWLeasePrefix([]byte(lock))
	for h, ls := range pr.leases {
		for i, left := range ls {
			if left > 0 {
				st.Keys[rwLease(p, h, i+1)] = sandbox.Item{Type: sandbox.TypeString, Value: "1", At: st.Now + left}
			}
		}
	}
}

func rwLease(prefix, holder string, i int) string {
	return prefix + ":" + holder + ":rwlock_timeout:" + strconv.Itoa(i)
}

// rwSteps bounds each probe run: an operation takes a few hundred
// instructions.
const rwSteps = 20_000

// RWRecognize runs a script on the probe battery of layout l's role and
// says which probe it did not answer as the role does ("" when every
// probe matched).
func RWRecognize(body []byte, l *RWLock) string {
	why, _ := rwRecognize(body, l)
	return why
}

// rwRecognize is RWRecognize, and whether a run used a key named after
// the lock's that the call does not name.
func rwRecognize(body []byte, l *RWLock) (why string, derived bool) {
	p, ref := sandbox.PrepareDerived(body)
	if ref != nil {
		return "it " + ref.Reason, false
	}
	r := sandbox.NewRunner()
	defer func() { r.Close() }()
	for _, n := range rwNameSets {
		c := rwProbeCall(l, n)
		for _, pr := range rwProbes(n, l.Role) {
			st := &sandbox.State{Now: rwProbeNow, Keys: map[string]sandbox.Item{}}
			rwState(st, rwProbeLock, pr)
			if pr.latch != "" {
				st.Keys[c.latch] = sandbox.Item{Type: sandbox.TypeString, Value: pr.latch, At: st.Now + rwLatchLeft}
			}
			want := rwModel(l.Role, c, n, st)
			for _, order := range []int{sandbox.HKeysAsc, sandbox.HKeysDesc} {
				if r.Broken {
					r.Close()
					r = sandbox.NewRunner()
				}
				res := p.RunKeyed(r, c.keys, len(c.keys), c.argv, st, rwSteps, sandbox.SideKeys{Derived: c.prefixes, HKeys: order})
				for k := range res.Touched {
					derived = derived || !slices.Contains(c.keys, k)
				}
				if res.Ref != nil {
					return fmt.Sprintf("on %s, it %s", pr.name, res.Ref.Reason), derived
				}
				if why := want.differs(res); why != "" {
					return fmt.Sprintf("on %s, %s", pr.name, why), derived
				}
			}
		}
	}
	return "", derived
}

// rwOutcome is what the model says a call does.
type rwOutcome struct {
	reply resp.Value
	st    *sandbox.State
}

// differs says how a run differs from the model's outcome, or "".
func (w rwOutcome) differs(res sandbox.Result) string {
	if !res.Reply.Equal(w.reply) {
		return fmt.Sprintf("it answers %s where the role answers %s", rwShow(res.Reply), rwShow(w.reply))
	}
	keys := map[string]bool{}
	for k := range w.st.Keys {
		keys[k] = true
	}
	for k := range res.State.Keys {
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		a, aok := res.State.Lookup(k)
		b, bok := w.st.Lookup(k)
		switch {
		case aok && !bok:
			return fmt.Sprintf("it leaves %s as %s where the role leaves it missing", strconv.Quote(sandbox.Short(k)), a)
		case !aok && bok:
			return fmt.Sprintf("it leaves %s missing where the role leaves it as %s", strconv.Quote(sandbox.Short(k)), b)
		case aok && !a.Equal(b):
			return fmt.Sprintf("it leaves %s as %s (PTTL %d) where the role leaves %s (PTTL %d)", strconv.Quote(sandbox.Short(k)), rwItem(a), res.State.PTTL(k), rwItem(b), w.st.PTTL(k))
		}
	}
	if !slices.Equal(res.State.Published, w.st.Published) {
		return fmt.Sprintf("it publishes %v where the role publishes %v", res.State.Published, w.st.Published)
	}
	return ""
}

func rwShow(v resp.Value) string {
	switch v.Kind {
	case resp.KindInt:
		return strconv.FormatInt(v.Int, 10)
	case resp.KindArray:
		parts := make([]string, len(v.Elems))
		for i, e := range v.Elems {
			parts[i] = rwShow(e)
		}
		return "[" + strings.Join(parts, " ") + "]"
	case resp.KindBulk, resp.KindSimple:
		return strconv.Quote(sandbox.Short(string(v.Str)))
	}
	if v.Equal(resp.Nil) {
		return "nil"
	}
	return "an error"
}

func rwItem(it sandbox.Item) string {
	if it.Type == sandbox.TypeHash {
		fs := make([]string, 0, len(it.Hash))
		for _, f := range slices.Sorted(maps.Keys(it.Hash)) {
			fs = append(fs, f+"="+it.Hash[f])
		}
		return "{" + strings.Join(fs, " ") + "}"
	}
	return it.String()
}
