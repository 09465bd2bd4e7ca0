package suite

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/harness/run"
)

// --timings balances the shards by an earlier suite's run times.
func TestReadTimings(t *testing.T) {
	p := filepath.Join(t.TempDir(), "summary.json")
	os.WriteFile(p, []byte(`{"outcome":"valid","exit_status":0,"runs":[
		{"scenario":"a","seed":1,"verdict":"valid","duration_ns":3000000000},
		{"scenario":"a","seed":2,"verdict":"valid","duration_ns":1000000000},
		{"scenario":"a","seed":3,"verdict":"valid","duration_ns":2000000000},
		{"scenario":"b","seed":1,"verdict":"unknown","skipped":"needs --runtime docker"}]}`), 0o644)
	got, err := ReadTimings(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got["a"].Seconds() != 2 {
		t.Errorf("timings %v, want a: 2s only", got)
	}
	os.WriteFile(p, []byte(`{"runs":[]}`), 0o644)
	if _, err := ReadTimings(p); err == nil {
		t.Error("a file with no outcome read as a summary")
	}
}

// A skip reason of several lines, or with a pipe, stays one table cell,
// and the run count leaves skipped scenarios out (saying how many).
func TestSummaryTable(t *testing.T) {
	runs := []Run{
		{Scenario: "journal-cut", Seed: 1, Verdict: "valid", Duration: 10 * time.Second},
		{Scenario: "clock-storm", Seed: 1, Skipped: "not supported: the implementation does not declare\nthe \"clock\" capability | see docs"},
	}
	var b strings.Builder
	WriteTable(&b, runs, time.Minute)
	out := b.String()
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 6 {
		t.Fatalf("want a header, a rule, two rows, a blank line and the total:\n%s", out)
	}
	for _, l := range lines[:4] {
		if got := strings.Count(strings.ReplaceAll(l, `\|`, ""), "|"); got != 7 {
			t.Errorf("%d cell separators in %q, want 7", got, l)
		}
	}
	if !strings.Contains(out, `declare the "clock" capability \| see docs`) {
		t.Errorf("the reason is not one escaped cell:\n%s", out)
	}
	if !strings.Contains(out, "1 runs (1 skipped), 1m0s in all.") {
		t.Errorf("total:\n%s", out)
	}
}

// A suite's outcome names its exit status; with bugs on, valid is every
// bug caught and invalid one missed.
func TestOutcome(t *testing.T) {
	for _, tt := range []struct {
		exit     int
		withBugs bool
		want     string
	}{
		{run.ExitValid, false, "valid"}, {run.ExitInvalid, false, "invalid"}, {run.ExitUnknown, false, "unknown"},
		{run.ExitCannotRun, false, "could-not-run"}, {run.ExitValid, true, "caught"}, {run.ExitInvalid, true, "not-caught"},
		{run.ExitCannotRun, true, "could-not-run"},
	} {
		if got := Outcome(tt.exit, tt.withBugs); got != tt.want {
			t.Errorf("Outcome(%d, %v) = %q, want %q", tt.exit, tt.withBugs, got, tt.want)
		}
	}
}
