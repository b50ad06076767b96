package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Cluster is a real Redis Cluster on loopback: redis-server processes with
// cluster-enabled, joined by redis-cli --cluster create. Short timings, so
// that a failover takes about a second: cluster-node-timeout 300 ms, and
// cluster-require-full-coverage no, so that a shard without a master
// leaves the others serving; replicas sync at once (no diskless delay)
// and may take over whatever their data's age (the test decides).
type Cluster struct {
	Nodes []*Server
	buses []int // each node's cluster bus port
	dir   string
}

// ClusterNodeTimeout is the cluster-node-timeout the nodes run with.
const ClusterNodeTimeout = 300 * time.Millisecond

// StartCluster starts shards masters with replicas replicas each and
// joins them into one cluster, slots spread evenly; it waits until every
// node agrees the cluster is ok. Stop ends every process.
func StartCluster(dir string, shards, replicas int, extra ...string) (*Cluster, error) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		return nil, errors.New("redisproc: redis-cli not found (install it: apt-get install -y redis-tools, or run ./test.sh)")
	}
	c := &Cluster{dir: dir}
	for i := 0; i < shards*(1+replicas); i++ {
		s, bus, err := startNode(dir, "", extra)
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.Nodes = append(c.Nodes, s)
		c.buses = append(c.buses, bus)
	}
	if shards < 3 && replicas == 0 {
		// redis-cli creates clusters of three masters or more: smaller
		// ones are joined by hand, as it would.
		if err := c.join(len(c.Nodes)); err != nil {
			c.Stop()
			return nil, err
		}
	} else {
		args := []string{"--cluster", "create"}
		for _, s := range c.Nodes {
			args = append(args, s.Addr)
		}
		args = append(args, "--cluster-replicas", strconv.Itoa(replicas), "--cluster-yes")
		// redis-cli waits for the nodes to agree with no end of its own; a
		// handshake that timed out (a busy machine) is never tried again,
		// so meetings are repeated while it waits.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		done := make(chan struct{})
		go func() { // ends when redis-cli has returned
			defer close(done)
			c.meetAgain(ctx)
		}()
		out, err := exec.CommandContext(ctx, cli, args...).CombinedOutput()
		cancel()
		<-done
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("redisproc: redis-cli --cluster create: %w: %s", err, lastLines(string(out), 5))
		}
	}
	if err := c.WaitOK(20 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	if err := c.waitReplicas(20 * time.Second); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// startNode starts one cluster node on free ports, bound to host ("" is
// 127.0.0.1). Its bus port, chosen first, may be taken by another process
// before the node binds it (its start then fails whatever client port it
// tries): a new one is chosen.
func startNode(dir, host string, extra []string) (*Server, int, error) {
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		bus, err := FreePort()
		if err != nil {
			return nil, 0, err
		}
		args := append([]string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", strconv.Itoa(int(ClusterNodeTimeout.Milliseconds())), "--cluster-port", strconv.Itoa(bus),
			"--cluster-require-full-coverage", "no", "--cluster-replica-validity-factor", "0", "--repl-diskless-sync-delay", "0"}, extra...)
		s, err := startOnFreePort(func(s *Server) { s.dir, s.extra, s.host = dir, args, host })
		if err == nil {
			return s, bus, nil
		}
		lastErr = err
	}
	return nil, 0, lastErr
}

// meetAgain introduces to the first node, every few seconds until ctx is
// done, each node it does not know (CLUSTER MEET): redis-cli --cluster
// create meets each node once, and waits for ever when a handshake timed
// out. It starts after redis-cli has had time to find every node empty
// and meet them itself.
func (c *Cluster) meetAgain(ctx context.Context) {
	t := time.NewTicker(2 * time.Second)
	defer t.Stop()
	first := time.Now().Add(6 * time.Second)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if time.Now().Before(first) {
			continue
		}
		known, err := c.Nodes[0].DoAll("CLUSTER", "NODES")
		if err != nil {
			continue
		}
		for i, s := range c.Nodes[1:] {
			if !strings.Contains(known, s.Addr+"@") {
				host, port, _ := net.SplitHostPort(s.Addr)
				c.Nodes[0].Do("CLUSTER", "MEET", host, port, strconv.Itoa(c.buses[i+1]))
			}
		}
	}
}

// join gives each of the first masters nodes an even share of the slots
// and introduces every node to the first (CLUSTER ADDSLOTSRANGE, CLUSTER
// MEET).
func (c *Cluster) join(masters int) error {
	n := masters
	for i, s := range c.Nodes[:masters] {
		from, to := i*16384/n, (i+1)*16384/n-1
		if err := s.doOK("CLUSTER", "ADDSLOTSRANGE", strconv.Itoa(from), strconv.Itoa(to)); err != nil {
			return err
		}
		if err := s.doOK("CLUSTER", "SET-CONFIG-EPOCH", strconv.Itoa(i+1)); err != nil {
			return err
		}
	}
	for _, s := range c.Nodes[1:] {
		host, port, _ := net.SplitHostPort(c.Nodes[0].Addr)
		if err := s.doOK("CLUSTER", "MEET", host, port, strconv.Itoa(c.buses[0])); err != nil {
			return err
		}
	}
	return nil
}

// waitReplicas waits until every replica's link to its master is up.
func (c *Cluster) waitReplicas(within time.Duration) error {
	deadline := time.Now().Add(within)
	for _, s := range c.Nodes {
		for {
			info, err := s.Info("replication")
			if err == nil && (strings.Contains(info, "role:master") || strings.Contains(info, "master_link_status:up")) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("redisproc: replica %s not in sync within %v", s.Addr, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	return nil
}

// Seeds are every node's address, comma-separated.
func (c *Cluster) Seeds() string {
	var a []string
	for _, s := range c.Nodes {
		a = append(a, s.Addr)
	}
	return strings.Join(a, ",")
}

// Entry is the backend entry naming the cluster: cluster://seeds.
func (c *Cluster) Entry() string { return "cluster://" + c.Seeds() }

// Stop ends every node.
func (c *Cluster) Stop() {
	for _, s := range c.Nodes {
		s.Stop()
	}
}

// DoAll runs one command on a fresh connection to s and returns its whole
// reply as text: a bulk string's content, an array's elements one per
// line (nested arrays flattened), an error as "ERR ...".
func (s *Server) DoAll(args ...string) (string, error) {
	c, err := s.send(3*time.Second, args...)
	if err != nil {
		return "", err
	}
	defer c.Close()
	var out strings.Builder
	err = readText(bufio.NewReader(c), &out)
	return out.String(), err
}

func readText(r *bufio.Reader, out *strings.Builder) error {
	line, err := r.ReadString('\n')
	if err != nil {
		return err
	}
	line = strings.TrimRight(line, "\r\n")
	if line == "" {
		return errors.New("redisproc: empty reply line")
	}
	switch line[0] {
	case '$':
		n, _ := strconv.Atoi(line[1:])
		if n < 0 {
			return nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(r, buf); err != nil {
			return err
		}
		out.Write(buf[:n])
		out.WriteByte('\n')
	case '*':
		n, _ := strconv.Atoi(line[1:])
		for i := 0; i < n; i++ {
			if err := readText(r, out); err != nil {
				return err
			}
		}
	case '-':
		out.WriteString(line[1:])
		out.WriteByte('\n')
	default:
		out.WriteString(line[1:])
		out.WriteByte('\n')
	}
	return nil
}

// ID is the node's cluster id.
func (s *Server) ID() (string, error) {
	id, err := s.DoAll("CLUSTER", "MYID")
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(id), nil
}

// Role is the node's role: master or slave.
func (s *Server) Role() string {
	info, err := s.Info("replication")
	if err != nil {
		return ""
	}
	for _, l := range strings.Split(info, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "role:"); ok {
			return v
		}
	}
	return ""
}

// Masters are the nodes that are masters now, running.
func (c *Cluster) Masters() []*Server {
	var out []*Server
	for _, s := range c.Nodes {
		if s.Running() && s.Role() == "master" {
			out = append(out, s)
		}
	}
	return out
}

// ReplicaOf is a running replica of master, or nil.
func (c *Cluster) ReplicaOf(master *Server) *Server {
	_, port, _ := net.SplitHostPort(master.Addr)
	for _, s := range c.Nodes {
		if s == master || !s.Running() {
			continue
		}
		info, err := s.Info("replication")
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_port:"+port+"\r") {
			return s
		}
	}
	return nil
}

// Node is the node at addr, or nil.
func (c *Cluster) Node(addr string) *Server {
	for _, s := range c.Nodes {
		if s.Addr == addr {
			return s
		}
	}
	return nil
}

// MasterOfSlot is the node that serves slot now, by the first running
// master's CLUSTER SLOTS.
func (c *Cluster) MasterOfSlot(slot int) *Server {
	for _, s := range c.Masters() {
		return c.Node(s.OwnerOf(slot))
	}
	return nil
}

// OwnerOf is the address of the master that node s names for slot, by its
// CLUSTER SLOTS ("" when it names none, or does not answer).
func (s *Server) OwnerOf(slot int) string {
	out, err := s.DoAll("CLUSTER", "SLOTS")
	if err != nil {
		return ""
	}
	f := strings.Fields(out)
	// Ranges read: from, to, ip, port, id[, ip, port, id]...: find a
	// range by its from/to pair, followed by an address.
	for i := 0; i+3 < len(f); i++ {
		from, e1 := strconv.Atoi(f[i])
		to, e2 := strconv.Atoi(f[i+1])
		if e1 == nil && e2 == nil && net.ParseIP(f[i+2]) != nil && from <= slot && slot <= to && from <= to {
			return net.JoinHostPort(f[i+2], f[i+3])
		}
	}
	return ""
}

// WaitOK waits until every running node says cluster_state:ok and they all
// give the same slot map.
func (c *Cluster) WaitOK(within time.Duration) error {
	deadline := time.Now().Add(within)
	var last string
	for time.Now().Before(deadline) {
		ok := true
		maps := map[string]bool{}
		known := 0
		for _, s := range c.Nodes {
			if s.Running() {
				known++
			}
		}
		for _, s := range c.Nodes {
			if !s.Running() {
				continue
			}
			info, err := s.DoAll("CLUSTER", "INFO")
			if err != nil || !strings.Contains(info, "cluster_state:ok") || !strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(known)+"\r") &&
				!strings.Contains(info, "cluster_known_nodes:"+strconv.Itoa(len(c.Nodes))+"\r") {
				ok, last = false, s.Addr+": "+strings.SplitN(info, "\n", 2)[0]
				break
			}
			m, err := s.DoAll("CLUSTER", "SLOTS")
			if err != nil {
				ok = false
				break
			}
			maps[slotsOnly(m)] = true
		}
		if ok && len(maps) == 1 {
			return nil
		}
		if len(maps) > 1 {
			last = "the nodes give different slot maps"
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("redisproc: cluster not ok within %v: %s", within, last)
}

// slotsOnly keeps, of CLUSTER SLOTS, each range and its master: what all
// nodes must agree on (replicas may be listed in another order).
func slotsOnly(m string) string {
	var out []string
	f := strings.Fields(m)
	for i := 0; i+3 < len(f); i++ {
		from, e1 := strconv.Atoi(f[i])
		to, e2 := strconv.Atoi(f[i+1])
		if e1 == nil && e2 == nil && from <= to && net.ParseIP(f[i+2]) != nil {
			out = append(out, f[i]+"-"+f[i+1]+"@"+f[i+2]+":"+f[i+3])
			i += 3
		}
	}
	slices.Sort(out)
	return strings.Join(out, ",")
}

// WaitMaster waits until s is a master that every running node lists as
// owning slots.
func (c *Cluster) WaitMaster(s *Server, within time.Duration) error {
	deadline := time.Now().Add(within)
	last := ""
	for time.Now().Before(deadline) {
		info, _ := s.DoAll("CLUSTER", "INFO")
		if s.Role() == "master" && strings.Contains(info, "cluster_state:ok") {
			return nil
		}
		last = s.Role() + " " + strings.SplitN(info, "\n", 2)[0]
		time.Sleep(50 * time.Millisecond)
	}
	nodes, _ := s.DoAll("CLUSTER", "NODES")
	return fmt.Errorf("redisproc: %s did not become a master within %v (%s)\n%s", s.Addr, within, last, nodes)
}

// Reshard moves n slots from one master to another with redis-cli
// --cluster reshard (keys and all), as an operator does.
func (c *Cluster) Reshard(ctx context.Context, from, to *Server, n int) error {
	fid, tid, err := ids(from, to)
	if err != nil {
		return err
	}
	out, err := exec.CommandContext(ctx, "redis-cli", "--cluster", "reshard", from.Addr, "--cluster-from", fid, "--cluster-to", tid,
		"--cluster-slots", strconv.Itoa(n), "--cluster-yes", "--cluster-pipeline", "100").CombinedOutput()
	if err != nil {
		return fmt.Errorf("redisproc: redis-cli --cluster reshard: %w: %s", err, lastLines(string(out), 5))
	}
	return nil
}

// Fix runs redis-cli --cluster fix from the first running master,
// answering yes to its questions, as an operator does when a failure left
// slots uncovered or open (a master killed right after it took a slot in
// a resharding may leave its promoted replica without that slot, while
// the other nodes name the replica its owner). A slot with keys on one
// node is given to that node; one without keys anywhere, to any master.
func (c *Cluster) Fix(ctx context.Context) error {
	ms := c.Masters()
	if len(ms) == 0 {
		return errors.New("redisproc: no master runs")
	}
	cmd := exec.CommandContext(ctx, "redis-cli", "--cluster", "fix", ms[0].Addr, "--cluster-yes")
	cmd.Stdin = strings.NewReader(strings.Repeat("yes\n", 16))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("redisproc: redis-cli --cluster fix: %w: %s", err, lastLines(string(out), 5))
	}
	return nil
}

// MoveSlot moves one slot, keys and all, from one master to another by
// hand (SETSLOT IMPORTING/MIGRATING, MIGRATE, SETSLOT NODE), as redis-cli
// does for each slot.
func (c *Cluster) MoveSlot(slot int, from, to *Server) error {
	fid, tid, err := ids(from, to)
	if err != nil {
		return err
	}
	sl := strconv.Itoa(slot)
	if err := to.doOK("CLUSTER", "SETSLOT", sl, "IMPORTING", fid); err != nil {
		return err
	}
	if err := from.doOK("CLUSTER", "SETSLOT", sl, "MIGRATING", tid); err != nil {
		return err
	}
	host, port, _ := net.SplitHostPort(to.Addr)
	for {
		keys, err := from.DoAll("CLUSTER", "GETKEYSINSLOT", sl, "100")
		if err != nil {
			return err
		}
		ks := strings.Fields(keys)
		if len(ks) == 0 {
			break
		}
		args := append([]string{"MIGRATE", host, port, "", "0", "5000", "REPLACE", "KEYS"}, ks...)
		if r, err := from.Do(args...); err != nil || (r != "OK" && r != "NOKEY") {
			return fmt.Errorf("redisproc: MIGRATE: %q %v", r, err)
		}
	}
	for _, s := range []*Server{to, from} {
		if err := s.doOK("CLUSTER", "SETSLOT", sl, "NODE", tid); err != nil {
			return err
		}
	}
	for _, s := range c.Masters() {
		if s != to && s != from {
			s.Do("CLUSTER", "SETSLOT", sl, "NODE", tid)
		}
	}
	return nil
}

// ids are two nodes' cluster ids.
func ids(a, b *Server) (string, string, error) {
	ia, err := a.ID()
	if err != nil {
		return "", "", err
	}
	ib, err := b.ID()
	return ia, ib, err
}

func lastLines(s string, n int) string {
	ls := strings.Split(strings.TrimSpace(s), "\n")
	if len(ls) > n {
		ls = ls[len(ls)-n:]
	}
	return strings.Join(ls, "\n")
}
