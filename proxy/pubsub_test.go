package proxy

import (
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/base/acl"
)

// Channel patterns (PSUBSCRIBE) match as Redis's stringmatchlen matches
// them.
func TestChannelPatterns(t *testing.T) {
	for _, c := range []struct {
		pat, s string
		want   bool
	}{
		{"redisson_lock__channel:*", "redisson_lock__channel:{orders}", true},
		{"redisson_lock__channel:*", "redisson_lock__channel", false},
		{"*", "", true},
		{"a*b*c", "axxbyyc", true},
		{"a*b*c", "axxbyy", false},
		{"h?llo", "hello", true},
		{"h?llo", "hllo", false},
		{"h[ae]llo", "hallo", true},
		{"h[ae]llo", "hillo", false},
		{"h[^e]llo", "hallo", true},
		{"h[^e]llo", "hello", false},
		{"h[a-b]llo", "hbllo", true},
		{"h[b-a]llo", "hallo", true},
		{`h\*llo`, "h*llo", true},
		{`h\*llo`, "hello", false},
		{"lock:[\\]]", "lock:]", true},
	} {
		if got := acl.Match(c.pat, c.s); got != c.want {
			t.Errorf("Match(%q, %q) = %v", c.pat, c.s, got)
		}
	}
}

// A notice's payload reads back as written, binary-safe; others are not
// notices.
func TestNoticePayload(t *testing.T) {
	cmd := appendNotice(nil, "rc", "id-1", noticeShard, []byte("ch a\x00"), []byte(" msg\r\n"))
	want := "*3\r\n$7\r\nPUBLISH\r\n$2\r\nrc\r\n$20\r\nid-1 1 5 ch a\x00 msg\r\n\r\n"
	if string(cmd) != want {
		t.Fatalf("%q", cmd)
	}
	id, kind, ch, msg, ok := parseNotice([]byte("id-1 1 5 ch a\x00 msg\r\n"))
	if !ok || id != "id-1" || kind != noticeShard || string(ch) != "ch a\x00" || string(msg) != " msg\r\n" {
		t.Fatalf("parse: %q %v %q %q %v", id, kind, ch, msg, ok)
	}
	for _, bad := range []string{"", "id", "id 3 1 x", "id 0 9 short", "id 0 -1 x", " 0 1 x"} {
		if _, _, _, _, ok := parseNotice([]byte(bad)); ok {
			t.Errorf("%q read as a notice", bad)
		}
	}
}
