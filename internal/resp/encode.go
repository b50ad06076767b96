package resp

import "strconv"

func appendPrefix(b []byte, c byte, n int64) []byte {
	if n >= 0 && n <= 9 {
		return append(b, c, byte('0'+n), '\r', '\n')
	}
	b = append(b, c)
	b = strconv.AppendInt(b, n, 10)
	return append(b, '\r', '\n')
}

// AppendArrayHeader appends "*n\r\n".
func AppendArrayHeader(b []byte, n int) []byte { return appendPrefix(b, '*', int64(n)) }

// AppendBulk appends a bulk string.
func AppendBulk(b, s []byte) []byte {
	b = appendPrefix(b, '$', int64(len(s)))
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendBulkString appends a bulk string.
func AppendBulkString(b []byte, s string) []byte {
	b = appendPrefix(b, '$', int64(len(s)))
	b = append(b, s...)
	return append(b, '\r', '\n')
}

// AppendBulkInt appends an integer as a bulk string (how commands carry numbers).
func AppendBulkInt(b []byte, n int64) []byte {
	var tmp [20]byte
	return AppendBulk(b, strconv.AppendInt(tmp[:0], n, 10))
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
