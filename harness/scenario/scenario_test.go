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
			bugs := []*Bug{nil}
			for i := range s.Bugs {
				bugs = append(bugs, &s.Bugs[i])
			}
			for _, bug := range bugs {
				o := s.Options(7, "local", bug)
				if err := o.Validate(); err != nil {
					t.Fatalf("options (bug %v): %v", bug, err)
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
			if _, err := workloads.Named(s.Workload); err != nil {
				t.Fatal(err)
			}
			for _, b := range s.Bugs {
				if !slices.Contains(node.KnownBugs(), b.Name) {
					t.Errorf("bug %q is not one of the reference node's %v", b.Name, node.KnownBugs())
				}
				if !slices.ContainsFunc(b.Args, func(a string) bool { return strings.HasPrefix(a, "--bugs=") && strings.Contains(a, b.Name) }) {
					t.Errorf("bug args %v do not switch %s on", b.Args, b.Name)
				}
				if b.Why == "" {
					t.Errorf("bug %s: a case says why the scenario exposes it", b.Name)
				}
				if _, ok := s.Options(3, "local", &b).Checker(b.Checker); !ok {
					t.Errorf("bug %s: checker %q does not judge the scenario's runs", b.Name, b.Checker)
				}
				// The two runs of a case differ by the bug's flags alone.
				bug, correct := s.Options(3, "local", &b), s.Options(3, "local", nil)
				if !slices.Equal(bug.NodeArgs, append(slices.Clone(correct.NodeArgs), b.Args...)) || !slices.Equal(bug.Schedule, correct.Schedule) {
					t.Errorf("bug %s: the runs differ by more than the bug: %v vs %v", b.Name, bug.NodeArgs, correct.NodeArgs)
				}
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
	a, b, c := s.Options(1, "local", nil), s.Options(1, "local", nil), s.Options(2, "local", nil)
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
	if missing := MissingBugs(Catalog(), node.KnownBugs()); len(missing) > 0 {
		t.Errorf("no scenario names %v", missing)
	}
	if got := MissingBugs(Catalog(), []string{"auto-down", "no-such-bug"}); !slices.Equal(got, []string{"no-such-bug"}) {
		t.Errorf("MissingBugs = %v", got)
	}
}

// Cases are picked by case, scenario or bug name; an unknown one is
// refused with the known cases.
func TestSelectCases(t *testing.T) {
	all := Catalog()
	for _, tt := range []struct {
		filter string
		want   []string
	}{
		{"coordinator-crash", []string{"coordinator-crash/no-coordinator-persistence"}},
		{"isolate-oldest-idgen/singleton-no-fencing", []string{"isolate-oldest-idgen/singleton-no-fencing"}},
		{"entity-skip-replay", []string{"at-least-once-under-partitions/entity-skip-replay", "oldest-three-crash/entity-skip-replay"}},
		{"coordinator-crash, coordinator-crash/no-coordinator-persistence", []string{"coordinator-crash/no-coordinator-persistence"}},
	} {
		cs, err := SelectCases(all, tt.filter)
		if err != nil {
			t.Fatalf("%q: %v", tt.filter, err)
		}
		var got []string
		for _, c := range cs {
			got = append(got, c.Name())
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q: %v, want %v", tt.filter, got, tt.want)
		}
	}
	if _, err := SelectCases(all, "no-such-bug"); err == nil || !strings.Contains(err.Error(), "known cases") {
		t.Errorf("an unknown case: %v", err)
	}
	if cs, _ := SelectCases(all, ""); len(cs) != len(Cases(all)) {
		t.Errorf("no filter: %d cases, want all %d", len(cs), len(Cases(all)))
	}
}

// TestEveryCheckerIsReachable: every checker of the registry judges some
// run: a workload's, a run with faults, or a scenario's that adds it (the
// registry's own test holds the rest).
func TestEveryCheckerIsReachable(t *testing.T) {
	for _, e := range checker.Registry() {
		if len(e.Workloads) > 0 || e.WithFaults {
			continue
		}
		found := false
		for _, s := range Catalog() {
			o := s.Options(1, "local", nil)
			if _, ok := o.Checker(e.Name); ok {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: no scenario adds it, and it judges no workload's runs", e.Name)
		}
	}
}
