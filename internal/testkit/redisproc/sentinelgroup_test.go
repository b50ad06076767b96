package redisproc

import (
	"testing"
)

// A group fails over on SENTINEL FAILOVER: every Sentinel then names the
// replica, which is a master.
func TestGroupFailsOver(t *testing.T) {
	g, err := StartGroup(t.TempDir(), "g1", GroupOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	from, to, err := g.Failover()
	if err != nil {
		t.Fatal(err)
	}
	if from != g.Servers[0] || to != g.Servers[1] || !hasRole(to, "master") {
		t.Fatalf("after a failover from %s: %s", from.Addr, to.Addr)
	}
}
