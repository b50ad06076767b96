package config

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseBackend(t *testing.T) {
	for _, tc := range []struct {
		entry string
		want  BackendSpec
		err   string
	}{
		{entry: "10.0.0.1:6379", want: BackendSpec{Kind: BackendAddr, Addrs: []string{"10.0.0.1:6379"}}},
		{entry: "sentinel://10.0.1.1:26379,10.0.1.2:26379,10.0.1.3:26379/locks-a",
			want: BackendSpec{Kind: BackendSentinel, Addrs: []string{"10.0.1.1:26379", "10.0.1.2:26379", "10.0.1.3:26379"}, Name: "locks-a"}},
		{entry: "sentinel://s1:26379+S2:26379/locks-b",
			want: BackendSpec{Kind: BackendSentinel, Addrs: []string{"s1:26379", "s2:26379"}, Name: "locks-b"}},
		{entry: "cluster://10.0.5.1:7000,10.0.5.2:7000",
			want: BackendSpec{Kind: BackendCluster, Addrs: []string{"10.0.5.1:7000", "10.0.5.2:7000"}}},
		{entry: "sentinel://10.0.1.1:26379", err: "MASTER_NAME"},
		{entry: "sentinel://10.0.1.1:26379/", err: "MASTER_NAME"},
		{entry: "redis://10.0.1.1:6379", err: "a backend is host:port"},
		{entry: "cluster://", err: "no address"},
		{entry: "a:1,b:2", err: "one master per entry"},
		{entry: "cluster://a:x", err: "port"},
	} {
		got, err := ParseBackend(tc.entry)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseBackend(%q) = %+v, %v; want an error with %q", tc.entry, got, err, tc.err)
			}
			continue
		}
		tc.want.Entry = tc.entry
		if err != nil || !reflect.DeepEqual(got, tc.want) {
			t.Errorf("ParseBackend(%q) = %+v, %v; want %+v", tc.entry, got, err, tc.want)
		}
	}
}

// The -backends flag separates entries by commas; inside an entry the
// addresses are separated by "+", and a comma inside a sentinel:// entry
// before its /MASTER_NAME is read the same way.
func TestBackendsFlagIsUnambiguous(t *testing.T) {
	for in, want := range map[string][]string{
		"a:1,b:2,c:3": {"a:1", "b:2", "c:3"},
		"sentinel://s1:26379+s2:26379/m1,sentinel://s3:26379/m2,c:3": {"sentinel://s1:26379+s2:26379/m1", "sentinel://s3:26379/m2", "c:3"},
		"sentinel://s1:26379,s2:26379/m1,c:3":                        {"sentinel://s1:26379+s2:26379/m1", "c:3"},
		"cluster://n1:7000+n2:7000,c:3":                              {"cluster://n1:7000+n2:7000", "c:3"},
	} {
		if got := splitBackends(in); !reflect.DeepEqual(got, want) {
			t.Errorf("splitBackends(%q) = %q; want %q", in, got, want)
		}
	}
}

// The sentinel_* settings need a sentinel:// backend, and go together as
// the backend_* ones do; with one, the flags set them.
func TestSentinelSettings(t *testing.T) {
	group := "-backends=sentinel://127.0.0.1:26379+127.0.0.1:26380+127.0.0.1:26381/locks-a,127.0.0.1:6379,127.0.0.1:6380"
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"-backends=127.0.0.1:6379", "-sentinel_password=x"}, "sentinel_password: sentinel_* settings need a sentinel:// backend"},
		{[]string{group, "-sentinel_username=u"}, "sentinel_password: sentinel_username needs a sentinel_password"},
		{[]string{group, "-sentinel_tls_server_name=s"}, "sentinel_tls_server_name: sentinel_tls_* settings need sentinel_tls: true"},
		{[]string{group, "-sentinel_tls", "-sentinel_tls_cert_file=c.pem"}, "sentinel_tls_cert_file: sentinel_tls_cert_file and sentinel_tls_key_file go together"},
		{[]string{group, "-sentinel_tls", "-sentinel_tls_ca_file=/nonexistent/ca.pem"}, "sentinel_tls_ca_file: cannot read it"},
	} {
		_, _, err := Load(tc.args, nil)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("Load(%q) = %v; want %q", tc.args, err, tc.err)
		}
	}
	c, _, err := Load([]string{group, "-sentinel_username=u", "-sentinel_password=p", "-sentinel_tls", "-sentinel_tls_skip_verify"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.SentinelUsername != "u" || c.SentinelPassword != "p" || !c.SentinelTLS || !c.SentinelTLSSkipVerify || len(c.Backends) != 3 {
		t.Fatalf("flags gave %+v", c)
	}
	if tc, err := c.SentinelTLSConfig(); err != nil || tc == nil || !tc.InsecureSkipVerify {
		t.Fatalf("SentinelTLSConfig() = %+v, %v", tc, err)
	}
}
