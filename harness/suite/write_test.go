package suite

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/coverage"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/protocol"
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

// A suite's coverage: written beside its summary, summed up per scenario
// (what only it showed) with what the suite never exercised, and merged
// across the parts of a split suite; a part without coverage leaves the
// merged suite without (a union of some parts would understate it).
func TestSuiteCoverage(t *testing.T) {
	tmp := t.TempDir()
	part := func(name string, add func(c *coverage.Suite)) string {
		dir := filepath.Join(tmp, name)
		os.MkdirAll(dir, 0o755)
		res := Result{Runs: []Run{{Scenario: name, Seed: 1, Verdict: "valid"}}, Exit: run.ExitValid}
		if add != nil {
			res.Coverage = coverage.NewSuite()
			add(res.Coverage)
		}
		if err := Write(dir, res); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	caps := []string{protocol.CapMembership, protocol.CapEvents, protocol.CapSingleton}
	a := part("a", func(c *coverage.Suite) {
		c.Add("a", coverage.Coverage{Behaviours: []string{"fault kill:one", "event singleton-started @oldest | none", "op read ok | none"}, Capabilities: caps})
	})
	b := part("b", func(c *coverage.Suite) {
		c.Add("b", coverage.Coverage{Behaviours: []string{"op read ok | none", "event member-up @oldest | none"}, Capabilities: caps})
	})
	s, err := ReadSummary(filepath.Join(a, SummaryFile))
	if err != nil || s.Coverage == nil || s.Coverage.Behaviours != 3 {
		t.Fatalf("part a's summary: %v, %+v", err, s.Coverage)
	}
	merged, err := Merge([]string{a, b}, filepath.Join(tmp, "merged"))
	if err != nil {
		t.Fatal(err)
	}
	mc := merged.Coverage
	if mc == nil || mc.Behaviours != 4 || len(mc.Scenarios) != 2 {
		t.Fatalf("merged coverage %+v", mc)
	}
	if got := mc.Scenarios[0]; got.Scenario != "a" || got.Behaviours != 3 || got.Only != 2 {
		t.Errorf("scenario a: %+v, want 3 behaviours, 2 shown by no other", got)
	}
	if !slices.Contains(mc.NeverLogged, protocol.EventSingletonStopped) || slices.Contains(mc.NeverLogged, protocol.EventMemberUp) {
		t.Errorf("never logged: %v", mc.NeverLogged)
	}
	if !slices.Contains(mc.NeverInjected, "pause:one") || slices.Contains(mc.NeverInjected, "kill:one") {
		t.Errorf("never injected: %v", mc.NeverInjected)
	}
	md, _ := os.ReadFile(filepath.Join(tmp, "merged", SummaryMarkdownFile))
	if !strings.Contains(string(md), "| a | 1 | 3 | 2 |") || !strings.Contains(string(md), "coverage: 4 behaviours") {
		t.Errorf("summary.md's coverage section:\n%s", md)
	}
	none := part("c", nil)
	if m, err := Merge([]string{a, none}, filepath.Join(tmp, "merged2")); err != nil || m.Coverage != nil {
		t.Errorf("a part without coverage: %v, coverage %+v", err, m.Coverage)
	}
	os.WriteFile(filepath.Join(none, coverage.File), []byte("[]"), 0o644)
	if _, err := Merge([]string{a, none}, filepath.Join(tmp, "merged3")); err == nil {
		t.Error("a part with a damaged coverage.json was merged")
	}
	if _, err := os.Stat(filepath.Join(tmp, "merged3")); err == nil {
		t.Error("a refused merge wrote its folder")
	}
}
