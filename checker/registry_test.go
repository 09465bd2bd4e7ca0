package checker

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// TestRegistry: every checker of the package is in the registry (a
// checker type left out fails here), documented in a line, reachable from
// some run (a workload's, every run with faults, or a scenario that adds
// it: harness/scenario's TestEveryCheckerIsReachable holds the last), and
// builds under its own name.
func TestRegistry(t *testing.T) {
	reg := map[string]Entry{}
	for _, e := range Registry() {
		if _, dup := reg[e.Name]; dup {
			t.Errorf("%s: registered twice", e.Name)
		}
		reg[e.Name] = e
		if e.Doc == "" || strings.Contains(e.Doc, "\n") {
			t.Errorf("%s: want a one-line doc", e.Name)
		}
		if len(e.Workloads) == 0 && !e.WithFaults && len(e.Params) == 0 {
			t.Errorf("%s: judges no workload's runs, no run with faults, and takes no scenario parameter: unreachable", e.Name)
		}
		for _, r := range e.Required {
			if !slices.Contains(e.Params, r) {
				t.Errorf("%s: requires %s but takes no such parameter", e.Name, r)
			}
		}
		spec := Spec{Name: e.Name}
		if slices.Contains(e.Required, ParamFault) {
			spec.Fault = "partition:"
		}
		c, err := Build(spec)
		if err != nil {
			t.Errorf("%s: %v", e.Name, err)
			continue
		}
		if c.Name() != e.Name {
			t.Errorf("%s builds a checker called %s", e.Name, c.Name())
		}
	}
	for _, name := range checkerTypes(t) {
		if _, ok := reg[name]; !ok {
			t.Errorf("checker %q has a Name method but no registry entry", name)
		}
	}
}

// checkerTypes are the names the package's Name() methods return: every
// checker it defines.
func checkerTypes(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		file, err := parser.ParseFile(fset, f, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || fn.Name.Name != "Name" || len(fn.Body.List) != 1 {
				continue
			}
			ret, ok := fn.Body.List[0].(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 1 {
				continue
			}
			if lit, ok := ret.Results[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				name, _ := strconv.Unquote(lit.Value)
				names = append(names, name)
			}
		}
	}
	if len(names) < len(Registry()) {
		t.Fatalf("found %d checker types (%v), fewer than the registry's %d: the scan is broken", len(names), names, len(Registry()))
	}
	return names
}

// Build refuses what a stored run or a scenario must not ask for.
func TestBuildRefuses(t *testing.T) {
	for _, tt := range []struct {
		spec Spec
		want string
	}{
		{Spec{Name: "no-such"}, "unknown checker"},
		{Spec{Name: "served-during-fault"}, "needs a fault"},
		{Spec{Name: "answered-after-heal", Min: 2, Fault: "x"}, "takes no min"},
		{Spec{Name: "linearizable", Fault: "kill:"}, "takes no fault"},
	} {
		if _, err := Build(tt.spec); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("Build(%+v) = %v, want an error with %q", tt.spec, err, tt.want)
		}
	}
}

// For: the workload's checkers in the registry's order, recovered with
// faults, the scenario's after, a checker with nothing to judge left out,
// a Spec that cannot be built an unknown result.
func TestFor(t *testing.T) {
	names := func(cs []Checker) []string {
		var out []string
		for _, c := range cs {
			out = append(out, c.Name())
		}
		return out
	}
	p := For("idgen", nil, false, nil)
	if got, want := names(p.Checkers), []string{"unique-ids", "single-instance", "singleton-events", "liveness", "availability"}; !slices.Equal(got, want) {
		t.Errorf("idgen: %v, want %v", got, want)
	}
	p = For("register", []string{"membership", "entities"}, true, []Spec{{Name: "passivated", Min: 5}, {Name: "served-during-fault"}})
	if got, want := names(p.Checkers), []string{"linearizable", "single-instance", "hand-off", "liveness", "availability", "recovered", "passivated"}; !slices.Equal(got, want) {
		t.Errorf("register with faults: %v, want %v", got, want)
	}
	if !slices.Equal(p.LeftOut, []string{"singleton-events"}) {
		t.Errorf("left out %v, want singleton-events (no singleton, no coordinator)", p.LeftOut)
	}
	if len(p.Refused) != 1 || p.Refused[0].Checker != "served-during-fault" || p.Refused[0].Verdict != Unknown {
		t.Errorf("refused %+v, want served-during-fault unknown", p.Refused)
	}
}
