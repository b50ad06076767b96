package classify

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/libscripts"
)

// A semaphore kept as a count of free permits and a sorted set of the
// permits taken, scored with their deadlines (libscripts), and variants.
const (
	permSetup      = libscripts.PermitsSetup
	permAcquire    = libscripts.PermitsAcquire
	permRelease    = libscripts.PermitsRelease
	permAvailable  = libscripts.PermitsAvailable
	permAcquireTwo = `redis.call('decrby', KEYS[1], 2)
redis.call('zadd', KEYS[2], ARGV[2], ARGV[1], ARGV[2], ARGV[1] .. '-2')
return 'OK'`
	// As a string, as a count read back is.
	permAvailableString = `return redis.call('get', KEYS[1]) or '0'`
	permSet             = `redis.call('set', KEYS[1], ARGV[1])
return 1`
)

func TestPermitsScriptsClassify(t *testing.T) {
	now := time.Now().UnixMilli()
	ms := func(n int64) string { return strconv.FormatInt(n, 10) }
	keys := []string{"sem", "sem:timeout"}
	for _, tc := range []struct {
		name, text string
		keys       []string
		argv       []string
		want       string // String(), or the refusal's start
	}{
		{"set-up", permSetup, keys[:1:1], []string{"2"}, ""},
		{"set-up, two keys", permSetup, keys, []string{"2"}, "semaphore-setup keys=2 name=1 args=1 limit=1; success: :1; failure: :0"},
		{"acquire", permAcquire, keys, []string{"id-1", ms(now + 5000), ms(now)},
			"semaphore-acquire keys=2 name=1 args=3 token=1 deadline=2 clock=3; success: \"OK\"; failure: (nil)"},
		{"release", permRelease, keys, []string{"id-1"}, "semaphore-release keys=2 name=1 args=1 token=1; success: :1; failure: :0"},
		{"available", permAvailable, keys, []string{ms(now)}, "semaphore-available keys=2 name=1 args=1 clock=1"},
		{"available, as a string", permAvailableString, keys, []string{ms(now)}, "semaphore-available keys=2 name=1 args=1 clock=1"},
		{"several permits", permAcquireTwo, keys, []string{"id-1", ms(now + 5000), ms(now)}, "refused: it takes 2 permits in one call"},
		{"a change of the limit", permSet, keys, []string{"3"}, "refused: " + PermitsChangeRefusal},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, ref := sandbox.Compile([]byte(tc.text))
			if ref != nil {
				t.Fatalf("compile: %v", ref)
			}
			s := classifyPermitsAt(p, tc.keys, tc.argv, now)
			got := ""
			switch {
			case s == nil:
			case s.Role == SemUnknown:
				got = "refused: " + s.Refused
			default:
				got = s.String()
			}
			if !strings.HasPrefix(got, tc.want) || (tc.want == "" && got != "") {
				t.Fatalf("got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// An acquire's TTL is its deadline less the caller's clock; a deadline
// years ahead (a permit without a lease) is no TTL, refused as a permit
// that never expires.
func TestPermitsAcquireTTL(t *testing.T) {
	now := time.Now().UnixMilli()
	p, _ := sandbox.Compile([]byte(permAcquire))
	s := classifyPermitsAt(p, []string{"sem", "sem:timeout"}, []string{"id-1", strconv.FormatInt(now+5000, 10), strconv.FormatInt(now, 10)}, now)
	if s == nil || s.Role != SemAcquire {
		t.Fatalf("not an acquire: %v", s)
	}
	call := func(deadline, clock int64) [][]byte {
		return [][]byte{[]byte("id-2"), []byte(strconv.FormatInt(deadline, 10)), []byte(strconv.FormatInt(clock, 10))}
	}
	if ttl, ok := s.TTLOf(call(now+10000, now+1)); !ok || ttl != 9999*time.Millisecond {
		t.Fatalf("TTL %v %v; want 9999ms", ttl, ok)
	}
	if ttl, ok := s.TTLOf(call(922337203685477, now)); !ok || ttl != 0 {
		t.Fatalf("TTL of a permit without a lease: %v %v; want none", ttl, ok)
	}
	if !s.Matches([][]byte{[]byte("sem"), []byte("sem:timeout")}, call(now, now)) {
		t.Fatal("a call of the same shape does not match")
	}
}
