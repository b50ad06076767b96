package script

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// describe renders a probe: the keys' states and any changed argument.
func describe(keys, argv, orig []string, specs []keySpec, base []string) string {
	return describeIn(namer{}, keys, argv, orig, specs, base)
}

func describeIn(nm namer, keys, argv, orig []string, specs []keySpec, base []string) string {
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
			parts = append(parts, fmt.Sprintf("%s holding %s (%s)", who, valueText(nm, s.value, argv), t))
		}
	}
	out := "with " + strings.Join(parts, ", ")
	for i := range argv {
		if i < len(orig) && argv[i] != orig[i] {
			out += fmt.Sprintf(" and %s = %s", nm.arg(i), strconv.Quote(short(argv[i])))
		}
	}
	if base != nil && !slices.Equal(keys, base) {
		out += " and other key names"
	}
	return out
}

// ownersText describes a probe's sorted set of owners.
func ownersText(nm namer, s keySpec, argv []string) string {
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
		mode = "exclusive, marked " + strconv.Quote(short(s.marker))
	}
	return "a sorted set of owners holding " + strings.Join(who, " and ") + ", " + mode
}

func valueText(nm namer, v string, argv []string) string {
	for i, a := range argv {
		if a == v {
			return nm.arg(i)
		}
	}
	return "another value " + strconv.Quote(short(v))
}

// effect describes what a run did to the keys.
func effectIn(nm namer, keys, argv []string, before, after *State) string {
	var parts []string
	for k, key := range keys {
		b, bok := before.lookup(key)
		a, aok := after.lookup(key)
		name := fmt.Sprintf("KEYS[%d]", k+1)
		switch {
		case bok && !aok:
			parts = append(parts, "deleted "+name)
		case aok && a.Type != TypeString && (!bok || !a.equal(b)):
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

func pttlText(st *State, key string) string {
	p := st.pttl(key)
	if p == -1 {
		return "no TTL"
	}
	return fmt.Sprintf("PTTL %d ms", p)
}
