package config

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
)

// validateSecurity checks authentication and TLS settings.
func (c *Config) validateSecurity() error {
	seen := map[string]bool{}
	for i, u := range c.Users {
		key := fmt.Sprintf("users[%d]", i)
		switch {
		case u.Name == "" || u.Name == "default":
			return invalid(key+".name", "must be a name other than default (set requirepass for the default user), got %q", u.Name)
		case seen[u.Name]:
			return invalid(key+".name", "%q is listed twice", u.Name)
		case u.Password == "":
			return invalid(key+".password", "must not be empty")
		}
		if _, err := u.ACL(); err != nil {
			return invalid(key+".rules", "%v", err)
		}
		seen[u.Name] = true
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		return invalid("tls_cert_file", "tls_cert_file and tls_key_file go together")
	}
	if c.TLSAuthClients && (c.TLSCAFile == "" || c.TLSCertFile == "") {
		return invalid("tls_auth_clients", "needs tls_cert_file, tls_key_file and tls_ca_file")
	}
	if c.TLSCAFile != "" && c.TLSCertFile == "" {
		return invalid("tls_ca_file", "tls_ca_file (the CA of client certificates) needs tls_cert_file and tls_key_file: without them clients are served in plain text")
	}
	if (c.BackendTLSCertFile == "") != (c.BackendTLSKeyFile == "") {
		return invalid("backend_tls_cert_file", "backend_tls_cert_file and backend_tls_key_file go together")
	}
	if !c.BackendTLS {
		for _, k := range []struct {
			key string
			set bool
		}{
			{"backend_tls_ca_file", c.BackendTLSCAFile != ""}, {"backend_tls_cert_file", c.BackendTLSCertFile != ""},
			{"backend_tls_server_name", c.BackendTLSServerName != ""}, {"backend_tls_skip_verify", c.BackendTLSSkipVerify},
		} {
			if k.set {
				return invalid(k.key, "backend_tls_* settings need backend_tls: true")
			}
		}
	}
	if c.BackendUsername != "" && c.BackendPassword == "" {
		return invalid("backend_password", "backend_username needs a backend_password")
	}
	if err := c.validateSentinels(); err != nil {
		return err
	}
	// The files are read now, so that a missing or unreadable one is a
	// configuration mistake like any other, refused before anything starts.
	if _, err := c.ClientTLS(); err != nil {
		return err
	}
	if _, err := c.BackendTLSConfig(); err != nil {
		return err
	}
	_, err := c.SentinelTLSConfig()
	return err
}

// validateSentinels checks the sentinel_* settings: they need a sentinel://
// backend, and go together as the backend_* ones do.
func (c *Config) validateSentinels() error {
	sentinels := false
	for _, b := range c.Backends {
		if s, err := ParseBackend(b); err == nil && s.Kind == BackendSentinel {
			sentinels = true
		}
	}
	set := []struct {
		key string
		set bool
	}{
		{"sentinel_username", c.SentinelUsername != ""}, {"sentinel_password", c.SentinelPassword != ""}, {"sentinel_tls", c.SentinelTLS},
		{"sentinel_tls_ca_file", c.SentinelTLSCAFile != ""}, {"sentinel_tls_cert_file", c.SentinelTLSCertFile != ""},
		{"sentinel_tls_key_file", c.SentinelTLSKeyFile != ""},
		{"sentinel_tls_server_name", c.SentinelTLSServerName != ""}, {"sentinel_tls_skip_verify", c.SentinelTLSSkipVerify},
	}
	for _, k := range set {
		if k.set && !sentinels {
			return invalid(k.key, "sentinel_* settings need a sentinel:// backend")
		}
	}
	if (c.SentinelTLSCertFile == "") != (c.SentinelTLSKeyFile == "") {
		return invalid("sentinel_tls_cert_file", "sentinel_tls_cert_file and sentinel_tls_key_file go together")
	}
	if !c.SentinelTLS {
		for _, k := range set[3:] {
			if k.set {
				return invalid(k.key, "sentinel_tls_* settings need sentinel_tls: true")
			}
		}
	}
	if c.SentinelUsername != "" && c.SentinelPassword == "" {
		return invalid("sentinel_password", "sentinel_username needs a sentinel_password")
	}
	return nil
}

// SentinelTLSConfig builds the TLS configuration for the Sentinels of
// sentinel:// backends, or nil.
func (c *Config) SentinelTLSConfig() (*tls.Config, error) {
	if !c.SentinelTLS {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.SentinelTLSServerName, InsecureSkipVerify: c.SentinelTLSSkipVerify}
	if c.SentinelTLSCAFile != "" {
		pool, err := loadCA(c.SentinelTLSCAFile)
		if err != nil {
			return nil, invalid("sentinel_tls_ca_file", "%v", err)
		}
		t.RootCAs = pool
	}
	if c.SentinelTLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.SentinelTLSCertFile, c.SentinelTLSKeyFile)
		if err != nil {
			return nil, invalid("sentinel_tls_cert_file", "%v", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

// ClientTLS builds the TLS configuration for the client listener, or nil.
func (c *Config) ClientTLS() (*tls.Config, error) {
	if c.TLSCertFile == "" {
		return nil, nil
	}
	cert, err := tls.LoadX509KeyPair(c.TLSCertFile, c.TLSKeyFile)
	if err != nil {
		return nil, invalid("tls_cert_file", "%v", err)
	}
	t := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if c.TLSCAFile != "" {
		pool, err := loadCA(c.TLSCAFile)
		if err != nil {
			return nil, invalid("tls_ca_file", "%v", err)
		}
		t.ClientCAs = pool
		t.ClientAuth = tls.VerifyClientCertIfGiven
		if c.TLSAuthClients {
			t.ClientAuth = tls.RequireAndVerifyClientCert
		}
	}
	return t, nil
}

// BackendTLSConfig builds the TLS configuration for backend links, or nil.
func (c *Config) BackendTLSConfig() (*tls.Config, error) {
	if !c.BackendTLS {
		return nil, nil
	}
	t := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.BackendTLSServerName, InsecureSkipVerify: c.BackendTLSSkipVerify}
	if c.BackendTLSCAFile != "" {
		pool, err := loadCA(c.BackendTLSCAFile)
		if err != nil {
			return nil, invalid("backend_tls_ca_file", "%v", err)
		}
		t.RootCAs = pool
	}
	if c.BackendTLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.BackendTLSCertFile, c.BackendTLSKeyFile)
		if err != nil {
			return nil, invalid("backend_tls_cert_file", "%v", err)
		}
		t.Certificates = []tls.Certificate{cert}
	}
	return t, nil
}

func loadCA(path string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("cannot read it: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", path)
	}
	return pool, nil
}
