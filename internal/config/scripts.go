package config

import (
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	"github.com/redlock-proxy/redlock-proxy/proxy/script"
)

// ScriptConfig registers a lock script the built-in registry does not know.
// Give its text (recognised whatever its formatting) or its sha1 (recognised
// only byte for byte), its role, and where its token and TTL are. Reply
// patterns default to the role's usual ones (see script.RoleDefaults):
// "ok", "nil", "int:N", "int:nkeys", "int:>0", "int:>=N", "error:PREFIX",
// "status:TEXT".
type ScriptConfig struct {
	Name      string   `yaml:"name"`
	SHA1      string   `yaml:"sha1"`
	Text      string   `yaml:"text"`
	Role      string   `yaml:"role"`       // acquire, release, extend, extend-or-acquire, ttl
	Keys      *int     `yaml:"keys"`       // keys it takes; 0 means one or more (default 1)
	TokenArg  *int     `yaml:"token_arg"`  // 1-based ARGV position of the token (default 1)
	TTLArg    *int     `yaml:"ttl_arg"`    // 1-based ARGV position of the TTL; 0 for none (default: 2 for acquire and extend roles, 0 otherwise)
	TTLUnit   string   `yaml:"ttl_unit"`   // ms or s (default ms)
	ReplyUnit string   `yaml:"reply_unit"` // ttl role: unit of the reply, ms or s (default ms)
	Granted   []string `yaml:"granted"`    // replies meaning the backend did it
	Refused   []string `yaml:"refused"`    // replies meaning it definitively did not
	Success   string   `yaml:"success"`    // reply on success when backends disagree
	Failure   string   `yaml:"failure"`    // reply on failure when backends disagree
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

// Spec converts the entry into a script spec. key names the entry in errors.
func (sc ScriptConfig) Spec(key string) (*script.Spec, error) {
	role, err := script.ParseRole(sc.Role)
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
	s := script.RoleDefaults(role)
	s.Name = sc.Name
	if s.Name == "" {
		s.Name = "configured " + sc.Role + " script"
	}
	if sc.Keys != nil {
		if *sc.Keys < 0 {
			return nil, invalid(key+".keys", "must be 0 (one or more) or a count, got %d", *sc.Keys)
		}
		s.Keys = *sc.Keys
	}
	if sc.TokenArg != nil {
		if *sc.TokenArg < 1 {
			return nil, invalid(key+".token_arg", "is a 1-based ARGV position, got %d", *sc.TokenArg)
		}
		s.TokenArg = *sc.TokenArg - 1
	}
	if sc.TTLArg != nil {
		if *sc.TTLArg < 0 {
			return nil, invalid(key+".ttl_arg", "is a 1-based ARGV position or 0 for none, got %d", *sc.TTLArg)
		}
		s.TTLArg = *sc.TTLArg - 1
	}
	if s.TTLArg == s.TokenArg && s.TTLArg >= 0 {
		return nil, invalid(key+".ttl_arg", "cannot be the token's position")
	}
	if (role == script.RoleAcquire || role == script.RoleExtendOrAcquire) && s.TTLArg < 0 {
		return nil, invalid(key+".ttl_arg", "an %s script must say where its TTL is: the proxy needs it for validity", sc.Role)
	}
	if s.TTLUnit, err = unit(sc.TTLUnit); err != nil {
		return nil, invalid(key+".ttl_unit", "%v", err)
	}
	if s.ReplyUnit, err = unit(sc.ReplyUnit); err != nil {
		return nil, invalid(key+".reply_unit", "%v", err)
	}
	pats := func(field string, in []string, dst *[]script.Pattern) error {
		if in == nil {
			return nil
		}
		*dst = nil
		for i, p := range in {
			pat, err := script.ParsePattern(p)
			if err != nil {
				return invalid(fmt.Sprintf("%s.%s[%d]", key, field, i), "%v", err)
			}
			*dst = append(*dst, pat)
		}
		return nil
	}
	if err := pats("granted", sc.Granted, &s.Granted); err != nil {
		return nil, err
	}
	if err := pats("refused", sc.Refused, &s.Refused); err != nil {
		return nil, err
	}
	for field, p := range map[string]*script.Pattern{"success": &s.Success, "failure": &s.Failure} {
		v := sc.Success
		if field == "failure" {
			v = sc.Failure
		}
		if v == "" {
			continue
		}
		pat, err := script.ParsePattern(v)
		if err != nil {
			return nil, invalid(key+"."+field, "%v", err)
		}
		*p = pat
	}
	return &s, nil
}

// RegisterScripts adds the configured scripts to a registry.
func (c *Config) RegisterScripts(r *script.Registry) error {
	for i, sc := range c.Scripts {
		key := fmt.Sprintf("scripts[%d]", i)
		spec, err := sc.Spec(key)
		if err != nil {
			return err
		}
		if sc.SHA1 != "" {
			r.RegisterSha(strings.ToLower(sc.SHA1), spec)
			continue
		}
		if err := r.Register(sc.Text, spec); err != nil {
			return invalid(key+".text", "%v", err)
		}
	}
	return nil
}
