// Package impl_test holds the rules every package of the reference node
// keeps, so that a simulation can run it: time is read only through
// impl/clock, and no package keeps mutable state of its own.
package impl_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// sources parses every non-test Go file under impl/, outside skip.
func sources(t *testing.T, skip string) map[string]*ast.File {
	t.Helper()
	fset := token.NewFileSet()
	files := map[string]*ast.File{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path == skip {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files[path] = f
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no sources found under impl/")
	}
	return files
}

// TestTimeOnlyThroughTheClock: outside impl/clock no code reads the time
// or starts a timer from the time package. The node's decisions take their
// time from a clock.Clock (virtual in a simulation); I/O drivers that need
// the machine's time (socket deadlines) say so with clock.Machine.
func TestTimeOnlyThroughTheClock(t *testing.T) {
	reads := map[string]bool{"Now": true, "Since": true, "Until": true, "Sleep": true, "After": true,
		"AfterFunc": true, "NewTimer": true, "NewTicker": true, "Tick": true}
	for path, f := range sources(t, "clock") {
		name := ""
		for _, imp := range f.Imports {
			if p, _ := strconv.Unquote(imp.Path.Value); p == "time" {
				name = "time"
				if imp.Name != nil {
					name = imp.Name.Name
				}
			}
		}
		if name == "" {
			continue
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); ok && id.Name == name && reads[sel.Sel.Name] {
				t.Errorf("%s: time.%s: read the time through impl/clock", path, sel.Sel.Name)
			}
			return true
		})
	}
}

// TestNoPackageState: a package-level variable is an error value, a
// compile-time interface assertion, or one of the read-only tables listed
// here with why; anything else would be state shared by every node of a
// simulation running in one process.
func TestNoPackageState(t *testing.T) {
	readOnly := map[string]string{
		"persistence.bucketEvents":      "a bbolt bucket name",
		"persistence.bucketEpochs":      "a bbolt bucket name",
		"persistence.bucketMeta":        "a bbolt bucket name",
		"persistence.bucketFenceTokens": "a bbolt bucket name",
		"persistence.keyGlobal":         "a bbolt key",
		"singleton.nameRE":              "a compiled pattern",
		"sharding.bugFields":            "the table of deliberate bugs' names",
	}
	for path, f := range sources(t, "") {
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok || gd.Tok != token.VAR {
				continue
			}
			for _, spec := range gd.Specs {
				for _, id := range spec.(*ast.ValueSpec).Names {
					key := f.Name.Name + "." + id.Name
					switch {
					case id.Name == "_", strings.HasPrefix(strings.ToLower(id.Name), "err"), readOnly[key] != "":
					default:
						t.Errorf("%s: package-level variable %s: keep state in a value a node owns", path, key)
					}
				}
			}
		}
	}
}
