package resp

import (
	"bufio"
	"errors"
	"fmt"
	"io"
)

// ErrProtocol is wrapped by every error the Reader returns for malformed input.
var ErrProtocol = errors.New("resp: protocol error")

// ReaderLimits bound what one reply may make the Reader allocate.
type ReaderLimits struct {
	MaxBulk  int // largest bulk string, bytes (default 64 MiB)
	MaxElems int // largest array (default 1<<20)
	MaxDepth int // deepest nesting (default 8)
}

// Reader decodes RESP2 replies (and the RESP3 types a Redis 7 may send when
// asked) from a stream.
type Reader struct {
	br  *bufio.Reader
	lim ReaderLimits
}

// NewReader returns a Reader over br.
func NewReader(br *bufio.Reader, lim ReaderLimits) *Reader {
	if lim.MaxBulk <= 0 {
		lim.MaxBulk = 64 << 20
	}
	if lim.MaxElems <= 0 {
		lim.MaxElems = 1 << 20
	}
	if lim.MaxDepth <= 0 {
		lim.MaxDepth = 8
	}
	return &Reader{br: br, lim: lim}
}

// Buffered reports how many bytes are already read from the stream but not
// yet decoded.
func (r *Reader) Buffered() int { return r.br.Buffered() }

// Read decodes the next reply. Errors from the stream are returned as they
// are; malformed input returns an error wrapping ErrProtocol, after which
// the stream is out of sync and must be closed.
func (r *Reader) Read() (Value, error) { return r.read(0) }

var (
	okBytes = []byte("OK")
)

func (r *Reader) read(depth int) (Value, error) {
	line, err := r.line()
	if err != nil {
		return Value{}, err
	}
	if len(line) == 0 {
		return Value{}, fmt.Errorf("%w: empty line", ErrProtocol)
	}
	body := line[1:]
	switch line[0] {
	case '+':
		if len(body) == 2 && body[0] == 'O' && body[1] == 'K' {
			return Value{Kind: KindSimple, Str: okBytes}, nil
		}
		return Value{Kind: KindSimple, Str: append([]byte(nil), body...)}, nil
	case '-':
		return Value{Kind: KindError, Str: append([]byte(nil), body...)}, nil
	case ':':
		n, ok := ParseInt(body)
		if !ok {
			return Value{}, fmt.Errorf("%w: bad integer %q", ErrProtocol, body)
		}
		return Value{Kind: KindInt, Int: n}, nil
	case '_':
		if len(body) != 0 {
			return Value{}, fmt.Errorf("%w: bad null %q", ErrProtocol, line)
		}
		return Nil, nil
	case '#': // RESP3 boolean
		switch {
		case len(body) == 1 && body[0] == 't':
			return Value{Kind: KindInt, Int: 1}, nil
		case len(body) == 1 && body[0] == 'f':
			return Value{Kind: KindInt, Int: 0}, nil
		}
		return Value{}, fmt.Errorf("%w: bad boolean %q", ErrProtocol, line)
	case '$', '=', '!', '(', ',':
		if line[0] == '(' || line[0] == ',' { // big number, double: keep text
			return Value{Kind: KindBulk, Str: append([]byte(nil), body...)}, nil
		}
		n, ok := ParseInt(body)
		if !ok || n < -1 {
			return Value{}, fmt.Errorf("%w: bad bulk length %q", ErrProtocol, body)
		}
		if n == -1 {
			return Nil, nil
		}
		if n > int64(r.lim.MaxBulk) {
			return Value{}, fmt.Errorf("%w: bulk of %d bytes exceeds the limit of %d", ErrProtocol, n, r.lim.MaxBulk)
		}
		buf, err := r.readN(int(n) + 2)
		if err != nil {
			return Value{}, err
		}
		if buf[n] != '\r' || buf[n+1] != '\n' {
			return Value{}, fmt.Errorf("%w: bulk not terminated by CRLF", ErrProtocol)
		}
		kind := KindBulk
		if line[0] == '!' { // RESP3 blob error
			kind = KindError
		}
		return Value{Kind: kind, Str: buf[:n:n]}, nil
	case '*', '%', '~', '>':
		n, ok := ParseInt(body)
		if !ok || n < -1 {
			return Value{}, fmt.Errorf("%w: bad array length %q", ErrProtocol, body)
		}
		if n == -1 {
			return Nil, nil
		}
		if line[0] == '%' {
			if n > int64(r.lim.MaxElems)/2 {
				return Value{}, fmt.Errorf("%w: map of %d pairs exceeds the limit of %d elements", ErrProtocol, n, r.lim.MaxElems)
			}
			n *= 2
		}
		if n > int64(r.lim.MaxElems) {
			return Value{}, fmt.Errorf("%w: array of %d elements exceeds the limit of %d", ErrProtocol, n, r.lim.MaxElems)
		}
		if depth >= r.lim.MaxDepth {
			return Value{}, fmt.Errorf("%w: nesting deeper than %d", ErrProtocol, r.lim.MaxDepth)
		}
		elems := make([]Value, 0, min(n, 64))
		for i := int64(0); i < n; i++ {
			e, err := r.read(depth + 1)
			if err != nil {
				return Value{}, err
			}
			elems = append(elems, e)
		}
		return Value{Kind: KindArray, Elems: elems}, nil
	}
	return Value{}, fmt.Errorf("%w: unexpected type byte %q", ErrProtocol, line[0])
}

// readN reads exactly n bytes. Memory grows with what actually arrives, so
// a length header alone cannot make the reader allocate its announced size.
func (r *Reader) readN(n int) ([]byte, error) {
	const chunk = 64 << 10
	buf := make([]byte, 0, min(n, chunk))
	for len(buf) < n {
		k := min(n-len(buf), max(chunk, len(buf)))
		start := len(buf)
		buf = append(buf, make([]byte, k)...)
		if _, err := io.ReadFull(r.br, buf[start:]); err != nil {
			return nil, err
		}
	}
	return buf, nil
}

// line returns the next CRLF-terminated line without its terminator. The
// slice is valid until the next read.
func (r *Reader) line() ([]byte, error) {
	line, err := r.br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			return nil, fmt.Errorf("%w: line longer than %d bytes", ErrProtocol, r.br.Size())
		}
		return nil, err
	}
	if len(line) < 2 || line[len(line)-2] != '\r' {
		return nil, fmt.Errorf("%w: line not terminated by CRLF", ErrProtocol)
	}
	return line[:len(line)-2], nil
}

// ParseInt parses a decimal int64 as Redis does (string2ll): an optional
// minus sign, digits, no leading zeros, no plus sign, no spaces, no overflow.
func ParseInt(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 20 {
		return 0, false
	}
	if len(b) == 1 && b[0] == '0' {
		return 0, true
	}
	neg := false
	if b[0] == '-' {
		neg = true
		b = b[1:]
		if len(b) == 0 {
			return 0, false
		}
	}
	if b[0] < '1' || b[0] > '9' {
		return 0, false
	}
	var v uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		if v > (1<<64-1)/10 {
			return 0, false
		}
		v = v*10 + uint64(c-'0')
		if v < uint64(c-'0') {
			return 0, false
		}
	}
	if neg {
		if v > 1<<63 {
			return 0, false
		}
		return -int64(v), true
	}
	if v > 1<<63-1 {
		return 0, false
	}
	return int64(v), true
}
