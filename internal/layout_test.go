package internal

import (
	"bufio"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// floor is one level of the tree: the directories it holds and the floors
// its packages may import besides their own.
type floor struct {
	name string
	dirs []string // module-relative; "d/..." is d and the tree under it, anything else that directory alone
	may  []string
}

// floors is the layout, lowest first; doc.go tells it in prose.
var floors = []floor{
	{"base", []string{"internal/base/..."}, nil},
	{"quorum", []string{"quorum/..."}, nil},
	{"script", []string{"internal/script/..."}, []string{"base"}},
	{"netio", []string{"netio/..."}, []string{"base", "quorum"}},
	{"proxy", []string{"proxy/..."}, []string{"base", "quorum", "script", "netio"}},
	{"app", []string{"internal/app/...", ".", "cmd/..."}, []string{"base", "quorum", "script", "netio", "proxy"}},
	{"testkit", []string{"internal/testkit/..."}, []string{"base"}},
	{"harness", []string{"bench/...", "integration/..."}, []string{"base", "quorum", "script", "netio", "proxy", "app", "testkit"}},
	{"layout", []string{"internal"}, nil}, // this package: the floors' doc and this test
}

// floorOf returns the floor holding a module-relative directory, or nil.
func floorOf(dir string) *floor {
	var best *floor
	bestLen := -1
	for i := range floors {
		for _, d := range floors[i].dirs {
			tree, isTree := strings.CutSuffix(d, "/...")
			match := dir == d || (isTree && (dir == tree || strings.HasPrefix(dir, tree+"/")))
			if match && len(d) > bestLen {
				best, bestLen = &floors[i], len(d)
			}
		}
	}
	return best
}

// mayImport reports whether code on floor from may import floor to; test
// files may also import the test kits.
func (f *floor) mayImport(to *floor, testFile bool) bool {
	return to == f || slices.Contains(f.may, to.name) || (testFile && to.name == "testkit")
}

func modulePath(t *testing.T, root string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(root, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if mod, ok := strings.CutPrefix(sc.Text(), "module "); ok {
			return strings.TrimSpace(mod)
		}
	}
	t.Fatal("go.mod names no module")
	return ""
}

// A package imports only its own floor and the floors its floor may import;
// every directory of Go code is on a floor, and every floor holds code.
func TestLayoutFloors(t *testing.T) {
	root := ".."
	mod := modulePath(t, root)
	used := map[string]bool{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if p != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(p))
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(rel)
		own := floorOf(dir)
		if own == nil {
			t.Errorf("%s/%s: directory %s is on no floor; add it to floors and to doc.go", dir, name, dir)
			return nil
		}
		used[own.name] = true
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		for _, imp := range f.Imports {
			ip, err := strconv.Unquote(imp.Path.Value)
			if err != nil {
				return err
			}
			var to *floor
			switch {
			case ip == mod:
				to = floorOf(".")
			case strings.HasPrefix(ip, mod+"/"):
				to = floorOf(strings.TrimPrefix(ip, mod+"/"))
			default:
				continue
			}
			if to == nil {
				t.Errorf("%s: imports %s, which is on no floor", path.Join(dir, name), ip)
				continue
			}
			if !own.mayImport(to, strings.HasSuffix(name, "_test.go")) {
				t.Errorf("%s: the %s floor imports %s (the %s floor); it may import only %v", path.Join(dir, name), own.name, ip, to.name, append([]string{own.name}, own.may...))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range floors {
		if !used[f.name] {
			t.Errorf("floor %s holds no Go code: its directories %v are gone", f.name, f.dirs)
		}
	}
}
