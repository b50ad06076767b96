package netio

import (
	"fmt"
	"slices"
	"testing"
)

// owners is a node's slot map: three shards, A's with a replica. A node
// that saw the takeover names A2 (A's replica) for A's slots, and A as its
// replica; one that did not names A, A2 as its replica.
func owners(switched bool) []slotRange {
	first := slotRange{from: 0, to: 5460, addr: "A", replicas: []string{"A2"}}
	if switched {
		first = slotRange{from: 0, to: 5460, addr: "A2", replicas: []string{"A"}}
	}
	return []slotRange{first, {from: 5461, to: 10922, addr: "B"}, {from: 10923, to: 16383, addr: "C"}}
}

func ownerOf(conf []slotRange, s int) string {
	for _, r := range conf {
		if r.from <= s && s <= r.to {
			return r.addr
		}
	}
	return ""
}

// A shard's owner is confirmed only by a majority of the cluster's other
// masters: whatever subset of nodes a round reaches, and whichever of B
// and C have learnt of A2's takeover, a round confirms A only while both
// B and C name it, and A2 only once both name it. So no two rounds, of
// any proxies, confirm A and A2 at the same time, and once one of B or C
// has switched, A is never confirmed again. A (cut off from the bus)
// always names itself; A2, once promoted, always names itself.
func TestClusterConfirmationNeedsAMajorityOfTheOtherMasters(t *testing.T) {
	for state := 0; state < 4; state++ {
		bNew, cNew := state&1 != 0, state&2 != 0
		views := map[string]bool{"A": false, "A2": true, "B": bNew, "C": cNew}
		nodes := []string{"A", "A2", "B", "C"}
		for subset := 1; subset < 16; subset++ {
			var answers []nodeAnswer
			for i, n := range nodes {
				if subset&(1<<i) != 0 {
					answers = append(answers, nodeAnswer{addr: n, ranges: owners(views[n])})
				}
			}
			conf, _, _ := tallyRound(answers)
			name := fmt.Sprintf("B switched %v, C switched %v, answers %v", bNew, cNew, answers)
			switch ownerOf(conf, 100) {
			case "A":
				if bNew || cNew {
					t.Errorf("%s: A confirmed", name)
				}
			case "A2":
				if !bNew || !cNew {
					t.Errorf("%s: A2 confirmed", name)
				}
			}
			// The other shards are confirmed by the masters that are not
			// theirs; A and A2 both count there, each naming B and C.
			if got := ownerOf(conf, 6000); got != "" && got != "B" {
				t.Errorf("%s: slot 6000 confirmed for %s", name, got)
			}
		}
	}
	// Everyone answers, everyone switched: A2 for A's slots, B and C theirs.
	var all []nodeAnswer
	for _, n := range []string{"A", "A2", "B", "C"} {
		all = append(all, nodeAnswer{addr: n, ranges: owners(n != "A")})
	}
	conf, named, _ := tallyRound(all)
	if ownerOf(conf, 0) != "A2" || ownerOf(conf, 6000) != "B" || ownerOf(conf, 16383) != "C" || len(named) != 4 {
		t.Fatalf("confirmed %v (named %v)", conf, named)
	}
}

// A cluster of one shard has no other master: its own nodes confirm it.
// With a replica that took over while the old master names itself,
// neither is confirmed; a cluster of two shards takes the other master's
// word.
func TestClusterConfirmationOfSmallClusters(t *testing.T) {
	one := func(owner, replica string) []slotRange {
		return []slotRange{{from: 0, to: 16383, addr: owner, replicas: []string{replica}}}
	}
	if conf, _, _ := tallyRound([]nodeAnswer{{addr: "A", ranges: []slotRange{{from: 0, to: 16383, addr: "A"}}}}); ownerOf(conf, 0) != "A" {
		t.Fatalf("one master alone: %v", conf)
	}
	if conf, _, _ := tallyRound([]nodeAnswer{{addr: "A", ranges: one("A", "A2")}, {addr: "A2", ranges: one("A2", "A")}}); len(conf) != 0 {
		t.Fatalf("an old master and its replica that took over, each naming itself: %v confirmed", conf)
	}
	two := []slotRange{{from: 0, to: 8191, addr: "A"}, {from: 8192, to: 16383, addr: "B"}}
	conf, _, _ := tallyRound([]nodeAnswer{{addr: "B", ranges: two}})
	if ownerOf(conf, 0) != "A" || ownerOf(conf, 9000) != "" {
		t.Fatalf("two shards, B answering: %v (B cannot confirm itself)", conf)
	}
}

// A cluster whose bus is split, with new masters joined to one half, has
// two sets of masters: the half of A, B and C knows only those three, and
// B and C name A; the half of A2 (A's replica, which took over) and the
// new masters D, E and F knows those, and B and C from before the split,
// and names A2. D, E and F are a majority of the masters other than A and
// A2 that some answer names, and B and C the whole of those the first
// half's answers name: two majorities with no master in common. A round
// that reads both halves must confirm neither A nor A2: its owner must
// have a majority of the other masters in each answer's own map too.
func TestClusterConfirmationAcrossASplitWithNewMasters(t *testing.T) {
	stale := owners(false)
	withNew := []slotRange{{from: 0, to: 0, addr: "D"}, {from: 1, to: 1, addr: "E"}, {from: 2, to: 2, addr: "F"}, {from: 3, to: 5460, addr: "A2"}}
	fresh := append(slices.Clone(withNew), stale[1:]...) // A2's map: it knew B and C before the split
	var half, all []nodeAnswer
	for _, n := range []string{"A", "B", "C"} {
		half = append(half, nodeAnswer{addr: n, ranges: stale})
	}
	all = append(all, half...)
	all = append(all, nodeAnswer{addr: "A2", ranges: fresh})
	for _, n := range []string{"D", "E", "F"} {
		all = append(all, nodeAnswer{addr: n, ranges: withNew}) // they never heard from B and C
	}
	if conf, _, _ := tallyRound(half); ownerOf(conf, 100) != "A" || ownerOf(conf, 6000) != "B" {
		t.Fatalf("A, B and C alone: %v", conf)
	}
	conf, named, _ := tallyRound(all)
	if got := ownerOf(conf, 100); got != "" {
		t.Fatalf("both halves: slot 100 confirmed for %s (named %v): a round of A, B and C alone confirms A", got, named)
	}
}

// A master cut off from the bus, whose map stopped when it was cut, does
// not keep the masters it knows from confirming what changed since: the
// old master A, still answering as the owner of its slots after A2 took
// over, and C's slots moved to a new master D after the cut.
func TestClusterConfirmationPastAStaleMap(t *testing.T) {
	now := []slotRange{{from: 0, to: 5460, addr: "A2"}, {from: 5461, to: 10922, addr: "B"}, {from: 10923, to: 16000, addr: "C"}, {from: 16001, to: 16383, addr: "D"}}
	answers := []nodeAnswer{{addr: "A", ranges: owners(false)}}
	for _, n := range []string{"A2", "B", "C", "D"} {
		answers = append(answers, nodeAnswer{addr: n, ranges: now})
	}
	conf, _, _ := tallyRound(answers)
	for s, want := range map[int]string{100: "A2", 6000: "B", 12000: "C", 16383: "D"} {
		if got := ownerOf(conf, s); got != want {
			t.Errorf("slot %d confirmed for %q; want %s (%v)", s, got, want, conf)
		}
	}
}
