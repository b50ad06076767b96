package proxy

import (
	"slices"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
	"github.com/redlock-proxy/redlock-proxy/netio"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// keyObs is what one backend said of one key.
type keyObs struct {
	cs       spec.Case
	pttl     int64
	value    []byte
	hasValue bool
	after    int64
}

// obs reads backend i's state of key k; ok is false when the backend's
// answer does not count.
func (o *op) obs(i, k int) (keyObs, bool) {
	vote, counted := o.tally.Vote(i)
	if !counted || vote == quorum.Pending || vote == quorum.Unknown {
		return keyObs{}, false
	}
	v := o.replies[i]
	if !o.sc.detailed {
		return keyObs{cs: spec.Case(v.Int >> 1)}, true
	}
	e := v.Elems[1+4*k:]
	return keyObs{cs: spec.Case(e[0].Int), pttl: e[1].Int, value: e[2].Str, hasValue: e[2].Kind == resp.KindBulk, after: e[3].Int}, true
}

// holder is a case without its TTL detail: missing, own or other.
func holder(c spec.Case) spec.Case {
	switch c {
	case spec.CaseOwn, spec.CaseOwnNoTTL, spec.CaseOwnLowTTL, spec.CaseOwnAgain:
		return spec.CaseOwn
	case spec.CaseOther, spec.CaseOtherNoTTL, spec.CaseOtherLowTTL:
		return spec.CaseOther
	case spec.CaseOwnShared, spec.CaseOwnSharedOthers, spec.CaseOtherShared:
		return c // a lock of several owners: each case on its own
	}
	return spec.CaseMissing
}

// ttlRank orders a key's TTL cases from most time left to least.
func ttlRank(c spec.Case) int {
	switch c {
	case spec.CaseOwnNoTTL, spec.CaseOtherNoTTL:
		return 0
	case spec.CaseOwnLowTTL, spec.CaseOtherLowTTL:
		return 2
	}
	return 1
}

// majorityKey is the state a majority of counted backends agree key k is
// in: who holds it (and, answered in detail, the same value), its TTL case
// from the majority-th most time left, and that PTTL before and after.
func (o *op) majorityKey(k int, elapsed time.Duration) (keyObs, bool) {
	ob, ok := o.majorityKeyOfBackends(k, elapsed)
	if holder(ob.cs) == spec.CaseMissing {
		// A lock that only the upgrade's veto holds is an old client's.
		if v, vok := o.vetoObs(k); vok && holder(v.cs) != spec.CaseMissing {
			return v, true
		}
	}
	return ob, ok
}

// majorityKeyOfBackends is majorityKey among the voting backends.
func (o *op) majorityKeyOfBackends(k int, elapsed time.Duration) (keyObs, bool) {
	m := quorum.Majority(o.e.n)
	if !o.sc.detailed {
		return o.majorityCompact(m)
	}
	for i := range o.replies {
		a, ok := o.obs(i, k)
		if !ok {
			continue
		}
		h := holder(a.cs)
		var ranks [3]int
		var pttls, afters []int64
		count, again := 0, 0
		for j := range o.replies {
			b, ok := o.obs(j, k)
			if !ok || holder(b.cs) != h || (h == spec.CaseOther && o.sc.detailed && string(b.value) != string(a.value)) {
				continue
			}
			count++
			ranks[ttlRank(b.cs)]++
			if b.cs == spec.CaseOwnAgain {
				again++
			}
			if o.sc.detailed {
				pttls = append(pttls, b.pttl)
				afters = append(afters, b.after)
			}
		}
		if count < m {
			continue
		}
		out := a
		switch {
		case h == spec.CaseMissing:
			out.cs = spec.CaseMissing
		case ranks[0] >= m:
			out.cs = h + 1 // no TTL
		case ranks[0]+ranks[1] >= m:
			out.cs = h
		default:
			out.cs = h + 2 // too little left
		}
		if out.cs == spec.CaseOwn && again >= m {
			// A reentrant lock that a majority holds more than once: one
			// hold less leaves it held (never a release while a majority
			// still counts holds).
			out.cs = spec.CaseOwnAgain
		}
		if o.sc.detailed {
			out.pttl = o.validityLeft(majorityPTTL(o.e.n, pttls), elapsed)
			out.after = o.validityLeft(majorityPTTL(o.e.n, afters), elapsed)
		}
		return out, true
	}
	return keyObs{cs: spec.CaseMissing, pttl: -2, after: -2}, false
}

// majorityCompact is majorityKey for compact answers (one key, cases
// only), in one pass.
func (o *op) majorityCompact(m int) (keyObs, bool) {
	var counts [numCaseCodes]int
	for i := range o.replies {
		if a, ok := o.obs(i, 0); ok && int(a.cs) < len(counts) {
			counts[a.cs]++
		}
	}
	if counts[spec.CaseMissing] >= m {
		return keyObs{cs: spec.CaseMissing}, true
	}
	for _, h := range []spec.Case{spec.CaseOwn, spec.CaseOther} {
		noTTL, ok, low := counts[h+1], counts[h], counts[h+2]
		switch {
		case noTTL >= m:
			return keyObs{cs: h + 1}, true
		case noTTL+ok >= m:
			return keyObs{cs: h}, true
		case noTTL+ok+low >= m:
			return keyObs{cs: h + 2}, true
		}
	}
	for _, cs := range []spec.Case{spec.CaseOwnShared, spec.CaseOwnSharedOthers, spec.CaseOtherShared} {
		if counts[cs] >= m {
			return keyObs{cs: cs}, true
		}
	}
	return keyObs{cs: spec.CaseMissing, pttl: -2, after: -2}, false
}

// numCaseCodes bounds the case codes a reference answer may give.
const numCaseCodes = 16

// majorityPTTL is how long a majority of the n backends will still hold
// the key, from the PTTLs (ms, -1 for none) of those that hold it: the one
// rule, quorum.MajorityTTL, in milliseconds.
func majorityPTTL(n int, ps []int64) int64 {
	ds := make([]time.Duration, len(ps))
	for i, p := range ps {
		ds[i] = time.Duration(p) * time.Millisecond
	}
	r, ok := quorum.MajorityTTL(n, ds)
	switch {
	case !ok:
		return -2
	case r == quorum.NoExpiry:
		return -1
	}
	return r.Milliseconds()
}

// validityLeft turns a majority's PTTL into what a client may rely on.
func (o *op) validityLeft(p int64, elapsed time.Duration) int64 {
	if p < 0 {
		return p
	}
	return o.e.timing.RemainingValidity(time.Duration(p)*time.Millisecond, elapsed).Milliseconds()
}

// scriptReplyAt is the reply the client's script would have given on one
// Redis holding the majority's state at now, consistent with the decision.
func (o *op) scriptReplyAt(success bool, now time.Time) resp.Value {
	cl := o.sc.class
	elapsed := now.Sub(o.t1)
	sit := spec.Situation{NKeys: o.sc.nkeys, Keys: o.sc.keys, Argv: o.sc.argv, RoundDown: true}
	var focus keyObs
	if o.sc.nkeys == 1 {
		focus, _ = o.majorityKey(0, elapsed)
		sit.Case = focus.cs
		if holder(focus.cs) == spec.CaseOwn {
			sit.Count = 1
		}
	} else {
		states := make([]keyObs, o.sc.nkeys)
		cases := make([]spec.Case, o.sc.nkeys)
		for k := range states {
			states[k], _ = o.majorityKey(k, elapsed)
			cases[k] = states[k].cs
			if holder(cases[k]) == spec.CaseOwn {
				sit.Count++
			}
		}
		sit.Case, sit.Focus = cl.Combine(cases)
		focus = states[sit.Focus]
	}
	if !cl.Role.Query() && cl.Acts(sit.Case) != success {
		// The majority's state says otherwise than the vote (a split, a
		// lock granted too late): take the case most backends that voted
		// the decision's way were in.
		sit.Case, sit.Focus, focus = o.fallbackCase(success, elapsed)
	}
	o.sc.caseAt = sit.Case
	sit.PTTL, sit.PTTLAfter = focus.pttl, focus.after
	sit.Value, sit.HasValue = focus.value, focus.hasValue
	t := cl.Replies[sit.Case]
	if t == nil {
		return resp.ErrorValue(msgNoReplyForCase(sit.Case.String()))
	}
	return t.Fill(&sit)
}

// fallbackCase picks the case, among those whose outcome matches the
// decision, that the most counted backends were in; with none, the role's
// usual case for that outcome.
func (o *op) fallbackCase(success bool, elapsed time.Duration) (spec.Case, int, keyObs) {
	cl := o.sc.class
	var counts [numCaseCodes]int
	var focus [numCaseCodes]int
	var first [numCaseCodes]keyObs
	cases := make([]spec.Case, o.sc.nkeys)
	for i := range o.replies {
		ok := true
		for k := range cases {
			a, aok := o.obs(i, k)
			ok = ok && aok
			cases[k] = a.cs
		}
		if !ok {
			continue
		}
		cs, f := cl.Combine(cases)
		if cl.Acts(cs) != success || int(cs) >= len(counts) {
			continue
		}
		if counts[cs] == 0 {
			focus[cs] = f
			first[cs], _ = o.obs(i, f)
			first[cs].pttl = o.validityLeft(first[cs].pttl, elapsed)
			first[cs].after = o.validityLeft(first[cs].after, elapsed)
		}
		counts[cs]++
	}
	best := -1
	for cs := range counts {
		if counts[cs] > 0 && (best < 0 || counts[cs] > counts[best]) {
			best = cs
		}
	}
	if best >= 0 {
		return spec.Case(best), focus[best], first[best]
	}
	cs := spec.CaseMissing
	switch {
	case success && (cl.Role == spec.RoleExtend || cl.Role == spec.RoleRelease):
		cs = spec.CaseOwn
	case !success && cl.Role.Takes():
		cs = spec.CaseOther
	}
	return cs, 0, keyObs{cs: cs, pttl: -2, after: -2}
}

// countRepairLocked returns, for a reentrant lock's op that succeeded,
// the count of holds a majority of masters agree on and the masters whose
// own count differs from it: each counted master's count after the op
// (what it held, one more where it took or entered, one less where it
// released), the others' 0, and the majority-th largest of them. A repair
// (spec.CountRepair) sets it where the lock is still the caller's and
// no later write came; so the masters agree again, and no minority keeps
// counting holds the majority has given up, or gives up holds the majority
// still counts.
//
// It returns the repair's command and the masters it goes to.
func (o *op) countRepairLocked() ([]byte, []int) {
	if o.sc.class == nil || !o.sc.class.Counted || !o.sc.success || o.sc.nonce == "" {
		return nil, nil
	}
	cl := o.sc.class
	counts := make([]int64, o.e.n)
	own := make([]bool, o.e.n)
	for i := 0; i < o.e.n; i++ {
		a, ok := o.obs(i, 0)
		if !ok {
			continue
		}
		var n int64
		if holder(a.cs) == spec.CaseOwn {
			n, _ = resp.ParseInt(a.value)
		}
		acted, _ := o.acted(o.replies[i])
		switch {
		case acted && cl.Role == spec.RoleRelease:
			n--
		case acted:
			n++
		}
		counts[i], own[i] = max(n, 0), n > 0
	}
	sorted := append([]int64(nil), counts...)
	slices.Sort(sorted)
	d := sorted[len(sorted)-quorum.Majority(o.e.n)]
	var nodes []int
	for i, n := range counts {
		if own[i] && n != d {
			nodes = append(nodes, i)
		}
	}
	if len(nodes) == 0 {
		return nil, nil
	}
	return cl.AppendCountRepair(nil, o.sc.keys, o.sc.argv, fenceStatePrefix, o.sc.nonce, d), nodes
}

// sendAfterReply sends what a script's op leaves behind it, as a second
// step is sent: before the reply leaves, on the links the client's next
// command will follow: a reentrant lock's repair (to nodes) and a release's
// notice (to every master). Their answers are not needed: a master that
// misses a repair keeps its count until the lock expires or a later op
// repairs it, and one that misses a notice is one fewer to deliver it.
func (o *op) sendAfterReply(repair []byte, nodes []int, notice []byte, now time.Time) {
	for _, n := range nodes {
		o.e.be.Send(n, repair, spec.CountRepair(), netio.Discard, n, now.Add(o.e.timeout), 0)
	}
	if notice != nil {
		for n := 0; n < o.e.n; n++ {
			o.e.be.Send(n, notice, nil, netio.Discard, n, now.Add(o.e.timeout), 0)
		}
	}
}

// noticeLocked returns, for a release of a script that publishes when it
// frees its lock (spec.Notice), the PUBLISH of its notice once the
// release freed the lock on a majority: a release that succeeded (of a
// reentrant lock: its last hold), or a delete that found the lock. Every
// master gets it (sendAfterReply); a proxy delivers it to its subscribers
// once a majority of masters delivered it (Server.Released).
func (o *op) noticeLocked() []byte {
	if o.rw != nil {
		return o.rwNoticeLocked()
	}
	cl := o.sc.class
	if cl == nil || cl.Notice == nil || !o.sc.success {
		return nil
	}
	if cl.Role == spec.RoleRelease && cl.Counted && o.sc.caseAt == spec.CaseOwnAgain {
		return nil // holds are left: nothing was released
	}
	n := cl.Notice
	kind, msg := noticeMessage, n.PayloadOf(o.sc.keys, o.sc.argv)
	switch {
	case n.Shard:
		kind = noticeShard
	case n.List:
		// A signal for BLPOP waiters, kept for the list's TTL (signals.go).
		kind, msg = noticeSignal, append(strconv.AppendInt(nil, o.sc.signalTTL.Milliseconds(), 10), append([]byte(" "), msg...)...)
	}
	return appendNotice(nil, netio.ReleaseChannel, newNonce(), kind, n.ChannelOf(o.sc.keys, o.sc.argv), msg)
}
