package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// etcdMembers is the size of the etcd cluster: the smallest that survives
// the loss of a member, as users deploy it for locks.
const etcdMembers = 3

// etcdPath is where Debian's etcd-server package installs the server.
var etcdPath = "/usr/bin/etcd"

// etcdBinary finds the etcd server, on PATH or at etcdPath.
func etcdBinary() (string, error) {
	if p, err := exec.LookPath("etcd"); err == nil {
		return p, nil
	}
	if _, err := os.Stat(etcdPath); err == nil {
		return etcdPath, nil
	}
	return "", errors.New("etcd not found")
}

// etcdVersion asks the binary for its version ("3.4.23").
func etcdVersion(bin string) string {
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		return "unknown"
	}
	for _, line := range strings.Split(string(out), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd Version: "); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

// etcdCluster is a three-member etcd cluster on loopback ports. The bench
// run owns it: stop ends every member and waits for it, and the members
// are also killed if the bench dies without stopping them (Pdeathsig).
type etcdCluster struct {
	Endpoints []string
	Version   string
	procs     []*exec.Cmd
	dones     []chan struct{}
}

// startEtcd starts the members with their data directories under dataRoot
// and their logs appended to logFile, and waits until the cluster has a
// leader and takes writes. A port taken between its choice and its use
// fails the start; it is retried on other ports.
func startEtcd(dataRoot string, logFile *os.File) (*etcdCluster, error) {
	bin, err := etcdBinary()
	if err != nil {
		return nil, err
	}
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		e, err := startEtcdOnce(bin, filepath.Join(dataRoot, fmt.Sprintf("etcd-%d", attempt)), logFile)
		if err == nil {
			return e, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startEtcdOnce(bin, dataRoot string, logFile *os.File) (*etcdCluster, error) {
	e := &etcdCluster{Version: etcdVersion(bin)}
	var names, peers []string
	for i := 0; i < etcdMembers; i++ {
		cp, err := redisproc.FreePort()
		if err != nil {
			return nil, err
		}
		pp, err := redisproc.FreePort()
		if err != nil {
			return nil, err
		}
		names = append(names, fmt.Sprintf("m%d", i))
		peers = append(peers, fmt.Sprintf("http://127.0.0.1:%d", pp))
		e.Endpoints = append(e.Endpoints, fmt.Sprintf("http://127.0.0.1:%d", cp))
	}
	var cluster []string
	for i := range names {
		cluster = append(cluster, names[i]+"="+peers[i])
	}
	token := fmt.Sprintf("bench-%d", time.Now().UnixNano())
	for i := range names {
		args := []string{"--name", names[i], "--data-dir", filepath.Join(dataRoot, names[i]),
			"--listen-client-urls", e.Endpoints[i], "--advertise-client-urls", e.Endpoints[i],
			"--listen-peer-urls", peers[i], "--initial-advertise-peer-urls", peers[i],
			"--initial-cluster", strings.Join(cluster, ","), "--initial-cluster-state", "new",
			"--initial-cluster-token", token, "--logger", "zap", "--log-outputs", "stderr", "--log-level", "warn"}
		fmt.Fprintf(logFile, "== %s %s %s\n", time.Now().Format(time.RFC3339), bin, strings.Join(args, " "))
		cmd := exec.Command(bin, args...)
		cmd.Stdout, cmd.Stderr = logFile, logFile
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			e.stop()
			return nil, fmt.Errorf("starting etcd: %w", err)
		}
		done := make(chan struct{})
		go func() { // owned by etcdCluster: ends when the member exits (stop waits for it)
			cmd.Wait()
			close(done)
		}()
		e.procs = append(e.procs, cmd)
		e.dones = append(e.dones, done)
	}
	if err := e.waitReady(20 * time.Second); err != nil {
		e.stop()
		return nil, fmt.Errorf("%w; its log is in %s", err, logFile.Name())
	}
	return e, nil
}

// waitReady waits until every member answers Status and a write commits.
func (e *etcdCluster) waitReady(limit time.Duration) error {
	cl, err := e.client()
	if err != nil {
		return err
	}
	defer cl.Close()
	deadline := time.Now().Add(limit)
	for {
		for i, d := range e.dones {
			select {
			case <-d:
				return fmt.Errorf("member m%d exited at start", i)
			default:
			}
		}
		ready := true
		for _, ep := range e.Endpoints {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := cl.Status(ctx, ep)
			cancel()
			if err != nil || st.Leader == 0 {
				ready = false
				break
			}
		}
		if ready {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_, err := cl.Put(ctx, "bench:ready", "1")
			cancel()
			if err == nil {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("cluster on %s did not become ready in %v", strings.Join(e.Endpoints, ","), limit)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// client is a client of the whole cluster, quiet: its warnings would land
// between the table's lines.
func (e *etcdCluster) client() (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{Endpoints: e.Endpoints, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
}

func (e *etcdCluster) pids() []int {
	var out []int
	for _, c := range e.procs {
		out = append(out, c.Process.Pid)
	}
	return out
}

// stop kills every member (their data is scratch, and a graceful stop
// of a whole cluster takes seconds) and waits for it. It may be called
// more than once.
func (e *etcdCluster) stop() {
	for _, c := range e.procs {
		c.Process.Kill()
	}
	for _, d := range e.dones {
		<-d
	}
}

// etcdLocker is the etcd series' client: one client of the cluster, as
// one process of a user's has, and one session (a lease, kept alive) per
// concurrent locker.
type etcdLocker struct {
	cl       *clientv3.Client
	sessions []*concurrency.Session
}

func newEtcdLocker(e *etcdCluster, clients int) (*etcdLocker, error) {
	cl, err := e.client()
	if err != nil {
		return nil, fmt.Errorf("etcd client: %w", err)
	}
	l := &etcdLocker{cl: cl}
	for i := 0; i < clients; i++ {
		s, err := concurrency.NewSession(cl, concurrency.WithTTL(60))
		if err != nil {
			l.close()
			return nil, fmt.Errorf("etcd session: %w", err)
		}
		l.sessions = append(l.sessions, s)
	}
	return l, nil
}

// cycle is concurrency.Mutex Lock then Unlock on the cycle's own key: as
// the Redis series, each cycle locks a key of its own. Uncontended, Lock
// is one transaction (put the session's key under the prefix, read the
// prefix's first holder) and Unlock one delete.
func (l *etcdLocker) cycle() cycleFunc {
	return func(ctx context.Context, w int, key, token string) error {
		m := concurrency.NewMutex(l.sessions[w], key)
		if err := m.Lock(ctx); err != nil {
			return err
		}
		return m.Unlock(ctx)
	}
}

// close revokes the sessions' leases and closes the client.
func (l *etcdLocker) close() {
	for _, s := range l.sessions {
		s.Close()
	}
	l.cl.Close()
}

// fsName names the file system that holds path ("tmpfs", "ext4", ...).
func fsName(path string) string {
	var st syscall.Statfs_t
	if err := syscall.Statfs(path, &st); err != nil {
		return "unknown"
	}
	switch uint32(st.Type) {
	case 0x01021994:
		return "tmpfs"
	case 0x794c7630:
		return "overlayfs"
	case 0xef53:
		return "ext4"
	case 0x58465342:
		return "xfs"
	case 0x9123683e:
		return "btrfs"
	case 0x2fc12fc1:
		return "zfs"
	}
	return fmt.Sprintf("0x%x", uint32(st.Type))
}
