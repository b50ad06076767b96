package config

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"reflect"
	"strconv"
	"strings"
)

// usageHead comes before the list of flags in -h; %v is the first-start
// wait with the defaults.
const usageHead = `redlock-proxy: a lock service that speaks the Redis protocol: every lock command becomes a Redlock majority vote over N independent Redis masters.

Usage:
  redlock-proxy                 try it: three embedded demo backends (not for production)
  redlock-proxy -backends 10.0.0.11:6379,10.0.0.12:6379,10.0.0.13:6379
  redlock-proxy -config config.example.yaml -log_level debug
  redlock-proxy -check -config proxy.yaml   validate the configuration, print a summary, exit (0 good, 1 not)
  redlock-proxy -version                    print the version, revision and Go version

Every flag is also a key of the YAML file given with -config (see
config.example.yaml); flags given on the command line win over the file.

The first start waits: over fresh masters (or masters no proxy has used)
locks are refused for max_ttl + drift (%v with the defaults), since a
master that may have forgotten locks never counts sooner. /readyz and
INFO proxy say how long is left.

Flags:
`

// seeHelp ends every refusal of the command line.
const seeHelp = "redlock-proxy -h lists every flag"

// flagFailure is a flag whose value was refused.
type flagFailure struct {
	name, value string
	want        string
}

// recorder remembers which flag refused its value, so that the error can
// say what the flag wants.
type recorder struct {
	flag.Value
	name   string
	failed **flagFailure
}

func (r recorder) Set(s string) error {
	if err := r.Value.Set(s); err != nil {
		want := "a valid value"
		if g, ok := r.Value.(flag.Getter); ok {
			want = describe(reflect.TypeOf(g.Get()))
		}
		*r.failed = &flagFailure{name: r.name, value: s, want: want}
		return err
	}
	return nil
}

func (r recorder) IsBoolFlag() bool {
	b, ok := r.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// parseFlags parses args into fs. -h prints the usage to out; every other
// mistake comes back as a one-line error, and nothing is printed.
func parseFlags(fs *flag.FlagSet, args []string, out io.Writer) error {
	var failed *flagFailure
	orig := map[string]flag.Value{}
	var names []string
	fs.VisitAll(func(f *flag.Flag) {
		orig[f.Name] = f.Value
		names = append(names, f.Name)
		f.Value = recorder{Value: f.Value, name: f.Name, failed: &failed}
	})
	defer fs.VisitAll(func(f *flag.Flag) { f.Value = orig[f.Name] })
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	err := fs.Parse(args)
	if err == nil {
		return nil
	}
	if errors.Is(err, flag.ErrHelp) {
		fs.VisitAll(func(f *flag.Flag) { f.Value = orig[f.Name] })
		if out != nil {
			d := Default()
			fmt.Fprintf(out, usageHead, d.MaxTTL+d.Timing().Drift(d.MaxTTL))
			fs.SetOutput(out)
			fs.PrintDefaults()
		}
		return flag.ErrHelp
	}
	msg := err.Error()
	switch {
	case failed != nil:
		value := failed.value
		if value == "" || strings.ContainsAny(value, " \t\"'") {
			value = strconv.Quote(value)
		}
		return fmt.Errorf("%w: -%s: want %s, got %s; %s", ErrInvalid, failed.name, failed.want, value, seeHelp)
	case strings.HasPrefix(msg, "flag provided but not defined: -"):
		name := strings.TrimPrefix(msg, "flag provided but not defined: -")
		msg = "unknown flag -" + name
		if s := suggest(name, names); s != "" {
			msg += " (did you mean -" + s + "?)"
		}
	case strings.HasPrefix(msg, "flag needs an argument: -"):
		msg = strings.TrimPrefix(msg, "flag needs an argument: ") + " needs a value"
	}
	return fmt.Errorf("%w: %s; %s", ErrInvalid, msg, seeHelp)
}
