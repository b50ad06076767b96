package sandbox

import (
	"math"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Strings.

func cmdGet(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], TypeString)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !ok:
		return resp.Nil, nil
	}
	return bulk(it.Value), nil
}

// strOpts are the options of SET and GETEX, parsed as Redis 7.0 parses
// them: each option is accepted only where it fits the ones before it
// (the same expiry option twice is fine, the last wins), anything else is
// a syntax error; the expiry's value is read later.
type strOpts struct {
	nx, xx, get, keep, persist bool
	expiry, value              string // "ex", "px", "exat" or "pxat", and its argument
}

func parseStrOpts(args []string, from int, getex bool) (strOpts, bool) {
	var o strOpts
	for j := from; j < len(args); j++ {
		w := strings.ToLower(args[j])
		next := j+1 < len(args)
		other := func(e string) bool { // no expiry other than e so far
			return o.expiry == "" || o.expiry == e
		}
		switch {
		case w == "nx" && !o.xx && !getex:
			o.nx = true
		case w == "xx" && !o.nx && !getex:
			o.xx = true
		case w == "get" && !getex:
			o.get = true
		case w == "keepttl" && !o.persist && o.expiry == "" && !getex:
			o.keep = true
		case w == "persist" && getex && o.expiry == "" && !o.keep:
			o.persist = true
		case (w == "ex" || w == "px" || w == "exat" || w == "pxat") && !o.keep && !o.persist && other(w) && next:
			o.expiry, o.value = w, args[j+1]
			j++
		default:
			return o, false
		}
	}
	return o, true
}

// expiryAt reads the expiry option's value as an absolute time (ms).
func (c *call) expiryAt(o strOpts) (int64, *Stop) {
	n, ok := ParseInt(o.value)
	if !ok {
		_, r := c.fail(errNotInt)
		return 0, r
	}
	seconds := o.expiry == "ex" || o.expiry == "exat"
	if n <= 0 || seconds && n > math.MaxInt64/1000 {
		_, r := c.expireErr()
		return 0, r
	}
	if seconds {
		n *= 1000
	}
	if o.expiry == "ex" || o.expiry == "px" {
		if n > math.MaxInt64-c.s.Now {
			_, r := c.expireErr()
			return 0, r
		}
		n += c.s.Now
	}
	return n, nil
}

// cmdSet is SET key value [NX|XX] [GET] [EX s|PX ms|EXAT s|PXAT ms|KEEPTTL].
func cmdSet(c *call) (resp.Value, *Stop) {
	args, s := c.args, c.s
	o, ok := parseStrOpts(args, 3, false)
	if !ok {
		return c.fail(errSyntax)
	}
	var at int64
	if o.expiry != "" {
		var ref *Stop
		if at, ref = c.expiryAt(o); ref != nil {
			return resp.Value{}, ref
		}
	}
	old, exists := s.Lookup(args[1])
	var reply resp.Value
	if o.get {
		if exists && old.Type != TypeString {
			return c.fail(errWrongType)
		}
		reply = resp.Nil
		if exists {
			reply = bulk(old.Value)
		}
	}
	if (o.nx && exists) || (o.xx && !exists) {
		if o.get {
			return reply, nil
		}
		return resp.Nil, nil
	}
	it := Item{Value: args[2], At: at}
	if o.keep && exists {
		it.At = old.At
	}
	c.put(args[1], it)
	if o.get {
		return reply, nil
	}
	return resp.OK, nil
}

func cmdSetNX(c *call) (resp.Value, *Stop) {
	if _, ok := c.s.Lookup(c.args[1]); ok {
		return resp.IntValue(0), nil
	}
	c.put(c.args[1], Item{Value: c.args[2]})
	return resp.IntValue(1), nil
}

// cmdSetEx is SETEX key seconds value and PSETEX key ms value.
func cmdSetEx(c *call) (resp.Value, *Stop) {
	n, ok := ParseInt(c.args[2])
	if !ok {
		return c.fail(errNotInt)
	}
	unit := int64(1)
	if c.name == "setex" {
		unit = 1000
	}
	if n <= 0 || n > math.MaxInt64/unit || n*unit > math.MaxInt64-c.s.Now {
		return c.expireErr()
	}
	c.put(c.args[1], Item{Value: c.args[3], At: c.s.Now + n*unit})
	return resp.OK, nil
}

func cmdGetSet(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	c.put(c.args[1], Item{Value: c.args[2]})
	if !ok {
		return resp.Nil, nil
	}
	return bulk(it.Value), nil
}

func cmdGetDel(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], TypeString)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !ok:
		return resp.Nil, nil
	}
	delete(c.s.Keys, c.args[1])
	return bulk(it.Value), nil
}

// cmdGetEx is GETEX key [EX s|PX ms|EXAT s|PXAT ms|PERSIST].
func cmdGetEx(c *call) (resp.Value, *Stop) {
	o, ok := parseStrOpts(c.args, 2, true)
	if !ok {
		return c.fail(errSyntax)
	}
	it, exists, typeOK := c.typed(c.args[1], TypeString)
	switch {
	case !exists:
		return resp.Nil, nil
	case !typeOK:
		return c.fail(errWrongType)
	}
	reply := bulk(it.Value)
	switch {
	case o.persist:
		it.At = 0
	case o.expiry != "":
		at, ref := c.expiryAt(o)
		if ref != nil {
			return resp.Value{}, ref
		}
		if at <= c.s.Now {
			delete(c.s.Keys, c.args[1])
			return reply, nil
		}
		it.At = at
	}
	c.put(c.args[1], it)
	return reply, nil
}

func cmdMGet(c *call) (resp.Value, *Stop) {
	out := make([]resp.Value, 0, len(c.args)-1)
	for _, k := range c.args[1:] {
		it, ok := c.s.Lookup(k)
		if ok && it.Type == TypeString {
			out = append(out, bulk(it.Value))
		} else {
			out = append(out, resp.Nil)
		}
	}
	return array(out...), nil
}

// cmdMSet is MSET and MSETNX.
func cmdMSet(c *call) (resp.Value, *Stop) {
	if len(c.args)%2 == 0 {
		return c.fail("ERR wrong number of arguments for '" + c.name + "' command")
	}
	if c.name == "msetnx" {
		for i := 1; i < len(c.args); i += 2 {
			if _, ok := c.s.Lookup(c.args[i]); ok {
				return resp.IntValue(0), nil
			}
		}
	}
	for i := 1; i < len(c.args); i += 2 {
		c.put(c.args[i], Item{Value: c.args[i+1]})
	}
	if c.name == "msetnx" {
		return resp.IntValue(1), nil
	}
	return resp.OK, nil
}

func cmdAppend(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	if len(it.Value)+len(c.args[2]) > maxString {
		return resp.Value{}, Refuse(RefuseBudget, "builds a string longer than %d bytes", maxString)
	}
	it.Value += c.args[2]
	c.put(c.args[1], it)
	return resp.IntValue(int64(len(it.Value))), nil
}

func cmdSetRange(c *call) (resp.Value, *Stop) {
	off, ok := ParseInt(c.args[2])
	if !ok {
		return c.fail(errNotInt)
	}
	if off < 0 {
		return c.fail("ERR offset is out of range")
	}
	it, exists, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	v := c.args[3]
	if v == "" {
		return resp.IntValue(int64(len(it.Value))), nil
	}
	if off > maxString || off+int64(len(v)) > maxString {
		return resp.Value{}, Refuse(RefuseBudget, "builds a string longer than %d bytes", maxString)
	}
	b := []byte(it.Value)
	if need := int(off) + len(v); need > len(b) {
		b = append(b, make([]byte, need-len(b))...)
	}
	copy(b[off:], v)
	if !exists {
		it = Item{}
	}
	it.Value = string(b)
	c.put(c.args[1], it)
	return resp.IntValue(int64(len(b))), nil
}

func cmdGetRange(c *call) (resp.Value, *Stop) {
	start, ok1 := ParseInt(c.args[2])
	end, ok2 := ParseInt(c.args[3])
	if !ok1 || !ok2 {
		return c.fail(errNotInt)
	}
	it, _, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	return bulk(getrange(it.Value, start, end)), nil
}

func cmdStrlen(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	return resp.IntValue(int64(len(it.Value))), nil
}

// cmdIncr is INCR, DECR, INCRBY and DECRBY.
func cmdIncr(c *call) (resp.Value, *Stop) {
	by := int64(1)
	if len(c.args) == 3 {
		n, ok := ParseInt(c.args[2])
		if !ok {
			return c.fail(errNotInt)
		}
		by = n
	}
	if strings.HasPrefix(c.name, "decr") {
		if by == math.MinInt64 {
			return c.fail("ERR decrement would overflow")
		}
		by = -by
	}
	it, exists, typeOK := c.typed(c.args[1], TypeString)
	if !typeOK {
		return c.fail(errWrongType)
	}
	var cur int64
	if exists {
		n, ok := ParseInt(it.Value)
		if !ok {
			return c.fail(errNotInt)
		}
		cur = n
	}
	if (by < 0 && cur < 0 && by < math.MinInt64-cur) || (by > 0 && cur > 0 && by > math.MaxInt64-cur) {
		return c.fail(errOverflow)
	}
	cur += by
	it.Value = strconv.FormatInt(cur, 10)
	c.put(c.args[1], it)
	return resp.IntValue(cur), nil
}

// getrange is GETRANGE's substring rule.
func getrange(v string, start, end int64) string {
	n := int64(len(v))
	if start < 0 && end < 0 && start > end {
		return ""
	}
	if start < 0 {
		start += n
	}
	if end < 0 {
		end += n
	}
	start = max(start, 0)
	end = max(end, 0)
	if end >= n {
		end = n - 1
	}
	if n == 0 || start > end {
		return ""
	}
	return v[start : end+1]
}
