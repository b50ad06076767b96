package spec

import (
	"math"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
)

// Locks kept as a sorted set of owners (ShapeOwners): what the roles mean
// for them, in Go, as semantics.go says it for string locks. A member is
// an owner while its deadline (its score) is after now, as Redis's
// ZREMRANGEBYSCORE key -inf now would leave it; the marker member, when
// the class has one, makes the lock exclusive.

// ownerView is a key of ShapeOwners as one caller sees it.
type ownerView struct {
	exists    bool    // the key exists
	zset      bool    // and is a sorted set (any other value is another holder's)
	owners    int     // live owners, the marker aside
	mine      bool    // the caller is one of them
	exclusive bool    // the lock is exclusive
	deadline  float64 // the caller's deadline, when mine
}

func (c *Class) ownerView(st *sandbox.State, key, tok string) ownerView {
	it, ok := st.Lookup(key)
	if !ok {
		return ownerView{}
	}
	v := ownerView{exists: true, zset: it.Type == sandbox.TypeZset}
	if !v.zset {
		return v
	}
	now := float64(st.Now)
	marked := false
	for m, score := range it.Zset {
		if score <= now {
			continue
		}
		if c.Marker != "" && m == c.Marker {
			marked = true
			continue
		}
		v.owners++
		if tok != "" && m == tok {
			v.mine, v.deadline = true, score
		}
	}
	v.exclusive = v.owners == 1 && (marked || c.Marker == "")
	return v
}

// ownersCase is keyCase for ShapeOwners.
func (c *Class) ownersCase(st *sandbox.State, key, tok string) Case {
	v := c.ownerView(st, key, tok)
	switch {
	case !v.exists:
		return CaseMissing
	case !v.zset:
		return CaseOther
	case v.owners == 0:
		return CaseMissing
	case v.mine && v.exclusive:
		return CaseOwn
	case v.mine && v.owners == 1:
		return CaseOwnShared
	case v.mine:
		return CaseOwnSharedOthers
	case v.exclusive:
		return CaseOther
	}
	return CaseOtherShared
}

// simulateOwners runs a role that acts (cs is the key's case) on a
// ShapeOwners key of out, with a TTL of ms: as the library's script does
// on one Redis, expired members removed, the caller's member (and the
// marker, for an exclusive lock) scored with now + ms, and the key
// expiring with its last member.
func (c *Class) simulateOwners(out *sandbox.State, key, tok string, cs Case, ms int64) {
	it, ok := out.Lookup(key)
	if !ok || it.Type != sandbox.TypeZset {
		it = sandbox.Item{Type: sandbox.TypeZset}
	}
	z := map[string]float64{}
	now := float64(out.Now)
	for m, s := range it.Zset {
		if s > now {
			z[m] = s
		}
	}
	d := float64(out.Now + ms)
	switch c.Role {
	case RoleAcquire, RoleExtendOrAcquire:
		z[tok] = d
		if c.Marker != "" {
			z[c.Marker] = d
		}
	case RoleShare:
		z[tok] = d
		delete(z, c.Marker)
	case RoleExtend:
		z[tok] = d
		if _, ok := z[c.Marker]; ok && c.Marker != "" {
			z[c.Marker] = d
		}
	case RoleRelease:
		delete(z, tok)
		if cs == CaseOwn {
			delete(z, c.Marker)
		}
	}
	top := math.Inf(-1)
	for _, s := range z {
		top = math.Max(top, s)
	}
	if len(z) == 0 || top <= now {
		delete(out.Keys, key)
		return
	}
	out.Keys[key] = sandbox.Item{Type: sandbox.TypeZset, Zset: z, At: int64(top)}
}

// Shape is how a lock is kept in its key.
type Shape uint8

// The shapes.
const (
	// ShapeString: the key holds its owner's token.
	ShapeString Shape = iota
	// ShapeOwners: the key is a sorted set whose members are its owners,
	// each scored with its deadline (ms since the Unix epoch); the key
	// expires with the last of them. A lock is exclusive when the marker
	// member (Layout.Marker, scored like its owner) is in the set, or,
	// without a marker, when it has one owner; otherwise it is shared.
	ShapeOwners
	// ShapeHash: the key is a hash whose one field is its owner's token
	// (with a value of the script's, Layout.FieldArg or FieldValue); any
	// other hash, or value, is another holder's. Its cases and roles are a
	// string lock's.
	ShapeHash
)
