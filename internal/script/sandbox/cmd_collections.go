package sandbox

import "github.com/redlock-proxy/redlock-proxy/internal/base/resp"

// What hashes, sets and sorted sets share: the length of HLEN, SCARD and
// ZCARD, the removal of HDEL, SREM and ZREM, and the one-or-many replies.

func (c *call) lenType() Type {
	switch c.name {
	case "hlen":
		return TypeHash
	case "scard":
		return TypeSet
	}
	return TypeZset
}

func cmdLen(c *call) (resp.Value, *Stop) {
	it, ok, typeOK := c.typed(c.args[1], c.lenType())
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !ok:
		return resp.IntValue(0), nil
	}
	return resp.IntValue(int64(it.size())), nil
}

// removeNames deletes names from m and counts those it held.
func removeNames[V any](m map[string]V, names []string) int64 {
	n := int64(0)
	for _, f := range names {
		if _, ok := m[f]; ok {
			n++
			delete(m, f)
		}
	}
	return n
}

// cmdRemove is HDEL, SREM and ZREM: fields or members removed, the key
// deleted once it is empty.
func cmdRemove(c *call) (resp.Value, *Stop) {
	t := map[string]Type{"hdel": TypeHash, "srem": TypeSet, "zrem": TypeZset}[c.name]
	it, ok, typeOK := c.typed(c.args[1], t)
	switch {
	case !typeOK:
		return c.fail(errWrongType)
	case !ok:
		return resp.IntValue(0), nil
	}
	var n int64
	switch t {
	case TypeHash:
		n = removeNames(it.Hash, c.args[2:])
	case TypeSet:
		n = removeNames(it.Set, c.args[2:])
	default:
		n = removeNames(it.Zset, c.args[2:])
	}
	c.put(c.args[1], it)
	return resp.IntValue(n), nil
}

// oneOrMany answers a command of one name (HGET) with get of its third
// argument, and its many-name form (HMGET) with an array of get of each.
func (c *call) oneOrMany(single bool, get func(string) resp.Value) (resp.Value, *Stop) {
	if single {
		return get(c.args[2]), nil
	}
	out := make([]resp.Value, 0, len(c.args)-2)
	for _, f := range c.args[2:] {
		out = append(out, get(f))
	}
	return array(out...), nil
}

func boolInt(b bool) resp.Value {
	if b {
		return resp.IntValue(1)
	}
	return resp.IntValue(0)
}
