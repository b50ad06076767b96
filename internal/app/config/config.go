// Package config reads redlock-proxy's configuration from a YAML file and
// command-line flags (flags override the file; both use the same names) and
// validates it.
//
// It promises: every configuration it returns has passed Validate; every
// refusal names the key and the rule it breaks; unknown keys are refused,
// not ignored.
package config

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"reflect"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/redlock-proxy/redlock-proxy/internal/base/acl"
	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/proxy"
	"github.com/redlock-proxy/redlock-proxy/quorum"
)

// Config is the whole configuration. YAML keys and flag names are the same.
type Config struct {
	Listen string `yaml:"listen"` // client address (default 127.0.0.1:7379)
	Admin  string `yaml:"admin"`  // HTTP metrics and health address; "" disables (default 127.0.0.1:7380)
	// Pprof is whether the admin address also serves Go's profiles
	// (/debug/pprof/): "auto" (default: only when the admin address is a
	// loopback one, so that exposing /metrics does not expose them),
	// "true" or "false".
	Pprof            string        `yaml:"pprof"`
	Backends         List          `yaml:"backends"`          // Redis masters: host:port, or sentinel://HOST:PORT[,HOST:PORT...]/MASTER_NAME; none: embedded demo backends
	EmbeddedBackends int           `yaml:"embedded_backends"` // in-process backends when none are configured (default 3)
	DriftFactor      float64       `yaml:"drift_factor"`      // clock drift allowance per unit of TTL (default 0.01)
	DriftFloor       time.Duration `yaml:"drift_floor"`       // added to the drift (default 2ms)
	MinValidity      time.Duration `yaml:"min_validity"`      // least validity a granted lock leaves (default 0)
	BackendTimeout   time.Duration `yaml:"backend_timeout"`   // per-backend timeout of each command (default 50ms)
	MaxTTL           time.Duration `yaml:"max_ttl"`           // longest TTL a client may ask for (default 5m)
	// RestartQuarantine is how a backend that may have lost writes is kept
	// out of quorums for max_ttl + drift: "strict" (default: from what the
	// master reports, its uptime and the replication marker the proxies keep
	// on it, so every proxy decides alike), "run-id" (trust a backend seen
	// for the first time, quarantine a changed run_id: unsafe when a proxy
	// starts soon after a master restarted), "off" (never: unsafe).
	RestartQuarantine string `yaml:"restart_quarantine"`
	// Clients.
	RequirePass     string        `yaml:"requirepass"`       // password of the default user (default: none, no AUTH needed)
	Users           []UserConfig  `yaml:"users"`             // more users for AUTH user pass (with users and no requirepass, the default user is disabled)
	TLSCertFile     string        `yaml:"tls_cert_file"`     // serve clients over TLS with this certificate...
	TLSKeyFile      string        `yaml:"tls_key_file"`      // ...and key (PEM)
	TLSCAFile       string        `yaml:"tls_ca_file"`       // CA for client certificates
	TLSAuthClients  bool          `yaml:"tls_auth_clients"`  // require client certificates signed by tls_ca_file
	MaxClients      int           `yaml:"max_clients"`       // connected clients (default 10000)
	IdleTimeout     time.Duration `yaml:"idle_timeout"`      // close a client idle this long (default 0: never)
	CommandTimeout  time.Duration `yaml:"command_timeout"`   // a started command must arrive whole within this (default 10s)
	WriteTimeout    time.Duration `yaml:"write_timeout"`     // give up on a client that does not read its replies (default 10s)
	ShutdownGrace   time.Duration `yaml:"shutdown_grace"`    // at SIGTERM, how long commands in flight and their undos may take to finish (default 5s)
	ShutdownDelay   time.Duration `yaml:"shutdown_delay"`    // at SIGTERM, how long /readyz answers 503 while clients are still served, before the listener closes (default 0)
	MaxArgs         int           `yaml:"max_args"`          // arguments per command (default 4096)
	MaxBulk         int           `yaml:"max_bulk"`          // bytes per argument (default 512 KiB)
	MaxInline       int           `yaml:"max_inline"`        // bytes per inline command line (default 64 KiB)
	MaxCommandBytes int           `yaml:"max_command_bytes"` // bytes buffered for one command (default 1 MiB)
	MaxToken        int           `yaml:"max_token"`         // bytes in a lock token, and in a value a read brings back (default 1 KiB)

	// Backends.
	BackendUsername      string `yaml:"backend_username"`        // AUTH user for the backends (never a client's)
	BackendPassword      string `yaml:"backend_password"`        // AUTH password for the backends
	BackendTLS           bool   `yaml:"backend_tls"`             // connect to the backends over TLS
	BackendTLSCAFile     string `yaml:"backend_tls_ca_file"`     // CA that signed the backends' certificates (default: system roots)
	BackendTLSCertFile   string `yaml:"backend_tls_cert_file"`   // client certificate for backends that require one
	BackendTLSKeyFile    string `yaml:"backend_tls_key_file"`    // its key
	BackendTLSServerName string `yaml:"backend_tls_server_name"` // name to verify (default: each backend's host)
	BackendTLSSkipVerify bool   `yaml:"backend_tls_skip_verify"` // do not verify backend certificates (tests only)

	// Sentinels of sentinel:// backends, in the style of the backend_*
	// settings.
	SentinelUsername      string `yaml:"sentinel_username"`        // AUTH user for the Sentinels
	SentinelPassword      string `yaml:"sentinel_password"`        // AUTH password for the Sentinels
	SentinelTLS           bool   `yaml:"sentinel_tls"`             // connect to the Sentinels over TLS
	SentinelTLSCAFile     string `yaml:"sentinel_tls_ca_file"`     // CA that signed the Sentinels' certificates (default: system roots)
	SentinelTLSCertFile   string `yaml:"sentinel_tls_cert_file"`   // client certificate for Sentinels that require one
	SentinelTLSKeyFile    string `yaml:"sentinel_tls_key_file"`    // its key
	SentinelTLSServerName string `yaml:"sentinel_tls_server_name"` // name to verify (default: each Sentinel's host)
	SentinelTLSSkipVerify bool   `yaml:"sentinel_tls_skip_verify"` // do not verify Sentinel certificates (tests only)

	// UpgradeFrom is the Redis the clients locked on before the proxy,
	// while they move to it (host:port; default: none). Every grant then
	// needs that Redis's grant too (it is a veto, never a vote), so a client
	// still locking there directly and one going through the proxy exclude
	// each other; when it does not answer, locks are refused. The proxy says
	// when it has had no client but the proxies for max_ttl + drift: then
	// the setting can go.
	UpgradeFrom         string `yaml:"upgrade_from"`
	UpgradeFromUsername string `yaml:"upgrade_from_username"` // AUTH user for it (default: backend_username)
	UpgradeFromPassword string `yaml:"upgrade_from_password"` // AUTH password for it (default: backend_password)
	// UpgradeFromDB is the database the old clients lock in on it (their
	// SELECT; default 0): the proxy's clients use database 0 of the
	// masters, and the veto reads and writes the same names there.
	UpgradeFromDB int `yaml:"upgrade_from_db"`

	// UnknownScripts is what happens to a script no registry entry knows:
	// "refuse" (default) or "vote" (run it on every backend and reply what a
	// majority answer; safe only for scripts that keep their state in the
	// keys they are given).
	UnknownScripts string         `yaml:"unknown_scripts"`
	Scripts        []ScriptConfig `yaml:"scripts"`    // more lock scripts (see ScriptConfig)
	LogLevel       string         `yaml:"log_level"`  // debug, info, warn, error (default info)
	LogFormat      string         `yaml:"log_format"` // text or json (default text)

	// GoMaxProcs is how many threads run the proxy's Go code at once
	// (GOMAXPROCS). 0 (default): the GOMAXPROCS environment variable when
	// set, else half the CPUs the process may use (its cgroup CPU quota,
	// else the machine's), at least 1. See Procs.
	GoMaxProcs int `yaml:"gomaxprocs"`
}

// Procs is the GOMAXPROCS that the gomaxprocs setting asks for, given the
// CPUs the process may use (its CPU quota, or the machine's CPU count): the
// setting when positive, else half the CPUs, at least 1. Most of the
// proxy's CPU is the kernel's socket work, done in its own threads; fewer
// of them wake each other less often, and leave the other CPUs to the
// interrupts and to what shares the machine (on two CPUs, one thread spent
// about a fifth less CPU per lock cycle at 50 clients than two, for the
// same throughput; see docs/performance.md).
func Procs(setting, cpus int) int {
	if setting > 0 {
		return setting
	}
	return max(1, cpus/2)
}

// UserConfig is a client user: AUTH name password, and what it may do.
type UserConfig struct {
	Name     string `yaml:"name"`
	Password string `yaml:"password"`
	// Rules are Redis ACL rules (the part of a users.acl line after the
	// name), applied from no command and no key; empty: every command on
	// every key.
	Rules string `yaml:"rules"`
}

// ACL is the user's rules, read; nil when it has none.
func (u UserConfig) ACL() (*acl.Rules, error) {
	if strings.TrimSpace(u.Rules) == "" {
		return nil, nil
	}
	return acl.Parse(u.Rules)
}

// List is a list of strings, written in YAML as a sequence or as one
// comma-separated string, and as a flag always comma-separated.
type List []string

// UnmarshalYAML accepts a sequence or a comma-separated scalar.
func (l *List) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*l = splitList(n.Value)
		return nil
	case yaml.SequenceNode:
		var s []string
		if err := n.Decode(&s); err != nil {
			return err
		}
		*l = s
		return nil
	}
	return fmt.Errorf("line %d: expected a list or a comma-separated string", n.Line)
}

func splitList(s string) List {
	var out List
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// Default is the configuration with nothing set. The front end's settings
// take their defaults from the front end itself, so each default is written
// once.
func Default() Config {
	p := proxy.DefaultConfig()
	return Config{
		Listen:            "127.0.0.1:7379",
		Admin:             "127.0.0.1:7380",
		Pprof:             "auto",
		EmbeddedBackends:  3,
		DriftFactor:       p.Timing.DriftFactor,
		DriftFloor:        p.Timing.DriftFloor,
		MinValidity:       p.Timing.MinValidity,
		BackendTimeout:    p.BackendTimeout,
		MaxTTL:            p.MaxTTL,
		RestartQuarantine: "strict",
		UnknownScripts:    "refuse",
		MaxClients:        p.MaxClients,
		CommandTimeout:    p.CommandTimeout,
		WriteTimeout:      p.WriteTimeout,
		ShutdownGrace:     5 * time.Second,
		MaxArgs:           p.Limits.MaxArgs,
		MaxBulk:           p.Limits.MaxBulk,
		MaxInline:         p.Limits.MaxInline,
		MaxCommandBytes:   p.Limits.MaxCommandBytes,
		MaxToken:          p.Limits.MaxToken,
		LogLevel:          "info",
		LogFormat:         "text",
	}
}

// ErrInvalid is wrapped by every validation error.
var ErrInvalid = errors.New("invalid configuration")

// KeyError is a refused setting: the key (users[0].name for a field of a
// list) and what it wants. It wraps ErrInvalid.
type KeyError struct {
	Key  string
	Rule string
}

func (e *KeyError) Error() string { return ErrInvalid.Error() + ": " + e.Key + ": " + e.Rule }

// Unwrap makes every KeyError an ErrInvalid.
func (e *KeyError) Unwrap() error { return ErrInvalid }

func invalid(key, format string, a ...any) error {
	return &KeyError{Key: key, Rule: fmt.Sprintf(format, a...)}
}

// topKey is the top-level key a KeyError's key belongs to: users for
// users[0].name.
func topKey(key string) string {
	if i := strings.IndexAny(key, "[."); i >= 0 {
		return key[:i]
	}
	return key
}

// Validate checks every key. It returns warnings for settings that work but
// are probably not what the operator wants.
func (c *Config) Validate() (warnings []string, err error) {
	if _, err := parseAddr(c.Listen, true); err != nil {
		return nil, invalid("listen", "%v", err)
	}
	if c.Admin != "" {
		if _, err := parseAddr(c.Admin, true); err != nil {
			return nil, invalid("admin", "%v (or empty to turn it off)", err)
		}
	}
	switch c.Pprof {
	case "auto", "false":
	case "true":
		if c.Admin != "" && !loopback(c.Admin) {
			warnings = append(warnings, fmt.Sprintf("pprof: true serves Go's profiles (/debug/pprof/) on admin %s, which is not a loopback address: whoever reaches it can profile the process and read its command line", c.Admin))
		}
	default:
		return nil, invalid("pprof", "must be auto (only when admin is a loopback address), true or false, got %q", c.Pprof)
	}
	seen := map[string]string{}
	for _, b := range c.Backends {
		spec, err := ParseBackend(b)
		if err != nil {
			return nil, invalid("backends", "%v", err)
		}
		if prev, ok := seen[spec.Key()]; ok {
			return nil, invalid("backends", "%q and %q are the same backend; every backend must be an independent master", prev, b)
		}
		seen[spec.Key()] = b
		for _, a := range spec.Addrs {
			if prev, ok := seen[a]; ok && prev != b {
				return nil, invalid("backends", "%q and %q share %s; every backend must be independent", prev, b, a)
			}
			seen[a] = b
		}
	}
	if c.UpgradeFrom != "" {
		canon, err := parseAddr(c.UpgradeFrom, false)
		if err != nil {
			return nil, invalid("upgrade_from", "%v", err)
		}
		if prev, ok := seen[canon]; ok {
			return nil, invalid("upgrade_from", "%q is also backend %q: the Redis clients used before the proxy is a veto, not one of the masters", c.UpgradeFrom, prev)
		}
		if len(c.Backends) == 0 {
			return nil, invalid("upgrade_from", "needs backends: the masters the clients move to")
		}
		if c.UpgradeFromDB < 0 {
			return nil, invalid("upgrade_from_db", "%d is no database", c.UpgradeFromDB)
		}
	} else if c.UpgradeFromUsername != "" || c.UpgradeFromPassword != "" {
		return nil, invalid("upgrade_from_password", "upgrade_from_* settings need upgrade_from")
	} else if c.UpgradeFromDB != 0 {
		return nil, invalid("upgrade_from_db", "upgrade_from_* settings need upgrade_from")
	}
	n := len(c.Backends)
	if n == 0 {
		if c.EmbeddedBackends < 1 {
			return nil, invalid("embedded_backends", "must be at least 1, got %d", c.EmbeddedBackends)
		}
		n = c.EmbeddedBackends
	}
	if n%2 == 0 && n > 0 {
		warnings = append(warnings, fmt.Sprintf("backends: %d backends (an even number) tolerate %s, as %d would: a majority of %d is %d; use an odd number",
			n, failures(n-quorum.Majority(n)), n-1, n, quorum.Majority(n)))
	}
	if n < 3 {
		warnings = append(warnings, fmt.Sprintf("backends: with %d backend(s) no failure is tolerated; Redlock needs at least 3", n))
	}
	var te *quorum.TimingError
	if err := c.Timing().Validate(); errors.As(err, &te) {
		return nil, invalid(te.Setting, "%s", te.Rule)
	}
	switch {
	case c.MaxTTL <= 0:
		return nil, invalid("max_ttl", "must be positive, got %v", c.MaxTTL)
	case c.BackendTimeout <= 0:
		return nil, invalid("backend_timeout", "must be positive, got %v", c.BackendTimeout)
	case c.BackendTimeout >= c.MaxTTL:
		return nil, invalid("backend_timeout", "must be below max_ttl (%v), got %v (above a tenth of max_ttl, %v, it is accepted with a warning)", c.MaxTTL, c.BackendTimeout, c.MaxTTL/10)
	case c.MinValidity >= c.MaxTTL:
		return nil, invalid("min_validity", "must be below max_ttl (%v), got %v", c.MaxTTL, c.MinValidity)
	}
	if c.BackendTimeout > c.MaxTTL/10 {
		warnings = append(warnings, fmt.Sprintf("backend_timeout: %v is more than a tenth of max_ttl (%v, a tenth is %v); a slow backend would eat most of a lock's validity", c.BackendTimeout, c.MaxTTL, c.MaxTTL/10))
	}
	switch c.RestartQuarantine {
	case "strict":
	case "run-id":
		warnings = append(warnings, "restart_quarantine: run-id trusts a master the first time this proxy sees it: a proxy started, restarted or added soon after a master restarted or was promoted can hand out a lock that is still held (unsafe then; the default strict rule is not)")
	case "off":
		warnings = append(warnings, "restart_quarantine: off: a backend that restarts forgetting its locks can hand out a lock that is still held (unsafe; for tests only)")
	default:
		return nil, invalid("restart_quarantine", "must be strict, run-id or off, got %q", c.RestartQuarantine)
	}
	if err := c.validateSecurity(); err != nil {
		return nil, err
	}
	switch {
	case c.MaxClients < 1:
		return nil, invalid("max_clients", "must be at least 1, got %d", c.MaxClients)
	case c.IdleTimeout < 0:
		return nil, invalid("idle_timeout", "must not be negative (0: never), got %v", c.IdleTimeout)
	case c.CommandTimeout <= 0:
		return nil, invalid("command_timeout", "must be positive, got %v", c.CommandTimeout)
	case c.WriteTimeout <= 0:
		return nil, invalid("write_timeout", "must be positive, got %v", c.WriteTimeout)
	case c.ShutdownGrace <= 0:
		return nil, invalid("shutdown_grace", "must be positive, got %v", c.ShutdownGrace)
	case c.ShutdownDelay < 0:
		return nil, invalid("shutdown_delay", "must not be negative (0: close the listener at once), got %v", c.ShutdownDelay)
	case c.MaxArgs < 3:
		return nil, invalid("max_args", "must be at least 3 (SET key value), got %d", c.MaxArgs)
	case c.MaxBulk < 1024:
		return nil, invalid("max_bulk", "must be at least 1024 bytes, got %d", c.MaxBulk)
	case c.MaxInline < 1024:
		return nil, invalid("max_inline", "must be at least 1024 bytes, got %d", c.MaxInline)
	case c.MaxCommandBytes < c.MaxBulk:
		return nil, invalid("max_command_bytes", "must be at least max_bulk (%d), got %d", c.MaxBulk, c.MaxCommandBytes)
	case c.MaxToken < 16 || c.MaxToken > c.MaxBulk:
		return nil, invalid("max_token", "must be at least 16 bytes and at most max_bulk (%d), got %d", c.MaxBulk, c.MaxToken)
	}
	switch c.UnknownScripts {
	case "refuse":
	case "vote":
		warnings = append(warnings, "unknown_scripts: vote: scripts the proxy does not know run on every backend; this is safe only for scripts that keep their state in the keys they are given")
	default:
		return nil, invalid("unknown_scripts", "must be refuse or vote, got %q", c.UnknownScripts)
	}
	if err := c.RegisterScripts(classify.NewRegistry()); err != nil {
		return nil, err
	}
	if c.GoMaxProcs < 0 {
		return nil, invalid("gomaxprocs", "must not be negative (0: half the CPUs), got %d", c.GoMaxProcs)
	}
	switch c.LogLevel {
	case "debug", "info", "warn", "error":
	default:
		return nil, invalid("log_level", "must be debug, info, warn or error, got %q", c.LogLevel)
	}
	switch c.LogFormat {
	case "text", "json":
	default:
		return nil, invalid("log_format", "must be text or json, got %q", c.LogFormat)
	}
	return warnings, nil
}

// ServesPprof reports whether the admin address serves /debug/pprof/.
func (c *Config) ServesPprof() bool {
	switch c.Pprof {
	case "true":
		return true
	case "auto":
		return loopback(c.Admin)
	}
	return false
}

// loopback reports whether a listening address is on the loopback
// interface only: localhost or a loopback IP (an empty host is every
// interface).
func loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// failures says how many failed backends are tolerated.
func failures(f int) string {
	switch f {
	case 0:
		return "no failure"
	case 1:
		return "1 failure"
	}
	return fmt.Sprintf("%d failures", f)
}

// parseAddr checks host:port and returns a canonical spelling, so that two
// spellings of one address compare equal. A listening address may leave
// the host empty and use port 0 (any free port).
func parseAddr(s string, listening bool) (string, error) {
	host, port, err := net.SplitHostPort(s)
	if err != nil || (host == "" && !listening) {
		return "", fmt.Errorf("must be host:port, got %q", s)
	}
	for _, ch := range port {
		if ch < '0' || ch > '9' {
			return "", fmt.Errorf("port of %q must be a number", s)
		}
	}
	p, err := strconv.Atoi(port)
	if err != nil || p > 65535 || (p < 1 && !listening) {
		return "", fmt.Errorf("port of %q must be 1-65535", s)
	}
	if ip := net.ParseIP(host); ip != nil {
		host = ip.String()
	} else {
		host = strings.ToLower(strings.TrimSuffix(host, "."))
	}
	return net.JoinHostPort(host, strconv.Itoa(p)), nil
}

// ReadFile decodes a YAML file over c. Unknown keys are refused.
func (c *Config) ReadFile(path string) error {
	_, err := c.readFile(path)
	return err
}

// readFile is ReadFile, and also returns the line of each top-level key
// the file sets.
func (c *Config) readFile(path string) (lines map[string]int, err error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c.readYAML(data, path)
}

// ReadYAML decodes YAML over c; name is used in errors. Every refusal
// names the key, its line and what the key wants. A key written with no
// value is refused, except admin (off) and backends (none).
func (c *Config) ReadYAML(data []byte, name string) error {
	_, err := c.readYAML(data, name)
	return err
}

// tabIndented is the first line (from 1) whose indentation holds a tab,
// or 0: the YAML parser's own words for it ("found character that cannot
// start any token") do not say what to do.
func tabIndented(data []byte) int {
	for i, line := range bytes.Split(data, []byte("\n")) {
		indent := line[:len(line)-len(bytes.TrimLeft(line, " \t"))]
		if bytes.IndexByte(indent, '\t') >= 0 && len(bytes.TrimSpace(line)) > 0 {
			return i + 1
		}
	}
	return 0
}

// readYAML is ReadYAML, and also returns the line of each top-level key.
func (c *Config) readYAML(data []byte, name string) (lines map[string]int, err error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, nil
		}
		if line := tabIndented(data); line > 0 {
			return nil, fmt.Errorf("%w: %s, line %d: indent with spaces: YAML does not allow tabs in indentation", ErrInvalid, name, line)
		}
		return nil, fmt.Errorf("%w: %s: %v", ErrInvalid, name, err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%w: %s: holds more than one YAML document", ErrInvalid, name)
	}
	if len(doc.Content) != 1 {
		return nil, nil
	}
	m := doc.Content[0]
	if m.Kind == yaml.ScalarNode && m.Tag == "!!null" {
		return nil, nil // a document with nothing in it
	}
	d := yamlDecoder{name: name}
	if m.Kind != yaml.MappingNode {
		return nil, d.at(m, "want key: value lines such as max_ttl: 30s, got %s", written(m))
	}
	// Decode into a copy, so that a refused file leaves c as it was. A key
	// with no value: admin and backends mean "none"; for any other key it is
	// a mistake.
	next := *c
	rest := &yaml.Node{Kind: yaml.MappingNode, Line: m.Line}
	lines = map[string]int{}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		lines[k.Value] = k.Line
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			switch k.Value {
			case "admin":
				next.Admin = ""
				continue
			case "backends":
				next.Backends = nil
				continue
			}
		}
		rest.Content = append(rest.Content, k, v)
	}
	if err := d.mapping("", rest, reflect.ValueOf(&next).Elem()); err != nil {
		return nil, err
	}
	*c = next
	return lines, nil
}

// Load builds the configuration from command-line arguments: defaults, then
// the file named by -config, then every flag given. -h writes the usage to
// out and returns flag.ErrHelp; any other mistake in the arguments is one
// line, in the error, naming the flag, or the key and its line in the file.
func Load(args []string, out io.Writer) (Config, []string, error) {
	c := Default()
	path := configPath(args)
	var lines map[string]int
	if path != "" {
		var err error
		if lines, err = c.readFile(path); err != nil {
			return c, nil, err
		}
	}
	// The flags' defaults are the file's values, so only flags given override.
	fs := flag.NewFlagSet("redlock-proxy", flag.ContinueOnError)
	fs.String("config", "", "YAML configuration file (flags override it)")
	fs.StringVar(&c.Listen, "listen", c.Listen, "address for Redis clients")
	fs.StringVar(&c.Admin, "admin", c.Admin, "address for HTTP /metrics, /healthz, /readyz (empty: off)")
	fs.StringVar(&c.Pprof, "pprof", c.Pprof, "serve /debug/pprof/ on the admin address: auto (only when it is a loopback address), true or false")
	fs.Func("backends", "comma-separated backends: host:port, sentinel://HOST:PORT+HOST:PORT/MASTER_NAME or cluster://HOST:PORT+HOST:PORT (none: embedded demo backends)", func(s string) error {
		c.Backends = splitBackends(s)
		return nil
	})
	fs.IntVar(&c.EmbeddedBackends, "embedded_backends", c.EmbeddedBackends, "in-process demo backends when no backends are given")
	fs.Float64Var(&c.DriftFactor, "drift_factor", c.DriftFactor, "clock drift allowance per unit of TTL")
	fs.DurationVar(&c.DriftFloor, "drift_floor", c.DriftFloor, "added to the drift allowance")
	fs.DurationVar(&c.MinValidity, "min_validity", c.MinValidity, "least validity a granted lock must leave")
	fs.DurationVar(&c.BackendTimeout, "backend_timeout", c.BackendTimeout, "per-backend timeout of each command")
	fs.DurationVar(&c.MaxTTL, "max_ttl", c.MaxTTL, "longest TTL a client may ask for")
	fs.StringVar(&c.RestartQuarantine, "restart_quarantine", c.RestartQuarantine, "strict, run-id (unsafe when a proxy starts after a master restart) or off (unsafe)")
	fs.StringVar(&c.RequirePass, "requirepass", c.RequirePass, "password clients must give (AUTH, HELLO AUTH)")
	fs.StringVar(&c.TLSCertFile, "tls_cert_file", c.TLSCertFile, "serve clients over TLS with this certificate (PEM)")
	fs.StringVar(&c.TLSKeyFile, "tls_key_file", c.TLSKeyFile, "key of tls_cert_file (PEM)")
	fs.StringVar(&c.TLSCAFile, "tls_ca_file", c.TLSCAFile, "CA for client certificates")
	fs.BoolVar(&c.TLSAuthClients, "tls_auth_clients", c.TLSAuthClients, "require client certificates signed by tls_ca_file")
	fs.IntVar(&c.MaxClients, "max_clients", c.MaxClients, "connected clients")
	fs.DurationVar(&c.IdleTimeout, "idle_timeout", c.IdleTimeout, "close a client idle this long (0: never)")
	fs.DurationVar(&c.CommandTimeout, "command_timeout", c.CommandTimeout, "a started command must arrive whole within this")
	fs.DurationVar(&c.WriteTimeout, "write_timeout", c.WriteTimeout, "give up on a client that does not read its replies")
	fs.DurationVar(&c.ShutdownGrace, "shutdown_grace", c.ShutdownGrace, "at SIGTERM, how long commands in flight and their undos may take to finish")
	fs.DurationVar(&c.ShutdownDelay, "shutdown_delay", c.ShutdownDelay, "at SIGTERM, how long /readyz answers 503 while clients are still served, before the listener closes (for a load balancer to stop sending clients)")
	fs.IntVar(&c.MaxArgs, "max_args", c.MaxArgs, "arguments per command")
	fs.IntVar(&c.MaxBulk, "max_bulk", c.MaxBulk, "bytes per argument")
	fs.IntVar(&c.MaxInline, "max_inline", c.MaxInline, "bytes per inline command line")
	fs.IntVar(&c.MaxCommandBytes, "max_command_bytes", c.MaxCommandBytes, "bytes buffered for one command")
	fs.IntVar(&c.MaxToken, "max_token", c.MaxToken, "bytes in a lock token, and in a value a read brings back")
	fs.StringVar(&c.UpgradeFrom, "upgrade_from", c.UpgradeFrom, "the Redis clients locked on before the proxy (host:port): a veto on every grant while they move")
	fs.StringVar(&c.UpgradeFromUsername, "upgrade_from_username", c.UpgradeFromUsername, "AUTH user for upgrade_from (default: backend_username)")
	fs.StringVar(&c.UpgradeFromPassword, "upgrade_from_password", c.UpgradeFromPassword, "AUTH password for upgrade_from (default: backend_password)")
	fs.IntVar(&c.UpgradeFromDB, "upgrade_from_db", c.UpgradeFromDB, "the database the old clients lock in on upgrade_from (their SELECT)")
	fs.StringVar(&c.BackendUsername, "backend_username", c.BackendUsername, "AUTH user for the backends")
	fs.StringVar(&c.BackendPassword, "backend_password", c.BackendPassword, "AUTH password for the backends")
	fs.BoolVar(&c.BackendTLS, "backend_tls", c.BackendTLS, "connect to the backends over TLS")
	fs.StringVar(&c.BackendTLSCAFile, "backend_tls_ca_file", c.BackendTLSCAFile, "CA of the backends' certificates")
	fs.StringVar(&c.BackendTLSCertFile, "backend_tls_cert_file", c.BackendTLSCertFile, "client certificate for the backends")
	fs.StringVar(&c.BackendTLSKeyFile, "backend_tls_key_file", c.BackendTLSKeyFile, "key of backend_tls_cert_file")
	fs.StringVar(&c.BackendTLSServerName, "backend_tls_server_name", c.BackendTLSServerName, "name to verify in backend certificates")
	fs.BoolVar(&c.BackendTLSSkipVerify, "backend_tls_skip_verify", c.BackendTLSSkipVerify, "do not verify backend certificates (tests only)")
	fs.StringVar(&c.SentinelUsername, "sentinel_username", c.SentinelUsername, "AUTH user for the Sentinels of sentinel:// backends")
	fs.StringVar(&c.SentinelPassword, "sentinel_password", c.SentinelPassword, "AUTH password for the Sentinels")
	fs.BoolVar(&c.SentinelTLS, "sentinel_tls", c.SentinelTLS, "connect to the Sentinels over TLS")
	fs.StringVar(&c.SentinelTLSCAFile, "sentinel_tls_ca_file", c.SentinelTLSCAFile, "CA of the Sentinels' certificates")
	fs.StringVar(&c.SentinelTLSCertFile, "sentinel_tls_cert_file", c.SentinelTLSCertFile, "client certificate for the Sentinels")
	fs.StringVar(&c.SentinelTLSKeyFile, "sentinel_tls_key_file", c.SentinelTLSKeyFile, "key of sentinel_tls_cert_file")
	fs.StringVar(&c.SentinelTLSServerName, "sentinel_tls_server_name", c.SentinelTLSServerName, "name to verify in Sentinel certificates")
	fs.BoolVar(&c.SentinelTLSSkipVerify, "sentinel_tls_skip_verify", c.SentinelTLSSkipVerify, "do not verify Sentinel certificates (tests only)")
	fs.StringVar(&c.UnknownScripts, "unknown_scripts", c.UnknownScripts, "refuse or vote")
	fs.StringVar(&c.LogLevel, "log_level", c.LogLevel, "debug, info, warn or error")
	fs.StringVar(&c.LogFormat, "log_format", c.LogFormat, "text or json")
	fs.IntVar(&c.GoMaxProcs, "gomaxprocs", c.GoMaxProcs, "threads running Go code at once (0: $GOMAXPROCS when set, else half the CPUs, at least 1)")
	if err := parseFlags(fs, args, out); err != nil {
		return c, nil, err
	}
	if fs.NArg() > 0 {
		return c, nil, fmt.Errorf("%w: unexpected argument %q (flags start with -; %s)", ErrInvalid, fs.Arg(0), seeHelp)
	}
	warnings, err := c.Validate()
	// A refused key that the file set, and no flag overrode, is located
	// in the file as a decoding error is.
	var ke *KeyError
	if errors.As(err, &ke) {
		key := topKey(ke.Key)
		flagged := false
		fs.Visit(func(f *flag.Flag) { flagged = flagged || f.Name == key })
		if line, ok := lines[key]; ok && !flagged {
			err = fmt.Errorf("%w: %s, line %d: %s: %s", ErrInvalid, path, line, ke.Key, ke.Rule)
		}
	}
	return c, warnings, err
}

// configPath finds the last -config FILE (or --config, or =FILE) among the
// arguments, as the flag package would.
func configPath(args []string) (path string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			break
		}
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "config" {
			continue
		}
		if hasVal {
			path = val
		} else if i+1 < len(args) {
			path = args[i+1]
			i++
		}
	}
	return path
}

// Timing is the configuration's clock assumptions, as the algorithm takes
// them.
func (c *Config) Timing() quorum.Timing {
	return quorum.Timing{DriftFactor: c.DriftFactor, DriftFloor: c.DriftFloor, MinValidity: c.MinValidity}
}

// Summary is the configuration in one line, for -check: the backends and
// the majority, where it listens, and the settings an operator checks
// first. It holds no secret.
func Summary(c Config) string {
	var b strings.Builder
	n := len(c.Backends)
	if n == 0 {
		fmt.Fprintf(&b, "%d embedded demo backends (not for production)", c.EmbeddedBackends)
	} else {
		fmt.Fprintf(&b, "%d backends (%s), majority %d", n, strings.Join(c.Backends, ", "), quorum.Majority(n))
	}
	if c.UpgradeFrom != "" {
		fmt.Fprintf(&b, ", upgrade_from %s", c.UpgradeFrom)
		if c.UpgradeFromDB != 0 {
			fmt.Fprintf(&b, " database %d", c.UpgradeFromDB)
		}
	}
	fmt.Fprintf(&b, "; listen %s", c.Listen)
	if c.TLSCertFile != "" {
		b.WriteString(" (TLS)")
	}
	admin := c.Admin
	if admin == "" {
		admin = "off"
	}
	fmt.Fprintf(&b, ", admin %s; max_ttl %v, backend_timeout %v, restart_quarantine %s; %d users", admin, c.MaxTTL, c.BackendTimeout, c.RestartQuarantine, len(c.Users))
	if c.RequirePass != "" {
		b.WriteString(" and requirepass")
	}
	return b.String()
}
