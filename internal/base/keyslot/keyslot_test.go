package keyslot

import (
	"fmt"
	"strings"
	"testing"
)

// Known slots, as Redis's CLUSTER KEYSLOT gives them.
func TestOfMatchesRedis(t *testing.T) {
	for key, want := range map[string]uint16{
		"foo": 12182, "bar": 5061, "x{a}": 15495, "x{b}": 3300, "{user1000}.following": 3443,
		"{user1000}.followers": 3443, "foo{}{bar}": 8363, "foo{{bar}}zap": 4015, "foo{bar}{zap}": 5061, "": 0,
	} {
		if got := OfString(key); got != want {
			t.Errorf("Of(%q) = %d, want %d", key, got, want)
		}
	}
}

func TestEveryTagHashesToItsSlot(t *testing.T) {
	longest := 0
	for s := 0; s < Slots; s++ {
		tag := Tag(uint16(s))
		if got := OfString("{" + tag + "}"); got != uint16(s) {
			t.Fatalf("Tag(%d) = %q hashes to %d", s, tag, got)
		}
		longest = max(longest, len(tag))
	}
	if longest > 3 {
		t.Errorf("longest tag %d bytes", longest)
	}
}

func TestCompanionSharesTheKeysSlot(t *testing.T) {
	for _, key := range []string{"lock", "{user}lock", "a{b}c", "}{", "{", "{}", "x{}{y}", "redlock-proxy:fence:z", strings.Repeat("k", 300)} {
		c := Companion(nil, "redlock-proxy:fence:", []byte(key))
		if Of(c) != OfString(key) {
			t.Errorf("companion %q of %q: slot %d, the key's %d", c, key, Of(c), OfString(key))
		}
		if b, want := string(BulkCompanion([]byte("x"), "redlock-proxy:fence:", []byte(key))), fmt.Sprintf("x$%d\r\n%s\r\n", len(c), c); b != want {
			t.Errorf("BulkCompanion(%q) = %q, want %q", key, b, want)
		}
	}
}
