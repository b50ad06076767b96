package proxy

import (
	"bytes"
	"errors"
	"io"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Limits bound what one client may make the proxy buffer or parse. They are
// enforced on each header before the data it announces is read.
type Limits struct {
	MaxArgs         int // arguments in one command (default 4096)
	MaxBulk         int // bytes in one argument (default 512 KiB)
	MaxInline       int // bytes in one inline (telnet-style) command line (default 64 KiB)
	MaxCommandBytes int // bytes buffered for one command (default 1 MiB)
	// MaxToken bounds a lock token, and a value a read brings back from the
	// backends (default 1 KiB): lock tokens are small, and the backend links
	// are shared, so no client may fill them with large values.
	MaxToken int
	// Before AUTH, when a password is required, Redis allows far less in
	// a multibulk request (an inline one is bounded by MaxInline alone).
	PreAuthArgs int // default 10
	PreAuthBulk int // default 16 KiB
}

// DefaultLimits are the input limits when none are set.
func DefaultLimits() Limits {
	return Limits{
		MaxArgs: 4096, MaxBulk: 512 << 10, MaxToken: 1 << 10, MaxInline: 64 << 10, MaxCommandBytes: 1 << 20,
		PreAuthArgs: 10, PreAuthBulk: 16 << 10,
	}
}

// defaults sets every zero limit to its default.
func (l *Limits) defaults() {
	d := DefaultLimits()
	for _, f := range []struct{ v, def *int }{
		{&l.MaxArgs, &d.MaxArgs}, {&l.MaxBulk, &d.MaxBulk}, {&l.MaxToken, &d.MaxToken}, {&l.MaxInline, &d.MaxInline},
		{&l.MaxCommandBytes, &d.MaxCommandBytes}, {&l.PreAuthArgs, &d.PreAuthArgs}, {&l.PreAuthBulk, &d.PreAuthBulk},
	} {
		if *f.v <= 0 {
			*f.v = *f.def
		}
	}
}

// ProtocolError is a malformed request: the client gets "-ERR Protocol
// error: <msg>" and the connection closes, as in Redis.
type ProtocolError string

func (e ProtocolError) Error() string { return "Protocol error: " + string(e) }

// The protocol errors, worded as Redis words them.
const (
	errInvalidMultibulk   ProtocolError = "invalid multibulk length"
	errInvalidBulk        ProtocolError = "invalid bulk length"
	errTooBigInline       ProtocolError = "too big inline request"
	errTooBigMbulkCount   ProtocolError = "too big mbulk count string"
	errTooBigBulkCount    ProtocolError = "too big bulk count string"
	errUnbalancedQuotes   ProtocolError = "unbalanced quotes in request"
	errUnauthMultibulk    ProtocolError = "unauthenticated multibulk length"
	errUnauthBulk         ProtocolError = "unauthenticated bulk length"
	errCommandTooBig      ProtocolError = "command larger than the proxy's max_command_bytes"
	maxHeaderLine                       = 64 << 10 // Redis's PROTO_INLINE_MAX_SIZE for count lines
	readChunk                           = 16 << 10
	errExpectedDollarHead               = "expected '$', got '"
)

// reader parses client requests (RESP arrays of bulk strings, or inline
// commands) from a connection, within Limits. Arguments returned by next
// point into its buffer and stay valid until the next fill.
type reader struct {
	rd    io.Reader
	lim   *Limits
	buf   []byte
	start int // first unparsed byte
	end   int // end of buffered data
	args  [][]byte
	// authed selects the full limits; false applies the pre-auth limits.
	authed bool

	// A multibulk command parsed in part, so that each fill costs only
	// the new bytes (as Redis keeps multibulklen and bulklen): its
	// argument count (0 when none is in progress), the offset of its next
	// header and its arguments so far, both relative to start, which fill
	// may move.
	mbCount int
	mbPos   int
	spans   []span
}

// span is an argument's place in a command, relative to its start.
type span struct{ off, n int }

func newReader(rd io.Reader, lim *Limits) *reader {
	return &reader{rd: rd, lim: lim, buf: make([]byte, readChunk)}
}

var errIncomplete = errors.New("incomplete")

// next parses one command from the buffered bytes. It returns nil, nil
// when more input is needed.
func (r *reader) next() ([][]byte, error) {
	for r.start < r.end {
		args, n, err := r.parse(r.buf[r.start:r.end])
		if err == errIncomplete {
			if r.end-r.start >= r.lim.MaxCommandBytes {
				return nil, errCommandTooBig
			}
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		r.start += n
		if len(args) > 0 {
			return args, nil
		}
	}
	return nil, nil
}

// buffered reports whether unparsed bytes remain.
func (r *reader) buffered() bool { return r.start < r.end }

// fill reads more input. Arguments returned before are invalid afterwards.
func (r *reader) fill() error {
	if r.start == r.end {
		r.start, r.end = 0, 0
		if len(r.buf) > 4*readChunk {
			r.buf = make([]byte, readChunk) // give a burst's memory back
		}
	} else if r.start > 0 {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.start = 0
	}
	if r.end == len(r.buf) {
		size := min(2*len(r.buf), r.lim.MaxCommandBytes+readChunk)
		if size <= len(r.buf) {
			return errCommandTooBig
		}
		nb := make([]byte, size)
		copy(nb, r.buf[:r.end])
		r.buf = nb
	}
	n, err := r.rd.Read(r.buf[r.end:])
	r.end += n
	if n > 0 {
		return nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return err
}

// parse decodes one command at the start of b and returns it with the
// number of bytes it used. An empty command (an empty inline line, "*0")
// returns no arguments and a positive length.
//
// The checks run in Redis's order (processMultibulkBuffer), with MaxBulk in
// the place of proto-max-bulk-len: a count is invalid before it is too big
// for an unauthenticated client, a bulk length too (MaxArgs, which Redis
// lacks, comes last). A header's first byte is checked only once its whole
// line has arrived, as Redis does.
func (r *reader) parse(b []byte) ([][]byte, int, error) {
	if r.mbCount == 0 && b[0] != '*' {
		return r.parseInline(b)
	}
	args, n, err := r.parseMultibulk(b)
	if err != nil && err != errIncomplete {
		r.mbCount = 0
	}
	return args, n, err
}

func (r *reader) parseMultibulk(b []byte) ([][]byte, int, error) {
	if r.mbCount == 0 {
		cr := lineEnd(b, 0)
		if cr < 0 {
			if len(b) > maxHeaderLine {
				return nil, 0, errTooBigMbulkCount
			}
			return nil, 0, errIncomplete
		}
		if cr+1 >= len(b) {
			return nil, 0, errIncomplete
		}
		count, ok := resp.ParseInt(b[1:cr])
		if !ok || count > 1<<31-1 {
			return nil, 0, errInvalidMultibulk
		}
		if !r.authed && count > int64(r.lim.PreAuthArgs) {
			return nil, 0, errUnauthMultibulk
		}
		if count <= 0 {
			return nil, cr + 2, nil
		}
		if count > int64(r.lim.MaxArgs) {
			return nil, 0, errInvalidMultibulk
		}
		r.mbCount, r.mbPos, r.spans = int(count), cr+2, r.spans[:0]
	}
	for len(r.spans) < r.mbCount {
		pos := r.mbPos
		cr := lineEnd(b, pos)
		if cr < 0 {
			if len(b)-pos > maxHeaderLine {
				return nil, 0, errTooBigBulkCount
			}
			return nil, 0, errIncomplete
		}
		if cr+1 >= len(b) {
			return nil, 0, errIncomplete
		}
		if b[pos] != '$' {
			return nil, 0, expectedDollar(b[pos])
		}
		n, ok := resp.ParseInt(b[pos+1 : cr])
		if !ok || n < 0 || n > int64(r.lim.MaxBulk) {
			return nil, 0, errInvalidBulk
		}
		if !r.authed && n > int64(r.lim.PreAuthBulk) {
			return nil, 0, errUnauthBulk
		}
		next := cr + 2
		// Know early that the command cannot fit, and refuse it whether or
		// not its bytes happen to be buffered already.
		if int64(next)+n+2 > int64(r.lim.MaxCommandBytes) {
			return nil, 0, errCommandTooBig
		}
		if int64(len(b)-next) < n+2 {
			return nil, 0, errIncomplete
		}
		// Like Redis, take the two bytes after the data as the terminator
		// without looking at them.
		r.spans = append(r.spans, span{next, int(n)})
		r.mbPos = next + int(n) + 2
	}
	args := r.args[:0]
	for _, s := range r.spans {
		args = append(args, b[s.off:s.off+s.n:s.off+s.n])
	}
	r.args = args
	r.mbCount = 0
	return args, r.mbPos, nil
}

// expectedDollar is Redis's "expected '$', got '%c'", with the byte as is,
// except CR and LF, which Redis's error replies turn into spaces.
func expectedDollar(c byte) ProtocolError {
	if c == '\r' || c == '\n' {
		c = ' '
	}
	return ProtocolError(errExpectedDollarHead + string([]byte{c}) + "'")
}

// lineEnd finds the '\r' ending the header line that starts at from (its
// type byte included, as Redis searches), or -1. Like Redis, the line is
// complete once any byte follows the '\r'.
func lineEnd(b []byte, from int) int {
	i := bytes.IndexByte(b[from:], '\r')
	if i < 0 {
		return -1
	}
	return from + i
}

// parseInline decodes a telnet-style command line, splitting it as Redis's
// sdssplitargs does (quotes, backslash escapes, \xHH).
func (r *reader) parseInline(b []byte) ([][]byte, int, error) {
	nl := bytes.IndexByte(b[:min(len(b), r.lim.MaxInline+2)], '\n')
	if nl < 0 {
		if len(b) > r.lim.MaxInline {
			return nil, 0, errTooBigInline
		}
		return nil, 0, errIncomplete
	}
	if nl >= r.lim.MaxCommandBytes {
		return nil, 0, errCommandTooBig // as next would, had it arrived slower
	}
	line := b[:nl]
	if len(line) > 0 && line[len(line)-1] == '\r' {
		line = line[:len(line)-1]
	}
	// Redis puts no pre-auth limit on inline commands: the line's length
	// bounds them already.
	args, err := splitArgs(line, r.args[:0], r.lim.MaxArgs)
	if err != nil {
		return nil, 0, err
	}
	r.args = args
	return args, nl + 1, nil
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func hexVal(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	}
	return c - 'A' + 10
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\n' || c == '\r' || c == '\t' || c == '\v' || c == '\f'
}

// splitArgs is Redis's sdssplitargs. Arguments are written back into line
// (unquoting only shrinks), so no allocation is needed.
func splitArgs(line []byte, args [][]byte, maxArgs int) ([][]byte, error) {
	p := 0
	w := 0 // write position in line
	for {
		for p < len(line) && isSpace(line[p]) {
			p++
		}
		if p >= len(line) {
			return args, nil
		}
		if len(args) >= maxArgs {
			return nil, errInvalidMultibulk
		}
		start := w
		inq, insq := false, false
		done := false
		for !done {
			if inq {
				switch {
				case p >= len(line):
					return nil, errUnbalancedQuotes
				case line[p] == '\\' && p+3 < len(line) && line[p+1] == 'x' && isHex(line[p+2]) && isHex(line[p+3]):
					line[w] = hexVal(line[p+2])*16 + hexVal(line[p+3])
					w++
					p += 3
				case line[p] == '\\' && p+1 < len(line):
					p++
					c := line[p]
					switch c {
					case 'n':
						c = '\n'
					case 'r':
						c = '\r'
					case 't':
						c = '\t'
					case 'b':
						c = '\b'
					case 'a':
						c = '\a'
					}
					line[w] = c
					w++
				case line[p] == '"':
					if p+1 < len(line) && !isSpace(line[p+1]) {
						return nil, errUnbalancedQuotes
					}
					done = true
				default:
					line[w] = line[p]
					w++
				}
			} else if insq {
				switch {
				case p >= len(line):
					return nil, errUnbalancedQuotes
				case line[p] == '\\' && p+1 < len(line) && line[p+1] == '\'':
					p++
					line[w] = '\''
					w++
				case line[p] == '\'':
					if p+1 < len(line) && !isSpace(line[p+1]) {
						return nil, errUnbalancedQuotes
					}
					done = true
				default:
					line[w] = line[p]
					w++
				}
			} else {
				switch {
				case p >= len(line):
					done = true
				case line[p] == ' ' || line[p] == '\n' || line[p] == '\r' || line[p] == '\t':
					// Only these end an unquoted token: sdssplitargs skips
					// every isspace() byte between tokens, but keeps \v and
					// \f inside one.
					done = true
				case line[p] == '"':
					inq = true
				case line[p] == '\'':
					insq = true
				default:
					line[w] = line[p]
					w++
				}
			}
			if p < len(line) {
				p++
			}
		}
		args = append(args, line[start:w:w])
	}
}
