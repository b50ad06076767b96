package quorum

import (
	"slices"
	"time"
)

// NoExpiry is the PTTL of a key that exists without a TTL.
const NoExpiry time.Duration = -1

// Holding is what one node answered about a key.
type Holding struct {
	Answered bool          // false when the node's answer is unknown
	Counts   bool          // false when the node is quarantined
	Exists   bool          // the key exists on the node
	Value    []byte        // its value
	PTTL     time.Duration // its remaining TTL, or NoExpiry
}

// MajorityValue returns the value that a majority of the n nodes hold under
// the key, counting only answered, counted nodes. ok is false when no value
// is held by a majority (including when a majority hold no key).
func MajorityValue(n int, hs []Holding) (value []byte, holders int, ok bool) {
	m := Majority(n)
	for i := range hs {
		if !hs[i].Answered || !hs[i].Counts || !hs[i].Exists {
			continue
		}
		c := 0
		for j := range hs {
			if hs[j].Answered && hs[j].Counts && hs[j].Exists && string(hs[j].Value) == string(hs[i].Value) {
				c++
			}
		}
		if c >= m {
			return hs[i].Value, c, true
		}
	}
	return nil, 0, false
}

// MajorityRemaining returns how long a majority will still hold the majority
// value: the majority-th largest PTTL among the nodes that hold it (a
// missing TTL counts as infinite and yields NoExpiry). ok is false when no
// value is held by a majority.
func MajorityRemaining(n int, hs []Holding) (value []byte, remaining time.Duration, ok bool) {
	value, _, ok = MajorityValue(n, hs)
	if !ok {
		return nil, 0, false
	}
	var ttls []time.Duration
	for i := range hs {
		if hs[i].Answered && hs[i].Counts && hs[i].Exists && string(hs[i].Value) == string(value) {
			ttls = append(ttls, hs[i].PTTL)
		}
	}
	r, _ := MajorityTTL(n, ttls)
	return value, r, true
}

// MajorityTTL is how long a majority of n nodes will still hold something,
// given the remaining TTLs of the nodes that hold it: the majority-th
// largest, with NoExpiry (or any negative TTL) counting as forever and
// returned as NoExpiry. ok is false when fewer than a majority hold it. ttls
// is reordered.
func MajorityTTL(n int, ttls []time.Duration) (remaining time.Duration, ok bool) {
	m := Majority(n)
	if len(ttls) < m {
		return 0, false
	}
	for i, t := range ttls {
		if t < 0 {
			ttls[i] = time.Duration(1<<63 - 1)
		}
	}
	slices.Sort(ttls)
	r := ttls[len(ttls)-m]
	if r == time.Duration(1<<63-1) {
		return NoExpiry, true
	}
	return r, true
}

// RemainingValidity turns a majority's remaining PTTL, read during a round
// that took elapsed, into what a client may still rely on: remaining minus
// elapsed minus drift. It returns NoExpiry unchanged and at least 0 otherwise.
func (t Timing) RemainingValidity(remaining, elapsed time.Duration) time.Duration {
	if remaining == NoExpiry {
		return NoExpiry
	}
	return max(t.Validity(remaining, elapsed), 0)
}
