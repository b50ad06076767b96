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

// A RESP3 map header with a pair count whose double overflows int64 is
// refused, not turned into a negative capacity (a panic).
func TestMapLengthThatOverflowsWhenDoubledIsRefused(t *testing.T) {
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

// RESP3's blob error is length-prefixed like a bulk string
// ("!<len>\r\n<bytes>\r\n"): the reader returns its message and stays in
// step with the stream.
func TestBlobErrorIsLengthPrefixed(t *testing.T) {
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

// A RESP3 boolean is exactly "#t" or "#f", and a null exactly "_":
// anything else is refused as malformed.
func TestMalformedResp3ScalarsAreRefused(t *testing.T) {
	for _, in := range []string{"#\r\n", "#x\r\n", "#tt\r\n", "#T\r\n", "_x\r\n", "_0\r\n"} {
		if v, err := readOne(in, ReaderLimits{}); !errors.Is(err, ErrProtocol) {
			t.Errorf("Read(%q) = %v, %v; want an error wrapping ErrProtocol", in, v, err)
		}
	}
}
