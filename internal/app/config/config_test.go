package config

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"flag"
	"io"
	"io/fs"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// writeConfig writes a YAML file into a fresh temporary directory and returns
// its path.
func writeConfig(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "redlock-proxy.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// mustLoad runs Load and fails the test on an error.
func mustLoad(t *testing.T, args ...string) (Config, []string) {
	t.Helper()
	var out bytes.Buffer
	c, warnings, err := Load(args, &out)
	if err != nil {
		t.Fatalf("Load(%q): %v (output %q)", args, err, out.String())
	}
	return c, warnings
}

// yamlKeys lists the yaml tags of Config's fields, in order.
func yamlKeys(t *testing.T) []string {
	t.Helper()
	var keys []string
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			t.Fatalf("field %s has no yaml key", f.Name)
		}
		keys = append(keys, key)
	}
	return keys
}

func TestDefaultValidates(t *testing.T) {
	c := Default()
	warnings, err := c.Validate()
	if err != nil {
		t.Fatalf("Default().Validate(): %v", err)
	}
	// Three embedded backends, 50ms against 60s, run-id quarantine: nothing
	// to warn about.
	if len(warnings) != 0 {
		t.Errorf("Default().Validate() warnings = %q, want none", warnings)
	}
	if len(c.Backends) != 0 || c.EmbeddedBackends != 3 {
		t.Errorf("Default() backends = %q, embedded = %d; want none and 3", c.Backends, c.EmbeddedBackends)
	}
}

func TestLoadNoArgsIsDefault(t *testing.T) {
	for _, args := range [][]string{nil, {}} {
		c, warnings := mustLoad(t, args...)
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("Load(%q) = %+v, want Default() %+v", args, c, Default())
		}
		if len(warnings) != 0 {
			t.Errorf("Load(%q) warnings = %q, want none", args, warnings)
		}
	}
}

func TestLoadFlags(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want func(*Config)
	}{
		{"listen", []string{"-listen", "0.0.0.0:6000"}, func(c *Config) { c.Listen = "0.0.0.0:6000" }},
		{"listen=", []string{"-listen=[::1]:6000"}, func(c *Config) { c.Listen = "[::1]:6000" }},
		{"--listen", []string{"--listen", ":6000"}, func(c *Config) { c.Listen = ":6000" }},
		{"admin", []string{"-admin", "10.0.0.1:9000"}, func(c *Config) { c.Admin = "10.0.0.1:9000" }},
		{"admin empty", []string{"-admin="}, func(c *Config) { c.Admin = "" }},
		{"backends", []string{"-backends", "a:6379, b:6379 ,c:6379,"}, func(c *Config) {
			c.Backends = List{"a:6379", "b:6379", "c:6379"}
		}},
		{"embedded_backends", []string{"-embedded_backends", "5"}, func(c *Config) { c.EmbeddedBackends = 5 }},
		{"drift_factor", []string{"-drift_factor", "0.05"}, func(c *Config) { c.DriftFactor = 0.05 }},
		{"drift_factor 0", []string{"-drift_factor=0"}, func(c *Config) { c.DriftFactor = 0 }},
		{"drift_factor 0.99", []string{"-drift_factor=0.99"}, func(c *Config) { c.DriftFactor = 0.99 }},
		{"drift_floor", []string{"-drift_floor", "5ms"}, func(c *Config) { c.DriftFloor = 5 * time.Millisecond }},
		{"drift_floor 0", []string{"-drift_floor", "0s"}, func(c *Config) { c.DriftFloor = 0 }},
		{"min_validity", []string{"-min_validity", "100ms"}, func(c *Config) { c.MinValidity = 100 * time.Millisecond }},
		{"backend_timeout", []string{"-backend_timeout", "20ms"}, func(c *Config) { c.BackendTimeout = 20 * time.Millisecond }},
		{"max_ttl", []string{"-max_ttl", "2m"}, func(c *Config) { c.MaxTTL = 2 * time.Minute }},
		{"restart_quarantine strict", []string{"-restart_quarantine", "strict"}, func(c *Config) { c.RestartQuarantine = "strict" }},
		{"log_level debug", []string{"-log_level", "debug"}, func(c *Config) { c.LogLevel = "debug" }},
		{"log_level warn", []string{"-log_level", "warn"}, func(c *Config) { c.LogLevel = "warn" }},
		{"log_level error", []string{"-log_level", "error"}, func(c *Config) { c.LogLevel = "error" }},
		{"log_format", []string{"-log_format", "json"}, func(c *Config) { c.LogFormat = "json" }},
		{"gomaxprocs", []string{"-gomaxprocs", "2"}, func(c *Config) { c.GoMaxProcs = 2 }},
		{"last flag wins", []string{"-log_level", "debug", "-log_level", "error"}, func(c *Config) { c.LogLevel = "error" }},
		{"several", []string{"-listen", ":1", "-max_ttl", "10s", "-backend_timeout", "1s", "-log_format", "json"}, func(c *Config) {
			c.Listen = ":1"
			c.MaxTTL = 10 * time.Second
			c.BackendTimeout = time.Second
			c.LogFormat = "json"
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, warnings := mustLoad(t, tt.args...)
			want := Default()
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Load(%q)\n got %+v\nwant %+v", tt.args, got, want)
			}
			if len(warnings) != 0 {
				t.Errorf("Load(%q) warnings = %q, want none", tt.args, warnings)
			}
		})
	}
}

// Every YAML key has a flag of the same name.
func TestEveryKeyHasAFlag(t *testing.T) {
	var out bytes.Buffer
	_, _, err := Load([]string{"-h"}, &out)
	if !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("Load(-h) error = %v, want flag.ErrHelp", err)
	}
	for _, key := range append(yamlKeys(t), "config") {
		if key == "scripts" || key == "users" {
			continue // lists of structures: YAML only
		}
		if !strings.Contains(out.String(), "-"+key+" ") && !strings.Contains(out.String(), "-"+key+"\n") {
			t.Errorf("usage has no flag -%s:\n%s", key, out.String())
		}
	}
}

const allKeysYAML = `# every key, none at its default
listen: 0.0.0.0:6000
admin: 0.0.0.0:6001
pprof: false
backends:
  - 10.0.0.1:6379
  - 10.0.0.2:6379
  - 10.0.0.3:6379
  - 10.0.0.4:6379
  - sentinel://10.0.1.1:26379,10.0.1.2:26379,10.0.1.3:26379/locks-a
embedded_backends: 7
drift_factor: 0.02
drift_floor: 3ms
min_validity: 100ms
backend_timeout: 40ms
max_ttl: 1m30s
restart_quarantine: run-id
requirepass: s3cret
users:
  - name: app
    password: apppass
    rules: "~app:* +@all -keys"
tls_cert_file: /etc/proxy/cert.pem
tls_key_file: /etc/proxy/key.pem
tls_ca_file: /etc/proxy/ca.pem
tls_auth_clients: true
max_clients: 500
idle_timeout: 5m
command_timeout: 3s
write_timeout: 4s
shutdown_grace: 7s
shutdown_delay: 3s
max_args: 100
max_bulk: 65536
max_inline: 4096
max_command_bytes: 131072
max_token: 256
upgrade_from: 10.0.0.9:6379
upgrade_from_username: old
upgrade_from_password: oldpass
upgrade_from_db: 2
backend_username: proxy
backend_password: backendpass
backend_tls: true
backend_tls_ca_file: /etc/proxy/backend-ca.pem
backend_tls_cert_file: /etc/proxy/backend-cert.pem
backend_tls_key_file: /etc/proxy/backend-key.pem
backend_tls_server_name: redis.internal
backend_tls_skip_verify: true
sentinel_username: watcher
sentinel_password: sentinelpass
sentinel_tls: true
sentinel_tls_ca_file: /etc/proxy/sentinel-ca.pem
sentinel_tls_cert_file: /etc/proxy/sentinel-cert.pem
sentinel_tls_key_file: /etc/proxy/sentinel-key.pem
sentinel_tls_server_name: sentinel.internal
sentinel_tls_skip_verify: true
unknown_scripts: vote
scripts:
  - name: mine
    text: if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('unlink', KEYS[1]) end return -1
    role: release
    failure: int:-1
    replies:
      missing: -2
log_level: debug
log_format: json
gomaxprocs: 3
`

// voteWarning is the warning unknown_scripts: vote gives.
const voteWarning = "unknown_scripts: vote: scripts the proxy does not know run on every backend; this is safe only for scripts that keep their state in the keys they are given"

// allKeysFile writes allKeysYAML, its TLS files under a fresh directory
// in place of /etc/proxy/, and returns the file's path and the
// configuration it holds.
func allKeysFile(t *testing.T) (string, Config) {
	t.Helper()
	dir := writeTLSFiles(t)
	want := allKeysConfig()
	for _, f := range []*string{&want.TLSCertFile, &want.TLSKeyFile, &want.TLSCAFile, &want.BackendTLSCAFile, &want.BackendTLSCertFile, &want.BackendTLSKeyFile,
		&want.SentinelTLSCAFile, &want.SentinelTLSCertFile, &want.SentinelTLSKeyFile} {
		*f = strings.Replace(*f, "/etc/proxy/", dir, 1)
	}
	return writeConfig(t, strings.ReplaceAll(allKeysYAML, "/etc/proxy/", dir)), want
}

func allKeysConfig() Config {
	return Config{
		Listen:                "0.0.0.0:6000",
		Admin:                 "0.0.0.0:6001",
		Pprof:                 "false",
		Backends:              List{"10.0.0.1:6379", "10.0.0.2:6379", "10.0.0.3:6379", "10.0.0.4:6379", "sentinel://10.0.1.1:26379,10.0.1.2:26379,10.0.1.3:26379/locks-a"},
		EmbeddedBackends:      7,
		DriftFactor:           0.02,
		DriftFloor:            3 * time.Millisecond,
		MinValidity:           100 * time.Millisecond,
		BackendTimeout:        40 * time.Millisecond,
		MaxTTL:                90 * time.Second,
		RestartQuarantine:     "run-id",
		RequirePass:           "s3cret",
		Users:                 []UserConfig{{Name: "app", Password: "apppass", Rules: "~app:* +@all -keys"}},
		TLSCertFile:           "/etc/proxy/cert.pem",
		TLSKeyFile:            "/etc/proxy/key.pem",
		TLSCAFile:             "/etc/proxy/ca.pem",
		TLSAuthClients:        true,
		MaxClients:            500,
		IdleTimeout:           5 * time.Minute,
		CommandTimeout:        3 * time.Second,
		WriteTimeout:          4 * time.Second,
		ShutdownGrace:         7 * time.Second,
		ShutdownDelay:         3 * time.Second,
		MaxArgs:               100,
		MaxBulk:               65536,
		MaxInline:             4096,
		MaxCommandBytes:       131072,
		MaxToken:              256,
		UpgradeFrom:           "10.0.0.9:6379",
		UpgradeFromUsername:   "old",
		UpgradeFromPassword:   "oldpass",
		UpgradeFromDB:         2,
		BackendUsername:       "proxy",
		BackendPassword:       "backendpass",
		BackendTLS:            true,
		BackendTLSCAFile:      "/etc/proxy/backend-ca.pem",
		BackendTLSCertFile:    "/etc/proxy/backend-cert.pem",
		BackendTLSKeyFile:     "/etc/proxy/backend-key.pem",
		BackendTLSServerName:  "redis.internal",
		BackendTLSSkipVerify:  true,
		SentinelUsername:      "watcher",
		SentinelPassword:      "sentinelpass",
		SentinelTLS:           true,
		SentinelTLSCAFile:     "/etc/proxy/sentinel-ca.pem",
		SentinelTLSCertFile:   "/etc/proxy/sentinel-cert.pem",
		SentinelTLSKeyFile:    "/etc/proxy/sentinel-key.pem",
		SentinelTLSServerName: "sentinel.internal",
		SentinelTLSSkipVerify: true,
		UnknownScripts:        "vote",
		Scripts: []ScriptConfig{{
			Name:    "mine",
			Text:    "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('unlink', KEYS[1]) end return -1",
			Role:    "release",
			Failure: "int:-1",
			Replies: Replies{Missing: "-2"},
		}},
		LogLevel:   "debug",
		LogFormat:  "json",
		GoMaxProcs: 3,
	}
}

func TestLoadFileEveryKey(t *testing.T) {
	want := allKeysConfig()
	// The file must really set every key: no field of want is at its default.
	def := reflect.ValueOf(Default())
	wv := reflect.ValueOf(want)
	for i := range wv.NumField() {
		if reflect.DeepEqual(wv.Field(i).Interface(), def.Field(i).Interface()) {
			t.Fatalf("test is stale: field %s is at its default", wv.Type().Field(i).Name)
		}
	}
	for _, key := range yamlKeys(t) {
		if !strings.Contains(allKeysYAML, "\n"+key+":") {
			t.Fatalf("test is stale: allKeysYAML does not set %s", key)
		}
	}

	path, want := allKeysFile(t)
	got, warnings := mustLoad(t, "-config", path)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Load(-config FILE)\n got %+v\nwant %+v", got, want)
	}
	if len(warnings) != 2 || !strings.HasPrefix(warnings[0], "restart_quarantine: run-id") || warnings[1] != voteWarning {
		t.Errorf("warnings = %q, want the run-id and the vote warnings", warnings)
	}
}

func TestReadFileEveryKey(t *testing.T) {
	c := Default()
	path, want := allKeysFile(t)
	if err := c.ReadFile(path); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("ReadFile\n got %+v\nwant %+v", c, want)
	}
}

func TestLoadFileBackendsForms(t *testing.T) {
	want := List{"a:6379", "b:6380", "c:6381"}
	tests := map[string]string{
		"block sequence":     "backends:\n  - a:6379\n  - b:6380\n  - c:6381\n",
		"flow sequence":      "backends: [\"a:6379\", \"b:6380\", \"c:6381\"]\n",
		"plain scalar":       "backends: a:6379, b:6380,c:6381\n",
		"quoted scalar":      "backends: \" a:6379 ,b:6380, c:6381, \"\n",
		"folded over a line": "backends: >-\n  a:6379,\n  b:6380,\n  c:6381\n",
	}
	for name, yaml := range tests {
		t.Run(name, func(t *testing.T) {
			c, _ := mustLoad(t, "-config", writeConfig(t, yaml))
			if !reflect.DeepEqual(c.Backends, want) {
				t.Errorf("backends = %q, want %q", c.Backends, want)
			}
		})
	}
	t.Run("empty sequence means embedded", func(t *testing.T) {
		c, _ := mustLoad(t, "-config", writeConfig(t, "backends: []\n"))
		if len(c.Backends) != 0 {
			t.Errorf("backends = %q, want none", c.Backends)
		}
	})
}

func TestLoadFileDurations(t *testing.T) {
	path := writeConfig(t, `
drift_floor: 1.5ms
min_validity: 250ms
backend_timeout: 50ms
max_ttl: 1m
`)
	c, _ := mustLoad(t, "-config", path)
	want := Default()
	want.DriftFloor = 1500 * time.Microsecond
	want.MinValidity = 250 * time.Millisecond
	want.BackendTimeout = 50 * time.Millisecond
	want.MaxTTL = time.Minute
	if !reflect.DeepEqual(c, want) {
		t.Errorf("got %+v\nwant %+v", c, want)
	}
}

// "off" is a YAML 1.1 boolean; it must still arrive as the string "off".
func TestLoadFileRestartQuarantineOff(t *testing.T) {
	for _, yaml := range []string{"restart_quarantine: off\n", "restart_quarantine: \"off\"\n"} {
		c, warnings := mustLoad(t, "-config", writeConfig(t, yaml))
		if c.RestartQuarantine != "off" {
			t.Errorf("%q: restart_quarantine = %q, want off", yaml, c.RestartQuarantine)
		}
		if len(warnings) != 1 || !strings.Contains(warnings[0], "restart_quarantine") {
			t.Errorf("%q: warnings = %q, want one about restart_quarantine", yaml, warnings)
		}
	}
}

func TestLoadFileEmptyIsDefault(t *testing.T) {
	for _, yaml := range []string{"", "# nothing\n", "---\n"} {
		c, _ := mustLoad(t, "-config", writeConfig(t, yaml))
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("%q: got %+v, want Default()", yaml, c)
		}
	}
}

func TestFlagsOverrideFile(t *testing.T) {
	path := writeConfig(t, `
listen: 10.0.0.1:1000
admin: 10.0.0.1:1001
backends: [x:1, y:2, z:3]
log_level: debug
max_ttl: 30s
`)
	tests := []struct {
		name string
		args []string
		want func(*Config)
	}{
		{"flag after config", []string{"-config", path, "-listen", "10.0.0.2:2000"}, func(c *Config) { c.Listen = "10.0.0.2:2000" }},
		{"flag before config", []string{"-listen", "10.0.0.2:2000", "-config", path}, func(c *Config) { c.Listen = "10.0.0.2:2000" }},
		{"backends overridden", []string{"-config", path, "-backends", "p:1,q:2,r:3"}, func(c *Config) { c.Backends = List{"p:1", "q:2", "r:3"} }},
		{"admin disabled by flag", []string{"-config", path, "-admin="}, func(c *Config) { c.Admin = "" }},
		{"flag set to the built-in default", []string{"-config", path, "-log_level", "info"}, func(c *Config) { c.LogLevel = "info" }},
		{"duration", []string{"-config", path, "-max_ttl", "45s"}, func(c *Config) { c.MaxTTL = 45 * time.Second }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _ := mustLoad(t, tt.args...)
			want := Default()
			want.Listen = "10.0.0.1:1000"
			want.Admin = "10.0.0.1:1001"
			want.Backends = List{"x:1", "y:2", "z:3"}
			want.LogLevel = "debug"
			want.MaxTTL = 30 * time.Second
			tt.want(&want)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("Load(%q)\n got %+v\nwant %+v", tt.args, got, want)
			}
		})
	}
}

func TestConfigFlagForms(t *testing.T) {
	path := writeConfig(t, "listen: 10.9.9.9:99\nlog_format: json\n")
	for _, args := range [][]string{
		{"-config", path},
		{"-config=" + path},
		{"--config", path},
		{"--config=" + path},
		{"-log_level", "warn", "--config", path},
		{"-log_level=warn", "-config=" + path},
	} {
		c, _ := mustLoad(t, args...)
		if c.Listen != "10.9.9.9:99" || c.LogFormat != "json" {
			t.Errorf("Load(%q): listen %q, log_format %q; the file was not read", args, c.Listen, c.LogFormat)
		}
	}
}

func TestLoadFileErrors(t *testing.T) {
	t.Run("unknown key", func(t *testing.T) {
		path := writeConfig(t, "listen: 127.0.0.1:1\nbackend_timout: 10ms\n")
		_, _, err := Load([]string{"-config", path}, io.Discard)
		if err == nil {
			t.Fatal("unknown key accepted")
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("error %v does not wrap ErrInvalid", err)
		}
		if !strings.Contains(err.Error(), "backend_timout") {
			t.Errorf("error %q does not name the unknown key", err)
		}
	})
	malformed := map[string]string{
		"unclosed flow":        "backends: [a:1, b:2\n",
		"bad indentation":      "listen: a:1\n  admin: b:2\n",
		"tab indentation":      "listen:\n\t- a\n",
		"not a mapping":        "- listen\n- admin\n",
		"scalar document":      "just a string\n",
		"backends as mapping":  "backends: {a: 1}\n",
		"integer duration":     "max_ttl: 60\n",
		"bad duration":         "max_ttl: sixty seconds\n",
		"string for int":       "embedded_backends: three\n",
		"string for float":     "drift_factor: lots\n",
		"list for string":      "listen: [a, b]\n",
		"duplicate key":        "listen: a:1\nlisten: b:2\n",
		"nested list backends": "backends: [[a:1]]\n",
	}
	for name, yaml := range malformed {
		t.Run(name, func(t *testing.T) {
			_, _, err := Load([]string{"-config", writeConfig(t, yaml)}, io.Discard)
			if err == nil {
				t.Fatalf("%q accepted", yaml)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
	t.Run("missing file", func(t *testing.T) {
		path := filepath.Join(t.TempDir(), "absent.yaml")
		_, _, err := Load([]string{"-config", path}, io.Discard)
		if err == nil {
			t.Fatal("missing file accepted")
		}
		if !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("error %v does not wrap fs.ErrNotExist", err)
		}
		if !strings.Contains(err.Error(), path) {
			t.Errorf("error %q does not name the file", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		_, _, err := Load([]string{"-config", t.TempDir()}, io.Discard)
		if err == nil {
			t.Fatal("directory accepted as a config file")
		}
	})
}

// A file with several YAML documents must not have all but the first
// silently ignored: the package promises unknown keys are refused, and a key
// set in a second document (listen here) would otherwise be dropped without a
// word.
func TestReadYAMLMultipleDocuments(t *testing.T) {
	for name, yaml := range map[string]string{
		"unknown key in second document": "listen: 127.0.0.1:1\n---\nbogus_key: 1\n",
		"setting in second document":     "log_level: debug\n---\nlisten: 127.0.0.1:2\n",
	} {
		t.Run(name, func(t *testing.T) {
			c := Default()
			err := c.ReadYAML([]byte(yaml), "test.yaml")
			if err == nil {
				t.Errorf("ReadYAML(%q) accepted and ignored everything after the first document (got %+v); want an error wrapping ErrInvalid", yaml, c)
			} else if !errors.Is(err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", err)
			}
		})
	}
}

// "admin:" with no value (YAML null) must not silently leave the admin
// server on its default address: admin "" is documented as "disabled", and
// an operator writing an empty admin key means that. Either disabling it or
// refusing the file is acceptable; keeping 127.0.0.1:7380 is not.
func TestReadYAMLNullAdmin(t *testing.T) {
	for _, yaml := range []string{"admin:\n", "admin: ~\n", "admin: null\n"} {
		c := Default()
		err := c.ReadYAML([]byte(yaml), "test.yaml")
		if err == nil && c.Admin != "" {
			t.Errorf("ReadYAML(%q): admin = %q with no error; want admin disabled (\"\") or the file refused", yaml, c.Admin)
		}
	}
	// The explicit empty string does disable it.
	c := Default()
	if err := c.ReadYAML([]byte("admin: \"\"\n"), "test.yaml"); err != nil || c.Admin != "" {
		t.Errorf(`admin: "": admin = %q, err %v; want "" and no error`, c.Admin, err)
	}
}

func TestValidateRefusals(t *testing.T) {
	tests := []struct {
		name string
		args []string
		key  string
	}{
		{"listen without port", []string{"-listen", "127.0.0.1"}, "listen"},
		{"listen empty", []string{"-listen="}, "listen"},
		{"listen too many colons", []string{"-listen", "::1:7379"}, "listen"},
		{"admin without port", []string{"-admin", "localhost"}, "admin"},
		{"admin garbage", []string{"-admin", "a:b:c"}, "admin"},
		{"backend without port", []string{"-backends", "a:1,b,c:3"}, "backends"},
		{"backend without host", []string{"-backends", "a:1,:2,c:3"}, "backends"},
		{"backend port 0", []string{"-backends", "a:1,b:0,c:3"}, "backends"},
		{"backend port 70000", []string{"-backends", "a:1,b:70000,c:3"}, "backends"},
		{"backend port 65536", []string{"-backends", "a:1,b:65536,c:3"}, "backends"},
		{"backend port negative", []string{"-backends", "a:1,b:-1,c:3"}, "backends"},
		{"backend port name", []string{"-backends", "a:1,b:redis,c:3"}, "backends"},
		{"duplicate backend", []string{"-backends", "a:1,b:2,a:1"}, "backends"},
		{"embedded_backends 0", []string{"-embedded_backends", "0"}, "embedded_backends"},
		{"embedded_backends negative", []string{"-embedded_backends", "-3"}, "embedded_backends"},
		{"embedded_backends 0 with empty backends", []string{"-backends", "", "-embedded_backends", "0"}, "embedded_backends"},
		{"drift_factor -0.1", []string{"-drift_factor", "-0.1"}, "drift_factor"},
		{"drift_factor 1", []string{"-drift_factor", "1"}, "drift_factor"},
		{"drift_factor NaN", []string{"-drift_factor", "NaN"}, "drift_factor"},
		{"drift_factor +Inf", []string{"-drift_factor", "+Inf"}, "drift_factor"},
		{"drift_floor negative", []string{"-drift_floor", "-1ms"}, "drift_floor"},
		{"min_validity negative", []string{"-min_validity", "-1ms"}, "min_validity"},
		{"max_ttl 0", []string{"-max_ttl", "0s"}, "max_ttl"},
		{"max_ttl negative", []string{"-max_ttl", "-1s"}, "max_ttl"},
		{"backend_timeout 0", []string{"-backend_timeout", "0s"}, "backend_timeout"},
		{"backend_timeout negative", []string{"-backend_timeout", "-5ms"}, "backend_timeout"},
		{"backend_timeout = max_ttl", []string{"-backend_timeout", "5m"}, "backend_timeout"},
		{"backend_timeout > max_ttl", []string{"-backend_timeout", "5s", "-max_ttl", "1s"}, "backend_timeout"},
		{"min_validity = max_ttl", []string{"-min_validity", "5m"}, "min_validity"},
		{"min_validity > max_ttl", []string{"-min_validity", "6m"}, "min_validity"},
		{"restart_quarantine maybe", []string{"-restart_quarantine", "maybe"}, "restart_quarantine"},
		{"restart_quarantine empty", []string{"-restart_quarantine="}, "restart_quarantine"},
		{"log_level loud", []string{"-log_level", "loud"}, "log_level"},
		{"log_level upper case", []string{"-log_level", "INFO"}, "log_level"},
		{"log_format xml", []string{"-log_format", "xml"}, "log_format"},
		{"gomaxprocs negative", []string{"-gomaxprocs", "-1"}, "gomaxprocs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, warnings, err := Load(tt.args, io.Discard)
			if err == nil {
				t.Fatalf("Load(%q) accepted (warnings %q)", tt.args, warnings)
			}
			if !errors.Is(err, ErrInvalid) {
				t.Errorf("Load(%q) error %v does not wrap ErrInvalid", tt.args, err)
			}
			if !strings.Contains(err.Error(), tt.key) {
				t.Errorf("Load(%q) error %q does not name %s", tt.args, err, tt.key)
			}
			if warnings != nil {
				t.Errorf("Load(%q) returned warnings %q with an error", tt.args, warnings)
			}
		})
	}
}

// The same rules through a YAML file, and through Validate directly.
func TestValidateRefusalsFromFileAndDirect(t *testing.T) {
	tests := []struct {
		yaml   string
		mutate func(*Config)
		key    string
	}{
		{"listen: nowhere\n", func(c *Config) { c.Listen = "nowhere" }, "listen"},
		{"admin: nowhere\n", func(c *Config) { c.Admin = "nowhere" }, "admin"},
		{"backends: [a:1, a:1, b:2]\n", func(c *Config) { c.Backends = List{"a:1", "a:1", "b:2"} }, "backends"},
		{"backends: [a:1, b:70000, c:3]\n", func(c *Config) { c.Backends = List{"a:1", "b:70000", "c:3"} }, "backends"},
		{"embedded_backends: 0\n", func(c *Config) { c.EmbeddedBackends = 0 }, "embedded_backends"},
		{"drift_factor: .nan\n", func(c *Config) { c.DriftFactor = math.NaN() }, "drift_factor"},
		{"drift_factor: 1.0\n", func(c *Config) { c.DriftFactor = 1 }, "drift_factor"},
		{"drift_floor: -1ms\n", func(c *Config) { c.DriftFloor = -time.Millisecond }, "drift_floor"},
		{"min_validity: -1ms\n", func(c *Config) { c.MinValidity = -time.Millisecond }, "min_validity"},
		{"max_ttl: 0s\n", func(c *Config) { c.MaxTTL = 0 }, "max_ttl"},
		{"backend_timeout: 0s\n", func(c *Config) { c.BackendTimeout = 0 }, "backend_timeout"},
		{"backend_timeout: 5m\n", func(c *Config) { c.BackendTimeout = 5 * time.Minute }, "backend_timeout"},
		{"min_validity: 5m\n", func(c *Config) { c.MinValidity = 5 * time.Minute }, "min_validity"},
		{"restart_quarantine: maybe\n", func(c *Config) { c.RestartQuarantine = "maybe" }, "restart_quarantine"},
		{"log_level: loud\n", func(c *Config) { c.LogLevel = "loud" }, "log_level"},
		{"log_format: xml\n", func(c *Config) { c.LogFormat = "xml" }, "log_format"},
	}
	for _, tt := range tests {
		t.Run(tt.key+"/file", func(t *testing.T) {
			_, _, err := Load([]string{"-config", writeConfig(t, tt.yaml)}, io.Discard)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(fmtErr(err), tt.key) {
				t.Errorf("file %q: error %v; want ErrInvalid naming %s", tt.yaml, err, tt.key)
			}
		})
		t.Run(tt.key+"/direct", func(t *testing.T) {
			c := Default()
			tt.mutate(&c)
			warnings, err := c.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(fmtErr(err), tt.key) {
				t.Errorf("Validate(%+v): error %v; want ErrInvalid naming %s", c, err, tt.key)
			}
			if warnings != nil {
				t.Errorf("Validate returned warnings %q with an error", warnings)
			}
		})
	}
}

func fmtErr(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// Boundary values that must be accepted.
func TestValidateAccepts(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(*Config)
	}{
		{"empty admin", func(c *Config) { c.Admin = "" }},
		{"listen any host", func(c *Config) { c.Listen = ":7379" }},
		{"listen ipv6", func(c *Config) { c.Listen = "[::1]:7379" }},
		{"backend ports 1 and 65535", func(c *Config) { c.Backends = List{"a:1", "b:65535", "c:6379"} }},
		{"ipv6 backends", func(c *Config) { c.Backends = List{"[::1]:6379", "[::1]:6380", "[::1]:6381"} }},
		{"same host, different ports", func(c *Config) { c.Backends = List{"h:6379", "h:6380", "h:6381"} }},
		{"embedded_backends ignored when backends given", func(c *Config) {
			c.Backends = List{"a:1", "b:2", "c:3"}
			c.EmbeddedBackends = 0
		}},
		{"drift_factor 0", func(c *Config) { c.DriftFactor = 0 }},
		{"drift_factor just below 1", func(c *Config) { c.DriftFactor = math.Nextafter(1, 0) }},
		{"drift_floor 0", func(c *Config) { c.DriftFloor = 0 }},
		{"min_validity 0", func(c *Config) { c.MinValidity = 0 }},
		{"min_validity just below max_ttl", func(c *Config) { c.MinValidity = c.MaxTTL - 1 }},
		{"backend_timeout a tenth of max_ttl", func(c *Config) { c.BackendTimeout = c.MaxTTL / 10 }},
		{"restart_quarantine strict", func(c *Config) { c.RestartQuarantine = "strict" }},
		{"log_level warn", func(c *Config) { c.LogLevel = "warn" }},
		{"log_format json", func(c *Config) { c.LogFormat = "json" }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.mutate(&c)
			warnings, err := c.Validate()
			if err != nil {
				t.Fatalf("Validate(%+v): %v", c, err)
			}
			if len(warnings) != 0 {
				t.Errorf("Validate(%+v) warnings = %q, want none", c, warnings)
			}
		})
	}
}

// One Redis master listed twice under different spellings of the same port
// (or of the same IP literal) is still one master: counting it twice lets a
// lock held on fewer than a majority of real masters count as a quorum,
// which is what the duplicate rule is there to prevent. Go's resolver reads
// "06379" and "+6379" as port 6379.
func TestValidateDuplicateBackendSpellings(t *testing.T) {
	tests := []struct {
		name     string
		backends List
	}{
		{"leading zero port", List{"10.0.0.1:6379", "10.0.0.1:06379", "10.0.0.2:6379"}},
		{"plus-signed port", List{"10.0.0.1:6379", "10.0.0.1:+6379", "10.0.0.2:6379"}},
		{"ipv6 literal spellings", List{"[::1]:6379", "[0:0:0:0:0:0:0:1]:6379", "[::2]:6379"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			c.Backends = tt.backends
			_, err := c.Validate()
			if !errors.Is(err, ErrInvalid) || !strings.Contains(fmtErr(err), "backends") {
				t.Errorf("Validate(backends %q): error %v; want ErrInvalid naming backends (the same master is listed twice)", tt.backends, err)
			}
		})
	}
}

func TestUnexpectedArgument(t *testing.T) {
	for _, args := range [][]string{
		{"extra"},
		{"-listen", "127.0.0.1:1", "extra"},
		{"extra", "-listen", "127.0.0.1:1"},
		{"--", "extra"},
	} {
		_, _, err := Load(args, io.Discard)
		if err == nil {
			t.Errorf("Load(%q) accepted a positional argument", args)
			continue
		}
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("Load(%q) error %v does not wrap ErrInvalid", args, err)
		}
		if !strings.Contains(err.Error(), "extra") {
			t.Errorf("Load(%q) error %q does not name the argument", args, err)
		}
	}
}

// A mistake on the command line is one line that names the flag, says
// what it wants and points at -h; the usage is not printed after it.
func TestBadFlags(t *testing.T) {
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"-no_such_flag"}, "unknown flag -no_such_flag"},
		{[]string{"-max_tll", "30s"}, "unknown flag -max_tll (did you mean -max_ttl?)"},
		{[]string{"-max-ttl", "30s"}, "unknown flag -max-ttl (did you mean -max_ttl?)"},
		{[]string{"-max_ttl", "sixty"}, "-max_ttl: want a duration such as 30s, got sixty"},
		{[]string{"-max_ttl", "30"}, "-max_ttl: want a duration such as 30s, got 30"},
		{[]string{"-embedded_backends", "three"}, "-embedded_backends: want a whole number, got three"},
		{[]string{"-drift_factor", "lots"}, "-drift_factor: want a number such as 0.01, got lots"},
		{[]string{"-backend_tls=maybe"}, "-backend_tls: want true or false, got maybe"},
		{[]string{"-listen"}, "-listen needs a value"},
	} {
		var out bytes.Buffer
		_, _, err := Load(tt.args, &out)
		if err == nil {
			t.Errorf("Load(%q) accepted", tt.args)
			continue
		}
		if errors.Is(err, flag.ErrHelp) || !errors.Is(err, ErrInvalid) {
			t.Errorf("Load(%q) error %v; want one wrapping ErrInvalid", tt.args, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, tt.want) || !strings.HasSuffix(msg, "; redlock-proxy -h lists every flag") || strings.Contains(msg, "\n") {
			t.Errorf("Load(%q) error %q; want one line with %q, ending with a pointer to -h", tt.args, msg, tt.want)
		}
		if out.Len() != 0 {
			t.Errorf("Load(%q) printed %d bytes of usage after the error:\n%s", tt.args, out.Len(), out.String())
		}
	}
}

// Every key of the file refuses a value of the wrong type with its name,
// its line and what it wants.
func TestFileTypeErrorsNameTheKey(t *testing.T) {
	wrong := map[reflect.Type]string{
		reflect.TypeFor[time.Duration]():  "30",
		reflect.TypeFor[int]():            "lots",
		reflect.TypeFor[float64]():        "lots",
		reflect.TypeFor[bool]():           "maybe",
		reflect.TypeFor[string]():         "[a, b]",
		reflect.TypeFor[List]():           "{a: 1}",
		reflect.TypeFor[[]UserConfig]():   "lots",
		reflect.TypeFor[[]ScriptConfig](): "lots",
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		key, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		value, ok := wrong[f.Type]
		if !ok {
			t.Fatalf("test is stale: no wrong value for %s of type %v", key, f.Type)
		}
		yaml := "# line 1\n" + key + ": " + value + "\n"
		_, _, err := Load([]string{"-config", writeConfig(t, yaml)}, io.Discard)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: error %v; want ErrInvalid", yaml, err)
			continue
		}
		if want := ", line 2: " + key + ": want "; !strings.Contains(err.Error(), want) {
			t.Errorf("%q: error %q; want it to contain %q", yaml, err, want)
		}
	}
	// The form the operator wrote is quoted back, with what the key wants.
	for yaml, want := range map[string]string{
		"max_ttl: 30\n":                       "max_ttl: want a duration such as 30s, got 30",
		"drift_floor: 2\n":                    "drift_floor: want a duration such as 30s, got 2",
		"backend_timeout: fifty ms\n":         `backend_timeout: want a duration such as 30s, got "fifty ms"`,
		"max_bulk: 512KiB\n":                  "max_bulk: want a whole number, got 512KiB",
		"backends: [[a:1]]\n":                 "backends[0]: want host:port, got a list",
		"users:\n  - name: [x]\n":             "users[0].name: want a string, got a list",
		"scripts:\n  - keys: one\n":           "scripts[0].keys: want a whole number, got one",
		"max_ttl: &t 30s\nidle_timeout: *t\n": "", // aliases are followed
	} {
		c := Default()
		err := c.ReadYAML([]byte(yaml), "proxy.yaml")
		if want == "" {
			if err != nil || c.IdleTimeout != 30*time.Second {
				t.Errorf("%q: idle_timeout %v, error %v; want 30s through the alias", yaml, c.IdleTimeout, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "proxy.yaml, line ") {
			t.Errorf("%q: error %v; want the file, its line and %q", yaml, err, want)
		}
	}
}

// A duration written 0 is zero, as time.ParseDuration reads it.
func TestFileDurationZero(t *testing.T) {
	c, _ := mustLoad(t, "-config", writeConfig(t, "idle_timeout: 0\nmin_validity: 0\n"))
	if c.IdleTimeout != 0 || c.MinValidity != 0 {
		t.Errorf("idle_timeout %v, min_validity %v; want 0", c.IdleTimeout, c.MinValidity)
	}
}

// A misspelt key is refused with the key it probably meant.
func TestUnknownKeySuggestsTheKnownOne(t *testing.T) {
	for yaml, want := range map[string]string{
		"max_tll: 30s\n":                         "line 1: unknown key max_tll (did you mean max_ttl?)",
		"log_level: info\nbackend_timout: 1s\n":  "line 2: unknown key backend_timout (did you mean backend_timeout?)",
		"max-clients: 5\n":                       "unknown key max-clients (did you mean max_clients?)",
		"requirepas: x\n":                        "unknown key requirepas (did you mean requirepass?)",
		"users:\n  - nmae: a\n    password: b\n": "line 2: unknown key users[0].nmae (did you mean users[0].name?)",
		"colour: blue\n":                         "line 1: unknown key colour",
	} {
		c := Default()
		err := c.ReadYAML([]byte(yaml), "proxy.yaml")
		if !errors.Is(err, ErrInvalid) || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("%q: error %v; want one ending %q", yaml, err, want)
		}
		if !reflect.DeepEqual(c, Default()) {
			t.Errorf("%q: a refused file changed the configuration: %+v", yaml, c)
		}
	}
	if s := suggest("colour", yamlKeys(t)); s != "" {
		t.Errorf("colour is no typo of a key, got the suggestion %s", s)
	}
}

func TestWarnings(t *testing.T) {
	tests := []struct {
		name string
		args []string
		want []string // each warning must contain the corresponding key
	}{
		{"4 backends", []string{"-backends", "a:1,b:2,c:3,d:4"}, []string{"backends"}},
		{"4 embedded", []string{"-embedded_backends", "4"}, []string{"backends"}},
		{"1 backend", []string{"-backends", "a:1"}, []string{"backends"}},
		{"1 embedded", []string{"-embedded_backends", "1"}, []string{"backends"}},
		{"2 backends: even and fewer than 3", []string{"-backends", "a:1,b:2"}, []string{"backends", "backends"}},
		{"backend_timeout 10s max_ttl 60s", []string{"-backend_timeout", "10s", "-max_ttl", "60s"}, []string{"backend_timeout"}},
		{"restart_quarantine off", []string{"-restart_quarantine", "off"}, []string{"restart_quarantine"}},
		{"all at once", []string{"-backends", "a:1,b:2,c:3,d:4", "-backend_timeout", "40s", "-restart_quarantine", "off"},
			[]string{"backends", "backend_timeout", "restart_quarantine"}},
		{"5 backends: none", []string{"-backends", "a:1,b:2,c:3,d:4,e:5"}, nil},
		{"backend_timeout 30s is exactly a tenth: none", []string{"-backend_timeout", "30s"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, warnings := mustLoad(t, tt.args...)
			if len(warnings) != len(tt.want) {
				t.Fatalf("warnings = %q, want %d naming %q", warnings, len(tt.want), tt.want)
			}
			for i, key := range tt.want {
				if !strings.Contains(warnings[i], key) {
					t.Errorf("warning %d = %q, want it to name %s", i, warnings[i], key)
				}
			}
		})
	}
	t.Run("even and fewer than 3 say which", func(t *testing.T) {
		_, even := mustLoad(t, "-backends", "a:1,b:2,c:3,d:4")
		if !strings.Contains(even[0], "even") {
			t.Errorf("even warning %q does not say even", even[0])
		}
		_, one := mustLoad(t, "-backends", "a:1")
		if !strings.Contains(one[0], "3") {
			t.Errorf("single-backend warning %q does not mention 3", one[0])
		}
	})
	// An even count is told how many failures it tolerates, in words that
	// cannot be read as more than it is.
	for args, want := range map[string]string{
		"a:1,b:2":                 "backends: 2 backends (an even number) tolerate no failure, as 1 would: a majority of 2 is 2; use an odd number",
		"a:1,b:2,c:3,d:4":         "backends: 4 backends (an even number) tolerate 1 failure, as 3 would: a majority of 4 is 3; use an odd number",
		"a:1,b:2,c:3,d:4,e:5,f:6": "backends: 6 backends (an even number) tolerate 2 failures, as 5 would: a majority of 6 is 4; use an odd number",
	} {
		_, w := mustLoad(t, "-backends", args)
		if len(w) == 0 || w[0] != want {
			t.Errorf("-backends %s: warnings %q; want first %q", args, w, want)
		}
	}
	// The backend_timeout rule is stated as numbers.
	_, w := mustLoad(t, "-backend_timeout", "31s")
	if len(w) != 1 || !strings.Contains(w[0], "a tenth is 30s") {
		t.Errorf("backend_timeout 31s: warnings %q; want one stating the tenth of max_ttl, 30s", w)
	}
	// The refusal says what is refused (not below max_ttl), and that a
	// tenth is only warned about.
	_, _, err := Load([]string{"-backend_timeout", "5m"}, io.Discard)
	if want := "backend_timeout: must be below max_ttl (5m0s), got 5m0s (above a tenth of max_ttl, 30s, it is accepted with a warning)"; err == nil || !strings.HasSuffix(err.Error(), want) {
		t.Errorf("backend_timeout 5m: error %v; want one ending %q", err, want)
	}
}

func TestHelp(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"-help"}, {"--help"}, {"-listen", ":1", "-h"}} {
		var out bytes.Buffer
		_, _, err := Load(args, &out)
		if !errors.Is(err, flag.ErrHelp) {
			t.Errorf("Load(%q) error = %v, want flag.ErrHelp", args, err)
		}
		usage := out.String()
		for _, want := range []string{"-listen", "-backends", "-config", "-restart_quarantine", "duration"} {
			if !strings.Contains(usage, want) {
				t.Errorf("Load(%q) usage lacks %s:\n%s", args, want, usage)
			}
		}
		// A description on the first line, then examples, then the flags.
		first, _, _ := strings.Cut(usage, "\n")
		if !strings.HasPrefix(first, "redlock-proxy: ") || !strings.Contains(first, "Redlock majority vote") {
			t.Errorf("usage does not start with a one-line description: %q", first)
		}
		// The file example is the one the repository ships, and the first
		// start's wait is stated, with its length at the defaults.
		if !strings.Contains(usage, "redlock-proxy -config config.example.yaml") {
			t.Errorf("usage's file example is not config.example.yaml:\n%s", usage)
		}
		if !strings.Contains(usage, "The first start waits: over fresh masters") || !strings.Contains(usage, "(5m3.002s with the defaults)") {
			t.Errorf("usage does not state the first start's wait:\n%s", usage)
		}
		example := strings.Index(usage, "redlock-proxy -backends 10.0.0.11:6379,")
		flags := strings.Index(usage, "\n  -admin")
		if example < 0 || flags < 0 || example > flags {
			t.Errorf("usage has no example before the flags:\n%s", usage)
		}
	}
}

// The run-id rule is accepted, with a warning that says when it is unsafe.
func TestRunIDRuleIsWarnedAbout(t *testing.T) {
	c, warnings := mustLoad(t, "-restart_quarantine", "run-id")
	if c.RestartQuarantine != "run-id" {
		t.Fatalf("restart_quarantine = %q, want run-id", c.RestartQuarantine)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "unsafe") || !strings.Contains(warnings[0], "restarted") {
		t.Errorf("warnings = %q, want one saying run-id is unsafe after a master restart", warnings)
	}
}

// gomaxprocs: a positive setting is taken as it is; 0 is half the CPUs the
// process may use, at least 1.
func TestProcs(t *testing.T) {
	for _, tt := range []struct{ setting, cpus, want int }{
		{0, 1, 1}, {0, 2, 1}, {0, 3, 1}, {0, 4, 2}, {0, 16, 8},
		{1, 16, 1}, {4, 2, 4},
	} {
		if got := Procs(tt.setting, tt.cpus); got != tt.want {
			t.Errorf("Procs(%d, %d) = %d, want %d", tt.setting, tt.cpus, got, tt.want)
		}
	}
}

// writeTLSFiles writes a self-signed certificate and its key under a fresh
// directory as every TLS file allKeysYAML names (the certificate also
// serves as the CAs), and returns the directory with a trailing slash.
func writeTLSFiles(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	dir := t.TempDir() + "/"
	for name, data := range map[string][]byte{"cert.pem": cert, "ca.pem": cert, "key.pem": keyPEM,
		"backend-ca.pem": cert, "backend-cert.pem": cert, "backend-key.pem": keyPEM,
		"sentinel-ca.pem": cert, "sentinel-cert.pem": cert, "sentinel-key.pem": keyPEM} {
		if err := os.WriteFile(dir+name, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TLS files are read when the configuration is loaded: a missing or bad
// one is refused like every other mistake (ErrInvalid, the key, and its
// line when the file set it), and so is a TLS setting that would do
// nothing. A rule broken by a key the file set names the file's line too.
func TestConfigurationMistakesAreOneKind(t *testing.T) {
	dir := writeTLSFiles(t)
	notPEM := filepath.Join(t.TempDir(), "not.pem")
	if err := os.WriteFile(notPEM, []byte("hello"), 0o600); err != nil {
		t.Fatal(err)
	}
	file := func(body string) []string { return []string{"-config", writeConfig(t, body)} }
	for _, tt := range []struct {
		name string
		args []string
		want string // the error ends with it; "FILE" is the file's path
	}{
		{"missing certificate, in the file", file("listen: 127.0.0.1:0\ntls_cert_file: /nonexistent/cert.pem\ntls_key_file: /nonexistent/key.pem\n"),
			"FILE, line 2: tls_cert_file: open /nonexistent/cert.pem: no such file or directory"},
		{"missing certificate, as a flag", []string{"-tls_cert_file", "/nonexistent/cert.pem", "-tls_key_file", "/nonexistent/key.pem"},
			"invalid configuration: tls_cert_file: open /nonexistent/cert.pem: no such file or directory"},
		{"tls_ca_file alone", []string{"-tls_ca_file", "/nonexistent/ca.pem"},
			"invalid configuration: tls_ca_file: tls_ca_file (the CA of client certificates) needs tls_cert_file and tls_key_file: without them clients are served in plain text"},
		{"missing client CA", file("tls_cert_file: " + dir + "cert.pem\ntls_key_file: " + dir + "key.pem\ntls_ca_file: /nonexistent/ca.pem\n"),
			"FILE, line 3: tls_ca_file: cannot read it: open /nonexistent/ca.pem: no such file or directory"},
		{"client CA not PEM", []string{"-tls_cert_file", dir + "cert.pem", "-tls_key_file", dir + "key.pem", "-tls_ca_file", notPEM},
			"invalid configuration: tls_ca_file: " + notPEM + " holds no PEM certificate"},
		{"missing backend CA", file("backend_tls: true\nbackend_tls_ca_file: /nonexistent/backend-ca.pem\n"),
			"FILE, line 2: backend_tls_ca_file: cannot read it: open /nonexistent/backend-ca.pem: no such file or directory"},
		{"missing backend client certificate", []string{"-backend_tls", "-backend_tls_cert_file", "/nonexistent/c.pem", "-backend_tls_key_file", "/nonexistent/k.pem"},
			"invalid configuration: backend_tls_cert_file: open /nonexistent/c.pem: no such file or directory"},
		{"backend TLS file without backend_tls", file("backend_tls_ca_file: " + dir + "backend-ca.pem\n"),
			"FILE, line 1: backend_tls_ca_file: backend_tls_* settings need backend_tls: true"},
		{"a rule, in the file", file("# comment\nbackend_timeout: 5m\n"),
			"FILE, line 2: backend_timeout: must be below max_ttl (5m0s), got 5m0s (above a tenth of max_ttl, 30s, it is accepted with a warning)"},
		{"a rule of a list's element, in the file", file("users:\n  - name: default\n    password: x\n"),
			`FILE, line 1: users[0].name: must be a name other than default (set requirepass for the default user), got "default"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, _, err := Load(tt.args, io.Discard)
			want := tt.want
			if len(tt.args) == 2 && tt.args[0] == "-config" {
				want = strings.Replace(want, "FILE", tt.args[1], 1)
			}
			if !errors.Is(err, ErrInvalid) || !strings.HasSuffix(fmtErr(err), want) || strings.Contains(fmtErr(err), "\n") {
				t.Errorf("Load(%q): error %v; want one line wrapping ErrInvalid, ending %q", tt.args, err, want)
			}
		})
	}
	// A key the file set but a flag overrode is the flag's: no line of the
	// file is named.
	path := writeConfig(t, "backend_timeout: 10ms\n")
	_, _, err := Load([]string{"-config", path, "-backend_timeout", "5m"}, io.Discard)
	if want := "invalid configuration: backend_timeout: must be below max_ttl"; !strings.HasPrefix(fmtErr(err), want) {
		t.Errorf("flag over the file: error %v; want one starting %q", err, want)
	}
	// Files that are there load.
	if _, _, err := Load([]string{"-tls_cert_file", dir + "cert.pem", "-tls_key_file", dir + "key.pem", "-tls_ca_file", dir + "ca.pem",
		"-backend_tls", "-backend_tls_ca_file", dir + "backend-ca.pem"}, io.Discard); err != nil {
		t.Errorf("TLS files that exist: %v", err)
	}
}

// pprof: auto serves the profiles only on a loopback admin address; true
// on another is warned about; anything else is refused.
func TestPprofSwitch(t *testing.T) {
	for _, tt := range []struct {
		admin, pprof string
		serves       bool
		warned       bool
	}{
		{"127.0.0.1:7380", "auto", true, false},
		{"[::1]:7380", "auto", true, false},
		{"localhost:7380", "auto", true, false},
		{"0.0.0.0:7380", "auto", false, false},
		{":7380", "auto", false, false},
		{"10.0.0.5:7380", "auto", false, false},
		{"127.0.0.1:7380", "false", false, false},
		{"0.0.0.0:7380", "true", true, true},
		{"127.0.0.1:7380", "true", true, false},
	} {
		c, warnings := mustLoad(t, "-admin", tt.admin, "-pprof", tt.pprof)
		if got := c.ServesPprof(); got != tt.serves {
			t.Errorf("admin %s, pprof %s: ServesPprof = %v, want %v", tt.admin, tt.pprof, got, tt.serves)
		}
		if warned := len(warnings) == 1 && strings.HasPrefix(warnings[0], "pprof: true serves"); warned != tt.warned || len(warnings) > 1 {
			t.Errorf("admin %s, pprof %s: warnings %q; want a pprof warning: %v", tt.admin, tt.pprof, warnings, tt.warned)
		}
	}
	if _, _, err := Load([]string{"-pprof", "yes"}, io.Discard); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "pprof: must be auto") {
		t.Errorf("pprof yes: %v; want a refusal naming pprof", err)
	}
}
