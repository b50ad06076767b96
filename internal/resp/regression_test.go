// Regression tests for bugs found while writing this suite, now fixed.

package resp

import (
	"errors"
	"fmt"
	"testing"
)

// readNoPanic is readOne that turns a panic into an error.
func readNoPanic(in string, lim ReaderLimits) (v Value, err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("panic: %v", p)
		}
	}()
	return readOne(in, lim)
}

// reader.go: a RESP3 map header's pair count is doubled before the MaxElems
// check, and the doubling overflows int64 for counts above 2^62-1. The
// negative result passes the check and reaches make([]Value, 0, min(n, 64))
// with a negative capacity, which panics ("makeslice: cap out of range").
func TestKnownBugMapLengthOverflow(t *testing.T) {
	for _, in := range []string{
		"%9223372036854775807\r\n", // doubled: -2
		"%4611686018427387904\r\n", // doubled: math.MinInt64
		"%4611686018427387905\r\n",
		"*1\r\n%6917529027641081856\r\n",
		"%7000000000000000000\r\n", // found by FuzzReader in 3s
	} {
		if _, err := readNoPanic(in, ReaderLimits{}); !errors.Is(err, ErrProtocol) {
			t.Errorf("Read(%q): error %v, want one wrapping ErrProtocol", in, err)
		}
	}
}

// reader.go: RESP3's blob error is length-prefixed like a bulk string
// ("!<len>\r\n<bytes>\r\n"), but the reader decodes '!' as a one-line error
// like '-'. It returns an error whose text is the length ("21") and then
// decodes the message itself as the next reply, so the stream is out of sync.
func TestKnownBugBlobError(t *testing.T) {
	r := newReader("!21\r\nSYNTAX invalid syntax\r\n:1\r\n", ReaderLimits{})
	v, err := r.Read()
	if want := errv("SYNTAX invalid syntax"); err != nil || !v.Equal(want) {
		t.Errorf("first Read = %v, %v; want %v", v, err, want)
	}
	v, err = r.Read()
	if err != nil || !v.Equal(IntValue(1)) {
		t.Errorf("second Read = %v, %v; want :1", v, err)
	}
	if _, err := readOne("!9223372036854775807\r\n", ReaderLimits{}); !errors.Is(err, ErrProtocol) {
		t.Errorf("huge blob error header: %v, want an error wrapping ErrProtocol", err)
	}
}

// reader.go: malformed RESP3 scalars are accepted. A boolean is exactly "#t"
// or "#f", and a null is exactly "_"; anything else is malformed input (the
// reader turns "#x" into false and "_x" into nil).
func TestKnownBugMalformedResp3Scalars(t *testing.T) {
	for _, in := range []string{"#\r\n", "#x\r\n", "#tt\r\n", "#T\r\n", "_x\r\n", "_0\r\n"} {
		if v, err := readOne(in, ReaderLimits{}); !errors.Is(err, ErrProtocol) {
			t.Errorf("Read(%q) = %v, %v; want an error wrapping ErrProtocol", in, v, err)
		}
	}
}
