package netio

import (
	"bytes"
	"strconv"
	"time"

	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// What a server says about itself, read from its replies to the identity
// check: INFO's run, uptime, role and memory policy, and CLIENT INFO's id
// and address.

// parseIdentity reads run_id, uptime_in_seconds and role from INFO.
func parseIdentity(info []byte) (id quorum.Identity, role, evicts string) {
	id = quorum.Identity{Uptime: -1}
	role = "master" // a backend whose INFO does not say is taken at its word as a master
	maxmemory := int64(0)
	policy := ""
	for _, line := range bytes.Split(info, []byte("\n")) {
		line = bytes.TrimRight(line, "\r")
		if v, ok := bytes.CutPrefix(line, []byte("maxmemory:")); ok {
			maxmemory, _ = strconv.ParseInt(string(v), 10, 64)
		} else if v, ok := bytes.CutPrefix(line, []byte("maxmemory_policy:")); ok {
			policy = string(v)
		} else if v, ok := bytes.CutPrefix(line, []byte("run_id:")); ok {
			id.RunID = string(v)
		} else if v, ok := bytes.CutPrefix(line, []byte("uptime_in_seconds:")); ok {
			if n, err := strconv.ParseInt(string(v), 10, 64); err == nil && n >= 0 {
				id.Uptime = time.Duration(n) * time.Second
			}
		} else if v, ok := bytes.CutPrefix(line, []byte("role:")); ok {
			role = string(v)
		}
	}
	if maxmemory > 0 && policy != "" && policy != "noeviction" {
		evicts = policy
	}
	return id, role, evicts
}

// evictionWhy explains why a master that may evict keys does not count.
func evictionWhy(policy string) string {
	return "it may evict keys under memory pressure (maxmemory-policy " + policy +
		"), which forgets locks with no restart to see: set maxmemory-policy noeviction (or maxmemory 0)"
}

// parseClientInfo reads id= and addr= from CLIENT INFO.
func parseClientInfo(info []byte) (id int64, addr string) {
	for _, f := range bytes.Fields(info) {
		if v, ok := bytes.CutPrefix(f, []byte("id=")); ok {
			id, _ = strconv.ParseInt(string(v), 10, 64)
		} else if v, ok := bytes.CutPrefix(f, []byte("addr=")); ok {
			addr = string(v)
		}
	}
	return id, addr
}
