package config

import (
	"fmt"
	"strings"
)

// A backend entry is one vote: a plain Redis master (host:port), a
// Sentinel-managed master (sentinel://HOST:PORT[,HOST:PORT...]/MASTER_NAME),
// or a Redis Cluster (cluster://HOST:PORT[,HOST:PORT...], any nodes of it,
// as seeds). In the -backends flag, whose entries are comma-separated, the
// addresses inside one entry are separated by "+" instead
// (sentinel://h1:26379+h2:26379/locks-a,10.0.3.1:6379); YAML takes either.

// BackendKind is what a backend entry names.
type BackendKind uint8

// The kinds of backend entries.
const (
	BackendAddr     BackendKind = iota // one master
	BackendSentinel                    // a master that a group of Sentinels manages
	BackendCluster                     // a Redis Cluster, keys routed by slot
)

// BackendSpec is a parsed backend entry.
type BackendSpec struct {
	Kind  BackendKind
	Addrs []string // the master; the Sentinels; the cluster's seed nodes (canonical host:port)
	Name  string   // the Sentinel master name
	Entry string   // the entry as written
}

// Key identifies the backend for the duplicate check: two entries with the
// same key are the same vote.
func (b BackendSpec) Key() string {
	switch b.Kind {
	case BackendSentinel:
		return "sentinel:" + b.Name + "@" + strings.Join(b.Addrs, "+")
	case BackendCluster:
		return "cluster:" + strings.Join(b.Addrs, "+")
	}
	return b.Addrs[0]
}

// ParseBackend reads one backend entry.
func ParseBackend(entry string) (BackendSpec, error) {
	spec := BackendSpec{Entry: entry}
	rest := entry
	switch {
	case strings.HasPrefix(entry, "sentinel://"):
		spec.Kind = BackendSentinel
		rest = strings.TrimPrefix(entry, "sentinel://")
		slash := strings.LastIndexByte(rest, '/')
		if slash < 0 || slash == len(rest)-1 {
			return spec, fmt.Errorf("%q: a Sentinel backend is sentinel://HOST:PORT[,HOST:PORT...]/MASTER_NAME", entry)
		}
		spec.Name, rest = rest[slash+1:], rest[:slash]
	case strings.HasPrefix(entry, "cluster://"):
		spec.Kind = BackendCluster
		rest = strings.TrimSuffix(strings.TrimPrefix(entry, "cluster://"), "/")
	case strings.Contains(entry, "://"):
		return spec, fmt.Errorf("%q: a backend is host:port, sentinel://HOST:PORT[,HOST:PORT...]/MASTER_NAME or cluster://HOST:PORT[,HOST:PORT...]", entry)
	}
	seen := map[string]bool{}
	for _, a := range strings.FieldsFunc(rest, func(r rune) bool { return r == ',' || r == '+' }) {
		canon, err := parseAddr(strings.TrimSpace(a), false)
		if err != nil {
			return spec, err
		}
		if !seen[canon] {
			seen[canon] = true
			spec.Addrs = append(spec.Addrs, canon)
		}
	}
	switch {
	case len(spec.Addrs) == 0:
		return spec, fmt.Errorf("%q names no address", entry)
	case spec.Kind == BackendAddr && len(spec.Addrs) > 1:
		return spec, fmt.Errorf("%q: one master per entry (host:port)", entry)
	}
	return spec, nil
}

// BackendSpecs parses every backend entry.
func (c Config) BackendSpecs() ([]BackendSpec, error) {
	var out []BackendSpec
	for _, b := range c.Backends {
		s, err := ParseBackend(b)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// splitBackends splits the -backends flag: entries by ",", except inside
// the addresses of a sentinel:// entry up to its "/MASTER_NAME" (a comma
// there is taken as "+").
func splitBackends(s string) []string {
	var out []string
	for _, part := range splitList(s) {
		if n := len(out); n > 0 && strings.HasPrefix(out[n-1], "sentinel://") && !strings.Contains(strings.TrimPrefix(out[n-1], "sentinel://"), "/") {
			out[n-1] += "+" + part
			continue
		}
		out = append(out, part)
	}
	return out
}
