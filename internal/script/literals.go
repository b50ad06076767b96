package script

import (
	"math"
	"slices"
)

// maxLiterals bounds the constants of a script whose calls are compared
// with them.
const maxLiterals = 512

// literals are a script's constants: every string constant, and the
// numbers the script may compare with (each number constant and its
// negation, and each string constant that reads as a number), sorted.
type literals struct {
	strs []string
	nums []float64
}

// add records a string constant; false when there are too many.
func (l *literals) addString(s string) bool {
	if slices.Contains(l.strs, s) {
		return true
	}
	if len(l.strs) >= maxLiterals {
		return false
	}
	l.strs = append(l.strs, s)
	if f, ok := argNumber([]byte(s)); ok {
		return l.addNumber(f)
	}
	return true
}

// addNumber records a number constant and its negation.
func (l *literals) addNumber(f float64) bool {
	for _, v := range []float64{f, -f} {
		if math.IsNaN(v) || slices.Contains(l.nums, v) {
			continue
		}
		if len(l.nums) >= maxLiterals {
			return false
		}
		l.nums = append(l.nums, v)
	}
	return true
}

func (l *literals) finish() { slices.Sort(l.nums) }
