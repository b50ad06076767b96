package config

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

const examplePath = "../../../config.example.yaml"

// commentedKey matches a line that shows a key's default in a comment.
var commentedKey = regexp.MustCompile(`(?m)^# ([a-z_]+):`)

// The example configuration runs unedited and says so, and shows every key
// at its default: written out, or in a comment for keys that are off or
// empty unless set.
func TestExampleConfigShowsEveryKeyAtItsDefault(t *testing.T) {
	raw, err := os.ReadFile(examplePath)
	if err != nil {
		t.Fatal(err)
	}
	text := string(raw)

	// Unedited, it loads without a warning: it is the default configuration.
	c, warnings, err := Load([]string{"-config", examplePath}, nil)
	if err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	if len(warnings) != 0 {
		t.Errorf("config.example.yaml gives warnings: %v", warnings)
	}
	if !reflect.DeepEqual(c, Default()) {
		t.Errorf("config.example.yaml unedited is not the default configuration:\n got %+v\nwant %+v", c, Default())
	}
	// Running it unedited means demo backends: the top of the file says so.
	head := strings.Join(strings.SplitN(text, "\n", 8)[:7], "\n")
	if !strings.Contains(head, "EDIT `backends` BEFORE USE") || !strings.Contains(head, "NOT FOR PRODUCTION") {
		t.Errorf("the first lines of config.example.yaml do not say loudly what to edit:\n%s", head)
	}

	// Every key appears, set or commented.
	for _, key := range yamlKeys(t) {
		set := regexp.MustCompile(`(?m)^` + key + `:`).MatchString(text)
		commented := regexp.MustCompile(`(?m)^# ` + key + `:`).MatchString(text)
		if set == commented {
			t.Errorf("config.example.yaml: %s is %s; want it once, set or commented", key, map[bool]string{true: "both set and commented", false: "missing"}[set])
		}
	}

	// With every commented key uncommented it is still the default: each
	// comment shows the key's default.
	keys := map[string]bool{}
	for _, k := range yamlKeys(t) {
		keys[k] = true
	}
	uncommented := commentedKey.ReplaceAllStringFunc(text, func(line string) string {
		if key := strings.TrimSuffix(strings.TrimPrefix(line, "# "), ":"); keys[key] {
			return key + ":"
		}
		return line
	})
	if uncommented == text {
		t.Fatal("no commented key found: the test reads the file wrongly")
	}
	all := Default()
	if err := all.ReadYAML([]byte(uncommented), "config.example.yaml, uncommented"); err != nil {
		t.Fatalf("config.example.yaml with its commented keys uncommented: %v", err)
	}
	if !reflect.DeepEqual(all, Default()) {
		t.Errorf("a commented key of config.example.yaml does not show its default:\n got %+v\nwant %+v", all, Default())
	}
}
