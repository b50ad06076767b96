package sandbox

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
type Literals struct {
	Strs []string
	Nums []float64
	// Affixes are the string constants a value may begin or end with as
	// a script tests (string.sub(ARGV[1], 1, 6) == 'force:'): those not
	// empty and not numbers (a TTL that begins with '1' is no owner
	// apart).
	Affixes []string
}

// add records a string constant; false when there are too many.
func (l *Literals) addString(s string) bool {
	if slices.Contains(l.Strs, s) {
		return true
	}
	if len(l.Strs) >= maxLiterals {
		return false
	}
	l.Strs = append(l.Strs, s)
	if f, ok := ArgNumber([]byte(s)); ok {
		return l.addNumber(f)
	}
	return true
}

// addNumber records a number constant and its negation.
func (l *Literals) addNumber(f float64) bool {
	for _, v := range []float64{f, -f} {
		if math.IsNaN(v) || slices.Contains(l.Nums, v) {
			continue
		}
		if len(l.Nums) >= maxLiterals {
			return false
		}
		l.Nums = append(l.Nums, v)
	}
	return true
}

func (l *Literals) finish() {
	slices.Sort(l.Nums)
	l.Affixes = nil
	for _, s := range l.Strs {
		if _, num := ArgNumber([]byte(s)); s != "" && !num {
			l.Affixes = append(l.Affixes, s)
		}
	}
}
