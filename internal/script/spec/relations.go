package spec

import (
	"encoding/binary"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
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

// relations is what a classification knows of the call it was verified
// on: the script's constants and that call's signature, and the
// relations in words (SCRIPT EXPLAIN).
type relations struct {
	Lits *sandbox.Literals
	Sig  string
	text string
}

// newRelations returns the relations of a call: lock keys, then its
// arguments (nm names them).
func NewRelations(l *sandbox.Literals, keys, argv []string, lock int, nm Namer) *relations {
	vals := append(append([]string{}, keys...), argv...)
	var parts []string
	for i := lock; i < len(vals); i++ {
		v := vals[i]
		f, num := sandbox.ArgNumber([]byte(v))
		p := nm.Arg(i-lock) + " " + kindWords[numKind(f, num)]
		if l != nil {
			if j := slices.Index(l.Strs, v); j >= 0 {
				p += " = " + strconv.Quote(sandbox.Short(v))
			}
			if pre, suf := affixes(l, []byte(v)); pre > 0 || suf > 0 {
				if pre > 0 {
					p += " beginning with " + strconv.Quote(sandbox.Short(l.Affixes[pre-1]))
				}
				if suf > 0 {
					p += " ending with " + strconv.Quote(sandbox.Short(l.Affixes[suf-1]))
				}
			}
			if num && !math.IsNaN(f) && len(l.Nums) > 0 {
				k := sort.SearchFloat64s(l.Nums, f)
				switch {
				case k < len(l.Nums) && l.Nums[k] == f:
					p += " = " + fmtNum(f)
				case k == 0:
					p += " below " + fmtNum(l.Nums[0])
				case k == len(l.Nums):
					p += " above " + fmtNum(l.Nums[k-1])
				default:
					p += " between " + fmtNum(l.Nums[k-1]) + " and " + fmtNum(l.Nums[k])
				}
			}
		}
		if j := slices.Index(vals[lock:i], v); j >= 0 {
			p += " = " + nm.Arg(j)
		}
		parts = append(parts, p)
	}
	return &relations{Lits: l, Sig: SigOf(l, keys, argv),
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
	return string(AppendSig(r.Lits, buf[:0], keys, argv)) == r.Sig
}

func SigOf(l *sandbox.Literals, keys, argv []string) string {
	return string(AppendSig(l, nil, BytesOf(keys), BytesOf(argv)))
}

func BytesOf(s []string) [][]byte {
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
func AppendSig(l *sandbox.Literals, dst []byte, keys, argv [][]byte) []byte {
	if l == nil {
		l = &sandbox.Literals{}
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
		f, ok := sandbox.ArgNumber(at(i))
		nums, isNum = append(nums, f), append(isNum, ok)
	}
	dst = binary.AppendUvarint(dst, uint64(n))
	for i := 0; i < n; i++ {
		v := at(i)
		f, num := nums[i], isNum[i]
		dst = append(dst, numKind(f, num))
		eq := 0
		for j, s := range l.Strs {
			if string(v) == s {
				eq = j + 1
				break
			}
		}
		dst = binary.AppendUvarint(dst, uint64(eq))
		// The constants it begins and ends with (but equals).
		pre, suf := affixes(l, v)
		dst = binary.AppendUvarint(dst, uint64(pre))
		dst = binary.AppendUvarint(dst, uint64(suf))
		if num && !math.IsNaN(f) {
			// Its place among the sorted constants: how many are below,
			// and whether one equals it.
			below := sort.SearchFloat64s(l.Nums, f)
			same := below < len(l.Nums) && l.Nums[below] == f
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

// affixes returns 1 + the index of the first constant (Literals.Affixes)
// that v begins with, and of the first it ends with, without being it; 0
// for none.
func affixes(l *sandbox.Literals, v []byte) (pre, suf int) {
	for j, s := range l.Affixes {
		if len(v) <= len(s) {
			continue
		}
		if pre == 0 && string(v[:len(s)]) == s {
			pre = j + 1
		}
		if suf == 0 && string(v[len(v)-len(s):]) == s {
			suf = j + 1
		}
	}
	return pre, suf
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
