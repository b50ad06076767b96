package spec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Spec renders the classification in its one-line form, which ParseSpec
// reads back (library facts are written in it):
//
//	release keys=1 args=1 token=1; missing: 0; own: 1; other: 0
//
// Words after the role: keys=N|any, args=N|any, token=I or tokens=I,J,...
// (1-based ARGV positions, one per key), prefix=P, ttl=I(ms|s) or
// ttl=const:MS, deadline (the TTL argument is a Unix time), additive, min=I(ms|s) (min=I(ms|s)+1 when PTTL equal to
// the minimum is still too little), nottl-acts, control=I:"value". Then
// each case with its reply template.
func (c *Class) Spec() string {
	var b strings.Builder
	b.WriteString(c.Role.String())
	count := func(n int) string {
		if n < 0 || (n == 0 && c.Keys == 0) {
			return "any"
		}
		return strconv.Itoa(n)
	}
	fmt.Fprintf(&b, " keys=%s args=%s", count(c.Keys), count(c.Args))
	if c.KeyArgs > 0 {
		fmt.Fprintf(&b, " keyargs=%d", c.KeyArgs)
	}
	if c.UniformToken() {
		fmt.Fprintf(&b, " token=%d", c.Tokens[0]+1)
	} else if c.Tokens != nil {
		var ts []string
		for _, t := range c.Tokens {
			ts = append(ts, strconv.Itoa(t+1))
		}
		b.WriteString(" tokens=" + strings.Join(ts, ","))
	}
	if c.Prefix > 0 {
		fmt.Fprintf(&b, " prefix=%d", c.Prefix)
	}
	if c.writes() || c.Rearms() {
		if c.TTLArg >= 0 {
			fmt.Fprintf(&b, " ttl=%d%s", c.TTLArg+1, unitWord(c.TTLUnit))
		} else {
			fmt.Fprintf(&b, " ttl=const:%d", c.TTLConst.Milliseconds())
		}
	}
	if c.Deadline && c.TTLArg >= 0 {
		b.WriteString(" deadline")
	}
	if c.Additive {
		b.WriteString(" additive")
	}
	if c.MinArg >= 0 {
		fmt.Fprintf(&b, " min=%d%s", c.MinArg+1, unitWord(c.MinUnit))
		if c.MinOffset != 0 {
			fmt.Fprintf(&b, "+%d", c.MinOffset)
		}
	}
	if c.NoTTLActs && c.Role.Extends() {
		b.WriteString(" nottl-acts")
	}
	if c.Shape == ShapeHash {
		if c.FieldArg >= 0 {
			fmt.Fprintf(&b, " hash=%d", c.FieldArg+1)
		} else {
			b.WriteString(" hash=" + strconv.Quote(c.FieldValue))
		}
		if c.Counted {
			b.WriteString(" counted")
		}
	}
	if c.Notice != nil {
		b.WriteString(" notice=" + strconv.Quote(c.Notice.String(c.Names())))
	}
	if c.Latch != nil {
		fmt.Fprintf(&b, " latch=%d:%d%s", c.Latch.Arg+1, c.Latch.TTLArg+1, unitWord(c.Latch.TTLUnit))
	}
	if c.Counter != nil {
		fmt.Fprintf(&b, " counter=%d", c.Counter.Arg+1)
	}
	if c.Each {
		b.WriteString(" each")
	}
	if c.Shape == ShapeOwners {
		b.WriteString(" owners")
		if c.Marker != "" {
			b.WriteString(" marker=" + strconv.Quote(c.Marker))
		}
		if c.Promotes {
			b.WriteString(" promotes")
		}
		if c.Demotes {
			b.WriteString(" demotes")
		}
	}
	for _, ct := range c.Controls {
		fmt.Fprintf(&b, " control=%d:%s", ct.Arg+1, strconv.Quote(ct.Value))
	}
	for _, cs := range c.Cases() {
		if t := c.Replies[cs]; t != nil {
			fmt.Fprintf(&b, "; %s: %s", cs, t)
		}
	}
	return b.String()
}

func unitWord(d time.Duration) string {
	if d == time.Second {
		return "s"
	}
	return "ms"
}

// ParseSpec reads a classification written by Spec.
func Parse(s string) (*Class, error) {
	parts := splitOutsideQuotes(s, ';')
	words := strings.Fields(parts[0])
	if len(words) == 0 {
		return nil, fmt.Errorf("script: empty spec")
	}
	role, err := parseRole(words[0])
	if err != nil {
		return nil, err
	}
	c := &Class{Role: role, Layout: Layout{Keys: 1, Args: -1, TTLArg: -1, MinArg: -1, FieldArg: -1, TTLUnit: time.Millisecond, MinUnit: time.Millisecond}}
	argUnit := func(v string) (int, time.Duration, int64, error) {
		off := int64(0)
		if i := strings.IndexByte(v, '+'); i >= 0 {
			o, err := strconv.ParseInt(v[i+1:], 10, 64)
			if err != nil {
				return 0, 0, 0, err
			}
			v, off = v[:i], o
		}
		unit := time.Millisecond
		switch {
		case strings.HasSuffix(v, "ms"):
			v = v[:len(v)-2]
		case strings.HasSuffix(v, "s"):
			v, unit = v[:len(v)-1], time.Second
		}
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return 0, 0, 0, fmt.Errorf("bad position %q", v)
		}
		return n - 1, unit, off, nil
	}
	for _, w := range words[1:] {
		k, v, _ := strings.Cut(w, "=")
		var err error
		switch k {
		case "keys", "args":
			n := -1
			if v != "any" {
				n, err = strconv.Atoi(v)
			}
			if k == "keys" {
				c.Keys = max(n, 0)
			} else {
				c.Args = n
			}
		case "token", "tokens":
			c.Tokens = []int{}
			for _, t := range strings.Split(v, ",") {
				var n int
				n, err = strconv.Atoi(t)
				if err == nil && n < 1 {
					err = fmt.Errorf("bad position %d", n)
				}
				c.Tokens = append(c.Tokens, n-1)
			}
		case "prefix":
			c.Prefix, err = strconv.Atoi(v)
		case "keyargs":
			c.KeyArgs, err = strconv.Atoi(v)
		case "ttl":
			if ms, ok := strings.CutPrefix(v, "const:"); ok {
				var n int64
				n, err = strconv.ParseInt(ms, 10, 64)
				c.TTLConst = time.Duration(n) * time.Millisecond
			} else {
				c.TTLArg, c.TTLUnit, _, err = argUnit(v)
			}
		case "additive":
			c.Additive = true
		case "deadline":
			c.Deadline = true
		case "min":
			c.MinArg, c.MinUnit, c.MinOffset, err = argUnit(v)
		case "nottl-acts":
			c.NoTTLActs = true
		case "owners":
			c.Shape = ShapeOwners
		case "counted":
			c.Counted = true
		case "each":
			c.Each = true
		case "hash":
			c.Shape = ShapeHash
			if strings.HasPrefix(v, `"`) {
				c.FieldValue, err = strconv.Unquote(v)
			} else {
				var n int
				n, err = strconv.Atoi(v)
				c.FieldArg = n - 1
				if err == nil && n < 1 {
					err = fmt.Errorf("bad position %d", n)
				}
			}
		case "marker":
			c.Marker, err = strconv.Unquote(v)
		case "promotes":
			c.Promotes = true
		case "demotes":
			c.Demotes = true
		case "control":
			i, q, _ := strings.Cut(v, ":")
			var n int
			n, err = strconv.Atoi(i)
			var val string
			if err == nil {
				val, err = strconv.Unquote(q)
			}
			c.Controls = append(c.Controls, Control{Arg: n - 1, Value: val})
		default:
			err = fmt.Errorf("unknown word")
		}
		if err != nil {
			return nil, fmt.Errorf("script: spec %q: %s: %v", s, w, err)
		}
	}
	if len(c.Tokens) == 1 && c.Keys > 1 {
		c.Tokens = UniformInts(c.Keys, c.Tokens[0])
	}
	for _, p := range parts[1:] {
		name, tmpl, ok := strings.Cut(p, ":")
		if !ok {
			return nil, fmt.Errorf("script: spec %q: want case: template, got %q", s, p)
		}
		cs, err := ParseCase(strings.TrimSpace(name))
		if err != nil {
			return nil, err
		}
		t, err := ParseTemplate(strings.TrimSpace(tmpl))
		if err != nil {
			return nil, err
		}
		c.Replies[cs] = t
	}
	for _, cs := range c.Cases() {
		if c.Replies[cs] == nil {
			return nil, fmt.Errorf("script: spec %q: no reply for case %s", s, cs)
		}
	}
	return c.Finish(), nil
}

// splitOutsideQuotes splits s at sep where sep is not inside a quoted
// string.
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	quoted, start := false, 0
	for i := 0; i < len(s); i++ {
		switch {
		case quoted && s[i] == '\\':
			i++
		case s[i] == '"':
			quoted = !quoted
		case !quoted && s[i] == sep:
			out = append(out, s[start:i])
			start = i + 1
		}
	}
	return append(out, s[start:])
}

func UniformInts(n, v int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// MustSpec parses a classification written in the source.
func Must(s string) *Class {
	c, err := Parse(s)
	if err != nil {
		panic(err)
	}
	c.Origin = "built in"
	return c
}
