package classify

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// Semaphores kept as a count of free permits (a string, the semaphore's
// name) beside a sorted set of the permits taken, each an id scored with
// its deadline in ms (Redisson's RPermitExpirableSemaphore keeps its
// permits so). The proxy serves them as slots (quorum.Slots): the limit
// is what the set-up call stores on each master, and a permit is a slot
// owned by its id, with its lease as TTL. A script of several keys is read
// as one of four operations by what it does to such a pair in the
// sandbox:
//
//   - set-up: with the count missing, writes one of its arguments there
//     (the limit); with a count there, changes nothing;
//   - acquire: with permits free, takes one (the count goes down by one
//     and one argument, the permit's id, joins the set, scored with
//     another, its deadline); with none free it changes nothing, and an
//     expired id in the set frees its permit;
//   - release: takes its id out of the set and counts its permit free
//     again, and changes nothing when the id is not there;
//   - available: changes nothing and answers the count.
//
// A script that changes a count once set up (Redisson's setPermits and
// addPermits), or takes several permits in one call, is recognized and
// refused with why. Every argument that is not the limit, the id, the
// deadline or the caller's clock is a control: the classification holds
// for its value only.

// PermitsChangeRefusal is why a call that changes a semaphore's limit once
// set up is refused.
const PermitsChangeRefusal = "it changes the permits of a semaphore already set up (as Redisson's setPermits and addPermits do); " +
	"through the proxy a semaphore's limit is set once, by a majority (trySetPermits): masters that missed a change would keep the old " +
	"limit, and permits taken under a larger one would outlive a cut"

// permProber probes one pair of keys: count (ck) and the deadlines (zk).
type permProber struct {
	p      *sandbox.Program
	keys   []string
	argv   []string
	now    int64
	ck, zk int
}

// permRun is one probe's outcome.
type permRun struct {
	ok      bool   // it ran, and left the count a string or missing
	count   string // after; "" when missing
	members map[string]float64
	reply   resp.Value
}

// run runs argv with the count and the set as given ("" and nil: missing).
func (pp *permProber) run(argv []string, count string, members map[string]float64) permRun {
	st := &sandbox.State{Now: pp.now, Keys: map[string]sandbox.Item{}}
	if count != "" {
		st.Keys[pp.keys[pp.ck]] = sandbox.Item{Type: sandbox.TypeString, Value: count}
	}
	if len(members) > 0 {
		st.Keys[pp.keys[pp.zk]] = sandbox.Item{Type: sandbox.TypeZset, Zset: members}
	}
	res := pp.p.Run(pp.keys, argv, st, sandbox.MaxSteps)
	if res.Ref != nil && res.Ref.Kind != sandbox.RefuseNoTTL {
		// Its keys have no expiry: that is the shape read here (the
		// proxy keeps permits of its own, with TTLs).
		return permRun{}
	}
	r := permRun{ok: true, reply: res.Reply, members: map[string]float64{}}
	if it, ok := res.State.Lookup(pp.keys[pp.ck]); ok {
		if it.Type != sandbox.TypeString {
			return permRun{}
		}
		r.count = it.Value
	}
	if it, ok := res.State.Lookup(pp.keys[pp.zk]); ok {
		if it.Type != sandbox.TypeZset {
			return permRun{}
		}
		r.members = it.Zset
	}
	return r
}

// live is the members of a probe's set that are not expired.
func (pp *permProber) live(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, s := range m {
		if s > float64(pp.now) {
			out[k] = s
		}
	}
	return out
}

// unchanged reports whether a run left the count as given and every live
// member as it was.
func (pp *permProber) unchanged(r permRun, count string, members map[string]float64) bool {
	if !r.ok || r.count != count {
		return false
	}
	before, after := pp.live(members), pp.live(r.members)
	if len(before) != len(after) {
		return false
	}
	for k, s := range before {
		if after[k] != s {
			return false
		}
	}
	return true
}

// other names a member that is none of the arguments.
func (pp *permProber) other(kind string) string {
	name := "redlock-proxy-probe-" + kind
	for slices.Contains(pp.argv, name) {
		name += "x"
	}
	return name
}

// freeCount is a count of free permits that none of the arguments equals.
func (pp *permProber) freeCount() string {
	for n := 7; ; n++ {
		if s := strconv.Itoa(n); !slices.Contains(pp.argv, s) {
			return s
		}
	}
}

// PermitsScript reads a call of a script of two keys or more as an
// operation of a semaphore kept as a count and a set of deadlines. It
// returns nil when the script is not one; a Semaphore whose Role is
// SemUnknown, with why, when it is one the proxy refuses.
func PermitsScript(p *sandbox.Program, keys, argv []string) *Semaphore {
	return classifyPermitsAt(p, keys, argv, time.Now().UnixMilli())
}

func classifyPermitsAt(p *sandbox.Program, keys, argv []string, now int64) *Semaphore {
	if len(keys) < 2 {
		return nil
	}
	var clocks []int
	for i, a := range argv {
		if n, err := strconv.ParseInt(a, 10, 64); err == nil && abs(n-now) <= semClockSpan {
			clocks = append(clocks, i)
		}
	}
	for ck := range keys {
		for zk := range keys {
			if ck == zk || keys[ck] == keys[zk] {
				continue
			}
			pp := &permProber{p: p, keys: keys, argv: argv, now: now, ck: ck, zk: zk}
			if s := pp.classify(clocks); s != nil {
				s.NKeys, s.Key = len(keys), ck
				return s
			}
		}
	}
	return nil
}

func (pp *permProber) classify(clocks []int) *Semaphore {
	free := pp.freeCount()
	if s := pp.setup(free); s != nil {
		return s
	}
	if s := pp.acquire(free, clocks); s != nil {
		return s
	}
	if s := pp.release(clocks); s != nil {
		return s
	}
	return pp.available(free)
}

// base is a classification of role with every argument but those in
// roles a control.
func (pp *permProber) base(role SemRole, roles ...int) *Semaphore {
	s := &Semaphore{Role: role, Stored: true, NArgs: len(pp.argv), Token: -1, Limit: -1, TTL: -1, Deadline: -1}
	for i, a := range pp.argv {
		if !slices.Contains(roles, i) {
			s.Controls = append(s.Controls, spec.Control{Arg: i, Value: a})
		}
	}
	return s
}

func refusedPermits(why string) *Semaphore {
	return &Semaphore{Stored: true, Refused: why}
}

// setup: a missing count becomes one of the arguments; one there stays.
func (pp *permProber) setup(free string) *Semaphore {
	rA := pp.run(pp.argv, "", nil)
	if !rA.ok || rA.count == "" || len(rA.members) != 0 {
		return nil
	}
	for i, a := range pp.argv {
		if a != rA.count {
			continue
		}
		if _, err := strconv.Atoi(a); err != nil {
			continue
		}
		alt := "3"
		if a == alt {
			alt = "4"
		}
		if r := pp.run(with(pp.argv, i, alt), "", nil); !r.ok || r.count != alt {
			continue
		}
		rB := pp.run(pp.argv, free, nil)
		if !rB.ok {
			return nil
		}
		if rB.ok && rB.count == a && rB.count != free {
			return refusedPermits(PermitsChangeRefusal) // it sets the count whatever was there
		}
		if !pp.unchanged(rB, free, nil) {
			return nil // a count moved (a counter semaphore's give-back)
		}
		if rB.reply.Equal(rA.reply) {
			return nil
		}
		s := pp.base(SemSetLimit, i)
		s.Limit, s.Success, s.Failure = i, rA.reply, rB.reply
		return s
	}
	return nil
}

// acquire: with free permits, the count goes down by one and one argument
// joins the set, scored with another.
func (pp *permProber) acquire(free string, clocks []int) *Semaphore {
	rB := pp.run(pp.argv, free, nil)
	if !rB.ok || len(rB.members) == 0 {
		return nil
	}
	n, _ := strconv.Atoi(free)
	if rB.count != strconv.Itoa(n-len(rB.members)) {
		return nil
	}
	if len(rB.members) > 1 {
		return refusedPermits(fmt.Sprintf("it takes %d permits in one call; through the proxy an acquire takes one permit, a slot of the semaphore", len(rB.members)))
	}
	var id string
	var score float64
	for id, score = range rB.members {
	}
	t := slices.Index(pp.argv, id)
	if t < 0 {
		return nil
	}
	d := -1
	for i, a := range pp.argv {
		if f, err := strconv.ParseFloat(a, 64); err == nil && f == score && i != t {
			d = i
			break
		}
	}
	c := -1
	for _, i := range clocks {
		if i != d && i != t {
			c = i
			break
		}
	}
	if d < 0 || c < 0 {
		return nil
	}
	// None free: nothing changes, with or without a live holder.
	rC := pp.run(pp.argv, "0", nil)
	if !pp.unchanged(rC, "0", nil) || rC.reply.Equal(rB.reply) {
		return nil
	}
	held := map[string]float64{pp.other("holder"): float64(pp.now + semKeyTTL)}
	if r := pp.run(pp.argv, "0", held); !pp.unchanged(r, "0", held) {
		return nil
	}
	// An expired permit is free again: the scores are deadlines.
	gone := map[string]float64{pp.other("gone"): float64(pp.now - semExpiredAgo)}
	if r := pp.run(pp.argv, "0", gone); !r.ok || r.members[id] != score {
		return nil
	}
	s := pp.base(SemAcquire, t, d, c)
	s.Token, s.Deadline, s.Clocks = t, d, []int{c}
	s.Success, s.Failure = rB.reply, rC.reply
	return s
}

// release: the caller's id leaves the set and its permit is counted free.
func (pp *permProber) release(clocks []int) *Semaphore {
	other := pp.other("holder")
	live := float64(pp.now + semKeyTTL)
	for t, a := range pp.argv {
		if slices.Contains(clocks, t) || a == "" {
			continue
		}
		own := map[string]float64{a: live, other: live}
		rD := pp.run(pp.argv, "0", own)
		if !rD.ok || rD.count != "1" {
			continue
		}
		if _, still := rD.members[a]; still || rD.members[other] != live {
			continue
		}
		notOwn := map[string]float64{other: live}
		rF := pp.run(pp.argv, "0", notOwn)
		if !pp.unchanged(rF, "0", notOwn) || rF.reply.Equal(rD.reply) {
			continue
		}
		s := pp.base(SemRelease, append([]int{t}, clocks...)...)
		s.Token, s.Clocks = t, clocks
		s.Success, s.Failure = rD.reply, rF.reply
		return s
	}
	return nil
}

// available: changes nothing and answers the count.
func (pp *permProber) available(free string) *Semaphore {
	held := map[string]float64{pp.other("holder"): float64(pp.now + semKeyTTL)}
	var reply resp.Value
	for _, count := range []string{free, "2"} {
		r := pp.run(pp.argv, count, held)
		n, _ := strconv.Atoi(count)
		isCount := r.reply.Kind == resp.KindInt && r.reply.Int == int64(n) || r.reply.Kind == resp.KindBulk && string(r.reply.Str) == count
		if !pp.unchanged(r, count, held) || !isCount {
			return nil
		}
		reply = r.reply
	}
	var clocks []int
	for i, a := range pp.argv {
		if n, err := strconv.ParseInt(a, 10, 64); err == nil && abs(n-pp.now) <= semClockSpan {
			clocks = append(clocks, i)
		}
	}
	s := pp.base(SemAvailable, clocks...)
	s.Clocks = clocks
	s.Success = reply // its kind is the answer's: an integer, or the count as a string
	return s
}
