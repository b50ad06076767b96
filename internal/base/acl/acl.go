// Package acl reads Redis ACL rules: the part of a users.acl line after the
// user's name, as Redis 7 writes them. It promises that Parse accepts the
// rules that govern commands and keys (+command, -command, +command|sub,
// +@category, -@category, allcommands, nocommands, ~pattern, %R~, %W~,
// %RW~, allkeys, resetkeys), on and off, and the channel rules (which have
// no effect where nothing is published), and refuses anything else with the
// rule named; and that Match is Redis's glob matching.
package acl

import (
	"fmt"
	"slices"
	"strings"
)

// Kind is what one rule does.
type Kind uint8

const (
	AllowCommand  Kind = iota // +name or +name|sub
	DenyCommand               // -name or -name|sub
	AllowCategory             // +@category (allcommands is +@all)
	DenyCategory              // -@category (nocommands is -@all)
	KeyPattern                // ~pattern, %R~, %W~, %RW~ (allkeys is ~*)
	ResetKeys                 // resetkeys
)

// Rule is one rule, in the order given.
type Rule struct {
	Kind        Kind
	Name        string // a command (lower case, "name|sub" for a subcommand) or a category
	Pattern     string // a key pattern
	Read, Write bool   // what a key pattern grants
}

// Rules are a user's rules. Off is the user disabled (no AUTH succeeds).
type Rules struct {
	Off   bool
	Rules []Rule
}

// Categories are Redis 7's command categories (ACL CAT), "all" aside.
var Categories = []string{"keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
	"hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous", "connection",
	"transaction", "scripting"}

// Parse reads rules separated by spaces.
func Parse(s string) (*Rules, error) {
	r := &Rules{}
	for _, f := range strings.Fields(s) {
		if err := r.add(f); err != nil {
			return nil, fmt.Errorf("%q: %w", f, err)
		}
	}
	return r, nil
}

func (r *Rules) add(f string) error {
	low := strings.ToLower(f)
	switch {
	case low == "on":
		r.Off = false
	case low == "off":
		r.Off = true
	case low == "allcommands":
		r.Rules = append(r.Rules, Rule{Kind: AllowCategory, Name: "all"})
	case low == "nocommands":
		r.Rules = append(r.Rules, Rule{Kind: DenyCategory, Name: "all"})
	case low == "allkeys":
		r.Rules = append(r.Rules, Rule{Kind: KeyPattern, Pattern: "*", Read: true, Write: true})
	case low == "resetkeys":
		r.Rules = append(r.Rules, Rule{Kind: ResetKeys})
	case low == "allchannels" || low == "resetchannels" || strings.HasPrefix(f, "&"):
		// Channels: nothing is published here, so there is nothing to grant.
	case strings.HasPrefix(f, "~"):
		r.Rules = append(r.Rules, Rule{Kind: KeyPattern, Pattern: f[1:], Read: true, Write: true})
	case strings.HasPrefix(f, "%"):
		i := strings.IndexByte(f, '~')
		if i < 0 {
			return fmt.Errorf("a %%R~, %%W~ or %%RW~ key pattern needs its ~")
		}
		rule := Rule{Kind: KeyPattern, Pattern: f[i+1:]}
		for _, c := range strings.ToUpper(f[1:i]) {
			switch c {
			case 'R':
				rule.Read = true
			case 'W':
				rule.Write = true
			default:
				return fmt.Errorf("key permissions are R, W or RW, not %q", f[1:i])
			}
		}
		if !rule.Read && !rule.Write {
			return fmt.Errorf("key permissions are R, W or RW, not %q", f[1:i])
		}
		r.Rules = append(r.Rules, rule)
	case strings.HasPrefix(f, "+@") || strings.HasPrefix(f, "-@"):
		cat := low[2:]
		if cat != "all" && !slices.Contains(Categories, cat) {
			return fmt.Errorf("unknown command category (Redis's are all, %s)", strings.Join(Categories, ", "))
		}
		k := AllowCategory
		if f[0] == '-' {
			k = DenyCategory
		}
		r.Rules = append(r.Rules, Rule{Kind: k, Name: cat})
	case strings.HasPrefix(f, "+") || strings.HasPrefix(f, "-"):
		name := low[1:]
		if name == "" || strings.ContainsAny(name, "@~%&") || strings.Count(name, "|") > 1 || strings.HasSuffix(name, "|") || strings.HasPrefix(name, "|") {
			return fmt.Errorf("not a command name")
		}
		k := AllowCommand
		if f[0] == '-' {
			k = DenyCommand
		}
		r.Rules = append(r.Rules, Rule{Kind: k, Name: name})
	case strings.HasPrefix(f, ">") || strings.HasPrefix(f, "<") || strings.HasPrefix(f, "#") || strings.HasPrefix(f, "!") ||
		low == "nopass" || low == "resetpass":
		return fmt.Errorf("passwords go in the user's password, not in its rules")
	case low == "reset":
		return fmt.Errorf("reset is not served: a user's rules start from no command and no key")
	default:
		return fmt.Errorf("not an ACL rule this proxy serves (commands: +name, -name, +@category, -@category, allcommands, nocommands; keys: ~pattern, %%R~pattern, %%W~pattern, allkeys, resetkeys; on, off)")
	}
	return nil
}

// Match reports whether s matches the glob pattern as Redis matches keys:
// * any run, ? one byte, [abc], [^abc] and [a-z] a class, \x x itself.
func Match(pattern, s string) bool {
	for len(pattern) > 0 {
		switch pattern[0] {
		case '*':
			for len(pattern) > 1 && pattern[1] == '*' {
				pattern = pattern[1:]
			}
			if len(pattern) == 1 {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if Match(pattern[1:], s[i:]) {
					return true
				}
			}
			return false
		case '?':
			if len(s) == 0 {
				return false
			}
			s = s[1:]
			pattern = pattern[1:]
		case '[':
			if len(s) == 0 {
				return false
			}
			rest, ok := matchClass(pattern[1:], s[0])
			if !ok {
				return false
			}
			pattern, s = rest, s[1:]
		case '\\':
			if len(pattern) >= 2 {
				pattern = pattern[1:]
			}
			fallthrough
		default:
			if len(s) == 0 || s[0] != pattern[0] {
				return false
			}
			pattern, s = pattern[1:], s[1:]
		}
	}
	return len(s) == 0
}

// matchClass matches c against the class that p starts (after its '['),
// and returns the pattern after the class.
func matchClass(p string, c byte) (string, bool) {
	not := len(p) > 0 && p[0] == '^'
	if not {
		p = p[1:]
	}
	match := false
	for len(p) > 0 && p[0] != ']' {
		switch {
		case p[0] == '\\' && len(p) >= 2:
			match = match || p[1] == c
			p = p[2:]
		case len(p) >= 3 && p[1] == '-' && p[2] != ']':
			lo, hi := p[0], p[2]
			if lo > hi {
				lo, hi = hi, lo
			}
			match = match || (c >= lo && c <= hi)
			p = p[3:]
		default:
			match = match || p[0] == c
			p = p[1:]
		}
	}
	if len(p) > 0 {
		p = p[1:] // the closing ]
	}
	return p, match != not
}
