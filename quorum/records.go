package quorum

import "time"

// The hold of a master that may have lost writes need not always be the
// ceiling (max_ttl + drift): the only locks its loss can make unsafe are
// the ones it may have held, and their deadlines are known elsewhere.
//
// Every write of grants to a master ends with a check that records, on
// that master, the latest deadline among them (its own clock): a grant
// counts on a master only once that record is there. So a grant G counted
// on a master X was recorded on every master of its majority M_G before
// it counted. When X loses its data, M_G without X still holds at least
// maj-1 of the N-1 other masters, and any set S of at least N - maj + 1
// of them meets it (|S| + |M_G \ {X}| >= N > N-1): the latest record
// among S bounds every grant X may have held, provided each master of S
// keeps a record of every grant it counted that may still be valid (it is
// whole: its data went on unbroken since before those grants, or its
// record was restored after its own loss from such a set, or its own hold
// ran to the ceiling). RecordsEnd computes that bound.
//
// Two instants matter. A grant counted on X was sent before X lost its
// data, but its writes to the others may still be on their way, up to the
// longest per-master timeout of any proxy (a vote that answers later does
// not count): so only readings sent at least that long after the loss
// (settle) can be relied on. And a reading's record is in its master's
// clock: the time left, converted with the drift rate, from when the
// reading arrived.
//
// Where no such set can be read (too few others whole and reachable, every
// master lost at once, masters no proxy has used) the hold is the ceiling.

// Reading is what one other backend's record of grant deadlines said, as
// a check read it.
type Reading struct {
	// Sent and Got bracket the master's reading of its record, in the
	// proxy's monotonic time.
	Sent, Got time.Time
	// Left is the record's latest deadline minus the master's clock as the
	// check ran (zero or negative: no grant recorded there is still valid).
	Left time.Duration
	// Whole reports that the backend's record covers every grant it
	// counted that may still be valid (see above).
	Whole bool
}

// RecordRate and RecordSlack convert a time left on a master's clock into
// the proxy's: a master clock that runs slow by up to the rate keeps a key
// longer in real time, and its millisecond reading may be a little short.
const (
	RecordRate  = 0.01
	RecordSlack = 2 * time.Millisecond
)

// ReadersNeeded is how many other backends' whole records bound every grant
// a lost backend of n may have held: n - maj(n) + 1. With one backend there
// is none to ask.
func ReadersNeeded(n int) int { return n - Majority(n) + 1 }

// RecordsEnd returns when every lock a backend of n that may have lost its
// data at lost may have held has expired, from the other backends'
// readings (one per other backend at most: the latest), or ok false when
// they cannot tell (fewer than ReadersNeeded(n) whole readings sent at
// least settle after the loss). The end is never before lost.
func RecordsEnd(n int, lost time.Time, settle time.Duration, others []Reading) (end time.Time, ok bool) {
	from := lost.Add(settle)
	count := 0
	end = lost
	for _, r := range others {
		if !r.Whole || r.Sent.Before(from) {
			continue
		}
		count++
		if left := r.Left; left > 0 {
			at := r.Got.Add(left + time.Duration(float64(left)*RecordRate) + RecordSlack)
			if at.After(end) {
				end = at
			}
		}
	}
	if count < ReadersNeeded(n) {
		return time.Time{}, false
	}
	return end, true
}
