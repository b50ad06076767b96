package classify

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// describe renders a probe: the keys' states and any changed argument.
func describe(keys, argv, orig []string, specs []keySpec, base []string) string {
	return describeIn(spec.Namer{}, keys, argv, orig, specs, base)
}

func describeIn(nm spec.Namer, keys, argv, orig []string, specs []keySpec, base []string) string {
	var parts []string
	allSame := len(specs) > 1
	for _, s := range specs[1:] {
		allSame = allSame && s == specs[0]
	}
	for k, s := range specs {
		if allSame && k > 0 {
			break
		}
		who := fmt.Sprintf("KEYS[%d]", k+1)
		if allSame {
			who = "every key"
		}
		switch {
		case !s.held && allSame:
			parts = append(parts, "every key missing")
		case !s.held:
			parts = append(parts, who+" missing")
		case s.ttl < 0:
			parts = append(parts, who+" expired")
		case s.zset:
			parts = append(parts, who+" "+ownersText(nm, s, argv))
		default:
			t := "no TTL"
			if s.ttl > 0 {
				t = fmt.Sprintf("PTTL %d ms", s.ttl)
			}
			if s.count > 1 {
				t = fmt.Sprintf("counted %d times, %s", s.count, t)
			}
			if s.mode {
				t = `beside "mode" = "write", ` + t
			}
			parts = append(parts, fmt.Sprintf("%s holding %s (%s)", who, valueText(nm, s.value, argv), t))
		}
	}
	out := "with " + strings.Join(parts, ", ")
	for i := range argv {
		if i < len(orig) && argv[i] != orig[i] {
			out += fmt.Sprintf(" and %s = %s", nm.Arg(i), strconv.Quote(sandbox.Short(argv[i])))
		}
	}
	if base != nil && !slices.Equal(keys, base) {
		out += " and other key names"
	}
	return out
}

// ownersText describes a probe's sorted set of owners.
func ownersText(nm spec.Namer, s keySpec, argv []string) string {
	var who []string
	if s.mine {
		who = append(who, fmt.Sprintf("%s (deadline in %d ms)", valueText(nm, s.value, argv), s.ttl))
	}
	if s.others == 1 {
		who = append(who, "another owner")
	} else if s.others > 1 {
		who = append(who, fmt.Sprintf("%d other owners", s.others))
	}
	mode := "shared"
	if s.marker != "" {
		mode = "exclusive, marked " + strconv.Quote(sandbox.Short(s.marker))
	}
	return "a sorted set of owners holding " + strings.Join(who, " and ") + ", " + mode
}

func valueText(nm spec.Namer, v string, argv []string) string {
	for i, a := range argv {
		if a == v {
			return nm.Arg(i)
		}
	}
	return "another value " + strconv.Quote(sandbox.Short(v))
}

// effect describes what a run did to the keys.
func effectIn(nm spec.Namer, keys, argv []string, before, after *sandbox.State) string {
	var parts []string
	for k, key := range keys {
		b, bok := before.Lookup(key)
		a, aok := after.Lookup(key)
		name := fmt.Sprintf("KEYS[%d]", k+1)
		switch {
		case bok && !aok:
			parts = append(parts, "deleted "+name)
		case aok && a.Type != sandbox.TypeString && (!bok || !a.Equal(b)):
			parts = append(parts, fmt.Sprintf("made %s %s with %s", name, a, pttlText(after, key)))
		case aok && (!bok || a.Value != b.Value):
			parts = append(parts, fmt.Sprintf("set %s to %s with %s", name, valueText(nm, a.Value, argv), pttlText(after, key)))
		case aok && a.At != b.At:
			parts = append(parts, fmt.Sprintf("set %s's %s", name, pttlText(after, key)))
		}
	}
	if len(parts) == 0 {
		return "changed nothing"
	}
	return strings.Join(parts, " and ")
}

func pttlText(st *sandbox.State, key string) string {
	p := st.PTTL(key)
	if p == -1 {
		return "no TTL"
	}
	return fmt.Sprintf("PTTL %d ms", p)
}
