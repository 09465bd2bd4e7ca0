package detect

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/scenario"
	"github.com/shardtest/shardtest/harness/suite"
	"github.com/shardtest/shardtest/internal/testbin"
)

// binary is a shardtest build for the nodes (the test binary is not one).
var binary string

func TestMain(m *testing.M) { testbin.Main(m, "shardtest-detect-test", &binary) }

// The short matrix: two quick cases of the catalogue, one seed each, on
// real local clusters, two runs at a time. The bug must be caught by its
// checker, the correct node under the same schedule must not be accused,
// and the time to detection must lie inside the run. (The long matrix is
// `shardtest detect`.)
func TestMatrixShort(t *testing.T) {
	cases, err := scenario.SelectCases(scenario.Catalog(), "coordinator-crash/no-coordinator-persistence,passivation-churn/drop-passivation-buffer")
	if err != nil {
		t.Fatal(err)
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := suite.New(suite.Config{Runtime: "local", Results: t.TempDir(), BasePort: 26400, LocalBinary: binary, Parallel: 2, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	outs, res, err := Run(context.Background(), s, cases, []int64{1})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != 2 || len(res.Runs) != 4 {
		t.Fatalf("%d rows from %d runs, want 2 from 4 (a bug and a correct run each)", len(outs), len(res.Runs))
	}
	for i, o := range outs {
		c := cases[i]
		sd := o.Seeds[0]
		if !sd.Detected {
			t.Errorf("%s not caught by %s: verdict %s (%s)", o.Case, o.Checker, sd.BugVerdict, sd.BugDir)
		}
		if sd.CorrectVerdict == checker.Invalid {
			t.Errorf("%s: the correct node was judged invalid (%s)", o.Case, sd.CorrectDir)
		}
		if sd.Detected && (sd.DetectedAfter <= 0 || sd.DetectedAfter > c.Scenario.Limit*3) {
			t.Errorf("%s detected after %v: outside the run", o.Case, sd.DetectedAfter)
		}
		if o.Failed() {
			t.Errorf("%s fails the matrix", o.Case)
		}
	}
	table := Markdown(outs)
	for _, want := range []string{"coordinator-crash/no-coordinator-persistence", "1 of 1 seeds"} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
}

// A row fails the matrix when it ran and caught nothing, or accused the
// correct node; a row that did not run (a Docker-only case on the local
// runtime) fails nothing.
func TestOutcomeFailed(t *testing.T) {
	for _, tt := range []struct {
		name  string
		seeds []Seed
		want  bool
	}{
		{"caught in one seed of two", []Seed{{Detected: true}, {}}, false},
		{"caught in none", []Seed{{}, {}}, true},
		{"caught, the correct node accused", []Seed{{Detected: true, CorrectVerdict: checker.Invalid}}, true},
		{"not run", []Seed{{Skipped: "needs --runtime docker"}}, false},
	} {
		if got := (Outcome{Seeds: tt.seeds}).Failed(); got != tt.want {
			t.Errorf("%s: Failed() = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// The short matrix in simulation: every case of the catalogue on seed 1
// (each bug with its tries), the whole cluster in this process, two runs
// at a time. Every bug must be caught by its checker and the correct node
// under the same schedule never accused. A seed replays exactly, so this
// is one fixed schedule per case: a change that makes a case miss it (or
// accuse the correct node) is caught here, in about a minute.
func TestSimMatrixShort(t *testing.T) {
	if testing.Short() {
		t.Skip("the simulated matrix takes about a minute")
	}
	cases := scenario.Cases(scenario.Catalog())
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	s, err := suite.New(suite.Config{Runtime: "sim", Results: t.TempDir(), Parallel: 2, Log: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	outs, _, err := Run(context.Background(), s, cases, []int64{1})
	if err != nil {
		t.Fatal(err)
	}
	if len(outs) != len(cases) {
		t.Fatalf("%d rows for %d cases", len(outs), len(cases))
	}
	for _, o := range outs {
		if o.Ran() == 0 {
			t.Errorf("%s did not run in simulation", o.Case)
			continue
		}
		sd := o.Seeds[0]
		if !sd.Detected {
			t.Errorf("%s not caught by %s on seed 1: verdict %s (%s)", o.Case, o.Checker, sd.BugVerdict, sd.BugDir)
		}
		if sd.CorrectVerdict == checker.Invalid {
			t.Errorf("%s: the correct node was judged invalid (%s)", o.Case, sd.CorrectDir)
		}
	}
}
