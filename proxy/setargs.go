package proxy

import (
	"math"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// setRequest is a SET the proxy accepts: a lock acquire, or (Redis 8.4's
// SET ... IFEQ) a compare-and-set that extends a lock.
type setRequest struct {
	key, value []byte
	ttl        time.Duration
	ifEq       bool // extend: set only if the key holds value
	// past: a deadline (PXAT, EXAT) already passed. One Redis answers such
	// a SET NX as it would a grant (OK where the key is free) and holds
	// nothing; ttl is 0.
	past bool
}

const (
	setNX = 1 << iota
	setXX
	setGet
	setKeepTTL
	setEX
	setPX
	setEXAT
	setPXAT
	setIFEQ
)

// parseSet validates SET key value [options] as Redis 7 does (same errors,
// same order), then applies the proxy's own rule: only an acquire (NX with
// an expiry) is accepted. now is the wall clock, for PXAT/EXAT. On error it
// returns the wire error message.
func parseSet(args [][]byte, now time.Time, maxTTL time.Duration) (setRequest, string) {
	flags := 0
	var expire, ifEq []byte
	for j := 3; j < len(args); j++ {
		opt := args[j]
		hasNext := j+1 < len(args)
		switch {
		case is(opt, "NX") && flags&(setXX|setIFEQ) == 0:
			flags |= setNX
		case is(opt, "XX") && flags&(setNX|setIFEQ) == 0:
			flags |= setXX
		case is(opt, "IFEQ") && flags&(setNX|setXX|setIFEQ) == 0 && hasNext:
			// Redis 8.4: set only if the current value equals the argument.
			flags |= setIFEQ
			ifEq = args[j+1]
			j++
		case is(opt, "GET"):
			flags |= setGet
		case is(opt, "KEEPTTL") && flags&(setEX|setEXAT|setPX|setPXAT) == 0:
			flags |= setKeepTTL
		case is(opt, "EX") && flags&(setKeepTTL|setEXAT|setPX|setPXAT) == 0 && hasNext:
			flags |= setEX
			expire = args[j+1]
			j++
		case is(opt, "PX") && flags&(setKeepTTL|setEX|setEXAT|setPXAT) == 0 && hasNext:
			flags |= setPX
			expire = args[j+1]
			j++
		case is(opt, "EXAT") && flags&(setKeepTTL|setEX|setPX|setPXAT) == 0 && hasNext:
			flags |= setEXAT
			expire = args[j+1]
			j++
		case is(opt, "PXAT") && flags&(setKeepTTL|setEX|setEXAT|setPX) == 0 && hasNext:
			flags |= setPXAT
			expire = args[j+1]
			j++
		default:
			return setRequest{}, msgSyntax
		}
	}
	var ms int64
	if expire != nil {
		n, ok := resp.ParseInt(expire)
		if !ok {
			return setRequest{}, msgNotInteger
		}
		seconds := flags&(setEX|setEXAT) != 0
		if n <= 0 || (seconds && n > math.MaxInt64/1000) {
			return setRequest{}, msgInvalidExpireSet
		}
		if seconds {
			n *= 1000
		}
		nowMs := now.UnixMilli()
		if flags&(setEX|setPX) != 0 {
			if n > math.MaxInt64-nowMs {
				return setRequest{}, msgInvalidExpireSet // Redis overflows to negative here
			}
			ms = n
		} else {
			ms = n - nowMs
		}
	}
	// A TTL is a time.Duration: without a max_ttl, the longest one is the
	// limit (beyond it, the conversion below would overflow).
	maxMs := int64(math.MaxInt64 / int64(time.Millisecond))
	if maxTTL > 0 {
		maxMs = min(maxMs, maxTTL.Milliseconds())
	}
	switch {
	case flags&setGet != 0:
		return setRequest{}, msgSetNoGet
	case flags&setIFEQ != 0 && string(ifEq) != string(args[2]):
		return setRequest{}, msgSetIfEqHandoff
	case flags&(setNX|setIFEQ) == 0:
		return setRequest{}, msgSetNeedsNX
	case expire == nil:
		return setRequest{}, msgSetNeedsExpiry
	case ms <= 0:
		return setRequest{key: args[1], value: args[2], ifEq: flags&setIFEQ != 0, past: true}, ""
	case ms > maxMs:
		return setRequest{}, msgTTLTooLong(ms, maxMs)
	}
	return setRequest{key: args[1], value: args[2], ttl: time.Duration(ms) * time.Millisecond, ifEq: flags&setIFEQ != 0}, ""
}
