package classify

import (
	"crypto/sha1"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/guard"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Bounds of what the registry remembers.
const (
	// maxClassesPerScript bounds the classifications kept per script
	// (one per number of keys, arguments and control values); the oldest
	// is dropped first.
	maxClassesPerScript = 16
	// maxRefusalsPerScript bounds the refused argument sets remembered
	// per script; past it every new argument set of that script is
	// refused at once (a script refused that often is not a lock script).
	maxRefusalsPerScript = 16
	// defaultBudget bounds the script text held for EVALSHA.
	defaultBudget = 32 << 20
)

// Entry is one script the proxy knows by SHA1: its text once seen, and
// what it was classified as for each call shape.
type Entry struct {
	Sha  string
	Body []byte // nil while known only by a fact or the configuration

	facts    []*spec.Class // library facts for this sha (immutable)
	declared []*spec.Class // configured by hand (immutable); these win

	classes atomic.Pointer[[]*spec.Class] // classifications, copy-on-write

	// mu protects the refusals (progRef through refused): what a call shape
	// was refused for, written once per shape and read on every call of it.
	// The classifications are copy-on-write (classes) and need no lock.
	mu       sync.Mutex
	progRef  *sandbox.Refusal
	checked  bool                        // Check ran
	checkRef *sandbox.Refusal            // and refused
	refusals map[string]*sandbox.Refusal // by call shape and argument values
	refused  *sandbox.Refusal            // set when maxRefusalsPerScript was reached
	logged   atomic.Bool
	guarded  atomic.Pointer[guarded]
	// rw: whether the script is each read-write lock operation (RWCheck).
	rw [RWReadRenew + 1]atomic.Pointer[rwVerdict]
}

// guarded is an entry's text as the vote policy runs it, or why it may not
// run.
type guarded struct {
	sc  *resp.Script
	ref *sandbox.Refusal
}

// Guarded returns the script the backends run for the entry under the
// vote policy (Guard), made once.
func (e *Entry) Guarded(keyPrefix string, maxTTLms int64) (*resp.Script, *sandbox.Refusal) {
	if g := e.guarded.Load(); g != nil {
		return g.sc, g.ref
	}
	if e.Body == nil {
		return nil, &sandbox.Refusal{Sha: e.Sha, Reason: "its text is unknown here: send it by EVAL or SCRIPT LOAD"}
	}
	sc, ref := guard.Script(e.Body, keyPrefix, maxTTLms)
	e.guarded.Store(&guarded{sc, ref})
	return sc, ref
}

// Lookup returns the classification covering a call, without
// classifying: a hand-declared one, one the classifier made for the same
// number of keys, arguments and control values and for arguments in the
// same relations (relations.go), or (while the text is unknown) a library
// fact. It does not allocate for calls of up to 64 keys and arguments.
func (e *Entry) Lookup(keys, argv [][]byte) *spec.Class {
	for _, c := range e.declared {
		if c.Matches(keys, argv) {
			return c
		}
	}
	if p := e.classes.Load(); p != nil {
		// The classifications of one text share its constants: the
		// call's signature is made once.
		var buf [256]byte
		var sig []byte
		var lits *sandbox.Literals
		for _, c := range *p {
			if !c.MatchesShape(keys, argv) {
				continue
			}
			if c.Rel != nil {
				if c.Rel.Lits != lits {
					lits, sig = c.Rel.Lits, spec.AppendSig(c.Rel.Lits, buf[:0], keys, argv)
				}
				if string(sig) != c.Rel.Sig {
					continue
				}
			}
			if !c.Covers(keys, argv) {
				continue
			}
			return c
		}
	}
	if e.Body == nil {
		for _, c := range e.facts {
			if c.Matches(keys, argv) {
				return c
			}
		}
	}
	return nil
}

// FirstRefusal reports whether this is the first time the script's
// refusal is reported (to log it once).
func (e *Entry) FirstRefusal() bool { return e.logged.CompareAndSwap(false, true) }

// Known lists what is known of the script, for SCRIPT EXPLAIN.
func (e *Entry) Known() (classes []*spec.Class, refusals []*sandbox.Refusal) {
	classes = append(classes, e.declared...)
	if p := e.classes.Load(); p != nil {
		classes = append(classes, *p...)
	}
	if e.Body == nil {
		classes = append(classes, e.facts...)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.progRef != nil {
		refusals = append(refusals, e.progRef)
	}
	for _, r := range e.refusals {
		refusals = append(refusals, r)
	}
	return classes, refusals
}

// Registry maps scripts, by SHA1, to what they are. It starts with the
// library facts; the configuration adds declarations; the classifier adds
// the rest as scripts arrive. It is safe for concurrent use.
type Registry struct {
	mu     sync.RWMutex
	bySha  map[string]*Entry
	bytes  int // script text held
	budget int

	// sem lets one classification run at a time: a burst of new scripts
	// costs one core, not all of them.
	sem chan struct{}
}

// NewRegistry returns a registry that knows the library facts (facts.go).
func NewRegistry() *Registry {
	r := &Registry{bySha: map[string]*Entry{}, budget: defaultBudget, sem: make(chan struct{}, 1)}
	for _, f := range Facts() {
		e := r.entry(f.Sha)
		e.facts = append(e.facts, f.Class)
	}
	return r
}

// entry returns the entry of sha, creating it (configuration time only,
// or under r.mu).
func (r *Registry) entry(sha string) *Entry {
	e, ok := r.bySha[sha]
	if !ok {
		e = &Entry{Sha: sha}
		r.bySha[sha] = e
	}
	return e
}

// Declare adds a hand-declared classification for a sha1 (the
// configuration's scripts:), before the registry is shared.
func (r *Registry) Declare(sha string, c *spec.Class) {
	e := r.entry(strings.ToLower(sha))
	e.declared = append(e.declared, c)
}

// Load returns the entry of a script text (EVAL, SCRIPT LOAD, SCRIPT
// EXPLAIN). With keep, the text is remembered for EVALSHA while the memory
// budget allows (see Keep); the entry returned is usable either way.
func (r *Registry) Load(body []byte, keep bool) *Entry {
	sha := sandbox.Sha1(body)
	r.mu.RLock()
	e, ok := r.bySha[sha]
	r.mu.RUnlock()
	if ok && e.Body != nil {
		return e
	}
	n := &Entry{Sha: sha, Body: append([]byte(nil), body...)}
	if ok {
		// Known by a fact or a declaration: the text completes it.
		n.facts, n.declared = e.facts, e.declared
		n.classes.Store(e.classes.Load())
	}
	if keep {
		return r.Keep(n)
	}
	return n
}

// Keep remembers an entry that has its text, while the memory budget
// allows, and returns the entry to use (one remembered before wins).
func (r *Registry) Keep(e *Entry) *Entry {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.bySha[e.Sha]; ok && old.Body != nil {
		return old
	}
	if e.Body == nil || r.bytes+len(e.Body) > r.budget {
		return e
	}
	r.bySha[e.Sha] = e
	r.bytes += len(e.Body)
	return e
}

// BySha returns the entry of a sha1 seen before or known by a fact or the
// configuration, or nil.
func (r *Registry) BySha(sha []byte) *Entry {
	var buf [40]byte
	if len(sha) != 40 {
		return nil
	}
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.bySha[string(resp.AppendLower(buf[:0], sha))]
}

// program compiles the entry's text. The compiled program is not kept
// (it is needed only while classifying, and is several times the text's
// size); a text that does not compile is remembered as refused.
func (e *Entry) program() (*sandbox.Program, *sandbox.Refusal) {
	e.mu.Lock()
	ref := e.progRef
	e.mu.Unlock()
	if ref != nil {
		return nil, ref
	}
	p, ref := sandbox.Compile(e.Body)
	if ref != nil {
		e.mu.Lock()
		e.progRef = ref
		e.mu.Unlock()
	}
	return p, ref
}

// Check compiles the script and runs it once on a typical call, to refuse
// at SCRIPT LOAD a script that cannot be a lock script whatever its
// arguments: one that does not compile, or that calls a command outside
// the allow-list, time or randomness.
func (r *Registry) Check(e *Entry) *sandbox.Refusal {
	if e.Body == nil {
		return nil
	}
	e.mu.Lock()
	if e.checked {
		ref := e.checkRef
		e.mu.Unlock()
		return ref
	}
	e.mu.Unlock()
	ref := r.check(e)
	e.mu.Lock()
	e.checked, e.checkRef = true, ref
	e.mu.Unlock()
	return ref
}

func (r *Registry) check(e *Entry) *sandbox.Refusal {
	p, ref := e.program()
	if ref != nil {
		return ref
	}
	now := time.Now().UnixMilli()
	st := &sandbox.State{Now: now, Keys: map[string]sandbox.Item{}}
	for _, held := range []bool{false, true} {
		if held {
			st.Keys["{probe}:lock"] = sandbox.Item{Value: "probe-token", At: now + ttlLong1}
		}
		res := p.Run([]string{"{probe}:lock"}, []string{"probe-token", "30000", "30000", "1"}, st, sandbox.MaxSteps)
		if res.Ref != nil && (res.Ref.Kind == sandbox.RefuseCommand || res.Ref.Kind == sandbox.RefuseBudget) {
			return &sandbox.Refusal{Sha: e.Sha, Reason: res.Ref.Reason}
		}
	}
	return nil
}

// Classify returns the classification of a call, classifying on first
// sight of its shape, control values and relations and caching the
// result. A refusal is cached for the exact arguments.
func (r *Registry) Classify(e *Entry, keys, argv [][]byte) (*spec.Class, *sandbox.Refusal) {
	if c := e.Lookup(keys, argv); c != nil {
		return c, nil
	}
	if e.Body == nil {
		return nil, &sandbox.Refusal{Sha: e.Sha, Reason: "its text is unknown here: send it by EVAL or SCRIPT LOAD"}
	}
	p, ref := e.program()
	if ref != nil {
		return nil, ref
	}
	key := shapeKey(keys, argv)
	e.mu.Lock()
	if ref := e.refused; ref != nil {
		e.mu.Unlock()
		return nil, ref
	}
	if ref := e.refusals[key]; ref != nil {
		e.mu.Unlock()
		return nil, ref
	}
	e.mu.Unlock()

	r.sem <- struct{}{}
	defer func() { <-r.sem }()
	if c := e.Lookup(keys, argv); c != nil {
		return c, nil // classified while this call waited
	}
	c, ref := Script(p, sandbox.Strs(keys), sandbox.Strs(argv))
	e.mu.Lock()
	defer e.mu.Unlock()
	if ref != nil {
		if e.refusals == nil {
			e.refusals = map[string]*sandbox.Refusal{}
		}
		if len(e.refusals) >= maxRefusalsPerScript {
			e.refused = &sandbox.Refusal{Sha: e.Sha, NoTTL: ref.NoTTL,
				Reason: fmt.Sprintf("%s (and it was refused for %d other argument sets; no longer classified)", ref.Reason, len(e.refusals))}
		} else {
			e.refusals[key] = ref
		}
		return nil, ref
	}
	var list []*spec.Class
	if p := e.classes.Load(); p != nil {
		list = append(list, *p...)
	}
	if len(list) >= maxClassesPerScript {
		list = list[1:]
	}
	list = append(list, c)
	e.classes.Store(&list)
	return c, nil
}

// shapeKey identifies a call by its number of keys and every argument
// (key names do not change a classification).
func shapeKey(keys, argv [][]byte) string {
	h := sha1.New()
	h.Write([]byte(strconv.Itoa(len(keys)) + ":"))
	for _, a := range argv {
		h.Write([]byte(strconv.Itoa(len(a)) + ":"))
		h.Write(a)
	}
	return string(h.Sum(nil))
}

// probeTTL stands in for a TTL argument of 0 or less when NoExpiry
// classifies a call to find which argument is its TTL.
const probeTTL = "30000"

// TTLReader returns a classification of the entry for the same number of
// keys and arguments (and control values) as the call that reads a TTL
// argument, whatever the relations of the call's arguments, or nil. A
// call whose TTL argument is no TTL (0 or less, not a number) stands in
// other relations than the calls classified, and gets the error of a TTL
// that is none before it is classified on its own.
func (e *Entry) TTLReader(keys, argv [][]byte) *spec.Class {
	classes, _ := e.Known()
	for _, c := range classes {
		if c.MatchesShape(keys, argv) && c.Writes() && c.TTLArg >= 0 {
			return c
		}
	}
	return nil
}

// NoExpiry reports whether a call whose script is refused gives 0 or less
// as the TTL argument (a lock that never expires, on one Redis, for a
// script that sets a TTL only when there is one), and that argument's
// name: the call is classified with each argument that is 0 or less in
// turn replaced by a TTL (a classification that holds for calls in those
// relations, kept as any other), and the argument is the one it reads as
// the TTL. The proxy never writes a lock that cannot expire, and such a
// call is refused as SET without an expiry is.
func (r *Registry) NoExpiry(e *Entry, keys, argv [][]byte) (string, bool) {
	if e.Body == nil {
		return "", false
	}
	// Each value that is 0 or less, in ARGV or in KEYS after the first (a
	// library may pass its TTL there).
	for p := 1; p < len(keys)+len(argv); p++ {
		k, a := append([][]byte(nil), keys...), append([][]byte(nil), argv...)
		v := &a
		i := p - len(keys)
		if p < len(keys) {
			v, i = &k, p
		}
		if n, ok := sandbox.ParseInt(string((*v)[i])); !ok || n > 0 {
			continue
		}
		(*v)[i] = []byte(probeTTL)
		c, ref := r.Classify(e, k, a)
		if ref != nil || !c.Writes() || c.TTLArg < 0 || c.Deadline {
			continue
		}
		// The argument's place among the class's arguments (KEYS after
		// the lock keys, then ARGV).
		at := c.KeyArgs + i
		if p < len(keys) {
			at = p - (len(keys) - c.KeyArgs)
		}
		if at == c.TTLArg {
			return c.Names().Arg(c.TTLArg), true
		}
	}
	return "", false
}
