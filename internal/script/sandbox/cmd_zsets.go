package sandbox

import (
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Sorted sets. Scores are doubles; replies show them as Redis 7.0 does
// (%.17g, inf and -inf).

// parseScore reads a score as ZADD does.
func parseScore(s string) (float64, bool) {
	if s == "" || s[0] == ' ' || s[0] == '\t' || s[0] == '\n' || s[0] == '\r' || s[0] == '\v' || s[0] == '\f' {
		return 0, false
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsNaN(f) {
		return 0, false
	}
	if f == 0 {
		f = 0 // no negative zero
	}
	return f, true
}

// FormatScore is how Redis 7.0 shows a score.
func FormatScore(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	}
	return strconv.FormatFloat(f, 'g', 17, 64)
}

// scoreRange is a ZCOUNT range: min and max, each inclusive or not.
type scoreRange struct {
	min, max     float64
	minEx, maxEx bool
}

func parseBound(s string) (float64, bool, bool) {
	ex := strings.HasPrefix(s, "(")
	if ex {
		s = s[1:]
	}
	f, err := strconv.ParseFloat(strings.TrimLeft(s, " \t\n\r\v\f"), 64)
	if err != nil && !math.IsInf(f, 0) || math.IsNaN(f) || s == "" {
		return 0, false, false
	}
	return f, ex, true
}

func parseRange(lo, hi string) (scoreRange, bool) {
	var r scoreRange
	var ok1, ok2 bool
	r.min, r.minEx, ok1 = parseBound(lo)
	r.max, r.maxEx, ok2 = parseBound(hi)
	return r, ok1 && ok2
}

func (r scoreRange) holds(f float64) bool {
	return (f > r.min || !r.minEx && f == r.min) && (f < r.max || !r.maxEx && f == r.max)
}

// zmember is a member with its score.
type zmember struct {
	name  string
	score float64
}

// sorted lists a sorted set's members in Redis's order: by score, then by
// name.
func sorted(z map[string]float64) []zmember {
	out := make([]zmember, 0, len(z))
	for m, s := range z {
		out = append(out, zmember{m, s})
	}
	slices.SortFunc(out, func(a, b zmember) int {
		switch {
		case a.score < b.score:
			return -1
		case a.score > b.score:
			return 1
		}
		return strings.Compare(a.name, b.name)
	})
	return out
}

// cmdZAdd is ZADD key [NX|XX] [GT|LT] [CH] [INCR] score member ... and
// ZINCRBY key increment member.
func cmdZAdd(c *call) (resp.Value, *Stop) {
	var nx, xx, gt, lt, ch, incr bool
	i := 2
	if c.name == "zincrby" {
		incr = true
	} else {
	opts:
		for ; i < len(c.args); i++ {
			switch strings.ToLower(c.args[i]) {
			case "nx":
				nx = true
			case "xx":
				xx = true
			case "gt":
				gt = true
			case "lt":
				lt = true
			case "ch":
				ch = true
			case "incr":
				incr = true
			default:
				break opts
			}
		}
	}
	elems := len(c.args) - i
	switch {
	case elems%2 != 0 || elems == 0:
		return c.fail(errSyntax)
	case nx && xx:
		return c.fail("ERR XX and NX options at the same time are not compatible")
	case gt && nx || lt && nx || gt && lt:
		return c.fail("ERR GT, LT, and/or NX options at the same time are not compatible")
	case incr && elems > 2:
		return c.fail("ERR INCR option supports a single increment-element pair")
	}
	scores := make([]float64, 0, elems/2)
	for j := i; j < len(c.args); j += 2 {
		f, ok := parseScore(c.args[j])
		if !ok {
			return c.fail(errNotFloat)
		}
		scores = append(scores, f)
	}
	it, exists, typeOK := c.typed(c.args[1], TypeZset)
	if !typeOK {
		return c.fail(errWrongType)
	}
	var added, updated, processed int64
	var score float64
	if exists || !xx {
		if !exists {
			it = Item{Type: TypeZset}
		}
		if it.Zset == nil {
			it.Zset = map[string]float64{}
		}
		for j, f := range scores {
			m := c.args[i+1+2*j]
			cur, has := it.Zset[m]
			switch {
			case has:
				if nx {
					continue
				}
				if incr {
					f += cur
					if math.IsNaN(f) {
						return c.fail("ERR resulting score is not a number (NaN)")
					}
				}
				if lt && f >= cur || gt && f <= cur {
					continue
				}
				if f != cur {
					it.Zset[m] = f
					updated++
				}
			case xx:
				continue
			default:
				it.Zset[m] = f
				added++
			}
			processed++
			score = f
		}
		c.put(c.args[1], it)
	}
	if incr {
		if processed == 0 {
			return resp.Nil, nil
		}
		return bulk(FormatScore(score)), nil
	}
	if ch {
		return resp.IntValue(added + updated), nil
	}
	return resp.IntValue(added), nil
}

// cmdZScore is ZSCORE and ZMSCORE.
func cmdZScore(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeZset)
	if !typeOK {
		return c.fail(errWrongType)
	}
	get := func(m string) resp.Value {
		if f, ok := it.Zset[m]; ok {
			return bulk(FormatScore(f))
		}
		return resp.Nil
	}
	return c.oneOrMany(c.name == "zscore", get)
}

// cmdZCount is ZCOUNT and ZREMRANGEBYSCORE.
func cmdZCount(c *call) (resp.Value, *Stop) {
	r, ok := parseRange(c.args[2], c.args[3])
	if !ok {
		return c.fail(errRange)
	}
	it, exists, typeOK := c.typed(c.args[1], TypeZset)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !exists:
		return resp.IntValue(0), nil
	}
	n := int64(0)
	for m, f := range it.Zset {
		if r.holds(f) {
			n++
			if c.name == "zremrangebyscore" {
				delete(it.Zset, m)
			}
		}
	}
	c.put(c.args[1], it)
	return resp.IntValue(n), nil
}

// rankRange sanitizes a rank range as Redis does; ok is false when it is
// empty.
func rankRange(start, end int64, n int) (int, int, bool) {
	l := int64(n)
	if start < 0 {
		start += l
	}
	if end < 0 {
		end += l
	}
	start = max(start, 0)
	if start > end || start >= l {
		return 0, 0, false
	}
	end = min(end, l-1)
	return int(start), int(end), true
}

func cmdZRemRangeByRank(c *call) (resp.Value, *Stop) {
	start, ok1 := ParseInt(c.args[2])
	end, ok2 := ParseInt(c.args[3])
	if !ok1 || !ok2 {
		return c.fail(errNotInt)
	}
	it, exists, typeOK := c.typed(c.args[1], TypeZset)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !exists:
		return resp.IntValue(0), nil
	}
	ms := sorted(it.Zset)
	a, b, ok := rankRange(start, end, len(ms))
	if !ok {
		return resp.IntValue(0), nil
	}
	for _, m := range ms[a : b+1] {
		delete(it.Zset, m.name)
	}
	c.put(c.args[1], it)
	return resp.IntValue(int64(b - a + 1)), nil
}

func cmdZRank(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeZset)
	if !typeOK {
		return c.fail(errWrongType)
	}
	ms := sorted(it.Zset)
	for i, m := range ms {
		if m.name == c.args[2] {
			if c.name == "zrevrank" {
				i = len(ms) - 1 - i
			}
			return resp.IntValue(int64(i)), nil
		}
	}
	return resp.Nil, nil
}

// cmdZRange is ZRANGE key start stop [BYSCORE] [REV] [LIMIT offset count]
// [WITHSCORES], and ZREVRANGE, ZRANGEBYSCORE and ZREVRANGEBYSCORE.
func cmdZRange(c *call) (resp.Value, *Stop) {
	byScore := c.name == "zrangebyscore" || c.name == "zrevrangebyscore"
	rev := c.name == "zrevrange" || c.name == "zrevrangebyscore"
	fixed := c.name != "zrange" // the legacy forms take no BYSCORE or REV
	var withScores, limited bool
	var offset, count int64 = 0, -1
	for j := 4; j < len(c.args); j++ {
		o := strings.ToLower(c.args[j])
		switch {
		case o == "withscores":
			withScores = true
		case o == "limit" && j+2 < len(c.args):
			var ok1, ok2 bool
			offset, ok1 = ParseInt(c.args[j+1])
			count, ok2 = ParseInt(c.args[j+2])
			if !ok1 || !ok2 {
				return c.fail(errNotInt)
			}
			limited = true
			j += 2
		case !fixed && !rev && o == "rev":
			rev = true
		case !fixed && !byScore && o == "byscore":
			byScore = true
		default:
			return c.fail(errSyntax)
		}
	}
	if limited && !byScore {
		return c.fail("ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX")
	}
	lo, hi := c.args[2], c.args[3]
	if rev && byScore {
		lo, hi = hi, lo
	}
	var r scoreRange
	var start, end int64
	if byScore {
		var ok bool
		if r, ok = parseRange(lo, hi); !ok {
			return c.fail(errRange)
		}
	} else {
		var ok1, ok2 bool
		start, ok1 = ParseInt(lo)
		end, ok2 = ParseInt(hi)
		if !ok1 || !ok2 {
			return c.fail(errNotInt)
		}
	}
	it, exists, typeOK := c.typed(c.args[1], TypeZset)
	switch {
	case !exists:
		return array(), nil
	case !typeOK:
		return c.fail(errWrongType)
	}
	ms := sorted(it.Zset)
	if rev {
		slices.Reverse(ms)
	}
	var sel []zmember
	if byScore {
		if offset < 0 {
			return array(), nil
		}
		for _, m := range ms {
			if !r.holds(m.score) {
				continue
			}
			if offset > 0 {
				offset--
				continue
			}
			if count == 0 {
				break
			}
			sel = append(sel, m)
			count--
		}
	} else if a, b, ok := rankRange(start, end, len(ms)); ok {
		sel = ms[a : b+1]
	}
	out := make([]resp.Value, 0, len(sel)*2)
	for _, m := range sel {
		out = append(out, bulk(m.name))
		if withScores {
			out = append(out, bulk(FormatScore(m.score)))
		}
	}
	return array(out...), nil
}
