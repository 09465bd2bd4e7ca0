package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/harness/local"
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
	s, err := readSummary(filepath.Join(suiteDirIn(t, results), "summary.json"))
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

// Workers' port ranges pass over those another program holds, and stop at
// a range that cannot be used at all.
func TestPickPortRanges(t *testing.T) {
	taken := func(ports ...int) func(int) error {
		return func(b int) error {
			if b >= 32600 {
				return errors.New("local: ports overlap this machine's ephemeral port range")
			}
			if slices.Contains(ports, b) {
				return fmt.Errorf("local: port %d is %w", b, local.ErrPortTaken)
			}
			return nil
		}
	}
	for _, tt := range []struct {
		name    string
		base, n int
		check   func(int) error
		want    []int
		wantErr string
	}{
		{"all free", 17400, 3, taken(), []int{17400, 17600, 17800}, ""},
		{"one held", 17400, 3, taken(17600), []int{17400, 17800, 18000}, ""},
		{"the first held", 17400, 1, taken(17400, 17600), []int{17800}, ""},
		{"held up to the ephemeral range", 32000, 2, taken(32000, 32200), nil, "port 32000 is taken"},
		{"a base port in the ephemeral range", 40000, 1, taken(), nil, "ephemeral"},
	} {
		got, err := pickPortRanges(tt.base, tt.n, tt.check)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: %v, %v; want an error with %q", tt.name, got, err, tt.wantErr)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tt.want) {
			t.Errorf("%s: %v, %v; want %v", tt.name, got, err, tt.want)
		}
	}
}

// Two suites started at the same moment from the same --base-port get
// ranges of their own: the first's reservations make the second pass
// over its ranges, though every port of them is free to a check; once
// the first releases them, they are free again.
func TestSuitesStartedTogetherTakeOtherRanges(t *testing.T) {
	base := 24400
	first, release, err := reservePortRanges(base, 2)
	if err != nil {
		t.Fatal(err)
	}
	second, release2, err := reservePortRanges(base, 2)
	if err != nil {
		release()
		t.Fatal(err)
	}
	for _, b := range second {
		if slices.Contains(first, b) {
			t.Errorf("both suites took the range from %d: %v and %v", b, first, second)
		}
	}
	release()
	release2()
	again, release3, err := reservePortRanges(base, 2)
	if err != nil {
		t.Fatal(err)
	}
	defer release3()
	if !slices.Equal(again, first) {
		t.Errorf("after release: %v, want the first suite's %v again", again, first)
	}
}
