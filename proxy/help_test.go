package proxy

import (
	"bufio"
	"bytes"
	"strings"
	"testing"

	"github.com/redlock-proxy/redlock-proxy/internal/base/resp"
)

// Every command of the table is documented, and nothing else is.
func TestEveryCommandIsDocumented(t *testing.T) {
	for name := range commands {
		d, ok := docs[name]
		if !ok {
			t.Errorf("%s has no documentation for HELP and COMMAND DOCS", name)
			continue
		}
		if d.summary == "" || d.group == "" {
			t.Errorf("%s: summary %q, group %q", name, d.summary, d.group)
		}
	}
	for name := range docs {
		if commands[name] == nil {
			t.Errorf("%s is documented but not served", name)
		}
	}
}

// field returns the value after key in a flat RESP2 map.
func field(m resp.Value, key string) (resp.Value, bool) {
	for i := 0; i+1 < len(m.Elems); i += 2 {
		if string(m.Elems[i].Str) == key {
			return m.Elems[i+1], true
		}
	}
	return resp.Value{}, false
}

// checkArgs checks argument maps as redis-cli reads them: a name and a type
// for each (redis-cli needs the type), flags as simple strings.
func checkArgs(t *testing.T, cmd string, args resp.Value) {
	t.Helper()
	if args.Kind != resp.KindArray {
		t.Errorf("%s: arguments are %v, not an array", cmd, args.Kind)
		return
	}
	for _, a := range args.Elems {
		name, ok1 := field(a, "name")
		typ, ok2 := field(a, "type")
		if !ok1 || !ok2 || name.Kind != resp.KindBulk || typ.Kind != resp.KindBulk {
			t.Errorf("%s: argument without a name and a type: %+v", cmd, a)
			continue
		}
		switch string(typ.Str) {
		case "key", "string", "integer", "double", "unix-time", "pure-token":
		case "oneof", "block":
			sub, ok := field(a, "arguments")
			if !ok {
				t.Errorf("%s: %s argument %s has no arguments", cmd, typ.Str, name.Str)
				continue
			}
			checkArgs(t, cmd, sub)
		default:
			t.Errorf("%s: argument %s has a type redis-cli does not know: %s", cmd, name.Str, typ.Str)
		}
		if flags, ok := field(a, "flags"); ok {
			for _, f := range flags.Elems {
				if f.Kind != resp.KindSimple {
					t.Errorf("%s: flag %+v is not a simple string", cmd, f)
				}
			}
		}
	}
}

// COMMAND DOCS is well formed for redis-cli: one map per served command
// with its summary, group and typed arguments; commands not served are
// left out.
func TestCommandDocsReply(t *testing.T) {
	read := func(b []byte) resp.Value {
		v, err := resp.NewReader(bufio.NewReader(bytes.NewReader(b)), resp.ReaderLimits{}).Read()
		if err != nil {
			t.Fatalf("COMMAND DOCS reply does not parse: %v", err)
		}
		return v
	}
	all := read(appendDocs(nil, sortedNames(), false))
	if len(all.Elems) != 2*len(commands) {
		t.Fatalf("COMMAND DOCS has %d entries, want %d", len(all.Elems)/2, len(commands))
	}
	for i := 0; i < len(all.Elems); i += 2 {
		name, d := string(all.Elems[i].Str), all.Elems[i+1]
		summary, ok := field(d, "summary")
		if !ok || !strings.HasPrefix(string(summary.Str), docs[name].summary[:10]) {
			t.Errorf("%s: summary %q", name, summary.Str)
		}
		if g, ok := field(d, "group"); !ok || string(g.Str) != docs[name].group {
			t.Errorf("%s: group %q", name, g.Str)
		}
		if args, ok := field(d, "arguments"); ok {
			checkArgs(t, name, args)
		} else if len(docs[name].args) > 0 {
			t.Errorf("%s: no arguments", name)
		}
	}
	some := read(appendDocs(nil, []string{"get", "flushall", "set"}, false))
	if len(some.Elems) != 4 || string(some.Elems[0].Str) != "get" || string(some.Elems[2].Str) != "set" {
		t.Errorf("COMMAND DOCS get flushall set = %+v; want get and set only", some)
	}
	if got := appendDocs(nil, []string{"get"}, true); !bytes.HasPrefix(got, []byte("%1\r\n$3\r\nget\r\n%3\r\n")) {
		t.Errorf("RESP3 COMMAND DOCS does not use maps: %q", got)
	}
}

// The synopsis reads as redis-cli shows a command's arguments.
func TestSynopsis(t *testing.T) {
	for name, want := range map[string]string{
		"set":   "SET key token NX|IFEQ token PX milliseconds|EX seconds|PXAT unix-time-milliseconds|EXAT unix-time-seconds",
		"del":   "DEL key [key ...]",
		"delex": "DELEX key [IFEQ token]",
		"eval":  "EVAL script numkeys [key [key ...]] [arg [arg ...]]",
		"hello": "HELLO [protover [AUTH username password] [SETNAME clientname]]",
		"quit":  "QUIT",
	} {
		if got := synopsis(name, docs[name]); got != want {
			t.Errorf("synopsis of %s = %q, want %q", name, got, want)
		}
	}
}

// A command registered twice panics when the table is built.
func TestCommandRegisteredTwicePanics(t *testing.T) {
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("a duplicate registration did not panic")
		}
	}()
	table(&commandDef{name: "ping"}, &commandDef{name: "ping"})
}
