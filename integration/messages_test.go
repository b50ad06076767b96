package integration

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/app/config"
)

// readyzLine waits until /readyz at admin has a line for backend i that
// contains want, and returns it.
func readyzLine(t *testing.T, admin string, i int, want string) string {
	t.Helper()
	prefix := fmt.Sprintf("backend %d ", i)
	var line string
	waitFor(t, 15*time.Second, fmt.Sprintf("/readyz to say %q of backend %d", want, i), func() error {
		_, body := httpGet(t, "http://"+admin+"/readyz")
		for _, l := range strings.Split(body, "\n") {
			if strings.HasPrefix(l, prefix) && strings.Contains(l, want) {
				line = l
				return nil
			}
		}
		return fmt.Errorf("/readyz:\n%s", body)
	})
	return line
}

// A hung master (SIGSTOP) is "stopped answering" in /readyz, INFO and the
// log alike, never a socket error of the proxy's own closing.
func TestHungMasterSaysStoppedAnsweringEverywhere(t *testing.T) {
	servers := startRedis(t, 3)
	logs := &syncBuffer{}
	a := startLogged(t, []string{servers[0].Addr, servers[1].Addr, servers[2].Addr}, logs, fastTimeout)
	waitHTTP(t, "http://"+a.AdminAddr()+"/readyz", 200)
	servers[0].Pause()
	defer servers[0].Resume()
	cl := proxyClient(t, a.Addr(), 2)
	cl.Do(t.Context(), "SET", uniqueKey("hung"), "t", "NX", "PX", "5000") // a command for it to leave unanswered
	readyzLine(t, a.AdminAddr(), 0, "down: stopped answering")
	info, _ := cl.Info(t.Context(), "proxy").Result()
	if !strings.Contains(info, "backend0_last_error:stopped answering") {
		t.Errorf("INFO proxy does not say stopped answering:\n%s", info)
	}
	waitLog(t, logs, "stopped answering", 3*time.Second)
	if strings.Contains(logs.String(), "use of closed network connection") || strings.Contains(info, "use of closed network connection") {
		t.Errorf("a hung master is described as the proxy's own closed socket:\n%s\n%s", logs.String(), info)
	}
}

// A backend that is no Redis master is named for what it is: twemproxy
// (nutcracker), which closes the connection on TIME and CLIENT, and
// another redlock-proxy; each said in /readyz and logged once.
func TestBackendsThatAreNotMastersAreNamed(t *testing.T) {
	servers := startRedis(t, 3)
	nutcracker, err := exec.LookPath("nutcracker")
	if err != nil {
		nutcracker = "/usr/sbin/nutcracker" // Debian installs it there, beyond a user's PATH
	}
	dir := t.TempDir()
	twemAddr := freeAddr(t)
	conf := filepath.Join(dir, "nutcracker.yml")
	os.WriteFile(conf, []byte(fmt.Sprintf("locks:\n  listen: %s\n  redis: true\n  servers:\n    - %s:1\n", twemAddr, servers[2].Addr)), 0o600)
	_, statsPort, _ := strings.Cut(freeAddr(t), ":")
	twem := exec.Command(nutcracker, "-c", conf, "-s", statsPort)
	if err := twem.Start(); err != nil {
		t.Fatalf("nutcracker (./test.sh installs it): %v", err)
	}
	t.Cleanup(func() { twem.Process.Kill(); twem.Wait() })
	other, _ := startApp(t, []string{servers[1].Addr, servers[2].Addr}, func(c *config.Config) { c.Admin = "" })

	logs := &syncBuffer{}
	a := startLogged(t, []string{servers[0].Addr, twemAddr, other.Addr()}, logs)
	readyzLine(t, a.AdminAddr(), 1, "not a Redis master: it closed the connection during the identity check")
	readyzLine(t, a.AdminAddr(), 2, "it is a redlock-proxy, not a Redis master")
	time.Sleep(2 * time.Second) // attempts go on: each is logged once per state change
	for _, want := range []string{"backend=1 addr=" + twemAddr, "backend=2 addr=" + other.Addr()} {
		if n := strings.Count(logs.String(), want); n != 1 {
			t.Errorf("%d log lines for %s; want 1:\n%s", n, want, logs.String())
		}
	}
}
