package proxy

import "testing"

// Every served command has its Redis ACL categories, so that +@category
// rules reach it.
func TestEveryCommandHasACLCategories(t *testing.T) {
	for name := range commands {
		if len(aclCategories[name]) == 0 {
			t.Errorf("%s has no ACL categories", name)
		}
	}
	for name := range aclCategories {
		if commands[name] == nil {
			t.Errorf("%s has ACL categories but is not served", name)
		}
	}
	for name := range aclSubcommands {
		if commands[name] == nil {
			t.Errorf("%s has ACL subcommands but is not served", name)
		}
	}
}
