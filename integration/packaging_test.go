package integration

import (
	"archive/tar"
	"bytes"
	"context"
	"debug/elf"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.yaml.in/yaml/v3"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
	"github.com/redlock-proxy/redlock-proxy/internal/testkit/redisproc"
)

// podman runs Debian's podman as root without touching the machine's
// image store or needing systemd: its storage (vfs) lives under dir.
func podman(t *testing.T, dir string) []string {
	t.Helper()
	bin, err := exec.LookPath("podman")
	if err != nil {
		t.Fatalf("podman not found (Debian's podman; ./test.sh installs it): %v", err)
	}
	return []string{bin, "--root", filepath.Join(dir, "root"), "--runroot", filepath.Join(dir, "run"),
		"--storage-driver", "vfs", "--cgroup-manager", "cgroupfs", "--events-backend", "none"}
}

func runCmd(t *testing.T, env []string, argv ...string) string {
	t.Helper()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", strings.Join(argv, " "), err, out)
	}
	return string(out)
}

// The image is built as the README says (packaging/build.sh: the static
// binaries first, then FROM scratch), holds the two binaries and nothing
// else, runs as a non-root user, and the proxy copied out of it runs: it
// serves locks over real masters and names its build; the probe copied out
// of it tells ready from not ready.
func TestContainerImage(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Fatal("building the image with podman needs root here (CI runs as root)")
	}
	dir := t.TempDir()
	pm := podman(t, dir)
	const tag = "localhost/redlock-proxy:test"
	dist := filepath.Join(dir, "dist")
	runCmd(t, []string{"ENGINE=" + strings.Join(pm, " "), "DIST=" + dist, "VERSION=9.9.9-test", "TMPDIR=" + dir}, "../packaging/build.sh", tag)
	t.Cleanup(func() { exec.Command(pm[0], append(pm[1:], "rmi", "-f", tag)...).Run() })

	// Non-root, the proxy as entrypoint, its ports.
	var inspect []struct {
		Config struct {
			User         string
			Entrypoint   []string
			Cmd          []string
			ExposedPorts map[string]struct{}
		}
	}
	if err := json.Unmarshal([]byte(runCmd(t, nil, append(pm, "image", "inspect", tag)...)), &inspect); err != nil || len(inspect) != 1 {
		t.Fatalf("podman image inspect: %v", err)
	}
	ic := inspect[0].Config
	if ic.User != "65532:65532" || !slices.Equal(ic.Entrypoint, []string{"/redlock-proxy"}) ||
		!slices.Equal(ic.Cmd, []string{"-listen", "0.0.0.0:7379", "-admin", "0.0.0.0:7380"}) {
		t.Errorf("image config: user %q, entrypoint %q, cmd %q", ic.User, ic.Entrypoint, ic.Cmd)
	}
	for _, p := range []string{"7379/tcp", "7380/tcp"} {
		if _, ok := ic.ExposedPorts[p]; !ok {
			t.Errorf("image does not expose %s: %v", p, ic.ExposedPorts)
		}
	}

	// Its files: the two binaries, no shell.
	archive := filepath.Join(dir, "image.tar")
	runCmd(t, nil, append(pm, "save", "--format", "docker-archive", "-o", archive, tag)...)
	if files := imageFiles(t, archive); !slices.Equal(files, []string{"probe", "redlock-proxy"}) {
		t.Errorf("image files = %q; want the proxy and the probe only", files)
	}

	// Copied out of the image and started as processes.
	ctr := strings.TrimSpace(runCmd(t, nil, append(pm, "create", tag)...))
	t.Cleanup(func() { exec.Command(pm[0], append(pm[1:], "rm", "-f", ctr)...).Run() })
	bin, probe := filepath.Join(dir, "redlock-proxy"), filepath.Join(dir, "probe")
	runCmd(t, nil, append(pm, "cp", ctr+":/redlock-proxy", bin)...)
	runCmd(t, nil, append(pm, "cp", ctr+":/probe", probe)...)
	for _, b := range []string{bin, probe} {
		if interp := elfInterpreter(t, b); interp != "" {
			t.Errorf("%s is dynamically linked (interpreter %s); want a static binary", filepath.Base(b), interp)
		}
	}

	servers := startRedis(t, 3)
	addrs := addrsOf(servers)
	port, _ := redisproc.FreePort()
	adminPort, _ := redisproc.FreePort()
	addr, admin := fmt.Sprintf("127.0.0.1:%d", port), fmt.Sprintf("127.0.0.1:%d", adminPort)
	readyz := "http://" + admin + "/readyz"
	if out, err := exec.Command(probe, readyz).CombinedOutput(); err == nil {
		t.Errorf("probe with nothing listening exited 0: %s", out)
	}
	proxy := exec.Command(bin, "-listen", addr, "-admin", admin, "-backends", strings.Join(addrs, ","),
		"-restart_quarantine", "run-id") // fresh masters: the default rule would refuse locks for max_ttl
	var logs syncBuffer // read while the proxy writes to it
	proxy.Stderr = &logs
	if err := proxy.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- proxy.Wait() }() // ends when the proxy does, below
	defer func() {
		proxy.Process.Signal(sigterm())
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			proxy.Process.Kill()
			<-exited
		}
	}()
	waitServing(t, addr)
	var out []byte
	waitFor(t, 15*time.Second, "the probe to see the proxy ready", func() error {
		var err error
		if out, err = exec.Command(probe, readyz).CombinedOutput(); err != nil {
			return fmt.Errorf("%w %s\n%s", err, out, logs.String())
		}
		return nil
	})
	if !strings.Contains(string(out), "200 ready: 3 of 3 backends count") {
		t.Errorf("probe output %q", out)
	}
	cl := redis.NewClient(&redis.Options{Addr: addr})
	defer cl.Close()
	ctx := context.Background()
	if ok, err := cl.SetNX(ctx, uniqueKey("image"), "t", 5*time.Second).Result(); !ok || err != nil {
		t.Fatalf("SET NX through the image's proxy: %v, %v", ok, err)
	}
	head := strings.TrimSpace(runCmd(t, nil, "git", "rev-parse", "HEAD"))
	info, err := cl.Info(ctx, "server").Result()
	if err != nil || !strings.Contains(info, "redlock_proxy_version:9.9.9-test\r\n") || !strings.Contains(info, "redlock_proxy_revision:"+head+"\r\n") {
		t.Errorf("INFO server of the image's proxy (%v) lacks version 9.9.9-test and revision %s:\n%s", err, head, info)
	}
	_, m := httpGet(t, "http://"+admin+"/metrics")
	if !regexp.MustCompile(`redlock_proxy_build_info\{goversion="go[^"]+",revision="` + head + `",version="9.9.9-test"\} 1`).MatchString(m) {
		t.Errorf("/metrics has no build info for revision %s", head)
	}
}

// imageFiles lists the regular files in a docker-archive's layers.
func imageFiles(t *testing.T, archive string) []string {
	t.Helper()
	f, err := os.Open(archive)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var files []string
	outer := tar.NewReader(f)
	for {
		h, err := outer.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasSuffix(h.Name, ".tar") {
			continue
		}
		layer := tar.NewReader(outer)
		for {
			lh, err := layer.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, strings.TrimPrefix(lh.Name, "/"))
		}
	}
	slices.Sort(files)
	return files
}

// elfInterpreter is the dynamic loader a binary names, or "" for a static one.
func elfInterpreter(t *testing.T, path string) string {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			b, _ := io.ReadAll(p.Open())
			return strings.TrimRight(string(b), "\x00")
		}
	}
	return ""
}

// proxyArgs checks that args are flags the proxy accepts, and returns the
// loaded configuration and the shutdown grace they give.
func proxyArgs(t *testing.T, where string, args []string) (config.Config, time.Duration) {
	t.Helper()
	cfg, _, err := config.Load(args, io.Discard)
	if err != nil {
		t.Fatalf("%s: the proxy refuses %q: %v", where, args, err)
	}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "-shutdown_grace=") }) {
		t.Errorf("%s: no -shutdown_grace=DURATION among %q", where, args)
	}
	return cfg, cfg.ShutdownGrace
}

// portOf is the port of a host:port.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	i := strings.LastIndexByte(addr, ':')
	p, err := strconv.Atoi(addr[i+1:])
	if err != nil {
		t.Fatalf("no port in %q", addr)
	}
	return p
}

// The compose example: three masters with health checks, the proxy over
// them (waiting for them to be healthy), its health check the probe on
// /readyz with a start period covering the first start's wait, and a stop
// grace longer than the proxy's shutdown grace.
func TestComposeExample(t *testing.T) {
	raw, err := os.ReadFile("../examples/compose/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services map[string]struct {
			Image       string
			Command     []string
			DependsOn   map[string]struct{ Condition string } `yaml:"depends_on"`
			Healthcheck struct {
				Test        []string
				StartPeriod string `yaml:"start_period"`
			}
			StopGracePeriod string `yaml:"stop_grace_period"`
			Ports           []string
		}
	}
	if err := yaml.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	p, ok := f.Services["redlock-proxy"]
	if !ok {
		t.Fatal("no redlock-proxy service")
	}
	cfg, grace := proxyArgs(t, "compose.yaml", p.Command)
	if len(cfg.Backends) != 3 {
		t.Fatalf("backends %q; want three masters", cfg.Backends)
	}
	for _, b := range cfg.Backends {
		name := b[:strings.LastIndexByte(b, ':')]
		m, ok := f.Services[name]
		if !ok || !strings.HasPrefix(m.Image, "redis:") {
			t.Errorf("backend %s is no redis service of the file", b)
			continue
		}
		if !slices.Equal(m.Healthcheck.Test, []string{"CMD", "redis-cli", "ping"}) {
			t.Errorf("master %s health check %q", name, m.Healthcheck.Test)
		}
		if i := slices.Index(m.Command, "--appendfsync"); i < 0 || m.Command[i+1] != "always" {
			t.Errorf("master %s does not sync every write: %q", name, m.Command)
		}
		if p.DependsOn[name].Condition != "service_healthy" {
			t.Errorf("the proxy does not wait for %s to be healthy: %+v", name, p.DependsOn)
		}
	}
	want := []string{"CMD", "/probe", fmt.Sprintf("http://127.0.0.1:%d/readyz", portOf(t, cfg.Admin))}
	if !slices.Equal(p.Healthcheck.Test, want) {
		t.Errorf("proxy health check %q; want %q", p.Healthcheck.Test, want)
	}
	hold := cfg.MaxTTL + cfg.Timing().Drift(cfg.MaxTTL)
	if sp, err := time.ParseDuration(p.Healthcheck.StartPeriod); err != nil || sp < hold {
		t.Errorf("start_period %q; want at least the first start's wait, %v", p.Healthcheck.StartPeriod, hold)
	}
	if sg, err := time.ParseDuration(p.StopGracePeriod); err != nil || sg <= grace {
		t.Errorf("stop_grace_period %q; want more than shutdown_grace %v", p.StopGracePeriod, grace)
	}
	if cfg.ServesPprof() {
		t.Error("the example serves pprof on a non-loopback admin address")
	}
	for _, port := range []string{fmt.Sprintf(":%d:%d", portOf(t, cfg.Listen), portOf(t, cfg.Listen)), fmt.Sprintf(":%d:%d", portOf(t, cfg.Admin), portOf(t, cfg.Admin))} {
		if !slices.ContainsFunc(p.Ports, func(s string) bool { return strings.HasSuffix(s, port) }) {
			t.Errorf("ports %q do not publish %s", p.Ports, port)
		}
	}
}

// k8sObject is what the Kubernetes example's checks read of each object.
type k8sObject struct {
	Kind     string
	Metadata struct {
		Name   string
		Labels map[string]string
	}
	Spec struct {
		Replicas     int
		MinAvailable int `yaml:"minAvailable"`
		Selector     struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		}
		Template struct {
			Metadata struct{ Labels map[string]string }
			Spec     struct {
				TerminationGracePeriodSeconds int `yaml:"terminationGracePeriodSeconds"`
				SecurityContext               struct {
					RunAsNonRoot   bool `yaml:"runAsNonRoot"`
					RunAsUser      int  `yaml:"runAsUser"`
					SeccompProfile struct {
						Type string
					} `yaml:"seccompProfile"`
				} `yaml:"securityContext"`
				Containers []struct {
					Args  []string
					Env   []struct{ Name, Value string }
					Ports []struct {
						Name          string
						ContainerPort int `yaml:"containerPort"`
					}
					ReadinessProbe k8sProbe `yaml:"readinessProbe"`
					LivenessProbe  k8sProbe `yaml:"livenessProbe"`
					Resources      struct {
						Limits map[string]string
					}
				}
			}
		}
		// Service: its selector is a plain map; ServiceMonitor: matchLabels.
		Ports []struct {
			Name       string
			TargetPort string `yaml:"targetPort"`
		}
		Endpoints []struct{ Port, Path string }
	}
	Selector map[string]string // a Service's, read apart (see below)
}

type k8sProbe struct {
	HTTPGet          struct{ Path, Port string } `yaml:"httpGet"`
	PeriodSeconds    int                         `yaml:"periodSeconds"`
	FailureThreshold int                         `yaml:"failureThreshold"`
}

// mebibytes reads a Kubernetes memory quantity given in Mi or Gi.
func mebibytes(q string) int {
	switch {
	case strings.HasSuffix(q, "Mi"):
		n, _ := strconv.Atoi(strings.TrimSuffix(q, "Mi"))
		return n
	case strings.HasSuffix(q, "Gi"):
		n, _ := strconv.Atoi(strings.TrimSuffix(q, "Gi"))
		return n * 1024
	}
	return 0
}

// The Kubernetes example: readiness on /readyz and liveness on /healthz of
// the admin port; a drain delay (shutdown_delay) at least as long as the
// readiness probe takes to see /readyz at 503, and a termination period
// above the delay and the shutdown grace; a non-root user and the
// RuntimeDefault seccomp profile (the restricted Pod Security profile); a
// memory limit that holds max_clients busy clients; a CPU limit (or
// GOMAXPROCS) so that the proxy does not size itself to the node; a
// Service and a PodDisruptionBudget that select the pods; and a
// ServiceMonitor that scrapes the Service's admin port and carries the
// release label Prometheus Operator installs select on.
func TestKubernetesExample(t *testing.T) {
	raw, err := os.ReadFile("../examples/kubernetes/redlock-proxy.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := map[string]k8sObject{}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var n yaml.Node
		if err := dec.Decode(&n); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		var o k8sObject
		if err := n.Decode(&o); err != nil {
			t.Fatal(err)
		}
		if o.Kind == "Service" {
			var s struct {
				Spec struct{ Selector map[string]string }
			}
			n.Decode(&s)
			o.Selector = s.Spec.Selector
		}
		objs[o.Kind] = o
	}
	for _, kind := range []string{"Deployment", "Service", "PodDisruptionBudget", "ServiceMonitor"} {
		if _, ok := objs[kind]; !ok {
			t.Fatalf("no %s in the example", kind)
		}
	}
	d := objs["Deployment"]
	pod := d.Spec.Template
	if len(pod.Spec.Containers) != 1 {
		t.Fatalf("%d containers", len(pod.Spec.Containers))
	}
	c := pod.Spec.Containers[0]
	cfg, grace := proxyArgs(t, "redlock-proxy.yaml", c.Args)
	if len(cfg.Backends) != 3 {
		t.Errorf("backends %q; want three masters", cfg.Backends)
	}
	ports := map[string]int{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	if ports["redis"] != portOf(t, cfg.Listen) || ports["admin"] != portOf(t, cfg.Admin) {
		t.Errorf("container ports %v; want redis on listen's, admin on admin's", ports)
	}
	if r := c.ReadinessProbe.HTTPGet; r.Path != "/readyz" || r.Port != "admin" {
		t.Errorf("readiness probe %+v; want /readyz on admin", r)
	}
	if l := c.LivenessProbe.HTTPGet; l.Path != "/healthz" || l.Port != "admin" {
		t.Errorf("liveness probe %+v; want /healthz on admin", l)
	}
	if tg := time.Duration(pod.Spec.TerminationGracePeriodSeconds) * time.Second; tg <= cfg.ShutdownDelay+grace {
		t.Errorf("terminationGracePeriodSeconds %v; want more than shutdown_delay %v + shutdown_grace %v", tg, cfg.ShutdownDelay, grace)
	}
	if r := c.ReadinessProbe; cfg.ShutdownDelay < time.Duration(r.PeriodSeconds*r.FailureThreshold)*time.Second {
		t.Errorf("shutdown_delay %v; want at least the readiness probe's period times its failure threshold (%ds x %d), so that /readyz at 503 is seen before the listener closes",
			cfg.ShutdownDelay, r.PeriodSeconds, r.FailureThreshold)
	}
	if sc := pod.Spec.SecurityContext; !sc.RunAsNonRoot || sc.RunAsUser != 65532 || sc.SeccompProfile.Type != "RuntimeDefault" {
		t.Errorf("pod security context %+v; want non-root, the image's user 65532, seccompProfile RuntimeDefault", sc)
	}
	// A busy client: budget 32 KiB; the process itself, 64 MiB.
	if lim, need := mebibytes(c.Resources.Limits["memory"]), 64+cfg.MaxClients*32/1024; lim < need {
		t.Errorf("memory limit %q for max_clients %d; want at least %d Mi", c.Resources.Limits["memory"], cfg.MaxClients, need)
	}
	if c.Resources.Limits["cpu"] == "" && cfg.GoMaxProcs == 0 && !slices.ContainsFunc(c.Env, func(e struct{ Name, Value string }) bool { return e.Name == "GOMAXPROCS" }) {
		t.Error("no CPU limit and no GOMAXPROCS: the proxy would size itself to the node's CPUs")
	}
	if cfg.ServesPprof() {
		t.Error("the example serves pprof on a non-loopback admin address")
	}
	labels := pod.Metadata.Labels
	selects := func(sel map[string]string, labels map[string]string) bool {
		for k, v := range sel {
			if labels[k] != v {
				return false
			}
		}
		return len(sel) > 0
	}
	if !selects(d.Spec.Selector.MatchLabels, labels) {
		t.Errorf("the Deployment's selector %v does not select its pods %v", d.Spec.Selector.MatchLabels, labels)
	}
	svc := objs["Service"]
	if !selects(svc.Selector, labels) {
		t.Errorf("the Service's selector %v does not select the pods %v", svc.Selector, labels)
	}
	svcPorts := map[string]bool{}
	for _, p := range svc.Spec.Ports {
		if _, ok := ports[p.TargetPort]; !ok {
			t.Errorf("Service port %s targets %s, no port of the container", p.Name, p.TargetPort)
		}
		svcPorts[p.Name] = true
	}
	pdb := objs["PodDisruptionBudget"]
	if !selects(pdb.Spec.Selector.MatchLabels, labels) || pdb.Spec.MinAvailable < 1 || pdb.Spec.MinAvailable >= d.Spec.Replicas {
		t.Errorf("PodDisruptionBudget %+v for %d replicas; want it to select the pods and keep some but not all", pdb.Spec, d.Spec.Replicas)
	}
	sm := objs["ServiceMonitor"]
	if !selects(sm.Spec.Selector.MatchLabels, svc.Metadata.Labels) {
		t.Errorf("the ServiceMonitor's selector %v does not select the Service %v", sm.Spec.Selector.MatchLabels, svc.Metadata.Labels)
	}
	if len(sm.Spec.Endpoints) != 1 || !svcPorts[sm.Spec.Endpoints[0].Port] || sm.Spec.Endpoints[0].Path != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %+v; want /metrics on a Service port", sm.Spec.Endpoints)
	}
	if sm.Metadata.Labels["release"] == "" {
		t.Errorf("ServiceMonitor labels %v; want the release label Prometheus Operator installs select on", sm.Metadata.Labels)
	}
}
