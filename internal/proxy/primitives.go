package proxy

import (
	"strconv"

	"github.com/redlock-proxy/redlock-proxy/internal/proxy/script"
)

// The newer release primitives of Valkey 9 (DELIFEQ) and Redis 8.4 (DELEX
// IFEQ, SET IFEQ), run as compare-and-delete and compare-and-extend on
// Redis 7 backends.

// compareDelete is DELIFEQ / DELEX IFEQ as a release: 1 deleted, 0 not.
var compareDelete = script.MustSpec("release keys=1 args=1 token=1; missing: 0; own: 1; own-no-ttl: 1; other: 0; other-no-ttl: 0")

// setIfEq is SET key value IFEQ value PX ms as an extend: re-arm the TTL
// of a lock that holds the caller's value (and of its fencing state, as
// every extend does); OK, or nil.
var setIfEq = script.MustSpec("extend keys=1 args=2 token=1 ttl=2ms nottl-acts; missing: nil; own: +OK; own-no-ttl: +OK; other: nil; other-no-ttl: nil")

// startSetIfEq extends a lock as SET key token IFEQ token PX ms: OK when a
// majority re-armed it with validity left, nil otherwise, as Redis 8.4.
func startSetIfEq(c *client, req setRequest) {
	ttl := []byte(strconv.FormatInt(req.ttl.Milliseconds(), 10))
	startClassOp(c, "set", setIfEq, [][]byte{req.key}, [][]byte{req.value, ttl})
}

// cmdDelIfEq is Valkey 9's DELIFEQ key value: delete the key if it holds
// value. It runs as a compare-and-delete on every backend.
func cmdDelIfEq(c *client, args [][]byte) { startCompareDelete(c, "delifeq", args[1], args[2]) }

func startCompareDelete(c *client, name string, key, value []byte) {
	startClassOp(c, name, compareDelete, [][]byte{key}, [][]byte{value})
}

// cmdDelEx is Redis 8.4's DELEX key [IFEQ value]: with IFEQ a
// compare-and-delete, without a condition a force DEL.
func cmdDelEx(c *client, args [][]byte) {
	switch {
	case len(args) == 2:
		cmdDel(c, args)
	case len(args) == 4 && is(args[2], "ifeq"):
		startCompareDelete(c, "delex", args[1], args[3])
	case len(args) == 4 && (is(args[2], "ifne") || is(args[2], "ifdeq") || is(args[2], "ifdne")):
		c.replyErr(msgDelexIfEqOnly)
	default:
		c.replyErr(msgSyntax)
	}
}
