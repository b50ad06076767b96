package sandbox

import (
	"strconv"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Server: the clock and the database number.

func cmdTime(c *call) (resp.Value, *Stop) {
	return array(bulk(strconv.FormatInt(c.s.Now/1000, 10)), bulk(strconv.FormatInt(c.s.Now%1000*1000, 10))), nil
}

func cmdSelect(c *call) (resp.Value, *Stop) {
	db, ok := ParseInt(c.args[1])
	if !ok {
		return c.fail(errNotInt)
	}
	if db != 0 {
		return resp.Value{}, Refuse(RefuseOther, "SELECTs database %d: only database 0 is served (locks live in database 0 of every backend)", db)
	}
	return resp.OK, nil
}
