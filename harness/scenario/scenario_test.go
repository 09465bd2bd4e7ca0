package scenario

import (
	"slices"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/impl/node"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/workloads"
)

// TestCatalog: every scenario is a test the harness accepts, with and
// without its bug; names are unique; a named bug is one the reference node
// has, switched on by its flags, and its checker is one the run has.
func TestCatalog(t *testing.T) {
	all := Catalog()
	if len(all) < 10 {
		t.Fatalf("%d scenarios, want the catalogue of at least 10", len(all))
	}
	seen := map[string]bool{}
	smoke := 0
	for _, s := range all {
		t.Run(s.Name, func(t *testing.T) {
			if seen[s.Name] {
				t.Fatalf("duplicate name")
			}
			seen[s.Name] = true
			if s.Danger == "" || s.Holds == "" {
				t.Error("a scenario says what is dangerous and what must hold")
			}
			for _, withBug := range []bool{false, true} {
				o := s.Options(7, "local", withBug)
				if err := o.Validate(); err != nil {
					t.Fatalf("options (bug %v): %v", withBug, err)
				}
				if o.Scenario != s.Name || o.Seed != 7 {
					t.Errorf("options name the scenario %q, seed %d", o.Scenario, o.Seed)
				}
			}
			if s.Smoke {
				smoke++
				if s.Docker {
					t.Error("the smoke subset runs on the local runtime: no docker-only scenario")
				}
			}
			if s.Bug == "" {
				return
			}
			if !slices.Contains(node.KnownBugs(), s.Bug) {
				t.Errorf("bug %q is not one of the reference node's %v", s.Bug, node.KnownBugs())
			}
			if !slices.ContainsFunc(s.BugArgs, func(a string) bool { return strings.HasPrefix(a, "--bugs=") && strings.Contains(a, s.Bug) }) {
				t.Errorf("bug args %v do not switch %s on", s.BugArgs, s.Bug)
			}
			w, err := workloads.Named(s.Workload)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, c := range checker.ForWorkload(w.Name()) {
				names = append(names, c.Name())
			}
			for _, e := range s.Expect {
				names = append(names, e.Name)
			}
			if !slices.Contains(names, s.Checker) {
				t.Errorf("checker %q is not among the run's %v", s.Checker, names)
			}
		})
	}
	if smoke == 0 {
		t.Error("no smoke subset")
	}
}

// TestOptionsSeedTheSchedule: a scripted schedule's own random choices
// follow the seed; the steps' times do not.
func TestOptionsSeedTheSchedule(t *testing.T) {
	s, err := Named("clock-storm")
	if err != nil {
		t.Fatal(err)
	}
	a, b, c := s.Options(1, "local", false), s.Options(1, "local", false), s.Options(2, "local", false)
	if !slices.Equal(a.Schedule, b.Schedule) {
		t.Fatal("same seed, different schedules")
	}
	if slices.Equal(a.Schedule, c.Schedule) {
		t.Fatal("another seed, the same target choices")
	}
	for i := range a.Schedule {
		if a.Schedule[i].At != c.Schedule[i].At || a.Schedule[i].Fault != c.Schedule[i].Fault {
			t.Fatalf("step %d: the seed changed the script itself", i)
		}
	}
	if err := nemesis.ValidateSchedule(a.Schedule); err != nil {
		t.Fatal(err)
	}
	// The catalogue's copy is not changed by Options.
	if s.Schedule[0].Seed != 0 {
		t.Fatal("Options changed the catalogue's schedule")
	}
}

func TestSelect(t *testing.T) {
	tests := []struct {
		filter  string
		smoke   bool
		want    []string
		wantErr bool
	}{
		{"coordinator-crash", false, []string{"coordinator-crash"}, false},
		{" coordinator-crash , pause-oldest,coordinator-crash", false, []string{"coordinator-crash", "pause-oldest"}, false},
		{"bogus", false, nil, true},
		{"journal-cut", true, nil, true}, // not in the smoke subset
	}
	for _, tt := range tests {
		got, err := Select(tt.filter, tt.smoke)
		if (err != nil) != tt.wantErr {
			t.Fatalf("Select(%q, %v): err %v", tt.filter, tt.smoke, err)
		}
		if err == nil && !slices.Equal(Names(got), tt.want) {
			t.Errorf("Select(%q, %v) = %v, want %v", tt.filter, tt.smoke, Names(got), tt.want)
		}
	}
	all, err := Select("", false)
	if err != nil || len(all) != len(Catalog()) {
		t.Fatalf("the empty filter selects all: %v, %v", Names(all), err)
	}
	smoke, err := Select("", true)
	if err != nil || len(smoke) == 0 || len(smoke) == len(all) {
		t.Fatalf("smoke subset %v, %v", Names(smoke), err)
	}
}

// TestEveryFaultHasAScenario: every fault of the nemesis catalogue is in
// the scripted schedule of some scenario, so the reference node is known to
// survive it; adding a fault without a scenario fails here. (A schedule
// drawn from the seed does not count: which faults it draws depends on the
// seed.)
func TestEveryFaultHasAScenario(t *testing.T) {
	covered := map[string][]string{}
	for _, s := range Catalog() {
		for _, st := range s.Schedule {
			covered[st.Fault] = append(covered[st.Fault], s.Name)
		}
	}
	for _, f := range nemesis.Catalog() {
		if len(covered[f.Name]) == 0 {
			t.Errorf("no scenario runs %s: add one to harness/scenario (faults.go) and docs/scenarios.md", f.Name)
		}
	}
	for name := range covered {
		if _, err := nemesis.Parse(name); err != nil {
			t.Errorf("a scenario schedules %s, which is not a fault: %v", name, err)
		}
	}
}

// TestPartitionShapesRunOnFiveNodesBothWays: each partition shape has a
// scenario under the singleton and one under entities, on 5 nodes.
func TestPartitionShapesRunOnFiveNodesBothWays(t *testing.T) {
	for _, f := range nemesis.Catalog() {
		shape, ok := strings.CutPrefix(f.Name, "partition:")
		if !ok || shape == "journal-cut" || shape == "halves" {
			continue // journal-cut cuts the journal, not the cluster; halves has majority-split*
		}
		for _, w := range []string{"idgen", "register"} {
			s, err := Named(shape + "-" + w)
			if err != nil {
				t.Errorf("%s under %s: %v", f.Name, w, err)
				continue
			}
			if s.Nodes != 5 || s.Workload != w {
				t.Errorf("%s: %d nodes, workload %s; want 5, %s", s.Name, s.Nodes, s.Workload, w)
			}
		}
	}
}

// TestEveryBugHasAScenario: each of the reference node's deliberate bugs is
// named by a scenario of the catalogue, so --with-bugs shows that the
// catalogue catches every one (the detection matrix aside).
func TestEveryBugHasAScenario(t *testing.T) {
	named := map[string]bool{}
	for _, s := range Catalog() {
		named[s.Bug] = true
	}
	for _, bug := range node.KnownBugs() {
		if !named[bug] {
			t.Errorf("%s: no scenario names it", bug)
		}
	}
}
