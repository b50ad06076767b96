package spec

import (
	"fmt"
	"strings"
)

// Role is what a lock script does, as the proxy votes on it.
type Role uint8

// The roles. Each has a reference script of the proxy's own (see
// reference.go) that the backends run in place of the client's text.
const (
	RoleUnknown         Role = iota
	RoleAcquire              // take every key if all are free (SET NX semantics)
	RoleRelease              // delete each key that holds the caller's token
	RoleExtend               // re-arm, or lengthen, the TTL of keys that all hold the caller's token
	RoleExtendOrAcquire      // extend the key if it holds the token, take it if free
	RoleTTL                  // report the remaining TTL of the caller's lock (read only)
	RoleOwner                // report whether the caller holds the lock (read only)
	RoleValue                // report the value held (read only)
	RoleInspect              // report the value held and its TTL (read only)
	RoleShare                // take a shared (read) lock: join the other readers, unless someone holds it exclusively
	RoleDelete               // delete the keys whatever holds them (DEL in a script)
	numRoles
)

var roleNames = [numRoles]string{"unknown", "acquire", "release", "extend", "extend-or-acquire", "ttl", "owner", "value", "inspect", "share", "delete"}

func (r Role) String() string {
	if r < numRoles {
		return roleNames[r]
	}
	return "unknown"
}

// Query reports whether the role only reads.
func (r Role) Query() bool { return r >= RoleTTL && r <= RoleInspect }

// Roles lists every role but RoleUnknown.
func Roles() []Role {
	out := make([]Role, 0, numRoles-1)
	for r := RoleAcquire; r < numRoles; r++ {
		out = append(out, r)
	}
	return out
}

// ParseRole reads a role name as written in the configuration, which
// declares locks kept in strings: share, whose lock has several owners,
// is the classifier's only.
func ParseRole(s string) (Role, error) {
	r, err := parseRole(s)
	if err == nil && r == RoleShare {
		return RoleUnknown, fmt.Errorf("script: role share is a lock of several owners, which the classifier reads from the script itself; a configuration declares locks kept in strings")
	}
	return r, err
}

func parseRole(s string) (Role, error) {
	for r := RoleAcquire; r < numRoles; r++ {
		if roleNames[r] == s {
			return r, nil
		}
	}
	return RoleUnknown, fmt.Errorf("script: unknown role %q (%s)", s, strings.Join(roleNames[1:], ", "))
}

// Takes reports whether the role takes free keys (a grant: its votes count
// only after the backend's continuity check, and a failed attempt is
// undone where it took them).
func (r Role) Takes() bool {
	return r == RoleAcquire || r == RoleExtendOrAcquire || r == RoleShare
}

// Extends reports whether the role re-arms a lock its caller holds.
func (r Role) Extends() bool { return r == RoleExtend || r == RoleExtendOrAcquire }

// Writes reports whether the role sets a TTL: it takes or extends, so its
// success needs validity left (and an upgrade's veto's grant).
func (r Role) Writes() bool { return r.Takes() || r.Extends() }
