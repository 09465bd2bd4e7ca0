package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/shardtest/shardtest/harness/suite"
	"github.com/shardtest/shardtest/internal/testbin"
)

// test-all --parallel 2 runs two real local clusters at once: both runs
// run to a verdict (whichever: two clusters on two cores may be slow, and
// docs/ci.md measures when that costs verdicts), in folders and with run
// ids of their own, and the summary lists them in the suite's order.
func TestParallelRunsSideBySide(t *testing.T) {
	bin, cleanup, err := testbin.Build("shardtest-parallel-test")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	results := t.TempDir()
	cmd := exec.Command(bin, "test-all", "--runtime", "local", "--scenario", "passivation-churn", "--test-count", "2", "--parallel", "2",
		"--base-port", "22400", "--results", results)
	out, err := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code == exitCannotRun || code < 0 {
		t.Fatalf("exit %d: %v\n%s", code, err, out)
	}
	s, err := suite.ReadSummary(filepath.Join(suiteDirIn(t, results), "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Runs) != 2 || s.Runs[0].Seed != 1 || s.Runs[1].Seed != 2 {
		t.Fatalf("runs %+v, want seeds 1 and 2 in order\n%s", s.Runs, out)
	}
	a, b := s.Runs[0], s.Runs[1]
	if a.Error != "" || b.Error != "" || a.Dir == "" || a.Dir == b.Dir {
		t.Fatalf("runs %+v and %+v: want both run, in folders of their own\n%s", a, b, out)
	}
	ids := map[string]bool{}
	for _, r := range s.Runs {
		o, err := os.ReadFile(filepath.Join(r.Dir, "test.json"))
		if err != nil {
			t.Fatal(err)
		}
		ids[runIDOf(t, o)] = true
	}
	if len(ids) != 2 {
		t.Errorf("run ids %v: want two", ids)
	}
}

// runIDOf reads the run id from a test.json.
func runIDOf(t *testing.T, testJSON []byte) string {
	t.Helper()
	var o struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(testJSON, &o); err != nil || o.RunID == "" {
		t.Fatalf("test.json: %v %s", err, testJSON)
	}
	return o.RunID
}
