package sandbox

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// argNumber reads a value as Redis's Lua (5.1, strtod) reads a string as
// a number, in tonumber, arithmetic and comparisons after tonumber: up to
// a first NUL byte (Lua hands strtod a C string), with white space before
// and after, a sign, a decimal number with a fraction and an exponent, a
// hexadecimal one (0x, with a fraction and a binary exponent), inf,
// infinity or nan. Plain integers of up to 15 digits are read without
// allocating.
func ArgNumber(b []byte) (float64, bool) {
	for i, c := range b {
		if c == 0 {
			b = b[:i]
			break
		}
	}
	i := 0
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	neg := false
	if i < len(b) && (b[i] == '+' || b[i] == '-') {
		neg = b[i] == '-'
		i++
	}
	body := i
	end, kind := scanNumber(b, i)
	if end == body {
		return 0, false
	}
	for j := end; j < len(b); j++ {
		if !isSpace(b[j]) {
			return 0, false
		}
	}
	var f float64
	switch kind {
	case numInf:
		f = math.Inf(1)
	case numNaN:
		f = math.NaN()
	case numInt:
		if end-body <= 15 {
			var n int64
			for _, c := range b[body:end] {
				n = n*10 + int64(c-'0')
			}
			f = float64(n)
			break
		}
		fallthrough
	default:
		s := string(b[body:end])
		if kind == numHex && !strings.ContainsAny(s, "pP") {
			s += "p0"
		}
		v, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, false
		}
		f = v
	}
	if neg {
		f = -f
	}
	return f, true
}

const (
	numInt = iota
	numDec
	numHex
	numInf
	numNaN
)

// scanNumber returns the end of the longest number strtod reads at i
// (after the sign), or i when there is none, and what it is.
func scanNumber(b []byte, i int) (int, int) {
	lower := func(j int) byte {
		if j < len(b) && b[j] >= 'A' && b[j] <= 'Z' {
			return b[j] + 'a' - 'A'
		}
		if j < len(b) {
			return b[j]
		}
		return 0
	}
	word := func(j int, w string) bool {
		for k := 0; k < len(w); k++ {
			if lower(j+k) != w[k] {
				return false
			}
		}
		return true
	}
	switch {
	case word(i, "infinity"):
		return i + 8, numInf
	case word(i, "inf"):
		return i + 3, numInf
	case word(i, "nan"):
		j := i + 3
		if j < len(b) && b[j] == '(' {
			k := j + 1
			for k < len(b) && (isAlnum(b[k]) || b[k] == '_') {
				k++
			}
			if k < len(b) && b[k] == ')' {
				return k + 1, numNaN
			}
		}
		return j, numNaN
	}
	if lower(i) == '0' && lower(i+1) == 'x' {
		j := i + 2
		digits := 0
		for j < len(b) && isHex(b[j]) {
			j, digits = j+1, digits+1
		}
		if j < len(b) && b[j] == '.' {
			j++
			for j < len(b) && isHex(b[j]) {
				j, digits = j+1, digits+1
			}
		}
		if digits == 0 {
			return i + 1, numInt // "0", then an x that is not part of it
		}
		if lower(j) == 'p' {
			if e := exponent(b, j+1); e > j+1 {
				j = e
			}
		}
		return j, numHex
	}
	j := i
	digits := 0
	for j < len(b) && isDigit(b[j]) {
		j, digits = j+1, digits+1
	}
	kind := numInt
	if j < len(b) && b[j] == '.' {
		k := j + 1
		for k < len(b) && isDigit(b[k]) {
			k, digits = k+1, digits+1
		}
		if digits > 0 {
			j, kind = k, numDec
		}
	}
	if digits == 0 {
		return i, numInt
	}
	if lower(j) == 'e' {
		if e := exponent(b, j+1); e > j+1 {
			j, kind = e, numDec
		}
	}
	return j, kind
}

// exponent returns the end of an exponent's signed digits at i, or i.
func exponent(b []byte, i int) int {
	j := i
	if j < len(b) && (b[j] == '+' || b[j] == '-') {
		j++
	}
	k := j
	for k < len(b) && isDigit(b[k]) {
		k++
	}
	if k == j {
		return i
	}
	return k
}

func isSpace(c byte) bool { return c == ' ' || c >= '\t' && c <= '\r' }

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }

func isAlnum(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
