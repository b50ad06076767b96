package integration

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// alertRules reads ops/prometheus-alerts.yml as a YAML tree and the names
// of its alerts.
func alertRules(t *testing.T) (*yaml.Node, []string) {
	t.Helper()
	raw, err := os.ReadFile("../ops/prometheus-alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := doc.Decode(&rules); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			names = append(names, r.Alert)
		}
	}
	return &doc, names
}

// promtool runs Debian's promtool (the prometheus package) in dir.
func promtool(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatalf("promtool not found (Debian's prometheus package; ./test.sh installs it): %v", err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// The alert rules pass promtool's check and their unit tests; every alert
// has a test that expects it to fire, and each test fails without the rule
// it tests.
func TestAlertRulesUnitTests(t *testing.T) {
	if out, err := promtool(t, "../ops", "check", "rules", "prometheus-alerts.yml"); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	if out, err := promtool(t, "../ops", "test", "rules", "prometheus-alerts.test.yml"); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}

	raw, err := os.ReadFile("../ops/prometheus-alerts.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	var tests struct {
		Tests []struct {
			AlertRuleTest []struct {
				Alertname string `yaml:"alertname"`
				ExpAlerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	if err := yaml.Unmarshal(raw, &tests); err != nil {
		t.Fatal(err)
	}
	fires := map[string]bool{}
	for _, tc := range tests.Tests {
		for _, a := range tc.AlertRuleTest {
			if len(a.ExpAlerts) > 0 {
				fires[a.Alertname] = true
			}
		}
	}
	doc, names := alertRules(t)
	if len(names) < 9 {
		t.Fatalf("only %d alerts read from prometheus-alerts.yml", len(names))
	}
	checkRunbooks(t, doc)
	for _, n := range names {
		if !fires[n] {
			t.Errorf("alert %s has no unit test that expects it to fire", n)
		}
	}

	// Without any one rule, the unit tests fail: each case tests its rule.
	dir := t.TempDir()
	test, err := os.ReadFile("../ops/prometheus-alerts.test.yml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus-alerts.test.yml"), test, 0o600); err != nil {
		t.Fatal(err)
	}
	rules := doc.Content[0]
	for i, name := range names {
		without := withoutRule(t, rules, i)
		if err := os.WriteFile(filepath.Join(dir, "prometheus-alerts.yml"), without, 0o600); err != nil {
			t.Fatal(err)
		}
		out, err := promtool(t, dir, "test", "rules", "prometheus-alerts.test.yml")
		if err == nil || !strings.Contains(out, name) {
			t.Errorf("without %s the unit tests still pass (or do not name it): %v\n%s", name, err, out)
		}
	}
}

// withoutRule encodes the rules file without its i-th alert rule (counting
// across groups).
func withoutRule(t *testing.T, root *yaml.Node, i int) []byte {
	t.Helper()
	var doc map[string][]map[string]any
	if err := root.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	for _, g := range doc["groups"] {
		rs, _ := g["rules"].([]any)
		if i < len(rs) {
			g["rules"] = append(rs[:i:i], rs[i+1:]...)
			break
		}
		i -= len(rs)
	}
	var b bytes.Buffer
	if err := yaml.NewEncoder(&b).Encode(doc); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// runbookBase is where the alerts' runbooks live: docs/operations.md on
// the project's main branch.
const runbookBase = "https://github.com/redlock-proxy/redlock-proxy/blob/main/docs/operations.md#"

// checkRunbooks checks that every alert has a runbook_url leading to a
// heading of docs/operations.md, and that no rule names a job.
func checkRunbooks(t *testing.T, doc *yaml.Node) {
	t.Helper()
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	if err := doc.Decode(&rules); err != nil {
		t.Fatal(err)
	}
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	anchors := map[string]bool{}
	for _, l := range strings.Split(string(ops), "\n") {
		if h := strings.TrimLeft(l, "#"); h != l && strings.HasPrefix(h, " ") {
			anchors[strings.ToLower(strings.ReplaceAll(strings.TrimSpace(h), " ", "-"))] = true
		}
	}
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			url := r.Annotations["runbook_url"]
			if !strings.HasPrefix(url, runbookBase) || !anchors[strings.TrimPrefix(url, runbookBase)] {
				t.Errorf("alert %s: runbook_url %q does not lead to a heading of docs/operations.md", r.Alert, url)
			}
			if strings.Contains(r.Expr, "job=") {
				t.Errorf("alert %s names a job: %s", r.Alert, r.Expr)
			}
		}
	}
}
