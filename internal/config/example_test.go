package config

import "testing"

// The example configuration shipped in the repository must load and pass
// validation, so that what the README shows works.
func TestExampleConfigLoads(t *testing.T) {
	c, warnings, err := Load([]string{"-config", "../../config.example.yaml"}, nil)
	if err != nil {
		t.Fatalf("config.example.yaml: %v", err)
	}
	if len(warnings) != 0 {
		t.Errorf("config.example.yaml gives warnings: %v", warnings)
	}
	if len(c.Backends) != 5 || c.MaxTTL.Seconds() != 60 || c.BackendTimeout.Milliseconds() != 50 {
		t.Errorf("config.example.yaml read as %+v", c)
	}
}
