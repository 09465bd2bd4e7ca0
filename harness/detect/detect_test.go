package detect

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/internal/testbin"
)

// binary is a shardtest build for the nodes (the test binary is not one).
var binary string

func TestMain(m *testing.M) { testbin.Main(m, "shardtest-detect-test", &binary) }

// The short matrix: the quick cases, one seed each, on real local
// clusters. The bug must be caught by its checker, the correct node under
// the same schedule must not be accused, and the time to detection must
// lie inside the run. (The long matrix is `shardtest detect`.)
func TestMatrixShort(t *testing.T) {
	quick := map[string]bool{"entity-skip-replay": true, "no-coordinator-persistence": true}
	var outs []Outcome
	for _, c := range Cases() {
		if !quick[c.Bug] {
			continue
		}
		t.Run(c.Bug, func(t *testing.T) {
			quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
			o, err := RunCase(context.Background(), c, Options{
				Seeds: []int64{1}, Results: t.TempDir(), Log: quiet,
				Runtime: func(args []string) run.Runtime {
					return run.Local{Binary: binary, BasePort: 26400, NodeArgs: args, Log: quiet}
				},
			})
			if err != nil {
				t.Fatal(err)
			}
			s := o.Seeds[0]
			if !s.Detected {
				t.Errorf("%s not caught by %s: verdict %s (%s)", c.Bug, c.Checker, s.BugVerdict, s.BugDir)
			}
			if s.CorrectVerdict == checker.Invalid {
				t.Errorf("the correct node was judged invalid under %s (%s)", c.Nemesis, s.CorrectDir)
			}
			if s.Detected && (s.DetectedAfter <= 0 || s.DetectedAfter > c.Limit*3) {
				t.Errorf("detected after %v: outside the run", s.DetectedAfter)
			}
			outs = append(outs, o)
		})
	}
	table := Markdown(outs)
	for _, want := range []string{"entity-skip-replay", "1 of 1 seeds"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

func TestMissing(t *testing.T) {
	got := Missing([]string{"auto-down", "no-such-bug"})
	if len(got) != 1 || got[0] != "no-such-bug" {
		t.Errorf("Missing = %v", got)
	}
}

// TestCasesAreRunnable: every case's runs (bug and correct node) are tests
// the harness accepts, its checker is one the workload runs, and the two
// runs differ only by the bug's flags.
func TestCasesAreRunnable(t *testing.T) {
	for _, c := range Cases() {
		t.Run(c.Name(), func(t *testing.T) {
			bug, correct := c.Options(3, true), c.Options(3, false)
			for _, o := range []run.Options{bug, correct} {
				o.Runtime = "local"
				if c.Docker {
					o.Runtime = "docker"
				}
				if err := o.Validate(); err != nil {
					t.Fatal(err)
				}
			}
			if len(bug.NodeArgs) != len(correct.NodeArgs)+len(c.BugArgs) || !slices.Equal(bug.Schedule, correct.Schedule) {
				t.Errorf("the runs differ by more than the bug: %v vs %v", bug.NodeArgs, correct.NodeArgs)
			}
			found := false
			for _, x := range checker.ForWorkload(c.Workload) {
				found = found || x.Name() == c.Checker
			}
			if !found {
				t.Errorf("checker %s is not one of the %s workload's", c.Checker, c.Workload)
			}
		})
	}
}
