// Package keyslot computes Redis Cluster hash slots, and names the keys the
// proxy keeps beside a lock so that they share the lock key's slot.
//
// It promises: Of follows Redis's rule (CRC16-XMODEM of the key, or of the
// first non-empty {hash tag} in it, modulo 16384); Tag(s) is a short string
// with Of("{"+Tag(s)+"}") == s for every slot s, the same in every process.
package keyslot

import (
	"strconv"
	"sync"
)

// Slots is the number of hash slots of a Redis Cluster.
const Slots = 16384

// Of is the hash slot of key.
func Of(key []byte) uint16 {
	for i, c := range key {
		if c != '{' {
			continue
		}
		for j := i + 1; j < len(key); j++ {
			if key[j] == '}' {
				if j > i+1 {
					key = key[i+1 : j]
				}
				return crc16(key) & (Slots - 1)
			}
		}
		break
	}
	return crc16(key) & (Slots - 1)
}

// OfString is Of for a string.
func OfString(key string) uint16 { return Of([]byte(key)) }

// Same reports whether every key hashes to the same slot.
func Same(keys [][]byte) bool {
	if len(keys) < 2 {
		return true
	}
	s := Of(keys[0])
	for _, k := range keys[1:] {
		if Of(k) != s {
			return false
		}
	}
	return true
}

// Tag is a short string that hashes to slot s (its hash tag): a key that
// contains "{" + Tag(s) + "}" before any other brace lives in slot s.
func Tag(s uint16) string {
	tagsOnce.Do(buildTags)
	return tags[s&(Slots-1)]
}

var (
	tagsOnce sync.Once
	tags     []string
)

// tagAlphabet makes the tags: the shortest strings over it, in order, the
// first of each slot kept.
const tagAlphabet = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"

func buildTags() {
	tags = make([]string, Slots)
	left := Slots
	var b [4]byte
	try := func(n int) {
		s := crc16(b[:n]) & (Slots - 1)
		if tags[s] == "" {
			tags[s] = string(b[:n])
			left--
		}
	}
	for _, c0 := range []byte(tagAlphabet) {
		b[0] = c0
		try(1)
	}
	for _, c0 := range []byte(tagAlphabet) {
		for _, c1 := range []byte(tagAlphabet) {
			b[0], b[1] = c0, c1
			try(2)
		}
	}
	for n := 3; left > 0 && n <= len(b); n++ {
		var walk func(i int)
		walk = func(i int) {
			if left == 0 {
				return
			}
			if i == n {
				try(n)
				return
			}
			for _, c := range []byte(tagAlphabet) {
				b[i] = c
				walk(i + 1)
			}
		}
		walk(0)
	}
	if left > 0 {
		panic("keyslot: some slots have no tag")
	}
}

// crc16 is CRC16-XMODEM (polynomial 0x1021, initial value 0), as Redis
// Cluster hashes keys.
func crc16(b []byte) uint16 {
	var crc uint16
	for _, c := range b {
		crc = crc<<8 ^ crcTable[byte(crc>>8)^c]
	}
	return crc
}

var crcTable = func() (t [256]uint16) {
	for i := range t {
		c := uint16(i) << 8
		for j := 0; j < 8; j++ {
			if c&0x8000 != 0 {
				c = c<<1 ^ 0x1021
			} else {
				c <<= 1
			}
		}
		t[i] = c
	}
	return t
}()

// Companion appends to dst the name of a key the proxy keeps beside key:
// prefix, then the hash tag of key's slot in braces, then key. It shares
// key's slot whatever braces key itself contains.
func Companion(dst []byte, prefix string, key []byte) []byte {
	return appendCompanion(dst, prefix, Tag(Of(key)), key)
}

func appendCompanion(dst []byte, prefix, tag string, key []byte) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, '{')
	dst = append(dst, tag...)
	dst = append(dst, '}')
	return append(dst, key...)
}

// BulkCompanion appends Companion(nil, prefix, key) as a RESP bulk string
// (its length, the name, CRLF), hashing key once: commands carry one for
// every lock key.
func BulkCompanion(dst []byte, prefix string, key []byte) []byte {
	tag := Tag(Of(key))
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(prefix)+2+len(tag)+len(key)), 10)
	dst = append(dst, '\r', '\n')
	dst = appendCompanion(dst, prefix, tag, key)
	return append(dst, '\r', '\n')
}

// InSlot is a key name of prefix in slot s: prefix then the slot's tag in
// braces.
func InSlot(prefix string, s uint16) string {
	return prefix + "{" + Tag(s) + "}"
}
