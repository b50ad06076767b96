package resp

import (
	"strconv"

	"github.com/tidwall/redcon"
)

// The one RESP encoder of the project: commands to the backends and
// replies to clients are written with these functions and no others. The
// RESP2 types are redcon's encoders; RESP3 adds what redcon has no encoder
// for (maps, pushes, its null), each with the RESP2 form Redis itself
// falls back to, so a caller passes resp3 and never writes a type byte.

// AppendArrayHeader appends "*n\r\n".
func AppendArrayHeader(b []byte, n int) []byte { return redcon.AppendArray(b, n) }

// AppendBulk appends a bulk string.
func AppendBulk(b, s []byte) []byte { return redcon.AppendBulk(b, s) }

// AppendBulkString appends a bulk string.
func AppendBulkString(b []byte, s string) []byte { return redcon.AppendBulkString(b, s) }

// AppendBulkHeader appends "$n\r\n", the start of a bulk string of n
// bytes written in parts: the caller appends the n bytes and "\r\n".
func AppendBulkHeader(b []byte, n int) []byte {
	i := len(b)
	b = redcon.AppendArray(b, n)
	b[i] = '$'
	return b
}

// AppendBulkInt appends an integer as a bulk string (how commands carry numbers).
// (redcon's formats through a string, which allocates).
func AppendBulkInt(b []byte, n int64) []byte {
	var tmp [20]byte
	return redcon.AppendBulk(b, strconv.AppendInt(tmp[:0], n, 10))
}

// AppendInt appends an integer reply.
func AppendInt(b []byte, n int64) []byte { return redcon.AppendInt(b, n) }

// AppendSimple appends a simple-string reply (newlines become spaces).
func AppendSimple(b []byte, s []byte) []byte { return redcon.AppendString(b, string(s)) }

// AppendError appends an error reply (newlines become spaces).
func AppendError(b []byte, s string) []byte { return redcon.AppendError(b, s) }

// AppendNull appends a null: "_" in RESP3, the null bulk string in RESP2.
func AppendNull(b []byte, resp3 bool) []byte {
	if resp3 {
		return append(b, '_', '\r', '\n')
	}
	return redcon.AppendNull(b)
}

// AppendNullArray appends a null where an array is expected: "_" in
// RESP3, the null array in RESP2.
func AppendNullArray(b []byte, resp3 bool) []byte {
	if resp3 {
		return append(b, '_', '\r', '\n')
	}
	return append(b, '*', '-', '1', '\r', '\n')
}

// AppendMapHeader starts a map of n pairs: a RESP3 map, or in RESP2 the
// flat array of 2n elements Redis sends instead.
func AppendMapHeader(b []byte, n int, resp3 bool) []byte {
	if resp3 {
		return appendHeader(b, '%', n)
	}
	return redcon.AppendArray(b, 2*n)
}

// AppendPushHeader starts an out-of-band message of n elements: a RESP3
// push, or in RESP2 an array (as pub/sub messages are sent).
func AppendPushHeader(b []byte, n int, resp3 bool) []byte {
	if resp3 {
		return appendHeader(b, '>', n)
	}
	return redcon.AppendArray(b, n)
}

func appendHeader(b []byte, c byte, n int) []byte {
	// redcon's array header with its type byte replaced: one integer
	// encoding for every header.
	i := len(b)
	b = redcon.AppendArray(b, n)
	b[i] = c
	return b
}

// AppendCommand appends a command made of string arguments. For hot paths,
// prefer AppendArrayHeader and AppendBulk, which do not allocate.
func AppendCommand(b []byte, args ...string) []byte {
	b = AppendArrayHeader(b, len(args))
	for _, a := range args {
		b = AppendBulkString(b, a)
	}
	return b
}
