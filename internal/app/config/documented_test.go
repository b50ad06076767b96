package config

import (
	"fmt"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readmeDefault is one default a table of docs/configuration.md states.
type readmeDefault struct {
	key, stated string
	line        int
}

// readmeDefaults reads the key/default pairs of docs/configuration.md's
// tables: the configuration table (| key | default | meaning |) and the
// limits table (| limit | default | key |). A row may name several keys with as many defaults ("`a`, `b`" |
// "`x`, `y`"); rows whose default is no value ("see ...") or that have no
// key ("fixed") state no default.
func readmeDefaults(t *testing.T, readme string) []readmeDefault {
	t.Helper()
	var out []readmeDefault
	for i, line := range strings.Split(readme, "\n") {
		if !strings.HasPrefix(line, "|") || strings.HasPrefix(line, "|---") {
			continue
		}
		cells := strings.Split(strings.Trim(line, "|"), "|")
		if len(cells) < 3 {
			continue
		}
		for j := range cells {
			cells[j] = strings.TrimSpace(cells[j])
		}
		var keyCell, defCell string
		switch {
		case strings.HasPrefix(cells[0], "`"): // | key | default | meaning |
			keyCell, defCell = cells[0], cells[1]
		case strings.HasPrefix(cells[2], "`"): // | limit | default | key / flag |
			keyCell, defCell = cells[2], cells[1]
		default:
			continue
		}
		if strings.HasPrefix(defCell, "see ") || defCell == "" {
			continue
		}
		keys := splitCell(keyCell)
		defs := splitCell(defCell)
		if len(defs) != len(keys) {
			if len(keys) == 1 {
				defs = []string{strings.Trim(defCell, "`")}
			} else {
				t.Errorf("docs/configuration.md line %d: %d keys and %d defaults: %s", i+1, len(keys), len(defs), line)
				continue
			}
		}
		for j, k := range keys {
			out = append(out, readmeDefault{key: k, stated: defs[j], line: i + 1})
		}
	}
	return out
}

// splitCell splits "`a`, `b`" into a and b.
func splitCell(cell string) []string {
	var out []string
	for _, p := range strings.Split(cell, ",") {
		out = append(out, strings.Trim(strings.TrimSpace(p), "`"))
	}
	return out
}

// parseStated reads a default as the documentation writes it, into the type of
// the key's field.
func parseStated(stated string, typ reflect.Type) (any, error) {
	s := strings.TrimSpace(stated)
	none := s == "none" || strings.HasPrefix(s, "never")
	switch {
	case typ == durationType:
		if none || s == "0" {
			return time.Duration(0), nil
		}
		return time.ParseDuration(strings.ReplaceAll(s, " ", ""))
	case typ == reflect.TypeFor[List]():
		if none {
			return List(nil), nil
		}
		return splitList(s), nil
	}
	switch typ.Kind() {
	case reflect.Slice:
		if none {
			return reflect.Zero(typ).Interface(), nil
		}
	case reflect.String:
		if none {
			return "", nil
		}
		return s, nil
	case reflect.Int:
		mult := 1
		for suffix, m := range map[string]int{" KiB": 1 << 10, " MiB": 1 << 20} {
			if v, ok := strings.CutSuffix(s, suffix); ok {
				s, mult = v, m
			}
		}
		n, err := strconv.Atoi(s)
		return n * mult, err
	case reflect.Float64:
		return strconv.ParseFloat(s, 64)
	case reflect.Bool:
		return strconv.ParseBool(s)
	}
	return nil, fmt.Errorf("no rule to read a default of type %v", typ)
}

// Each default docs/configuration.md's tables state is the default the
// code has, every key they name exists, and every key is documented there.
func TestDocumentedDefaultsAreTheDefaults(t *testing.T) {
	raw, err := os.ReadFile("../../../docs/configuration.md")
	if err != nil {
		t.Fatal(err)
	}
	readme := string(raw)
	def := reflect.ValueOf(Default())
	_, index := structKeys(def.Type())
	stated := readmeDefaults(t, readme)
	if len(stated) < 20 {
		t.Fatalf("only %d defaults read from docs/configuration.md's tables: the test reads them wrongly", len(stated))
	}
	for _, d := range stated {
		fi, ok := index[d.key]
		if !ok {
			t.Errorf("docs/configuration.md line %d states a default for %s, which is not a configuration key", d.line, d.key)
			continue
		}
		field := def.Field(fi)
		got, err := parseStated(d.stated, field.Type())
		if err != nil {
			t.Errorf("docs/configuration.md line %d: default of %s, %q, is not a value: %v", d.line, d.key, d.stated, err)
			continue
		}
		if !reflect.DeepEqual(got, field.Interface()) {
			t.Errorf("docs/configuration.md line %d says %s defaults to %q; the default is %v", d.line, d.key, d.stated, field.Interface())
		}
	}
	for _, key := range yamlKeys(t) {
		if !strings.Contains(readme, "`"+key+"`") {
			t.Errorf("docs/configuration.md does not mention the key `%s`", key)
		}
	}
}
