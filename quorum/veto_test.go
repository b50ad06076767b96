package quorum

import "testing"

// The veto never helps a round to a win, stops every grant it refuses or
// cannot answer, and waits for its answer before a win.
func TestWithVeto(t *testing.T) {
	for _, tc := range []struct {
		majority Outcome
		veto     Vote
		want     Outcome
	}{
		{Won, Granted, Won},
		{Won, Pending, Undecided},
		{Won, Refused, Lost},
		{Won, Unknown, Lost},
		{Undecided, Granted, Undecided},
		{Undecided, Pending, Undecided},
		{Undecided, Refused, Lost},
		{Undecided, Unknown, Lost},
		{Lost, Granted, Lost},
		{Lost, Pending, Lost},
		{Lost, Refused, Lost},
		{Lost, Unknown, Lost},
	} {
		if got := WithVeto(tc.majority, tc.veto); got != tc.want {
			t.Errorf("WithVeto(%v, %v) = %v; want %v", tc.majority, tc.veto, got, tc.want)
		}
	}
}
