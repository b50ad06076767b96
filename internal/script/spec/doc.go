// Package spec holds what a classification says: a lock script's Class
// (its role, where the role's arguments are, its shape and layout), the
// Case of the keys it meets, the Template of its reply in each case, its
// text form (spec.go, parsed and printed), what the role does to a model
// of the keys (semantics.go, shapes.go), and the reference script the
// backends run in its place (reference.go).
//
// It promises: a Class prints to a spec that parses back to it; the
// backends are only ever sent one of the fixed reference scripts, which
// can set free keys to the caller's token with a TTL within max_ttl,
// re-arm, lengthen or delete keys that hold the caller's token, delete
// keys outright as DEL does, or read; none can take a key from another
// holder or leave a key without expiry.
package spec
