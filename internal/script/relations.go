package script

import (
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// Relations: a classification is trusted only for calls whose arguments
// stand in the same relations as the call it was verified on. A script
// that compares an argument with a constant in its text (an anonymous
// owner "*" that may not re-enter, a reserved token, a numeric
// threshold) is one role for some values and another for others; the
// probes vary arguments, but cannot know which values the script singles
// out. The relations are what a script can test of its arguments without
// computing on them: each argument equal or not to each string constant,
// above, equal to or below each number constant, numeric or not (as
// Redis's Lua reads a number), its sign and whether it is whole, and each
// argument equal or not to each other, and above, equal to or below each
// other when both are numbers. A call in other relations is classified
// again, as a call of its own.

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

// relations is what a classification knows of the call it was verified
// on: the script's constants and that call's signature, and the
// relations in words (SCRIPT EXPLAIN).
type relations struct {
	lits *literals
	sig  string
	text string
}

// newRelations returns the relations of a call: lock keys, then its
// arguments (nm names them).
func (l *literals) newRelations(keys, argv []string, lock int, nm namer) *relations {
	vals := append(append([]string{}, keys...), argv...)
	var parts []string
	for i := lock; i < len(vals); i++ {
		v := vals[i]
		f, num := argNumber([]byte(v))
		p := nm.arg(i-lock) + " " + kindWords[numKind(f, num)]
		if l != nil {
			if j := slices.Index(l.strs, v); j >= 0 {
				p += " = " + strconv.Quote(short(v))
			}
			if num && !math.IsNaN(f) && len(l.nums) > 0 {
				k := sort.SearchFloat64s(l.nums, f)
				switch {
				case k < len(l.nums) && l.nums[k] == f:
					p += " = " + fmtNum(f)
				case k == 0:
					p += " below " + fmtNum(l.nums[0])
				case k == len(l.nums):
					p += " above " + fmtNum(l.nums[k-1])
				default:
					p += " between " + fmtNum(l.nums[k-1]) + " and " + fmtNum(l.nums[k])
				}
			}
		}
		if j := slices.Index(vals[lock:i], v); j >= 0 {
			p += " = " + nm.arg(j)
		}
		parts = append(parts, p)
	}
	return &relations{lits: l, sig: l.sigOf(keys, argv),
		text: strings.Join(parts, "; ")}
}

var kindWords = map[byte]string{
	kindText: "text", kindNaN: "NaN", kindNegative: "a negative number", kindPositive: "a positive number",
	kindNegative + kindWhole: "a negative whole number", kindZero + kindWhole: "zero", kindPositive + kindWhole: "a positive whole number",
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// holds reports whether a call stands in the relations.
func (r *relations) holds(keys, argv [][]byte) bool {
	var buf [256]byte
	return string(r.lits.appendSig(buf[:0], keys, argv)) == r.sig
}

func (l *literals) sigOf(keys, argv []string) string {
	return string(l.appendSig(nil, bytesOf(keys), bytesOf(argv)))
}

func bytesOf(s []string) [][]byte {
	out := make([][]byte, len(s))
	for i, x := range s {
		out[i] = []byte(x)
	}
	return out
}

// Numeric kinds of a value, as the signature writes them.
const (
	kindText = iota
	kindNaN
	kindNegative
	kindZero
	kindPositive
	kindWhole = 8 // added for a finite whole number
)

// smallSig is how many values a signature relates pairwise without
// allocating.
const smallSig = 64

// appendSig appends the signature of a call (its keys, then its
// arguments): per value, its numeric kind, the string constant it equals,
// its place among the number constants, the first value equal to it, and
// its place among the call's numbers. Two calls with the same signature
// stand in the same relations.
func (l *literals) appendSig(dst []byte, keys, argv [][]byte) []byte {
	if l == nil {
		l = &literals{}
	}
	n := len(keys) + len(argv)
	at := func(i int) []byte {
		if i < len(keys) {
			return keys[i]
		}
		return argv[i-len(keys)]
	}
	var small [smallSig]float64
	var smallOK [smallSig]bool
	nums, isNum := small[:0], smallOK[:0]
	if n > smallSig {
		nums, isNum = make([]float64, 0, n), make([]bool, 0, n)
	}
	for i := 0; i < n; i++ {
		f, ok := argNumber(at(i))
		nums, isNum = append(nums, f), append(isNum, ok)
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	for i := 0; i < n; i++ {
		v := at(i)
		f, num := nums[i], isNum[i]
		dst = append(dst, numKind(f, num))
		eq := 0
		for j, s := range l.strs {
			if string(v) == s {
				eq = j + 1
				break
			}
		}
		dst = binary.AppendUvarint(dst, uint64(eq))
		if num && !math.IsNaN(f) {
			// Its place among the sorted constants: how many are below,
			// and whether one equals it.
			below := sort.SearchFloat64s(l.nums, f)
			same := below < len(l.nums) && l.nums[below] == f
			dst = binary.AppendUvarint(dst, uint64(below)<<1|b2u(same))
		}
	}
	if n <= smallSig {
		for i := 0; i < n; i++ {
			first := i
			for j := 0; j < i; j++ {
				if string(at(j)) == string(at(i)) {
					first = j
					break
				}
			}
			dst = binary.AppendUvarint(dst, uint64(first))
			if isNum[i] && !math.IsNaN(nums[i]) {
				below := 0
				for j := 0; j < n; j++ {
					if isNum[j] && nums[j] < nums[i] {
						below++
					}
				}
				dst = binary.AppendUvarint(dst, uint64(below))
			}
		}
		return dst
	}
	firsts := map[string]int{}
	sorted := make([]float64, 0, n)
	for i := 0; i < n; i++ {
		if isNum[i] && !math.IsNaN(nums[i]) {
			sorted = append(sorted, nums[i])
		}
	}
	slices.Sort(sorted)
	for i := 0; i < n; i++ {
		first, ok := firsts[string(at(i))]
		if !ok {
			first = i
			firsts[string(at(i))] = i
		}
		dst = binary.AppendUvarint(dst, uint64(first))
		if isNum[i] && !math.IsNaN(nums[i]) {
			dst = binary.AppendUvarint(dst, uint64(sort.SearchFloat64s(sorted, nums[i])))
		}
	}
	return dst
}

func b2u(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}

func numKind(f float64, num bool) byte {
	switch {
	case !num:
		return kindText
	case math.IsNaN(f):
		return kindNaN
	}
	k := byte(kindZero)
	if f < 0 {
		k = kindNegative
	} else if f > 0 {
		k = kindPositive
	}
	if !math.IsInf(f, 0) && f == math.Trunc(f) {
		k += kindWhole
	}
	return k
}

// argNumber reads a value as Redis's Lua (5.1, strtod) reads a string as
// a number, in tonumber, arithmetic and comparisons after tonumber: up to
// a first NUL byte (Lua hands strtod a C string), with white space before
// and after, a sign, a decimal number with a fraction and an exponent, a
// hexadecimal one (0x, with a fraction and a binary exponent), inf,
// infinity or nan. Plain integers of up to 15 digits are read without
// allocating.
func argNumber(b []byte) (float64, bool) {
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
func isHex(c byte) bool   { return isDigit(c) || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F' }
func isAlnum(c byte) bool { return isDigit(c) || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
