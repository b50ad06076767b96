package redisproc

import (
	"fmt"
	"net"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

// ClusterSpec shapes a cluster that StartClusterSpec joins by hand,
// without redis-cli (which places masters and replicas by address as it
// sees fit): the first Shards nodes are masters, the slots spread evenly
// over them, and then Replicas[i] replicas follow master i.
type ClusterSpec struct {
	Shards   int
	Replicas []int
	// Hosts are the nodes' loopback addresses, in the order above ("" or
	// missing: 127.0.0.1). A node on an address of its own sends its
	// cluster bus traffic from it and announces it, so that CutBus can cut
	// that node's bus alone.
	Hosts []string
	Extra []string // more redis-server arguments for every node (a later one wins)
}

// StartClusterSpec starts and joins the cluster spec describes, and waits
// until every node agrees the cluster is ok and every replica is in sync.
func StartClusterSpec(dir string, spec ClusterSpec) (*Cluster, error) {
	c := &Cluster{dir: dir}
	var masterOf []int // per replica, its master's index
	for m, r := range spec.Replicas {
		for k := 0; k < r; k++ {
			masterOf = append(masterOf, m)
		}
	}
	for i := 0; i < spec.Shards+len(masterOf); i++ {
		host := ""
		if i < len(spec.Hosts) {
			host = spec.Hosts[i]
		}
		extra := spec.Extra
		if host != "" && host != "127.0.0.1" {
			extra = append([]string{"--bind-source-addr", host, "--cluster-announce-ip", host}, extra...)
		}
		s, bus, err := startNode(dir, host, extra)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		c.buses = append(c.buses, bus)
	}
	err := c.join(spec.Shards)
	deadline := time.Now().Add(20 * time.Second)
	for k, m := range masterOf {
		if err != nil {
			break
		}
		err = c.follow(c.Nodes[spec.Shards+k], c.Nodes[m], deadline)
	}
	if err == nil {
		err = c.WaitOK(20 * time.Second)
	}
	if err == nil {
		err = c.waitReplicas(20 * time.Second)
	}
	if err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// follow makes r a replica of master m (CLUSTER REPLICATE), once r knows
// m.
func (c *Cluster) follow(r, m *Server, deadline time.Time) error {
	id, err := m.ID()
	if err != nil {
		return err
	}
	for {
		err := r.doOK("CLUSTER", "REPLICATE", id)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// CutBus cuts node s off from the cluster bus, both ways, while its
// clients still reach it: firewall rules (iptables, OUTPUT, which every
// loopback packet passes) drop the bus traffic between s's own address
// (see ClusterSpec.Hosts) and the other nodes' bus ports, and to and from
// s's bus port. The function returned removes the rules; call it once.
func (c *Cluster) CutBus(s *Server) (heal func() error, err error) {
	host, _, _ := net.SplitHostPort(s.Addr)
	if host == "127.0.0.1" {
		return nil, fmt.Errorf("redisproc: %s shares 127.0.0.1 with the other nodes: give it an address of its own (ClusterSpec.Hosts)", s.Addr)
	}
	own := -1
	var others []string
	for i, n := range c.Nodes {
		if n == s {
			own = c.buses[i]
		} else {
			others = append(others, strconv.Itoa(c.buses[i]))
		}
	}
	if own < 0 {
		return nil, fmt.Errorf("redisproc: %s is not a node of the cluster", s.Addr)
	}
	var rules [][]string
	for i := 0; i < len(others); i += 15 { // multiport takes 15 ports at most
		ports := strings.Join(others[i:min(i+15, len(others))], ",")
		rules = append(rules,
			[]string{"-p", "tcp", "-s", host, "-m", "multiport", "--dports", ports, "-j", "DROP"},
			[]string{"-p", "tcp", "-d", host, "-m", "multiport", "--sports", ports, "-j", "DROP"})
	}
	rules = append(rules,
		[]string{"-p", "tcp", "-d", host, "--dport", strconv.Itoa(own), "-j", "DROP"},
		[]string{"-p", "tcp", "-s", host, "--sport", strconv.Itoa(own), "-j", "DROP"})
	iptables := func(op string, rule []string) error {
		out, err := exec.Command("iptables", append([]string{"-w", op, "OUTPUT"}, rule...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("redisproc: iptables %s OUTPUT %s: %w: %s (install iptables, or run ./test.sh)", op, strings.Join(rule, " "), err, out)
		}
		return nil
	}
	heal = func() error {
		var first error
		for _, r := range rules {
			if err := iptables("-D", r); err != nil && first == nil {
				first = err
			}
		}
		return first
	}
	for i, r := range rules {
		if err := iptables("-I", r); err != nil {
			for _, done := range rules[:i] {
				iptables("-D", done)
			}
			return nil, err
		}
	}
	return heal, nil
}
