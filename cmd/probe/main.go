// Command probe is the container image's health check, for runtimes that
// run one inside the container (docker compose, Docker, Podman): the image
// has no shell and no curl. It GETs a URL of the proxy's admin address,
// http://127.0.0.1:7380/readyz unless given another, prints the answer,
// and exits 0 on 200 and 1 otherwise.
package main

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"time"
)

func main() { os.Exit(probe(os.Args[1:], os.Stdout)) }

func probe(args []string, out io.Writer) int {
	url := "http://127.0.0.1:7380/readyz"
	switch len(args) {
	case 0:
	case 1:
		url = args[0]
	default:
		fmt.Fprintln(out, "usage: probe [URL]")
		return 2
	}
	cl := http.Client{Timeout: 2 * time.Second}
	resp, err := cl.Get(url)
	if err != nil {
		fmt.Fprintln(out, "probe:", err)
		return 1
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	fmt.Fprintf(out, "%s: %d %s", url, resp.StatusCode, body)
	if resp.StatusCode != http.StatusOK {
		return 1
	}
	return 0
}
