// Package libscripts gives tests the lock scripts of client libraries with
// a typical call of each: the exact text of the libraries installed on the
// test machine, taken at test time (the Go module cache, the npm packages
// of integration/node, Debian's python3-redis, the PyPI libraries of
// integration/python's virtualenv), and scripts written for
// this project in the style of libraries whose runtime is not installed
// (same behaviour, other text), each standing for a library fact.
//
// It promises that every script it returns is the library's own text
// (whose SHA1 the caller can check against a fact) or marked as a style
// script; a library that cannot be read is an error, never skipped.
package libscripts

import (
	"bytes"
	"encoding/json"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Script is a lock script with a call of it.
type Script struct {
	Library string
	Name    string
	Text    string
	Keys    []string
	Argv    []string
	// Fact is the SHA1 of the library's text this script is (or, for a
	// style script, stands for).
	Fact  string
	Style bool
}

// token22 is a token of redislock's default length.
const token22 = "Aq3xY7vQpL2mZr8sT1uWcE"

// call builds keys and argv from "k1 k2 -- a b". An argument @+N is a
// deadline N ms from now, as Unix time in ms (the calls of libraries that
// pass PXAT and PEXPIREAT times).
func call(s string) ([]string, []string) {
	ks, as, _ := strings.Cut(s, "--")
	argv := strings.Fields(as)
	for i, a := range argv {
		if d, ok := strings.CutPrefix(a, "@+"); ok {
			n, _ := strconv.ParseInt(d, 10, 64)
			argv[i] = strconv.FormatInt(time.Now().UnixMilli()+n, 10)
		}
	}
	return strings.Fields(ks), argv
}

// goScripts lists the script variables of the Go libraries: module, file,
// variable, call, fact.
var goScripts = []struct{ module, file, name, call, fact string }{
	{"github.com/go-redsync/redsync/v4", "scripts.go", "deleteScript", "lock:a -- tok-1", "e950836ed1e694540c503ef9972b8de518044d3b"},
	{"github.com/go-redsync/redsync/v4", "scripts.go", "touchScript", "lock:a -- tok-1 8000", "d75bb8b5bd13532ddedd17762e772346e39b321e"},
	{"github.com/go-redsync/redsync/v4", "scripts.go", "touchWithSetNXScript", "lock:a -- tok-1 8000", "b6b55c439e02c6f52ffb8be7ec8c0d0ac816ea79"},
	{"github.com/bsm/redislock", "redislock.go", "luaObtain", "lock:a -- " + token22 + " 22 10000", "80a1b5f2cfccec3b7119ba7721d2127682b691a7"},
	{"github.com/bsm/redislock", "redislock.go", "luaPTTL", "lock:a -- " + token22, "6484da7d58920897fdc22b7f9afd1a3d47524ea8"},
	{"github.com/bsm/redislock", "redislock.go", "luaRefresh", "lock:a -- " + token22 + " 10000", "a7aba3bc5d6e99b3003da8b9d80a63b9f4092ecf"},
	{"github.com/bsm/redislock", "redislock.go", "luaRelease", "lock:a -- " + token22, "cf0e94b2e9ffc7e04395cf88f7583fc309985910"},
	{"github.com/redis/rueidis", "rueidislock/lock.go", "acqat", "rueidislock:0:a -- tok-1 @+5000", "3875d208d9e377969d2022550302cc83ad17b584"},
	{"github.com/redis/rueidis", "rueidislock/lock.go", "acqms", "rueidislock:0:a -- tok-1 5000", "fa3d1aaa7e4145457755016a3d5daf72fa7a11bf"},
	{"github.com/redis/rueidis", "rueidislock/lock.go", "extend", "rueidislock:0:a -- tok-1 @+5000", "852ba6ec6104340ced36643283c856d4698569e4"},
	{"github.com/redis/rueidis", "rueidislock/lock.go", "delkey", "rueidislock:0:a -- tok-1 @+5000", "9eb62214c9af87ae5f9a9f12bb4520281c0d2ae1"},
}

// GoText returns one script of a Go module from the module cache: the
// first string argument of the call that initializes the variable name
// in file (a path inside the module), run from dir, a directory inside
// this module.
func GoText(dir, module, file, name string) (string, error) {
	cmd := exec.Command("go", "list", "-m", "-json", module)
	cmd.Dir = dir
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("libscripts: go list -m %s: %w", module, err)
	}
	var m struct{ Dir string }
	if err := json.Unmarshal(b, &m); err != nil || m.Dir == "" {
		return "", fmt.Errorf("libscripts: module %s is not in the module cache (go mod download): %v", module, err)
	}
	return goStringVar(filepath.Join(m.Dir, file), name)
}

// Go returns the scripts of redsync and bsm/redislock from the module
// cache (go list -m -json gives each module's directory), run from dir,
// a directory inside this module.
func Go(dir string) ([]Script, error) {
	var out []Script
	dirs := map[string]string{}
	for _, g := range goScripts {
		mdir, ok := dirs[g.module]
		if !ok {
			cmd := exec.Command("go", "list", "-m", "-json", g.module)
			cmd.Dir = dir
			b, err := cmd.Output()
			if err != nil {
				return nil, fmt.Errorf("libscripts: go list -m %s: %w", g.module, err)
			}
			var m struct{ Dir, Version string }
			if err := json.Unmarshal(b, &m); err != nil {
				return nil, fmt.Errorf("libscripts: go list -m %s: %w", g.module, err)
			}
			if m.Dir == "" {
				return nil, fmt.Errorf("libscripts: module %s is not in the module cache (go mod download)", g.module)
			}
			mdir, dirs[g.module] = m.Dir, m.Dir
		}
		text, err := goStringVar(filepath.Join(mdir, g.file), g.name)
		if err != nil {
			return nil, err
		}
		keys, argv := call(g.call)
		out = append(out, Script{Library: g.module, Name: g.name, Text: text, Keys: keys, Argv: argv, Fact: g.fact})
	}
	return out, nil
}

// goStringVar finds `var name = pkg.NewScript(..., "text", ...)` in a Go
// file.
func goStringVar(file, name string) (string, error) {
	f, err := parser.ParseFile(token.NewFileSet(), file, nil, 0)
	if err != nil {
		return "", fmt.Errorf("libscripts: %w", err)
	}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok {
			continue
		}
		for _, s := range g.Specs {
			v, ok := s.(*ast.ValueSpec)
			if !ok {
				continue
			}
			for i, n := range v.Names {
				if n.Name != name || i >= len(v.Values) {
					continue
				}
				c, ok := v.Values[i].(*ast.CallExpr)
				if !ok {
					continue
				}
				// The script is the first string argument (redsync passes
				// its sha1 after it).
				for _, a := range c.Args {
					if lit, ok := a.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						return strconv.Unquote(lit.Value)
					}
				}
			}
		}
	}
	return "", fmt.Errorf("libscripts: no script %s in %s", name, file)
}

// nodeDump prints the scripts of the npm packages as JSON.
const nodeDump = `const out = {};
const R4 = require("redlock"); const r4 = new R4([{}]);
for (const k of ["lockScript", "extendScript", "unlockScript"]) out["redlock@4.2.0 " + k] = r4[k];
const R5 = require("redlock5").default; const r5 = new R5([{}]);
for (const k of ["acquireScript", "extendScript", "releaseScript"]) out["redlock@5.0.0-beta.2 " + k] = r5.scripts[k].value;
require("@sesamecare-oss/redlock/build/scripts").ensureCommands({ defineCommand: (n, o) => { out["@sesamecare-oss/redlock@1.4.0 " + n] = o.lua; } });
const fs = require("fs");
const text = (m) => fs.readFileSync("node_modules/" + m, "utf8");
const bt = String.fromCharCode(96);
// Template literals after head: [name before head on the line, text].
const literals = (src, head) => {
  const o = [];
  for (let i = src.indexOf(head + bt); i >= 0; i = src.indexOf(head + bt, i + 1)) {
    const s = i + head.length + 1;
    const line = src.slice(src.lastIndexOf("\n", i) + 1, i);
    o.push([line.trim(), src.slice(s, src.indexOf(bt, s))]);
  }
  return o;
};
out["redis-semaphore@5.8.0 Mutex release"] = literals(text("redis-semaphore/lib/mutex/release.js"), "createEval)(")[0][1];
out["redis-semaphore@5.8.0 Mutex refresh"] = literals(text("redis-semaphore/lib/mutex/refresh.js"), "createEval)(")[0][1];
for (const n of ["parityDel", "parityRelock"]) out["node-redis-warlock@1.0.2 " + n] = text("node-redis-warlock/lib/lua/" + n + ".lua");
for (const [line, t] of literals(text("@microfleet/ioredis-lock/lib/scripts.js"), "= ")) out["@microfleet/ioredis-lock@6.0.1 " + line.split(" ")[2]] = t;
console.log(JSON.stringify(out));`

var nodeScripts = []struct{ name, call, fact string }{
	{"redlock@4.2.0 lockScript", "a b c -- tok-1 5000", "e5a322e2634ef59a516e8ea150cb085afafee684"},
	{"redlock@4.2.0 extendScript", "a b c -- tok-1 5000", "ce46f80993d5dac20dd066eb301a4e37994bdbed"},
	{"redlock@4.2.0 unlockScript", "a b c -- tok-1", "0f0f23b9048b36752b5be114f357ba083449f908"},
	{"redlock@5.0.0-beta.2 acquireScript", "a b c -- tok-1 5000", "96da70f7716f27d278a5218544df37fd8b0a5e4c"},
	{"redlock@5.0.0-beta.2 extendScript", "a b c -- tok-1 5000", "aed6f382e410db8ba7926d4e5e9aab410bf2a78a"},
	{"redlock@5.0.0-beta.2 releaseScript", "a b c -- tok-1", "e4612211c9f8f51c257e26e056b0a654b3187242"},
	{"@sesamecare-oss/redlock@1.4.0 acquireLock", "a b c -- 0 tok-1 5000", "1b77b94aa78451d55dfa97e18819bfbfc596cb5b"},
	{"@sesamecare-oss/redlock@1.4.0 extendLock", "a b c -- 0 tok-1 5000", "820e9778d2b6733e9ed771e4be90ae73a95a6f3b"},
	{"@sesamecare-oss/redlock@1.4.0 releaseLock", "a b c -- 0 tok-1", "df51f6837dcfe303d334e6abea9aeae192bab216"},
	{"redis-semaphore@5.8.0 Mutex release", "mutex:jobs -- id-1", "7157921a7cc7cfba979acf6d63f073151df17d12"},
	{"redis-semaphore@5.8.0 Mutex refresh", "mutex:jobs -- id-1 10000", "594683e49a64ebaf975caf5f8079a1d097c438f1"},
	{"node-redis-warlock@1.0.2 parityDel", "job:lock -- id-1", "5cc368fb92acd8fee3a986dc8e971d6cf28c3b44"},
	{"node-redis-warlock@1.0.2 parityRelock", "job:lock 10000 id-1 --", "78d3bb55c589f1b2edf66f3527f5017f8dfcd6bb"},
	{"@microfleet/ioredis-lock@6.0.1 delifequal", "lock:x -- id-1", "da225123b2af4a41136fdba7ffac1e045e344da1"},
	{"@microfleet/ioredis-lock@6.0.1 pexpireifequal", "lock:x -- id-1 10000", "bf3108245472c550b02852e1e425128e5eb399c4"},
}

// Node returns the scripts of node-redlock 4 and 5, @sesamecare-oss/redlock,
// redis-semaphore, node-redis-warlock and @microfleet/ioredis-lock from the
// npm packages in nodeDir (run `npm ci` there first), read by Node.js.
func Node(nodeDir string) ([]Script, error) {
	cmd := exec.Command("node", "-e", nodeDump)
	cmd.Dir = nodeDir
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("libscripts: reading the npm packages' scripts in %s (npm ci there first): %w: %s", nodeDir, err, stderr.String())
	}
	texts := map[string]string{}
	if err := json.Unmarshal(b, &texts); err != nil {
		return nil, fmt.Errorf("libscripts: node output: %w", err)
	}
	var out []Script
	for _, n := range nodeScripts {
		text, ok := texts[n.name]
		if !ok || text == "" {
			return nil, fmt.Errorf("libscripts: node printed no %s", n.name)
		}
		lib, name, _ := strings.Cut(n.name, " ")
		keys, argv := call(n.call)
		out = append(out, Script{Library: lib, Name: name, Text: text, Keys: keys, Argv: argv, Fact: n.fact})
	}
	return out, nil
}

// Python is Debian's interpreter, whose python3-redis the tests read
// (another python3 may come first on PATH).
const Python = "/usr/bin/python3"

// RedisPy returns redis-py's Lock scripts from the installed python3-redis.
func RedisPy() ([]Script, error) {
	cmd := exec.Command(Python, "-c", `import json, redis, redis.lock as l
print(json.dumps({"version": redis.__version__, "release": l.Lock.LUA_RELEASE_SCRIPT, "extend": l.Lock.LUA_EXTEND_SCRIPT, "reacquire": l.Lock.LUA_REACQUIRE_SCRIPT}))`)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("libscripts: %s cannot import redis.lock (apt-get install python3-redis): %w: %s", Python, err, stderr.String())
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("libscripts: python output: %w", err)
	}
	lib := "redis-py " + m["version"]
	mk := func(name, text, c, fact string) Script {
		keys, argv := call(c)
		return Script{Library: lib, Name: name, Text: text, Keys: keys, Argv: argv, Fact: fact}
	}
	return []Script{
		mk("Lock.LUA_RELEASE_SCRIPT", m["release"], "lock:a -- tok-1", "c3f8721cbb97f72bc19e972846bd7aaf91901658"),
		mk("Lock.LUA_EXTEND_SCRIPT (adding)", m["extend"], "lock:a -- tok-1 5000 0", "a4e8783852e6b949f9ef3a97212805108459a890"),
		mk("Lock.LUA_EXTEND_SCRIPT (replacing)", m["extend"], "lock:a -- tok-1 5000 1", "a4e8783852e6b949f9ef3a97212805108459a890"),
		mk("Lock.LUA_REACQUIRE_SCRIPT", m["reacquire"], "lock:a -- tok-1 5000", "1cac51482acf5858da00f6d685d68f886cd6b6b2"),
	}, nil
}

// pypiDump prints, as JSON, the scripts of the PyPI Redlock libraries as
// each sends them: pottery's as redis-py registers them, aioredlock's with
// the leading blanks of each line stripped (as its SCRIPT LOAD sends them),
// redlock-py's as it sends them by EVAL.
const pypiDump = `import json, re
from importlib.metadata import version
import redis, pottery, aioredlock.redis as a, redlock
# Registering pottery's scripts sends nothing: redis-py's Script only
# keeps the text and its SHA1.
pottery.Redlock(key="x", masters={redis.Redis()})
r = pottery.Redlock
strip = lambda s: re.sub(r'^\s+', '', s, flags=re.M).strip()
print(json.dumps({
    "pottery": version("pottery"), "aioredlock": version("aioredlock"), "redlock-py": version("redlock-py"),
    "acquired script": r._acquired_script.script, "extend script": r._extend_script.script, "release script": r._release_script.script,
    "SET_LOCK_SCRIPT": strip(a.Instance.SET_LOCK_SCRIPT), "UNSET_LOCK_SCRIPT": strip(a.Instance.UNSET_LOCK_SCRIPT),
    "GET_LOCK_TTL_SCRIPT": strip(a.Instance.GET_LOCK_TTL_SCRIPT), "unlock_script": redlock.Redlock.unlock_script}))`

// pypiScripts are the PyPI libraries' scripts with a typical call each:
// library, name, call, fact.
var pypiScripts = []struct{ lib, name, call, fact string }{
	{"pottery", "acquired script", "redlock:printer -- 6f1c2e7a-52b8-4a42-9a53-8f1b8e8b9a11", "f5f7bd3a3aa4a63c507c1155c5ea1219b350d992"},
	{"pottery", "extend script", "redlock:printer -- 6f1c2e7a-52b8-4a42-9a53-8f1b8e8b9a11 10000", "ba015a80261b616e7a62d35df0b8e3edbe6c9414"},
	{"pottery", "release script", "redlock:printer -- 6f1c2e7a-52b8-4a42-9a53-8f1b8e8b9a11", "a4aada0b36710970eedaaaeec4a6b7d8c78c4f80"},
	{"aioredlock", "SET_LOCK_SCRIPT", "resource -- 0b0c6f5e-2a51-4f44-8f0f-7f4b1b0e9d7a 10000", "c75a9bf1538efcdb1f383acc3e273c5089d57e58"},
	{"aioredlock", "UNSET_LOCK_SCRIPT", "resource -- 0b0c6f5e-2a51-4f44-8f0f-7f4b1b0e9d7a", "241e4ca540a1cc4ec1f32d9eb9f879e607d7e6e5"},
	{"aioredlock", "GET_LOCK_TTL_SCRIPT", "resource -- 0b0c6f5e-2a51-4f44-8f0f-7f4b1b0e9d7a", "f908d3f43dbcabc68fc0c9ecaf1fa4a285ecdb0a"},
	{"redlock-py", "unlock_script", "res -- AbCdEfGhIjKlMnOpQrStUv", "4e92fdc63815b3a0a2dd1c1df3694de73607c88d"},
}

// PyPI returns the scripts of pottery, aioredlock and redlock-py from the
// virtualenv integration/python/.venv under root (./test.sh makes it from
// integration/python/requirements.txt).
func PyPI(root string) ([]Script, error) {
	python := filepath.Join(root, "integration", "python", ".venv", "bin", "python")
	cmd := exec.Command(python, "-c", pypiDump)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("libscripts: reading the PyPI libraries' scripts with %s (./test.sh makes the virtualenv from integration/python/requirements.txt): %w: %s", python, err, stderr.String())
	}
	var m map[string]string
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("libscripts: python output: %w", err)
	}
	var out []Script
	for _, p := range pypiScripts {
		text := m[p.name]
		if text == "" {
			return nil, fmt.Errorf("libscripts: python printed no %s %s", p.lib, p.name)
		}
		keys, argv := call(p.call)
		out = append(out, Script{Library: p.lib + " " + m[p.lib], Name: p.name, Text: text, Keys: keys, Argv: argv, Fact: p.fact})
	}
	return out, nil
}

// ModuleRoot finds the directory of this module's go.mod from dir upward.
func ModuleRoot(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("libscripts: no go.mod above %s", dir)
		}
	}
}

// Installed returns every installed library's scripts, from a directory
// inside this module.
func Installed(dir string) ([]Script, error) {
	root, err := ModuleRoot(dir)
	if err != nil {
		return nil, err
	}
	var out []Script
	g, err := Go(root)
	if err != nil {
		return nil, err
	}
	out = append(out, g...)
	n, err := Node(filepath.Join(root, "integration", "node"))
	if err != nil {
		return nil, err
	}
	out = append(out, n...)
	p, err := RedisPy()
	if err != nil {
		return nil, err
	}
	out = append(out, p...)
	pypi, err := PyPI(root)
	if err != nil {
		return nil, err
	}
	return append(out, pypi...), nil
}

// symfonyDump prints the scripts Symfony Lock's RedisStore sends, as JSON:
// it is given a phpredis client that records what it is asked to
// evaluate, and answers 1 (so the store takes TIME to be usable in
// scripts, as on Redis 7).
const symfonyDump = `require_once 'Symfony/Component/Lock/autoload.php';
class Recorder extends \Redis {
    public $seen = [];
    public function __construct() {}
    #[\ReturnTypeWillChange]
    public function eval($script, $args = [], $n = 0) { $this->seen[] = [$script, $args, $n]; return 1; }
    #[\ReturnTypeWillChange]
    public function clearLastError() { return true; }
    #[\ReturnTypeWillChange]
    public function getLastError() { return null; }
}
$r = new Recorder();
$store = new Symfony\Component\Lock\Store\RedisStore($r, 30);
$key = new Symfony\Component\Lock\Key('res');
$store->save($key);
$store->saveRead($key);
$store->putOffExpiration($key, 30);
$store->exists($key);
$store->delete($key);
$out = [];
foreach (['probe', 'save', 'saveRead', 'putOffExpiration', 'exists', 'delete'] as $i => $name) {
    $out[$name] = ['text' => $r->seen[$i][0], 'args' => array_map('strval', $r->seen[$i][1])];
}
echo json_encode($out);`

// Symfony returns the scripts of Symfony Lock's RedisStore (Debian's
// php-symfony-lock), with the arguments it passes: KEYS[1], then ARGV.
// The names are the store's methods; "probe" is its check that TIME may be
// called in a script.
func Symfony() ([]Script, error) {
	cmd := exec.Command("php", "-r", symfonyDump)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("libscripts: php cannot load Symfony Lock (apt-get install php-cli php-redis php-symfony-lock): %w: %s", err, stderr.String())
	}
	var m map[string]struct {
		Text string   `json:"text"`
		Args []string `json:"args"`
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("libscripts: php output: %w", err)
	}
	var out []Script
	for _, name := range []string{"probe", "save", "saveRead", "putOffExpiration", "exists", "delete"} {
		s, ok := m[name]
		if !ok || s.Text == "" || len(s.Args) == 0 {
			return nil, fmt.Errorf("libscripts: php printed no %s", name)
		}
		out = append(out, Script{Library: "symfony/lock", Name: "RedisStore::" + name, Text: s.Text, Keys: s.Args[:1], Argv: s.Args[1:]})
	}
	return out, nil
}
