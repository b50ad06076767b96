package redisproc

import (
	"fmt"
	"net"
	"os/exec"
	"slices"
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
	return installRules(rules)
}

// AddNode starts an empty cluster node on host ("" is 127.0.0.1), with
// the cluster's timings and extra, that knows no other node yet: Meet
// introduces it. Stop ends it with the others.
func (c *Cluster) AddNode(host string, extra ...string) (*Server, error) {
	if host != "" && host != "127.0.0.1" {
		extra = append([]string{"--bind-source-addr", host, "--cluster-announce-ip", host}, extra...)
	}
	s, bus, err := startNode(c.dir, host, extra)
	if err != nil {
		return nil, err
	}
	c.Nodes = append(c.Nodes, s)
	c.buses = append(c.buses, bus)
	return s, nil
}

// Meet introduces node to the cluster through from (CLUSTER MEET on from,
// with node's bus port).
func (c *Cluster) Meet(from, node *Server) error {
	for i, n := range c.Nodes {
		if n == node {
			host, port, _ := net.SplitHostPort(node.Addr)
			return from.doOK("CLUSTER", "MEET", host, port, strconv.Itoa(c.buses[i]))
		}
	}
	return fmt.Errorf("redisproc: %s is not a node of the cluster", node.Addr)
}

// SplitBus splits the cluster bus in two: the nodes of side (all on one
// loopback address of their own, see ClusterSpec.Hosts and AddNode) keep
// their bus among themselves, the other nodes among themselves, and no
// bus traffic crosses between the two, while clients still reach every
// node. Firewall rules (iptables, OUTPUT) drop the packets from side's
// address to the other nodes' bus ports and back, and those from any
// other address to side's bus ports and back. The function returned
// removes the rules; call it once.
func (c *Cluster) SplitBus(side ...*Server) (heal func() error, err error) {
	host := ""
	var mine, others []string
	for i, n := range c.Nodes {
		h, _, _ := net.SplitHostPort(n.Addr)
		if slices.Contains(side, n) {
			if host != "" && h != host {
				return nil, fmt.Errorf("redisproc: the side's nodes are on %s and %s: put them on one address", host, h)
			}
			host = h
			mine = append(mine, strconv.Itoa(c.buses[i]))
		} else {
			others = append(others, strconv.Itoa(c.buses[i]))
		}
	}
	if host == "" || host == "127.0.0.1" {
		return nil, fmt.Errorf("redisproc: the side must be on a loopback address of its own, not %q", host)
	}
	var rules [][]string
	chunks := func(ports []string, f func(string)) {
		for i := 0; i < len(ports); i += 15 { // multiport takes 15 ports at most
			f(strings.Join(ports[i:min(i+15, len(ports))], ","))
		}
	}
	chunks(others, func(ps string) {
		rules = append(rules,
			[]string{"-p", "tcp", "-s", host, "-m", "multiport", "--dports", ps, "-j", "DROP"},
			[]string{"-p", "tcp", "-d", host, "-m", "multiport", "--sports", ps, "-j", "DROP"})
	})
	chunks(mine, func(ps string) {
		rules = append(rules,
			[]string{"-p", "tcp", "!", "-s", host, "-m", "multiport", "--dports", ps, "-j", "DROP"},
			[]string{"-p", "tcp", "!", "-d", host, "-m", "multiport", "--sports", ps, "-j", "DROP"})
	})
	return installRules(rules)
}

// installRules inserts firewall rules into OUTPUT, and returns the
// function that deletes them.
func installRules(rules [][]string) (heal func() error, err error) {
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
