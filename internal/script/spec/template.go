package spec

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"

	"github.com/redlock-proxy/redlock-proxy/internal/resp"
)

// Source is where a leaf of a reply template takes its value from.
type Source uint8

// The sources. PTTLs are in milliseconds, -2 for a missing key and -1 for
// one without TTL; the seconds variants round as Redis's TTL does.
const (
	SrcConst     Source = iota // the template's own value
	SrcPTTL                    // the focus key's PTTL before the script ran
	SrcTTL                     // the same in seconds
	SrcPTTLAfter               // the focus key's PTTL after the script ran
	SrcTTLAfter                // the same in seconds
	SrcValue                   // the value the focus key held
	SrcArg                     // ARGV[Arg] (a bulk, or its integer)
	SrcKey                     // KEYS[Arg]
	SrcFocusKey                // the focus key's name
	SrcIndex                   // the focus key's 1-based index in KEYS
	SrcCount                   // how many keys held the caller's token
	SrcNKeys                   // the number of keys
	SrcFence                   // the grant's number: a counter's new count on one Redis, FENCE's through the proxy (Counter)
	numSources
)

var sourceNames = [numSources]string{"", "pttl", "ttl", "pttl_after", "ttl_after", "value", "ARGV", "KEYS", "KEYS[index]", "index", "count", "nkeys", "fence"}

// Template is a reply with holes: what a script answers in one case,
// with the parts that depend on the state or the arguments marked.
type Template struct {
	Kind  resp.Kind
	Src   Source
	Int   int64  // SrcConst integer
	Str   string // SrcConst bulk, status or error text
	Arg   int    // SrcArg, SrcKey: 0-based index
	Elems []*Template
}

// Situation is what a template is filled from: the state the keys were in
// on one Redis (or the majority's state over several), and the call.
type Situation struct {
	Case      Case
	Focus     int   // 0-based index of the key that decided the case
	PTTL      int64 // focus key's PTTL before (-2 missing, -1 no TTL)
	PTTLAfter int64 // and after
	Value     []byte
	HasValue  bool
	Count     int
	NKeys     int
	Keys      [][]byte // needed only by SrcKey and SrcFocusKey
	Argv      [][]byte // needed only by SrcArg
	// Fence is the grant's number (SrcFence): on one Redis the counter's
	// count after the script, through the proxy the FENCE number.
	Fence int64
	// RoundDown makes TTLs in seconds round down, as the proxy reports
	// what remains of a majority's validity (never more than remains),
	// where one Redis rounds to the nearest second.
	RoundDown bool
}

// Timed reports whether the template shows a TTL (which the proxy fills
// as the reply leaves).
func (t *Template) Timed() bool { return t.uses(SrcPTTL, SrcTTL, SrcPTTLAfter, SrcTTLAfter) }

// NeedsArgs reports whether filling the template reads the call's keys or
// arguments (which the proxy then keeps).
func (t *Template) NeedsArgs() bool {
	if t == nil {
		return false
	}
	if t.Src == SrcArg || t.Src == SrcKey || t.Src == SrcFocusKey {
		return true
	}
	for _, e := range t.Elems {
		if e.NeedsArgs() {
			return true
		}
	}
	return false
}

// Fill returns the reply the template describes in situation s.
func (t *Template) Fill(s *Situation) resp.Value {
	v, _ := t.eval(s)
	return v
}

// eval fills the template; ok is false when a hole has no value in s (an
// argument that is not an integer, a value where the key is missing).
func (t *Template) eval(s *Situation) (resp.Value, bool) {
	switch t.Kind {
	case resp.KindArray:
		v := resp.Value{Kind: resp.KindArray, Elems: make([]resp.Value, len(t.Elems))}
		ok := true
		for i, e := range t.Elems {
			var eok bool
			v.Elems[i], eok = e.eval(s)
			ok = ok && eok
		}
		return v, ok
	case resp.KindInt:
		n, ok := t.intOf(s)
		return resp.IntValue(n), ok
	case resp.KindBulk:
		b, ok := t.bulkOf(s)
		if !ok {
			return resp.Nil, false
		}
		return resp.BulkValue(b), true
	case resp.KindSimple:
		return resp.Value{Kind: resp.KindSimple, Str: []byte(t.Str)}, true
	case resp.KindError:
		return resp.ErrorValue(t.Str), true
	}
	return resp.Nil, true
}

func ttlSeconds(p int64, down bool) int64 {
	switch {
	case p < 0:
		return p
	case down:
		return p / 1000
	}
	return (p + 500) / 1000
}

// intOf evaluates an integer leaf; ok is false when the source has no
// integer in s.
func (t *Template) intOf(s *Situation) (int64, bool) {
	switch t.Src {
	case SrcConst:
		return t.Int, true
	case SrcPTTL:
		return s.PTTL, true
	case SrcTTL:
		return ttlSeconds(s.PTTL, s.RoundDown), true
	case SrcPTTLAfter:
		return s.PTTLAfter, true
	case SrcTTLAfter:
		return ttlSeconds(s.PTTLAfter, s.RoundDown), true
	case SrcIndex:
		return int64(s.Focus + 1), true
	case SrcCount:
		return int64(s.Count), true
	case SrcNKeys:
		return int64(s.NKeys), true
	case SrcFence:
		return s.Fence, true
	case SrcArg:
		if t.Arg < len(s.Argv) {
			return sandbox.ParseInt(string(s.Argv[t.Arg]))
		}
	}
	return 0, false
}

func (t *Template) bulkOf(s *Situation) ([]byte, bool) {
	switch t.Src {
	case SrcConst:
		return []byte(t.Str), true
	case SrcValue:
		return s.Value, s.HasValue
	case SrcArg:
		if t.Arg < len(s.Argv) {
			return s.Argv[t.Arg], true
		}
	case SrcKey:
		if t.Arg < len(s.Keys) {
			return s.Keys[t.Arg], true
		}
	case SrcFocusKey:
		if s.Focus < len(s.Keys) {
			return s.Keys[s.Focus], true
		}
	}
	return nil, false
}

// String renders the template: integers as numbers, bulks quoted, +status,
// -error, nil, [arrays], and holes by name (pttl, ttl, value, ARGV[2],
// KEYS[index], index, count, nkeys...).
func (t *Template) String() string {
	var b strings.Builder
	t.write(&b)
	return b.String()
}

func (t *Template) write(b *strings.Builder) {
	switch t.Kind {
	case resp.KindArray:
		b.WriteByte('[')
		for i, e := range t.Elems {
			if i > 0 {
				b.WriteString(", ")
			}
			e.write(b)
		}
		b.WriteByte(']')
		return
	case resp.KindNil:
		b.WriteString("nil")
		return
	case resp.KindSimple:
		b.WriteString("+" + plainOrQuoted(t.Str))
		return
	case resp.KindError:
		b.WriteString("-" + plainOrQuoted(t.Str))
		return
	}
	switch t.Src {
	case SrcConst:
		if t.Kind == resp.KindInt {
			b.WriteString(strconv.FormatInt(t.Int, 10))
		} else {
			b.WriteString(strconv.Quote(t.Str))
		}
	case SrcArg:
		if t.Kind == resp.KindInt {
			fmt.Fprintf(b, "int(ARGV[%d])", t.Arg+1)
		} else {
			fmt.Fprintf(b, "ARGV[%d]", t.Arg+1)
		}
	case SrcKey:
		fmt.Fprintf(b, "KEYS[%d]", t.Arg+1)
	default:
		b.WriteString(sourceNames[t.Src])
	}
}

func plainOrQuoted(s string) string {
	if s == "" || strings.ContainsAny(s, ",[]\"\\") || strings.TrimSpace(s) != s || strconv.Quote(s) != `"`+s+`"` {
		return strconv.Quote(s)
	}
	return s
}

// ParseTemplate reads a template as String writes it.
func ParseTemplate(s string) (*Template, error) {
	p := &tparser{s: s}
	t, err := p.parse()
	if err != nil {
		return nil, fmt.Errorf("script: template %q: %w", s, err)
	}
	p.space()
	if p.i != len(p.s) {
		return nil, fmt.Errorf("script: template %q: unexpected %q", s, p.s[p.i:])
	}
	return t, nil
}

type tparser struct {
	s string
	i int
}

func (p *tparser) space() {
	for p.i < len(p.s) && p.s[p.i] == ' ' {
		p.i++
	}
}

// text reads a quoted string, or a plain run up to a ',' or ']' outside
// brackets (ARGV[2] is one word).
func (p *tparser) text() (string, error) {
	if p.i < len(p.s) && p.s[p.i] == '"' {
		rest := p.s[p.i:]
		q, err := strconv.QuotedPrefix(rest)
		if err != nil {
			return "", err
		}
		p.i += len(q)
		return strconv.Unquote(q)
	}
	j, depth := p.i, 0
	for ; p.i < len(p.s); p.i++ {
		c := p.s[p.i]
		if c == ',' && depth == 0 || c == ']' && depth == 0 {
			break
		}
		switch c {
		case '[':
			depth++
		case ']':
			depth--
		}
	}
	return strings.TrimSpace(p.s[j:p.i]), nil
}

func (p *tparser) parse() (*Template, error) {
	p.space()
	if p.i >= len(p.s) {
		return nil, fmt.Errorf("empty")
	}
	switch c := p.s[p.i]; {
	case c == '[':
		p.i++
		t := &Template{Kind: resp.KindArray, Elems: []*Template{}}
		p.space()
		if p.i < len(p.s) && p.s[p.i] == ']' {
			p.i++
			return t, nil
		}
		for {
			e, err := p.parse()
			if err != nil {
				return nil, err
			}
			t.Elems = append(t.Elems, e)
			p.space()
			if p.i >= len(p.s) {
				return nil, fmt.Errorf("unterminated array")
			}
			if p.s[p.i] == ']' {
				p.i++
				return t, nil
			}
			if p.s[p.i] != ',' {
				return nil, fmt.Errorf("want , or ] at %q", p.s[p.i:])
			}
			p.i++
		}
	case c == '+' || c == '-' && (p.i+1 >= len(p.s) || p.s[p.i+1] < '0' || p.s[p.i+1] > '9'):
		p.i++
		s, err := p.text()
		if err != nil {
			return nil, err
		}
		k := resp.KindSimple
		if c == '-' {
			k = resp.KindError
		}
		return &Template{Kind: k, Str: s}, nil
	case c == '"':
		s, err := p.text()
		if err != nil {
			return nil, err
		}
		return &Template{Kind: resp.KindBulk, Str: s}, nil
	}
	word, err := p.text()
	if err != nil {
		return nil, err
	}
	if n, err := strconv.ParseInt(word, 10, 64); err == nil {
		return &Template{Kind: resp.KindInt, Int: n}, nil
	}
	if word == "nil" {
		return &Template{Kind: resp.KindNil}, nil
	}
	var idx int
	if _, err := fmt.Sscanf(word, "int(ARGV[%d])", &idx); err == nil && idx >= 1 && word == fmt.Sprintf("int(ARGV[%d])", idx) {
		return &Template{Kind: resp.KindInt, Src: SrcArg, Arg: idx - 1}, nil
	}
	if _, err := fmt.Sscanf(word, "ARGV[%d]", &idx); err == nil && idx >= 1 && word == fmt.Sprintf("ARGV[%d]", idx) {
		return &Template{Kind: resp.KindBulk, Src: SrcArg, Arg: idx - 1}, nil
	}
	if word != "KEYS[index]" {
		if _, err := fmt.Sscanf(word, "KEYS[%d]", &idx); err == nil && idx >= 1 && word == fmt.Sprintf("KEYS[%d]", idx) {
			return &Template{Kind: resp.KindBulk, Src: SrcKey, Arg: idx - 1}, nil
		}
	}
	for src := SrcPTTL; src < numSources; src++ {
		if sourceNames[src] == word && src != SrcArg && src != SrcKey {
			k := resp.KindInt
			if src == SrcValue || src == SrcFocusKey {
				k = resp.KindBulk
			}
			return &Template{Kind: k, Src: src}, nil
		}
	}
	return nil, fmt.Errorf("unknown word %q", word)
}

// MustTemplate parses a template written in the source (facts, tests).
func MustTemplate(s string) *Template {
	t, err := ParseTemplate(s)
	if err != nil {
		panic(err)
	}
	return t
}

// sample is one observed reply with the situation it was given in.
type Sample struct {
	Sit   *Situation
	Reply resp.Value
	Probe string // description, for refusals
	// pub is what the run published, freed whether it freed the lock
	// (its one key was there before and is gone after), argv the call's
	// arguments: what a release's notice is read from (notice.go).
	Pub   []sandbox.Message
	Freed bool
	Keys  []string
	Argv  []string
	// latch: whether the run wrote its latch (Layout.Latch), with what
	// value and PTTL; moved: how much it added to its counter
	// (Layout.Counter), or -1 for anything but a count moved by 0 or 1.
	Latch      bool
	LatchValue string
	LatchPTTL  int64
	Moved      int64
}

// learn finds one template that explains every sample (all of the same
// case), preferring constants, then the sources in order. It returns the
// two samples it could not reconcile when there is none.
func Learn(samples []Sample) (*Template, *Sample, *Sample) {
	first := samples[0]
	t := &Template{Kind: first.Reply.Kind}
	for i := range samples[1:] {
		if !sameShape(first.Reply, samples[i+1].Reply) {
			return nil, &samples[0], &samples[i+1]
		}
	}
	if first.Reply.Kind == resp.KindArray {
		for j := range first.Reply.Elems {
			sub := make([]Sample, len(samples))
			for i, s := range samples {
				sub[i] = Sample{Sit: s.Sit, Reply: s.Reply.Elems[j], Probe: s.Probe}
			}
			e, a, b := Learn(sub)
			if e == nil {
				return nil, a, b
			}
			t.Elems = append(t.Elems, e)
		}
		if t.Elems == nil {
			t.Elems = []*Template{}
		}
		return t, nil, nil
	}
	for _, cand := range candidates(first) {
		ok := true
		for i := range samples {
			if v, vok := cand.eval(samples[i].Sit); !vok || !v.Equal(samples[i].Reply) {
				ok = false
				break
			}
		}
		if ok {
			return cand, nil, nil
		}
	}
	// Name the first sample that disagrees with the constant.
	for i := range samples[1:] {
		if !samples[i+1].Reply.Equal(first.Reply) {
			return nil, &samples[0], &samples[i+1]
		}
	}
	return nil, &samples[0], &samples[0]
}

func sameShape(a, b resp.Value) bool {
	if a.Kind != b.Kind || len(a.Elems) != len(b.Elems) {
		return false
	}
	for i := range a.Elems {
		if !sameShape(a.Elems[i], b.Elems[i]) {
			return false
		}
	}
	return true
}

// candidates lists the templates that could explain a leaf, best first.
func candidates(s Sample) []*Template {
	v := s.Reply
	switch v.Kind {
	case resp.KindInt:
		out := []*Template{}
		if s.Sit.NKeys > 1 && v.Int == int64(s.Sit.NKeys) {
			out = append(out, &Template{Kind: resp.KindInt, Src: SrcNKeys})
		}
		out = append(out, &Template{Kind: resp.KindInt, Int: v.Int})
		if s.Sit.Fence != 0 && v.Int == s.Sit.Fence {
			out = append(out, &Template{Kind: resp.KindInt, Src: SrcFence})
		}
		for _, src := range []Source{SrcCount, SrcIndex, SrcPTTL, SrcTTL, SrcPTTLAfter, SrcTTLAfter, SrcNKeys} {
			out = append(out, &Template{Kind: resp.KindInt, Src: src})
		}
		for j := range s.Sit.Argv {
			out = append(out, &Template{Kind: resp.KindInt, Src: SrcArg, Arg: j})
		}
		return out
	case resp.KindBulk:
		out := []*Template{{Kind: resp.KindBulk, Str: string(v.Str)}, {Kind: resp.KindBulk, Src: SrcValue}}
		for j := range s.Sit.Argv {
			out = append(out, &Template{Kind: resp.KindBulk, Src: SrcArg, Arg: j})
		}
		for j := range s.Sit.Keys {
			out = append(out, &Template{Kind: resp.KindBulk, Src: SrcKey, Arg: j})
		}
		return append(out, &Template{Kind: resp.KindBulk, Src: SrcFocusKey})
	case resp.KindSimple, resp.KindError:
		return []*Template{{Kind: v.Kind, Str: string(v.Str)}}
	}
	return []*Template{{Kind: resp.KindNil}}
}

// Fenced reports whether the template shows the grant's number.
func (t *Template) Fenced() bool { return t.uses(SrcFence) }

// Refence returns v, a reply filled from t, with every leaf that shows the
// grant's number (SrcFence) set to n.
func (t *Template) Refence(v resp.Value, n int64) resp.Value {
	switch {
	case t == nil:
		return v
	case t.Kind == resp.KindArray && v.Kind == resp.KindArray && len(v.Elems) == len(t.Elems):
		out := v
		out.Elems = make([]resp.Value, len(v.Elems))
		for i, e := range t.Elems {
			out.Elems[i] = e.Refence(v.Elems[i], n)
		}
		return out
	case t.Kind == resp.KindInt && t.Src == SrcFence:
		return resp.IntValue(n)
	}
	return v
}
