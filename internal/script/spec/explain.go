package spec

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

func (c *Class) Names() Namer { return Namer{Lock: c.Keys, Extra: c.KeyArgs} }

// Explain renders the classification for SCRIPT EXPLAIN and logs.
func (c *Class) Explain() []string {
	lines := []string{"role: " + c.roleText()}
	if c.Origin != "" {
		lines = append(lines, "source: "+c.Origin)
	}
	holds := fmt.Sprintf("holds for: %d key(s), %d argument(s)", c.Keys, c.Args)
	if c.KeyArgs > 0 {
		holds = fmt.Sprintf("holds for: %d key(s), then %d argument(s) in KEYS and %d in ARGV", c.Keys, c.KeyArgs, c.Args-c.KeyArgs)
	}
	lines = append(lines, holds+c.controlsText())
	if c.Rel != nil && c.Rel.text != "" {
		lines = append(lines, "and for arguments in these relations (others are classified again): "+c.Rel.text)
	}
	if t := c.seenText(); t != "" {
		lines = append(lines, "and for values within those probed (others are classified again): "+t)
	}
	lines = append(lines, "layout: "+c.layoutText())
	for _, cs := range c.Cases() {
		t := c.Replies[cs]
		if t == nil {
			continue
		}
		effect := "refused"
		switch {
		case c.Role.Query():
			effect = "answered"
		case c.Acts(cs):
			effect = "granted"
		}
		lines = append(lines, fmt.Sprintf("when %s: %s, replies %s", CaseText[cs], effect, t))
	}
	return lines
}

func (c *Class) roleText() string {
	s := c.Role.String()
	switch c.Role {
	case RoleAcquire:
		if c.Keys > 1 {
			s += " (all keys or none)"
		}
	case RoleRelease:
		s += " (compare-and-delete)"
	case RoleShare:
		s += " (a shared lock, beside other readers)"
	case RoleDelete:
		s += " (whatever holds the keys)"
	case RoleExtend:
		if c.Additive {
			s += " (compare-and-extend, adding to the TTL left)"
		} else {
			s += " (compare-and-extend, replacing the TTL)"
		}
	}
	return s
}

func (c *Class) controlsText() string {
	if len(c.Controls) == 0 {
		return ""
	}
	var parts []string
	for _, ct := range c.Controls {
		parts = append(parts, fmt.Sprintf("%s = %s", c.Names().Arg(ct.Arg), strconv.Quote(ct.Value)))
	}
	return " with " + strings.Join(parts, ", ")
}

func (c *Class) layoutText() string {
	var parts []string
	switch {
	case c.Tokens == nil:
		parts = append(parts, "no token")
	case c.UniformToken():
		parts = append(parts, "token "+c.Names().Arg(c.Tokens[0]))
	default:
		var ts []string
		for k, t := range c.Tokens {
			ts = append(ts, fmt.Sprintf("KEYS[%d]:%s", k+1, c.Names().Arg(t)))
		}
		parts = append(parts, "tokens "+strings.Join(ts, " "))
	}
	if c.Prefix > 0 {
		parts = append(parts, fmt.Sprintf("owner when the first %d bytes match", c.Prefix))
	}
	if c.Each {
		parts = append(parts, c.eachText())
	}
	if c.Latch != nil {
		parts = append(parts, fmt.Sprintf("its result recorded for a retry under %s for %s %s (each master acts once per latch)",
			c.Names().Arg(c.Latch.Arg), c.Names().Arg(c.Latch.TTLArg), unitName(c.Latch.TTLUnit)))
	}
	if c.Counter != nil {
		parts = append(parts, fmt.Sprintf("grants counted in %s, answered with their FENCE numbers (never counted on the masters)", c.Names().Arg(c.Counter.Arg)))
	}
	if c.Notice != nil {
		parts = append(parts, "tells waiters when it frees the lock: "+c.Notice.String(c.Names()))
	}
	if c.Shape == ShapeHash {
		v := strconv.Quote(c.FieldValue)
		if c.FieldArg >= 0 {
			v = c.Names().Arg(c.FieldArg)
		}
		if c.Counted {
			v = "the count of its holds (reentrant)"
		}
		parts = append(parts, "a hash whose one field is the owner's token, holding "+v)
	}
	if c.Shape == ShapeOwners {
		t := "a sorted set of owners scored with their deadlines"
		if c.Marker != "" {
			t += fmt.Sprintf(", exclusive when it holds %s", strconv.Quote(c.Marker))
		}
		if c.Promotes {
			t += ", promoting the caller's lone shared lock"
		}
		if c.Demotes {
			t += ", turning the caller's exclusive lock shared"
		}
		parts = append(parts, t)
	}
	if c.writes() || c.Rearms() {
		switch {
		case c.TTLArg >= 0 && c.Deadline:
			parts = append(parts, fmt.Sprintf("TTL until the deadline %s (Unix time in %s)", c.Names().Arg(c.TTLArg), unitName(c.TTLUnit)))
		case c.TTLArg >= 0:
			parts = append(parts, fmt.Sprintf("TTL %s in %s", c.Names().Arg(c.TTLArg), unitName(c.TTLUnit)))
		default:
			parts = append(parts, fmt.Sprintf("constant TTL %d ms", c.TTLConst.Milliseconds()))
		}
	}
	if c.MinArg >= 0 {
		op := "<"
		if c.MinOffset == 1 {
			op = "<="
		}
		parts = append(parts, fmt.Sprintf("too late when PTTL %s %s (%s)", op, c.Names().Arg(c.MinArg), unitName(c.MinUnit)))
	}
	if c.Role.Extends() {
		if c.NoTTLActs {
			parts = append(parts, "acts on a key without TTL")
		} else {
			parts = append(parts, "leaves a key without TTL alone")
		}
	}
	return strings.Join(parts, ", ")
}

func unitName(d time.Duration) string {
	if d == time.Second {
		return "seconds"
	}
	return "ms"
}

// namer names a call's arguments: the first extra ones are KEYS after the
// lock keys (a script that takes arguments in KEYS), the rest ARGV.
type Namer struct{ Lock, Extra int }

func (n Namer) Arg(i int) string {
	if i < n.Extra {
		return fmt.Sprintf("KEYS[%d]", n.Lock+i+1)
	}
	return fmt.Sprintf("ARGV[%d]", i-n.Extra+1)
}

func (c *Class) eachText() string {
	if !c.Each {
		return ""
	}
	return fmt.Sprintf("each of its %d keys on its own, replying one element per key", c.Keys)
}
