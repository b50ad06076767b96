package script

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Role is what a lock script does on one backend.
type Role uint8

// The roles of lock scripts.
const (
	RoleUnknown         Role = iota
	RoleAcquire              // take the lock (all its keys) if free
	RoleRelease              // delete the lock if it holds the caller's token
	RoleExtend               // re-arm the lock's TTL if it holds the caller's token
	RoleExtendOrAcquire      // extend if ours, take if free
	RoleTTL                  // report the lock's remaining TTL if ours
)

var roleNames = map[Role]string{
	RoleUnknown: "unknown", RoleAcquire: "acquire", RoleRelease: "release",
	RoleExtend: "extend", RoleExtendOrAcquire: "extend-or-acquire", RoleTTL: "ttl",
}

func (r Role) String() string { return roleNames[r] }

// ParseRole reads a role name as written in the configuration.
func ParseRole(s string) (Role, error) {
	for r, n := range roleNames {
		if n == s && r != RoleUnknown {
			return r, nil
		}
	}
	return RoleUnknown, fmt.Errorf("script: unknown role %q (acquire, release, extend, extend-or-acquire, ttl)", s)
}

// PatternKind is a shape a backend reply can have.
type PatternKind uint8

// Reply shapes.
const (
	PatOK         PatternKind = iota + 1 // +OK
	PatNil                               // nil bulk / nil array
	PatInt                               // integer equal to Int
	PatIntNKeys                          // integer equal to the number of keys
	PatIntPos                            // integer > 0
	PatError                             // error reply starting with Str
	PatSimpleStr                         // simple string equal to Str
	PatIntAtLeast                        // integer >= Int
)

// Pattern matches one backend reply.
type Pattern struct {
	Kind PatternKind
	Int  int64
	Str  string
}

// Match reports whether v has the pattern's shape.
func (p Pattern) Match(v resp.Value, nkeys int) bool {
	switch p.Kind {
	case PatOK:
		return v.IsOK()
	case PatNil:
		return v.Kind == resp.KindNil
	case PatInt:
		return v.Kind == resp.KindInt && v.Int == p.Int
	case PatIntNKeys:
		return v.Kind == resp.KindInt && v.Int == int64(nkeys)
	case PatIntPos:
		return v.Kind == resp.KindInt && v.Int > 0
	case PatError:
		return v.Kind == resp.KindError && len(v.Str) >= len(p.Str) && string(v.Str[:len(p.Str)]) == p.Str
	case PatSimpleStr:
		return v.Kind == resp.KindSimple && string(v.Str) == p.Str
	case PatIntAtLeast:
		return v.Kind == resp.KindInt && v.Int >= p.Int
	}
	return false
}

// Value is the reply the pattern describes, for answering the client.
func (p Pattern) Value(nkeys int) resp.Value {
	switch p.Kind {
	case PatOK:
		return resp.OK
	case PatNil:
		return resp.Nil
	case PatInt:
		return resp.IntValue(p.Int)
	case PatIntNKeys:
		return resp.IntValue(int64(nkeys))
	case PatIntPos:
		return resp.IntValue(1)
	case PatError:
		return resp.ErrorValue(p.Str)
	case PatSimpleStr:
		return resp.Value{Kind: resp.KindSimple, Str: []byte(p.Str)}
	case PatIntAtLeast:
		return resp.IntValue(p.Int)
	}
	return resp.Nil
}

// ParsePattern reads a reply pattern as written in the configuration:
// "ok", "nil", "int:N", "int:nkeys", "int:>=N", "int:>0", "error:PREFIX",
// "status:TEXT".
func ParsePattern(s string) (Pattern, error) {
	kind, arg, _ := strings.Cut(s, ":")
	switch strings.ToLower(kind) {
	case "ok":
		return Pattern{Kind: PatOK}, nil
	case "nil":
		return Pattern{Kind: PatNil}, nil
	case "error":
		return Pattern{Kind: PatError, Str: arg}, nil
	case "status":
		return Pattern{Kind: PatSimpleStr, Str: arg}, nil
	case "int":
		switch {
		case arg == "nkeys":
			return Pattern{Kind: PatIntNKeys}, nil
		case arg == ">0":
			return Pattern{Kind: PatIntPos}, nil
		case strings.HasPrefix(arg, ">="):
			n, err := strconv.ParseInt(arg[2:], 10, 64)
			if err != nil {
				return Pattern{}, fmt.Errorf("script: pattern %q: %w", s, err)
			}
			return Pattern{Kind: PatIntAtLeast, Int: n}, nil
		}
		n, err := strconv.ParseInt(arg, 10, 64)
		if err != nil {
			return Pattern{}, fmt.Errorf("script: pattern %q: %w", s, err)
		}
		return Pattern{Kind: PatInt, Int: n}, nil
	}
	return Pattern{}, fmt.Errorf("script: pattern %q: want ok, nil, int:N, int:nkeys, int:>0, int:>=N, error:PREFIX or status:TEXT", s)
}

// RoleDefaults returns the reply conventions most scripts of a role use:
// OK/nil for an acquire, 1/0 for release and extend, a PTTL in ms or a
// negative number for a TTL query. A configured spec starts from these.
func RoleDefaults(r Role) Spec {
	s := Spec{Role: r, Keys: 1, TokenArg: 0, TTLArg: -1, TTLUnit: time.Millisecond}
	switch r {
	case RoleAcquire:
		s.TTLArg = 1
		s.Granted, s.Refused = []Pattern{{Kind: PatOK}}, []Pattern{{Kind: PatNil}}
		s.Success, s.Failure = Pattern{Kind: PatOK}, Pattern{Kind: PatNil}
	case RoleRelease:
		s.Granted, s.Refused = []Pattern{int1}, []Pattern{int0}
		s.Success, s.Failure = int1, int0
	case RoleExtend, RoleExtendOrAcquire:
		s.TTLArg = 1
		s.Granted, s.Refused = []Pattern{int1}, []Pattern{int0}
		s.Success, s.Failure = int1, int0
	case RoleTTL:
		s.Granted = []Pattern{{Kind: PatIntAtLeast, Int: -1}}
		s.Refused = []Pattern{{Kind: PatInt, Int: -2}}
		s.Failure = Pattern{Kind: PatInt, Int: -2}
		s.ReplyUnit = time.Millisecond
	}
	return s
}

// Spec describes one known script: what it does and how to read it.
type Spec struct {
	Name     string // library and version, for logs and errors
	Role     Role
	Keys     int           // number of keys it takes; 0 means one or more (multi-key)
	TokenArg int           // index in ARGV of the caller's token
	TTLArg   int           // index in ARGV of the TTL, -1 when it takes none
	TTLUnit  time.Duration // unit of the TTL argument
	Granted  []Pattern     // replies meaning the backend did it
	Refused  []Pattern     // replies meaning it definitively did not; anything else is unknown
	Success  Pattern       // reply to the client on success when no majority agrees on one
	Failure  Pattern       // reply to the client on failure when no majority agrees on one
	// ReplyUnit is the unit of a TTL query's integer reply (ms or s).
	ReplyUnit time.Duration
	// DBArg is the 1-based position in ARGV of a database number the
	// script SELECTs (@sesamecare-oss/redlock), or 0 for none. The proxy
	// serves database 0 only.
	DBArg int
}

// Classify reads one backend's reply.
func (s *Spec) Classify(v resp.Value, nkeys int) (granted, refused bool) {
	for _, p := range s.Granted {
		if p.Match(v, nkeys) {
			return true, false
		}
	}
	for _, p := range s.Refused {
		if p.Match(v, nkeys) {
			return false, true
		}
	}
	return false, false
}

// Known is a script a client sent, with its sha1 and spec (nil when the
// registry does not know it).
type Known struct {
	Script *resp.Script // the client's bytes
	Spec   *Spec
	// Run is what the proxy sends to the backends for it: the registered
	// reference text of its canonical form, never the client's bytes, so
	// that no difference between the normaliser and Lua can smuggle code
	// through a recognised script. For a script registered by sha1 it is
	// the client's bytes (they hash to what the operator registered).
	Run *resp.Script
}

// entry is a registered canonical form.
type entry struct {
	spec *Spec
	ref  *resp.Script // nil for a sha1 registration
}

// Registry maps scripts to specs. Lookup, Remember and BySha are safe for
// concurrent use; Register and RegisterSha are for configuration time,
// before the registry is shared.
type Registry struct {
	byCanon map[string]entry

	mu     sync.RWMutex
	bySha  map[string]*Known // scripts seen through EVAL or SCRIPT LOAD
	bytes  int               // script bytes held in bySha
	budget int               // most script bytes bySha may hold
}

// NewRegistry returns a registry with the built-in specs (see builtin.go).
func NewRegistry() *Registry {
	r := &Registry{byCanon: map[string]entry{}, bySha: map[string]*Known{}, budget: 32 << 20}
	for _, b := range builtins {
		for _, src := range b.texts() {
			if err := r.Register(src, b.spec); err != nil {
				panic(fmt.Sprintf("script: built-in %s: %v", b.spec.Name, err))
			}
		}
	}
	return r
}

// Register adds a script text with its spec. Any script that normalizes
// to the same canonical text is recognised as the same.
func (r *Registry) Register(src string, spec *Spec) error {
	canon, err := Normalize([]byte(src))
	if err != nil {
		return fmt.Errorf("register %s: %w", spec.Name, err)
	}
	if prev, ok := r.byCanon[canon]; ok {
		if prev.spec != spec {
			return fmt.Errorf("register %s: the same script is already registered as %s", spec.Name, prev.spec.Name)
		}
		return nil // the first text of a canonical form is its reference
	}
	r.byCanon[canon] = entry{spec: spec, ref: resp.NewScript([]byte(src))}
	return nil
}

// RegisterSha adds a script known only by its sha1; it is recognised only
// when its exact bytes arrive (EVAL, or SCRIPT LOAD before EVALSHA).
func (r *Registry) RegisterSha(sha string, spec *Spec) {
	r.byCanon["sha:"+strings.ToLower(sha)] = entry{spec: spec}
}

// Lookup recognises a script body. A recognised script is remembered by
// sha1, so that a later EVALSHA finds it, while the registry's memory
// budget allows; an unknown one is not (see Remember). The Known is shared
// and must not be modified.
func (r *Registry) Lookup(body []byte) *Known {
	sum := sha1.Sum(body)
	sha := hex.EncodeToString(sum[:])
	r.mu.RLock()
	k, ok := r.bySha[sha]
	r.mu.RUnlock()
	if ok {
		return k
	}
	k = &Known{Script: &resp.Script{Sha: sha, Body: append([]byte(nil), body...)}}
	if e, ok := r.byCanon["sha:"+sha]; ok {
		k.Spec, k.Run = e.spec, k.Script
	} else if canon, err := Normalize(body); err == nil {
		if e, ok := r.byCanon[canon]; ok {
			k.Spec, k.Run = e.spec, e.ref
		}
	}
	if k.Spec != nil {
		r.Remember(k)
	}
	return k
}

// Remember keeps k for EVALSHA while the memory budget allows. The proxy
// remembers unknown scripts only when it may run them (the vote policy).
func (r *Registry) Remember(k *Known) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.bySha[k.Script.Sha]; !ok && r.bytes+len(k.Script.Body) <= r.budget {
		r.bySha[k.Script.Sha] = k
		r.bytes += len(k.Script.Body)
	}
}

// BySha returns a script seen before, or nil.
func (r *Registry) BySha(sha []byte) *Known {
	var buf [40]byte
	if len(sha) != 40 {
		return nil
	}
	for i, c := range sha {
		if c >= 'A' && c <= 'F' {
			c += 'a' - 'A'
		}
		buf[i] = c
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.bySha[string(buf[:])]
}
