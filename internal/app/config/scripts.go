package config

import (
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/internal/script/classify"
	"github.com/redlock-proxy/redlock-proxy/internal/script/sandbox"
	"github.com/redlock-proxy/redlock-proxy/internal/script/spec"
)

// ScriptConfig declares by hand what a lock script is, for a script the
// classifier refuses or to pin a classification. Give its text or its
// sha1, its role, where its token and TTL are, and its replies. The
// backends run the proxy's reference script for the role, as for a
// classified script; the declaration only says how to read the call and
// what to answer.
//
// Replies are templates (see spec.ParseTemplate: 1, nil, +OK, -ERR x,
// "text", pttl, ttl, [1, pttl]...); the older forms "ok", "nil", "int:N",
// "int:nkeys", "error:TEXT" and "status:TEXT" are read too. success is the
// reply in every case where the role acts (or, for a query, where the
// caller holds the lock), failure in every other case, and replies sets
// single cases (missing, own, own-no-ttl, other, other-no-ttl, partial).
type ScriptConfig struct {
	Name      string  `yaml:"name"`
	SHA1      string  `yaml:"sha1"`
	Text      string  `yaml:"text"`
	Role      string  `yaml:"role"`       // acquire, release, extend, extend-or-acquire, ttl, owner, value, inspect
	Keys      *int    `yaml:"keys"`       // keys it takes; 0 means any number (default 1)
	TokenArg  *int    `yaml:"token_arg"`  // 1-based ARGV position of the token (default 1; 0: none, for value and inspect)
	TTLArg    *int    `yaml:"ttl_arg"`    // 1-based ARGV position of the TTL (default 2 for acquire and extend roles)
	TTLUnit   string  `yaml:"ttl_unit"`   // ms or s (default ms)
	ReplyUnit string  `yaml:"reply_unit"` // ttl role: unit of the TTL it replies, ms or s (default ms)
	Success   string  `yaml:"success"`    // reply where the role acts
	Failure   string  `yaml:"failure"`    // reply elsewhere
	Replies   Replies `yaml:"replies"`    // replies of single cases
	// Granted and Refused were patterns for reading the backends' replies
	// to the script's own text. The backends now run the proxy's reference
	// script, whose replies the proxy reads itself: they are checked and
	// otherwise not used.
	Granted []string `yaml:"granted"`
	Refused []string `yaml:"refused"`
}

// Replies sets the reply of single cases (see spec.Case), overriding
// success and failure there.
type Replies struct {
	Missing     string `yaml:"missing"`
	Own         string `yaml:"own"`
	OwnNoTTL    string `yaml:"own-no-ttl"`
	OwnLowTTL   string `yaml:"own-low-ttl"`
	Other       string `yaml:"other"`
	OtherNoTTL  string `yaml:"other-no-ttl"`
	OtherLowTTL string `yaml:"other-low-ttl"`
	Partial     string `yaml:"partial"`
}

// byCase lists the replies set, by case name.
func (r Replies) byCase() [][2]string {
	var out [][2]string
	for _, c := range [][2]string{{"missing", r.Missing}, {"own", r.Own}, {"own-no-ttl", r.OwnNoTTL}, {"own-low-ttl", r.OwnLowTTL},
		{"other", r.Other}, {"other-no-ttl", r.OtherNoTTL}, {"other-low-ttl", r.OtherLowTTL}, {"partial", r.Partial}} {
		if c[1] != "" {
			out = append(out, c)
		}
	}
	return out
}

func unit(s string) (time.Duration, error) {
	switch s {
	case "", "ms":
		return time.Millisecond, nil
	case "s":
		return time.Second, nil
	}
	return 0, fmt.Errorf("must be ms or s, got %q", s)
}

// template reads a reply as a template, or in one of the older forms.
func template(s string) (*spec.Template, error) {
	kind, arg, found := strings.Cut(s, ":")
	if found || s == "ok" {
		switch strings.ToLower(kind) {
		case "ok":
			return spec.ParseTemplate("+OK")
		case "int":
			if arg == "nkeys" {
				return spec.ParseTemplate("nkeys")
			}
			return spec.ParseTemplate(arg)
		case "error":
			return spec.ParseTemplate("-" + fmt.Sprintf("%q", arg))
		case "status":
			return spec.ParseTemplate("+" + fmt.Sprintf("%q", arg))
		}
	}
	return spec.ParseTemplate(s)
}

// Class converts the entry into a classification; key names the entry in
// errors.
func (sc ScriptConfig) Class(key string) (*spec.Class, error) {
	role, err := spec.ParseRole(sc.Role)
	if err != nil {
		return nil, invalid(key+".role", "%v", err)
	}
	if (sc.Text == "") == (sc.SHA1 == "") {
		return nil, invalid(key, "give exactly one of text or sha1")
	}
	if sc.SHA1 != "" {
		if b, err := hex.DecodeString(sc.SHA1); err != nil || len(b) != 20 {
			return nil, invalid(key+".sha1", "must be 40 hex digits, got %q", sc.SHA1)
		}
	}
	if sc.Text != "" {
		if _, ref := sandbox.Compile([]byte(sc.Text)); ref != nil {
			return nil, invalid(key+".text", "%s", ref.Error())
		}
	}
	writes := role.Writes()
	c := &spec.Class{Role: role, Origin: "configured", Layout: spec.Layout{
		Keys: 1, Args: -1, Tokens: []int{0}, TTLArg: -1, MinArg: -1, TTLUnit: time.Millisecond, MinUnit: time.Millisecond,
		NoTTLActs: true,
	}}
	if sc.Name != "" {
		c.Origin = "configured: " + sc.Name
	}
	if sc.Keys != nil {
		if *sc.Keys < 0 {
			return nil, invalid(key+".keys", "must be 0 (any number) or a count, got %d", *sc.Keys)
		}
		c.Keys = *sc.Keys
	}
	if sc.TokenArg != nil {
		switch {
		case *sc.TokenArg < 0 || (*sc.TokenArg == 0 && role != spec.RoleValue && role != spec.RoleInspect):
			return nil, invalid(key+".token_arg", "is a 1-based ARGV position (0, no token, for value and inspect only), got %d", *sc.TokenArg)
		case *sc.TokenArg == 0:
			c.Tokens = nil
		default:
			c.Tokens = []int{*sc.TokenArg - 1}
		}
	} else if role == spec.RoleValue || role == spec.RoleInspect {
		c.Tokens = nil
	}
	if writes {
		c.TTLArg = 1
	}
	if sc.TTLArg != nil {
		switch {
		case *sc.TTLArg < 0:
			return nil, invalid(key+".ttl_arg", "is a 1-based ARGV position, got %d", *sc.TTLArg)
		case *sc.TTLArg == 0 && writes:
			return nil, invalid(key+".ttl_arg", "an %s script must say where its TTL is: the proxy needs it for validity", sc.Role)
		}
		c.TTLArg = *sc.TTLArg - 1
	}
	if c.Tokens != nil && c.TTLArg == c.Tokens[0] {
		return nil, invalid(key+".ttl_arg", "cannot be the token's position")
	}
	if !writes {
		c.TTLArg = -1
	}
	if c.TTLUnit, err = unit(sc.TTLUnit); err != nil {
		return nil, invalid(key+".ttl_unit", "%v", err)
	}
	replyUnit, err := unit(sc.ReplyUnit)
	if err != nil {
		return nil, invalid(key+".reply_unit", "%v", err)
	}
	for field, pats := range map[string][]string{"granted": sc.Granted, "refused": sc.Refused} {
		for i, p := range pats {
			if !oldPattern(p) {
				return nil, invalid(fmt.Sprintf("%s.%s[%d]", key, field, i), "want ok, nil, int:N, int:nkeys, int:>0, int:>=N, error:PREFIX or status:TEXT, got %q", p)
			}
		}
	}
	success, failure := defaultReplies(role, replyUnit)
	for field, p := range map[string]*string{"success": &success, "failure": &failure} {
		v := sc.Success
		if field == "failure" {
			v = sc.Failure
		}
		if v == "" {
			continue
		}
		if _, err := template(v); err != nil {
			return nil, invalid(key+"."+field, "%v", err)
		}
		*p = v
	}
	for _, cs := range c.Cases() {
		good := c.Acts(cs)
		if role.Query() {
			good = cs == spec.CaseOwn || cs == spec.CaseOwnNoTTL || (c.Tokens == nil && cs != spec.CaseMissing)
		}
		r := failure
		if good {
			r = success
		}
		t, _ := template(r)
		c.Replies[cs] = t
	}
	for _, r := range sc.Replies.byCase() {
		cs, err := spec.ParseCase(r[0])
		if err != nil {
			return nil, invalid(key+".replies", "%v", err)
		}
		t, err := template(r[1])
		if err != nil {
			return nil, invalid(key+".replies."+r[0], "%v", err)
		}
		c.Replies[cs] = t
	}
	return c.Finish(), nil
}

// oldPattern checks a granted/refused pattern.
func oldPattern(p string) bool {
	kind, arg, _ := strings.Cut(p, ":")
	switch strings.ToLower(kind) {
	case "ok", "nil", "error", "status":
		return true
	case "int":
		arg = strings.TrimPrefix(strings.TrimPrefix(arg, ">="), ">")
		if arg == "nkeys" || arg == "0" && strings.HasPrefix(p, "int:>0") {
			return true
		}
		_, err := strconv.ParseInt(arg, 10, 64)
		return err == nil
	}
	return false
}

// defaultReplies are the replies most scripts of a role use: OK or nil for
// an acquire, 1 or 0 for release and extend, the TTL or -2 for a TTL
// query, 1 or 0 for an owner query, the value (and TTL) or nil otherwise.
func defaultReplies(r spec.Role, replyUnit time.Duration) (success, failure string) {
	switch r {
	case spec.RoleAcquire:
		return "+OK", "nil"
	case spec.RoleTTL:
		if replyUnit == time.Second {
			return "ttl", "-2"
		}
		return "pttl", "-2"
	case spec.RoleValue:
		return "value", "nil"
	case spec.RoleInspect:
		return "[value, pttl]", "nil"
	}
	return "1", "0"
}

// RegisterScripts adds the configured scripts to a registry.
func (c *Config) RegisterScripts(r *classify.Registry) error {
	for i, sc := range c.Scripts {
		key := fmt.Sprintf("scripts[%d]", i)
		cl, err := sc.Class(key)
		if err != nil {
			return err
		}
		sha := strings.ToLower(sc.SHA1)
		if sc.Text != "" {
			sha = sandbox.Sha1([]byte(sc.Text))
		}
		r.Declare(sha, cl)
	}
	return nil
}
