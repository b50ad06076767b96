package classify

import (
	"fmt"
	"slices"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/base/keyslot"
)

// Read-write locks kept as Redisson's RReadWriteLock keeps them: a hash
// whose field "mode" is "read" or "write" and whose other fields are the
// holders, each counting its holds (a writer's field is its name with
// ":write"); each read hold has a lease of its own, a key named after
// the lock, the holder and the hold's number. A script is one of the five
// operations by what it does (RWRecognize, rwprobe.go), in that
// operation's call layout (rwLayouts): the layout says which key and
// argument is which, the probes that the script keeps the rule. The
// masters never run it: the proxy runs its own scripts for the operation
// (proxy's kind_rw.go), whose keys are the lock and the names derived from
// it (RWLeasePrefix).

// RWRole is what a read-write lock script does.
type RWRole uint8

// The read-write lock operations.
const (
	RWUnknown      RWRole = iota
	RWReadAcquire         // take a read hold (or one more)
	RWWriteAcquire        // take the write lock (or enter it again)
	RWReadRelease         // take off one read hold; free the lock at the last hold
	RWWriteRelease        // take off one write hold
	RWReadRenew           // re-arm the caller's read holds (the watchdog), per lock
)

func (r RWRole) String() string {
	switch r {
	case RWReadAcquire:
		return "rwlock-read-acquire"
	case RWWriteAcquire:
		return "rwlock-write-acquire"
	case RWReadRelease:
		return "rwlock-read-release"
	case RWWriteRelease:
		return "rwlock-write-release"
	case RWReadRenew:
		return "rwlock-read-renew"
	}
	return "unknown"
}

// RWLock is a call layout of a read-write lock script (0-based indexes).
type RWLock struct {
	Role  RWRole
	NKeys int // 0: pairs of keys (the renewal's lock and lease prefix)
	NArgs int // -1: one per pair, after the TTL
	// The lock key; the channel of the release's message; the latch key
	// of a release (a retry's answer); the caller's lease prefix
	// (KEYS[LeaseKey] is the lease prefix with ":<holder>:rwlock_timeout"),
	// and the prefix of every holder's leases; -1 when the call has none.
	Lock, Channel, Latch, OwnLeases, AllLeases int
	// The TTL in ms, the holder, the writer's name, the message, the
	// publish command (PUBLISH or SPUBLISH), the latch's TTL in ms.
	TTL, Holder, Writer, Message, Publish, LatchTTL int
}

// rwLayouts are the call layouts of the operations, as Redisson (3.52)
// calls its scripts; no two have the same numbers of keys and arguments.
var rwLayouts = []*RWLock{
	// RedissonReadLock.tryLockInnerAsync
	{Role: RWReadAcquire, NKeys: 2, NArgs: 3,
		Lock: 0, Channel: -1, Latch: -1, OwnLeases: 1, AllLeases: -1,
		TTL: 0, Holder: 1, Writer: 2, Message: -1, Publish: -1, LatchTTL: -1},
	// RedissonWriteLock.tryLockInnerAsync
	{Role: RWWriteAcquire, NKeys: 1, NArgs: 2,
		Lock: 0, Channel: -1, Latch: -1, OwnLeases: -1, AllLeases: -1,
		TTL: 0, Holder: 1, Writer: 1, Message: -1, Publish: -1, LatchTTL: -1},
	// RedissonReadLock.unlockInnerAsync
	{Role: RWReadRelease, NKeys: 5, NArgs: 4,
		Lock: 0, Channel: 1, Latch: 4, OwnLeases: 2, AllLeases: 3,
		TTL: -1, Holder: 1, Writer: -1, Message: 0, Publish: 2, LatchTTL: 3},
	// RedissonWriteLock.unlockInnerAsync (ARGV[2], the lease, re-arms a
	// lock whose holds are left)
	{Role: RWWriteRelease, NKeys: 3, NArgs: 5,
		Lock: 0, Channel: 1, Latch: 2, OwnLeases: -1, AllLeases: -1,
		TTL: 1, Holder: 2, Writer: 2, Message: 0, Publish: 3, LatchTTL: 4},
	// renewal.ReadLockTask (the watchdog of read locks)
	{Role: RWReadRenew, NKeys: 0, NArgs: -1,
		Lock: -1, Channel: -1, Latch: -1, OwnLeases: -1, AllLeases: -1,
		TTL: 0, Holder: -1, Writer: -1, Message: -1, Publish: -1, LatchTTL: -1},
}

// RWLayout returns the layout of the operation a call of nkeys keys and
// nargs arguments would be, or nil.
func RWLayout(nkeys, nargs int) *RWLock {
	for _, l := range rwLayouts {
		if l.NKeys == nkeys && l.NArgs == nargs || l.NKeys == 0 && nkeys > 0 && nkeys%2 == 0 && nargs == 1+nkeys/2 {
			return l
		}
	}
	return nil
}

// RWLayouts lists the layouts of the five operations.
func RWLayouts() []*RWLock { return slices.Clone(rwLayouts) }

// RWCheck says whether the entry's script does what layout l's operation
// does: "" when it does, else the probe that differed. It is worked out
// once per script and operation. derived reports whether the script used
// keys named after the lock's (as a read-write lock's do), so that a
// refusal can tell why it is not one.
func (e *Entry) RWCheck(l *RWLock) (why string, derived bool) {
	if e.Body == nil {
		return "its text is unknown here", false
	}
	if v := e.rw[l.Role].Load(); v != nil {
		return v.why, v.derived
	}
	v := &rwVerdict{}
	v.why, v.derived = rwRecognize(e.Body, l)
	e.rw[l.Role].Store(v)
	return v.why, v.derived
}

// rwVerdict is RWCheck's answer, kept on the entry.
type rwVerdict struct {
	why     string
	derived bool
}

// RWRoles lists the layouts whose operation the entry's script does.
func (e *Entry) RWRoles() []*RWLock {
	var out []*RWLock
	for _, l := range rwLayouts {
		if why, _ := e.RWCheck(l); why == "" {
			out = append(out, l)
		}
	}
	return out
}

// Fits says why a call does not fit the layout (its number of keys and
// arguments, and the lease names Redisson derives from the lock's), or "".
func (l *RWLock) Fits(keys, argv [][]byte) string {
	if l.NKeys == 0 {
		if len(keys) == 0 || len(keys)%2 != 0 || len(argv) != 1+len(keys)/2 {
			return fmt.Sprintf("%s takes pairs of keys and one argument per pair after the TTL, got %d keys and %d arguments", l.Role, len(keys), len(argv))
		}
		for k := 0; k < len(keys); k += 2 {
			if string(keys[k+1]) != RWLeasePrefix(keys[k]) {
				return fmt.Sprintf("%s: KEYS[%d] is not the lease prefix of KEYS[%d] (%q)", l.Role, k+2, k+1, RWLeasePrefix(keys[k]))
			}
		}
		return ""
	}
	if len(keys) != l.NKeys || len(argv) != l.NArgs {
		return fmt.Sprintf("%s takes %d keys and %d arguments, got %d and %d", l.Role, l.NKeys, l.NArgs, len(keys), len(argv))
	}
	p := RWLeasePrefix(keys[l.Lock])
	if l.OwnLeases >= 0 {
		if want := p + ":" + string(argv[l.Holder]) + ":rwlock_timeout"; string(keys[l.OwnLeases]) != want {
			return fmt.Sprintf("%s: KEYS[%d] is not the caller's lease prefix (%q)", l.Role, l.OwnLeases+1, want)
		}
	}
	if l.AllLeases >= 0 && string(keys[l.AllLeases]) != p {
		return fmt.Sprintf("%s: KEYS[%d] is not the lock's lease prefix (%q)", l.Role, l.AllLeases+1, p)
	}
	return ""
}

// RWLeasePrefix is the prefix of the lease keys of lock key: Redisson's
// "{key}", or the key itself when it holds a '{'. The lease of a
// holder's i-th read hold is prefix + ":" + holder + ":rwlock_timeout:" + i.
func RWLeasePrefix(key []byte) string {
	if strings.IndexByte(string(key), '{') >= 0 {
		return string(key)
	}
	return "{" + string(key) + "}"
}

// RWLeasesInSlot says whether every key derived from lock key (its lease
// prefix and more after it) is in the key's own hash slot, as keys a
// script writes must be on a Redis Cluster: always when the key holds no
// '{' (the prefix "{key}" hashes as key), otherwise only when its hash tag
// is complete.
func RWLeasesInSlot(key []byte) bool {
	p := RWLeasePrefix(key)
	return keyslot.OfString(p+":x") == keyslot.Of(key) && keyslot.OfString(p+":y") == keyslot.Of(key)
}

// String describes the layout for SCRIPT EXPLAIN.
func (l *RWLock) String() string {
	switch l.Role {
	case RWReadRenew:
		return fmt.Sprintf("%s keys=pairs ttl=1ms holder=ARGV[1+pair] (Redisson's ReadLockTask)", l.Role)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s keys=%d args=%d lock=KEYS[%d]", l.Role, l.NKeys, l.NArgs, l.Lock+1)
	if l.TTL >= 0 {
		fmt.Fprintf(&b, " ttl=%dms", l.TTL+1)
	}
	fmt.Fprintf(&b, " holder=%d", l.Holder+1)
	if l.Writer >= 0 && l.Writer != l.Holder {
		fmt.Fprintf(&b, " writer=%d", l.Writer+1)
	}
	if l.Channel >= 0 {
		fmt.Fprintf(&b, " notice=\"ARGV[%d] KEYS[%d] ARGV[%d]\" latch=%d:%dms", l.Publish+1, l.Channel+1, l.Message+1, l.Latch+1, l.LatchTTL+1)
	}
	b.WriteString(" (Redisson's RReadWriteLock)")
	return b.String()
}
