package config

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// The YAML file is decoded key by key, so that every refusal names the key
// it is about, the line it is on, and what was expected: "max_ttl: want a
// duration such as 30s, got 30" rather than the YAML library's "cannot
// unmarshal !!int `30` into time.Duration".

var durationType = reflect.TypeFor[time.Duration]()

// yamlDecoder decodes one file; name and the line of each node locate errors.
type yamlDecoder struct{ name string }

// at prefixes an error with the file and line of n.
func (d yamlDecoder) at(n *yaml.Node, format string, a ...any) error {
	return fmt.Errorf("%w: %s, line %d: %s", ErrInvalid, d.name, n.Line, fmt.Sprintf(format, a...))
}

// want refuses the value of key: what was expected and what was written.
func (d yamlDecoder) want(key string, n *yaml.Node, what string) error {
	return d.at(n, "%s: want %s, got %s", key, what, written(n))
}

// written shows a node as the operator wrote it.
func written(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "a list"
	case yaml.MappingNode:
		return "a mapping"
	case yaml.AliasNode:
		return "an alias (*" + n.Value + ")"
	}
	if n.Tag == "!!null" {
		return "nothing"
	}
	if n.Value == "" || strings.ContainsAny(n.Value, " \t\"'") {
		return strconv.Quote(n.Value)
	}
	return n.Value
}

// describe says what a value of type t is written as.
func describe(t reflect.Type) string {
	switch {
	case t == durationType:
		return "a duration such as 30s"
	case t == reflect.TypeFor[List]():
		return "a list of host:port, or one comma-separated string"
	}
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int64:
		return "a whole number"
	case reflect.Float64:
		return "a number such as 0.01"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Struct:
		return "a mapping of key: value"
	case reflect.Pointer:
		return describe(t.Elem())
	}
	return t.String()
}

// structKeys lists the YAML keys of a struct type with their field indexes,
// in field order.
func structKeys(t reflect.Type) (keys []string, index map[string]int) {
	index = map[string]int{}
	for i := range t.NumField() {
		key, _, _ := strings.Cut(t.Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		keys = append(keys, key)
		index[key] = i
	}
	return keys, index
}

// mapping decodes a YAML mapping into the struct v. path names the mapping
// in errors ("" at the top level).
func (d yamlDecoder) mapping(path string, n *yaml.Node, v reflect.Value) error {
	keys, index := structKeys(v.Type())
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, val := n.Content[i], n.Content[i+1]
		name := join(path, k.Value)
		fi, ok := index[k.Value]
		if !ok {
			msg := "unknown key " + name
			if s := suggest(k.Value, keys); s != "" {
				msg += " (did you mean " + join(path, s) + "?)"
			}
			return d.at(k, "%s", msg)
		}
		if line, dup := seen[k.Value]; dup {
			return d.at(k, "%s is set twice (first on line %d)", name, line)
		}
		seen[k.Value] = k.Line
		if err := d.value(name, val, v.Field(fi)); err != nil {
			return err
		}
	}
	return nil
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// value decodes one node into v, refusing anything v's type cannot hold.
func (d yamlDecoder) value(key string, n *yaml.Node, v reflect.Value) error {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.Tag == "!!null" {
		return d.at(n, "%s has no value (remove the line to keep the default)", key)
	}
	t := v.Type()
	switch {
	case t == durationType:
		if n.Kind == yaml.ScalarNode {
			if dur, err := time.ParseDuration(n.Value); err == nil {
				v.SetInt(int64(dur))
				return nil
			}
		}
		return d.want(key, n, describe(t))
	case t == reflect.TypeFor[List]():
		switch n.Kind {
		case yaml.ScalarNode:
			v.Set(reflect.ValueOf(splitList(n.Value)))
			return nil
		case yaml.SequenceNode:
			var l List
			for i, e := range n.Content {
				if e.Kind != yaml.ScalarNode || e.Tag == "!!null" {
					return d.want(fmt.Sprintf("%s[%d]", key, i), e, "host:port")
				}
				l = append(l, e.Value)
			}
			v.Set(reflect.ValueOf(l))
			return nil
		}
		return d.want(key, n, describe(t))
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return d.want(key, n, describe(t))
		}
		return d.mapping(key, n, v)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return d.want(key, n, describe(t))
		}
		if len(n.Content) == 0 {
			v.Set(reflect.Zero(t))
			return nil
		}
		s := reflect.MakeSlice(t, len(n.Content), len(n.Content))
		for i, e := range n.Content {
			if err := d.value(fmt.Sprintf("%s[%d]", key, i), e, s.Index(i)); err != nil {
				return err
			}
		}
		v.Set(s)
		return nil
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		if err := d.value(key, n, p.Elem()); err != nil {
			return err
		}
		v.Set(p)
		return nil
	}
	if n.Kind != yaml.ScalarNode {
		return d.want(key, n, describe(t))
	}
	p := reflect.New(t)
	if err := n.Decode(p.Interface()); err != nil {
		return d.want(key, n, describe(t))
	}
	v.Set(p.Elem())
	return nil
}

// suggest returns the candidate closest to word, if one is close enough to
// be a typo of it.
func suggest(word string, candidates []string) string {
	norm := strings.ReplaceAll(strings.ToLower(word), "-", "_")
	best, bestD := "", max(2, len(norm)/3)+1
	for _, c := range candidates {
		if d := distance(norm, c); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// distance is the Levenshtein distance between a and b, with the swap of
// two neighbouring letters counted as one edit.
func distance(a, b string) int {
	ra, rb := []rune(a), []rune(b)
	prev2 := make([]int, len(rb)+1)
	prev := make([]int, len(rb)+1)
	cur := make([]int, len(rb)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(ra); i++ {
		cur[0] = i
		for j := 1; j <= len(rb); j++ {
			cost := 1
			if ra[i-1] == rb[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && ra[i-1] == rb[j-2] && ra[i-2] == rb[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(rb)]
}
