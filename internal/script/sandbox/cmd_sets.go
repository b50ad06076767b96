package sandbox

import "github.com/redlock-proxy/redlock-proxy/internal/base/resp"

// Sets.

func cmdSAdd(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], TypeSet)
	if !typeOK {
		return c.fail(errWrongType)
	}
	if !ok {
		it = Item{Type: TypeSet}
	}
	if it.Set == nil {
		it.Set = map[string]struct{}{}
	}
	n := int64(0)
	for _, m := range c.args[2:] {
		if _, ok := it.Set[m]; !ok {
			n++
			it.Set[m] = struct{}{}
		}
	}
	c.put(c.args[1], it)
	return resp.IntValue(n), nil
}

// cmdSIsMember is SISMEMBER and SMISMEMBER.
func cmdSIsMember(c *call) (resp.Value, *Stop) {
	it, _, typeOK := c.typed(c.args[1], TypeSet)
	if !typeOK {
		return c.fail(errWrongType)
	}
	return c.oneOrMany(c.name == "sismember", func(m string) resp.Value { _, ok := it.Set[m]; return boolInt(ok) })
}
