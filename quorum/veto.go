package quorum

// A veto is a Redis that must grant a command for it to succeed, without
// being a vote: while clients move from one Redis to the proxy, the Redis
// they used until now vetoes every grant, so that a client still locking
// there directly and a client going through the proxy exclude each other.
// It never counts toward the majority, and it can only turn a won round
// into a lost one.

// WithVeto decides a round that a veto also judges: Won only when the
// majority won and the veto granted; Lost as soon as either lost (the veto
// refused, or could not answer: the old clients may hold the lock there);
// Undecided while the majority won and the veto has not answered, or the
// majority is undecided.
func WithVeto(majority Outcome, veto Vote) Outcome {
	switch {
	case majority == Lost || veto == Refused || veto == Unknown:
		return Lost
	case majority == Won && veto == Granted:
		return Won
	}
	return Undecided
}
