package sandbox

import (
	"math"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Any key.

func cmdDel(c *call) (resp.Value, *Stop) {
	n := int64(0)
	for _, k := range c.args[1:] {
		if _, ok := c.s.Lookup(k); ok {
			n++
			delete(c.s.Keys, k)
		}
	}
	return resp.IntValue(n), nil
}

// cmdExists is EXISTS and TOUCH: every name counts, repeated or not.
func cmdExists(c *call) (resp.Value, *Stop) {
	n := int64(0)
	for _, k := range c.args[1:] {
		if _, ok := c.s.Lookup(k); ok {
			n++
		}
	}
	return resp.IntValue(n), nil
}

func cmdType(c *call) (resp.Value, *Stop) {
	name := "none"
	if it, ok := c.s.Lookup(c.args[1]); ok {
		name = it.Type.String()
	}
	return resp.Value{Kind: resp.KindSimple, Str: []byte(name)}, nil
}

// cmdExpire is PEXPIRE, EXPIRE, PEXPIREAT and EXPIREAT, with NX, XX, GT
// and LT.
func cmdExpire(c *call) (resp.Value, *Stop) {
	var nx, xx, gt, lt bool
	for _, o := range c.args[3:] {
		switch strings.ToLower(o) {
		case "nx":
			nx = true
		case "xx":
			xx = true
		case "gt":
			gt = true
		case "lt":
			lt = true
		default:
			return c.fail("ERR Unsupported option " + o)
		}
	}
	switch {
	case nx && (xx || gt || lt):
		return c.fail("ERR NX and XX, GT or LT options at the same time are not compatible")
	case gt && lt:
		return c.fail("ERR GT and LT options at the same time are not compatible")
	}
	n, ok := ParseInt(c.args[2])
	if !ok {
		return c.fail(errNotInt)
	}
	if c.name == "expire" || c.name == "expireat" {
		if n > math.MaxInt64/1000 || n < math.MinInt64/1000 {
			return c.expireErr()
		}
		n *= 1000
	}
	var base int64
	if c.name == "expire" || c.name == "pexpire" {
		base = c.s.Now
	}
	if n > math.MaxInt64-base {
		return c.expireErr()
	}
	at := n + base
	it, exists := c.s.Lookup(c.args[1])
	if !exists {
		return resp.IntValue(0), nil
	}
	cur := it.At
	switch {
	case nx && cur != 0, xx && cur == 0, gt && (cur == 0 || at <= cur), lt && cur != 0 && at >= cur:
		return resp.IntValue(0), nil
	}
	if at <= c.s.Now {
		delete(c.s.Keys, c.args[1])
		return resp.IntValue(1), nil
	}
	it.At = at
	c.s.Keys[c.args[1]] = it
	return resp.IntValue(1), nil
}

// cmdTTL is PTTL, TTL, PEXPIRETIME and EXPIRETIME.
func cmdTTL(c *call) (resp.Value, *Stop) {
	it, ok := c.s.Lookup(c.args[1])
	switch {
	case !ok:
		return resp.IntValue(-2), nil
	case it.At == 0:
		return resp.IntValue(-1), nil
	}
	v := it.At
	if c.name == "pttl" || c.name == "ttl" {
		v -= c.s.Now
	}
	if c.name == "ttl" || c.name == "expiretime" {
		v = (v + 500) / 1000
	}
	return resp.IntValue(v), nil
}
