package main

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/harness/explore"
	"github.com/shardtest/shardtest/internal/testbin"
)

// Bad input to explore: a clear error, exit 3, and nothing written (no
// campaign folder, a corpus left as it was).
func TestExploreRefuses(t *testing.T) {
	tmp := t.TempDir()
	results := filepath.Join(tmp, "results")
	notCorpus := filepath.Join(tmp, "notes")
	os.MkdirAll(notCorpus, 0o755)
	os.WriteFile(filepath.Join(notCorpus, "a.txt"), []byte("mine"), 0o644)
	broken := filepath.Join(tmp, "broken")
	os.MkdirAll(broken, 0o755)
	os.WriteFile(filepath.Join(broken, "corpus.json"), []byte(`{"format":"shardtest-explore-corpus","version":1,"workload":"register","time_limit_ns":30000000000}`), 0o644)
	os.WriteFile(filepath.Join(broken, "0001.schedule.json"), []byte(`{"format":"shardtest-schedule","steps":[{"at":"5s","fault":"kill:one"},{"at":"1s","fault":"kill:one","heal":true}]}`), 0o644)
	base := []string{"explore", "--runtime", "local", "--results", results, "--base-port", "24400"}
	for name, tc := range map[string]struct {
		args []string
		want string
	}{
		"no bound":                        {nil, "needs a bound"},
		"a budget of 0":                   {[]string{"--budget", "0s"}, "--budget 0s"},
		"no runs":                         {[]string{"--runs", "0"}, "--runs 0"},
		"a corpus that is not one":        {[]string{"--runs", "1", "--corpus", notCorpus}, "not an exploration corpus"},
		"a schedule that no longer reads": {[]string{"--runs", "1", "--corpus", broken}, "entry 0001"},
		"faults the runtime cannot take":  {[]string{"--runs", "1", "--nemesis", "loss"}, "loss"},
		"an unknown bug":                  {[]string{"--runs", "1", "--scenario", "coordinator-crash", "--bug", "nope"}, "--bug nope"},
		"a phase too short":               {[]string{"--runs", "1", "--time-limit", "3s", "--nemesis-interval", "2s"}, "holds no fault"},
	} {
		t.Run(name, func(t *testing.T) {
			out, code := runCmd(t, append(base, tc.args...)...)
			if code != exitCannotRun || !strings.Contains(out, tc.want) {
				t.Errorf("exit %d, want %d saying %q:\n%s", code, exitCannotRun, tc.want, out)
			}
		})
	}
	if _, err := os.Stat(results); err == nil {
		t.Error("a refused campaign wrote into --results")
	}
	if es, _ := os.ReadDir(notCorpus); len(es) != 1 {
		t.Errorf("the folder that is not a corpus was written to: %v", es)
	}
}

// A campaign on real local clusters finds a deliberate bug of the
// reference node: entities restarted after a crash forget their state, so
// reads go back in time under kills. It stops at the invalid run, writes
// the command that reproduces it, and keeps the corpus.
func TestExploreFindsABug(t *testing.T) {
	if testing.Short() {
		t.Skip("starts local clusters")
	}
	bin, cleanup, err := testbin.Build("shardtest-explore-test")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	results := t.TempDir()
	cmd := exec.Command(bin, "explore", "--runtime", "local", "--base-port", "25400", "--results", results,
		"--workload", "register", "--entities", "20", "--nemesis", "kill:one,kill:oldest", "--nemesis-interval", "3s",
		"--time-limit", "12s", "--runs", "6", "--seed", "1", "--shrink-budget", "0",
		"--node-arg=--bugs=entity-skip-replay")
	out, _ := cmd.CombinedOutput()
	if code := cmd.ProcessState.ExitCode(); code != exitInvalid {
		t.Fatalf("exit %d, want %d (the bug found)\n%s", code, exitInvalid, out)
	}
	dirs, _ := filepath.Glob(filepath.Join(results, "explore", "*"))
	if len(dirs) != 1 {
		t.Fatalf("campaign folders %v", dirs)
	}
	dir := dirs[0]
	recs := readRecords(t, filepath.Join(dir, explore.RunsFile))
	last := recs[len(recs)-1]
	if last.Verdict != "invalid" || !strings.Contains(strings.Join(last.Invalid, ","), "linearizable") {
		t.Fatalf("the campaign's last run: %+v, want the invalid one (linearizable)\n%s", last, out)
	}
	if recs[0].Behaviours == 0 || recs[0].New != recs[0].Behaviours || recs[0].Entry == "" {
		t.Errorf("the first run: %+v, want every behaviour new and kept in the corpus", recs[0])
	}
	for _, name := range []string{explore.SummaryFile, explore.CoverageSVG, "corpus/corpus.json", "corpus/0001.schedule.json"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Error(err)
		}
	}
	md, _ := os.ReadFile(filepath.Join(dir, explore.SummaryFile))
	if !strings.Contains(string(md), "shardtest run") || !strings.Contains(string(out), "reproduce: shardtest run") {
		t.Errorf("no command to reproduce it:\n%s\n%s", md, out)
	}
}

// A campaign killed (SIGKILL) after its first run keeps that run and a
// readable corpus, and a campaign given that corpus resumes from it: what
// the corpus showed is not new to it.
func TestExploreKilledKeepsItsCorpus(t *testing.T) {
	if testing.Short() {
		t.Skip("starts local clusters")
	}
	bin, cleanup, err := testbin.Build("shardtest-explore-kill-test")
	if err != nil {
		t.Fatal(err)
	}
	defer cleanup()
	results := t.TempDir()
	corpus := filepath.Join(t.TempDir(), "corpus")
	args := []string{"explore", "--runtime", "local", "--base-port", "29400", "--results", results, "--corpus", corpus,
		"--workload", "register", "--entities", "20", "--nemesis", "kill:one", "--nemesis-interval", "3s", "--time-limit", "8s", "--seed", "2"}
	cmd := exec.Command(bin, append(args, "--runs", "5")...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var dir string
	deadline := time.Now().Add(3 * time.Minute)
	for ; ; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			t.Fatal("no run finished in 3 minutes")
		}
		dirs, _ := filepath.Glob(filepath.Join(results, "explore", "*"))
		if len(dirs) == 1 {
			if b, _ := os.ReadFile(filepath.Join(dirs[0], explore.RunsFile)); strings.Count(string(b), "\n") >= 1 {
				dir = dirs[0]
				break
			}
		}
	}
	cmd.Process.Kill()
	cmd.Wait()
	recs := readRecords(t, filepath.Join(dir, explore.RunsFile))
	if len(recs) < 1 || recs[0].Entry == "" {
		t.Fatalf("after the kill: %+v, want the first run kept as a corpus entry", recs)
	}
	if _, err := os.Stat(filepath.Join(recs[0].Dir, "results.json")); err != nil {
		t.Errorf("the finished run's folder: %v", err)
	}
	out, err := exec.Command(bin, append(args, "--runs", "1", "--seed", "3")...).CombinedOutput()
	if err != nil {
		t.Fatalf("resuming: %v\n%s", err, out)
	}
	dirs, _ := filepath.Glob(filepath.Join(results, "explore", "*"))
	if len(dirs) != 2 {
		t.Fatalf("campaign folders %v", dirs)
	}
	resumed := readRecords(t, filepath.Join(dirs[1], explore.RunsFile))
	if len(resumed) != 1 || resumed[0].New >= resumed[0].Behaviours {
		t.Errorf("the resumed campaign's run: %+v, want fewer new behaviours than it showed (the corpus showed some)\n%s", resumed, out)
	}
}

func readRecords(t *testing.T, path string) []explore.Record {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var recs []explore.Record
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r explore.Record
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("%s: %v: %s", path, err, sc.Text())
		}
		recs = append(recs, r)
	}
	return recs
}
