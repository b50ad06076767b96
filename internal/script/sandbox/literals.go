package sandbox

import (
	"math"
	"slices"
	"strings"
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
	// a script tests (string.sub(ARGV[1], 1, 6) == 'force:'): those that
	// hold a byte other than a letter or a digit, as a prefix's separator
	// does. Not the words of commands and options ('GET', 'PX', 'mode'),
	// which random tokens begin with often enough (a base64 token with
	// 'PX' one call in two thousand) to have their scripts classified
	// again and again; nor numbers (a TTL that begins with '1' is no
	// owner apart).
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
		if _, num := ArgNumber([]byte(s)); !num && strings.ContainsFunc(s, notAlnum) {
			l.Affixes = append(l.Affixes, s)
		}
	}
}

// notAlnum reports whether r is neither an ASCII letter nor a digit.
func notAlnum(r rune) bool {
	return !('a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
}
