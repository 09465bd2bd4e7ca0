package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"html"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/local"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/harness/scenario"
	"github.com/shardtest/shardtest/workloads"
)

// suiteRun is one run of test-all, for its summary.
type suiteRun struct {
	Scenario string          `json:"scenario"`
	Seed     int64           `json:"seed"`
	Bug      string          `json:"bug,omitempty"`
	Verdict  checker.Verdict `json:"verdict"`
	// Caught: with --with-bugs, the scenario's checker said invalid.
	Caught   bool          `json:"caught,omitempty"`
	Skipped  string        `json:"skipped,omitempty"`
	Error    string        `json:"error,omitempty"`
	Dir      string        `json:"dir,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	// Invalid names the checkers that said invalid.
	Invalid []string `json:"invalid,omitempty"`
	// Try of Tries: with --with-bugs, a scenario whose bug needs a race
	// (Scenario.BugTries) is run on further seeds until caught; a try
	// that did not catch it, followed by another, fails nothing.
	Try   int `json:"try,omitempty"`
	Tries int `json:"tries,omitempty"`
}

func newTestAllCmd() *cobra.Command {
	var (
		filter    string
		smoke     bool
		withBugs  bool
		testCount int
		seed      int64
		shard     string
		timings   string
		parallel  int
		cfg       suiteConfig
	)
	cmd := &cobra.Command{
		Use:   "test-all",
		Short: "Run the scenario catalogue (or a part of it) as a suite, with one JUnit file",
		Long: `Run the scenarios of the catalogue (shardtest list scenarios), each with
--test-count seeds (--seed, --seed+1, ...), and write one JUnit file for all
of them, with one test suite per run and one test case per checker, plus
summary.md and summary.json, under <results>/test-all/<time>/. Each run's
own folder (history, report, logs) is under <results>/<scenario>/.

--smoke runs the quick subset CI runs on every change; the whole catalogue
is the nightly suite. A scenario that needs Docker is skipped (and listed
as skipped) on --runtime local.

--image runs the catalogue against another implementation of the node
protocol (docs/protocol.md); a scenario whose workload or faults it does
not declare is skipped, with the capability it lacks. Scenario tuning
(fast passivation, a slow resolver) reaches every node as optional
SHARDTEST_* settings in the environment.

--with-bugs runs instead each scenario that names a deliberate bug of the
reference node with that bug switched on: a run passes when the scenario's
checker says invalid, i.e. the bug was caught. A bug that does damage only
when the system loses a race is tried on further seeds (seed+1000, ...), up to
the scenario's number of tries, until caught; a missed try followed by another
is a skipped test case.

--shard K/N runs the K-th of N parts of the suite's (scenario, seed) runs, so
N CI jobs in a matrix cover it once between them; the split is the same in
every job and balances the parts by each scenario's run time: its median in
--timings (the summary.json of an earlier suite), else its main phase plus
20 s. shardtest merge combines the parts' results (docs/ci.md).

--parallel P runs up to P runs at once, each its own cluster and results
folder (local: each worker takes the next range of 200 ports from
--base-port that is free, before the first run; a range another program
holds is passed over); the summaries keep the suite's order. Runs side
by side share the machine's cores: docs/ci.md says how many fit.

Exit status: 0 every run valid (or, with --with-bugs, every bug caught);
1 a run was invalid (or a bug went uncaught); 2 a run was unknown; 3 a run
could not run. The worst wins, and a proven violation is the worst: 1
whenever a run was invalid, else 3, else 2.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if parallel < 1 {
				return &exitError{exitCannotRun, fmt.Errorf("--parallel %d: want at least 1", parallel)}
			}
			// Worker w owns its own range of local ports, free before any
			// run: runs side by side never share one, and a range another
			// program holds is passed over for the next.
			// Each range is reserved for the whole suite, so another suite
			// started at the same moment takes others.
			bases := make([]int, parallel)
			if cfg.runtime == "local" {
				var release func()
				var err error
				if bases, release, err = reservePortRanges(cfg.basePort, parallel); err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("--parallel %d: %w", parallel, err)}
				}
				defer release()
			}
			if testCount < 1 {
				return &exitError{exitCannotRun, fmt.Errorf("--test-count %d: want at least 1", testCount)}
			}
			if cfg.runtime != "docker" && cfg.runtime != "local" {
				return &exitError{exitCannotRun, fmt.Errorf("--runtime %q: want docker or local", cfg.runtime)}
			}
			if cfg.runtime != "docker" && (cfg.image != "" || cfg.binary != "") {
				return &exitError{exitCannotRun, errors.New("--binary and --image are for --runtime docker")}
			}
			if withBugs && cfg.image != "" {
				return &exitError{exitCannotRun, errors.New("--with-bugs switches on the reference node's deliberate bugs: not with --image")}
			}
			scs, err := scenario.Select(filter, smoke)
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			shardK, shardN := 1, 1
			if shard != "" {
				if shardK, shardN, err = scenario.ParseShard(shard); err != nil {
					return &exitError{exitCannotRun, err}
				}
			}
			measured := map[string]time.Duration{}
			if timings != "" {
				if measured, err = readTimings(timings); err != nil {
					return &exitError{exitCannotRun, err}
				}
			}
			if withBugs {
				var with []scenario.Scenario
				for _, s := range scs {
					if s.Bug != "" {
						with = append(with, s)
					}
				}
				if len(with) == 0 {
					return &exitError{exitCannotRun, fmt.Errorf("--with-bugs: none of %s names a deliberate bug", strings.Join(scenario.Names(scs), ", "))}
				}
				scs = with
			}
			cfg.logger, err = newLogger("info", "text")
			if err != nil {
				return err
			}
			started := time.Now()
			suiteDir := filepath.Join(cfg.results, "test-all", started.UTC().Format("20060102T150405Z"))
			if err := os.MkdirAll(suiteDir, 0o755); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("results directory: %w", err)}
			}
			out := cmd.OutOrStdout()
			var runs []suiteRun
			var junit []report.Run
			worst := exitValid
			var pairs []scenario.Pair
			byName := map[string]scenario.Scenario{}
			for _, s := range scs {
				byName[s.Name] = s
				w, ok := measured[s.Name]
				if !ok {
					w = s.Expected()
				}
				for i := range testCount {
					pairs = append(pairs, scenario.Pair{Scenario: s.Name, Seed: seed + int64(i), Weight: w})
				}
			}
			if shardN > 1 {
				pairs = scenario.Shard(pairs, shardK, shardN)
				fmt.Fprintf(out, "shard %d/%d: %d of the suite's runs\n", shardK, shardN, len(pairs))
			}
			// Each pair's runs (one, or a bug's tries) land in its slot, so
			// the summaries keep the suite's order whatever order the runs
			// end in with --parallel.
			type entry struct {
				sr   suiteRun
				jr   report.Run
				code int
			}
			slots := make([][]entry, len(pairs))
			var mu sync.Mutex // out and worst
			runPair := func(i int, c suiteConfig) {
				p := pairs[i]
				s := byName[p.Scenario]
				tries := 1
				if withBugs {
					tries = max(s.BugTries, 1)
				}
				for try := range tries {
					if cmd.Context().Err() != nil {
						break
					}
					// Further tries take seeds no other run of the
					// suite takes.
					sr := suiteRun{Scenario: s.Name, Seed: p.Seed + int64(try)*bugTrySeedStep}
					if withBugs {
						sr.Bug = s.Bug
						if tries > 1 {
							sr.Try, sr.Tries = try+1, tries
						}
					}
					jr, code := c.runScenario(cmd, s, &sr, withBugs)
					again := withBugs && !sr.Caught && sr.Error == "" && sr.Skipped == "" && try+1 < tries
					if again {
						jr.Skipped = fmt.Sprintf("%s not caught at try %d of %d (it needs a race the system may win): tried again with seed %d",
							s.Bug, try+1, tries, sr.Seed+bugTrySeedStep)
						code = exitValid
					}
					slots[i] = append(slots[i], entry{sr, jr, code})
					mu.Lock()
					worst = worse(worst, code)
					fmt.Fprintln(out, sr.line())
					mu.Unlock()
					if !again {
						break
					}
				}
			}
			next := make(chan int)
			var wg sync.WaitGroup
			for w := range min(parallel, max(len(pairs), 1)) {
				c := cfg
				c.basePort = bases[w]
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range next {
						runPair(i, c)
					}
				}()
			}
			for i := range pairs {
				next <- i
			}
			close(next)
			wg.Wait()
			for _, es := range slots {
				for _, e := range es {
					runs = append(runs, e.sr)
					junit = append(junit, e.jr)
				}
			}
			var jb bytes.Buffer
			if err := report.WriteJUnit(&jb, junit); err != nil {
				return &exitError{exitCannotRun, err}
			}
			if err := writeSuite(suiteDir, runs, jb.Bytes(), withBugs, worst, time.Since(started)); err != nil {
				return &exitError{exitCannotRun, err}
			}
			fmt.Fprintf(out, "%s in %s\nsummary: %s\njunit: %s\n", runCount(runs), time.Since(started).Round(time.Second),
				filepath.Join(suiteDir, "summary.md"), filepath.Join(suiteDir, report.JUnitFile))
			if cmd.Context().Err() != nil {
				return &exitError{exitCannotRun, fmt.Errorf("interrupted: %w", cmd.Context().Err())}
			}
			if worst != exitValid {
				what := verdictFor(worst)
				if worst == exitCannotRun {
					what = "a run could not start"
				} else if withBugs && worst == exitInvalid {
					what = "a bug went uncaught"
				}
				return &exitError{worst, fmt.Errorf("suite: %s", what)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&filter, "scenario", "", "only these scenarios, comma-separated (default: all)")
	f.BoolVar(&smoke, "smoke", false, "only the smoke subset (the quick scenarios CI runs on every change)")
	f.BoolVar(&withBugs, "with-bugs", false, "run each scenario with its deliberate bug on; a run passes when the bug is caught")
	f.IntVar(&testCount, "test-count", 1, "seeds per scenario: --seed, --seed+1, ...")
	f.Int64Var(&seed, "seed", 1, "first seed")
	f.StringVar(&shard, "shard", "", "run only part K of N of the suite's runs (K/N), split the same way in every job")
	f.StringVar(&timings, "timings", "", "summary.json of an earlier suite: its median run times balance --shard")
	f.IntVar(&parallel, "parallel", 1, "run up to this many runs at once (each its own cluster; local: worker k uses --base-port + 200k)")
	f.StringVar(&cfg.runtime, "runtime", "docker", "where nodes run: docker or local")
	f.StringVar(&cfg.results, "results", "results", "results root folder")
	f.StringVar(&cfg.binary, "binary", "", "docker: static shardtest binary for the reference image (the journal's, and the nodes' without --image)")
	f.StringVar(&cfg.image, "image", "", "docker: run the nodes from this image, any implementation of docs/protocol.md (default: the reference node); scenarios it cannot take are skipped")
	f.IntVar(&cfg.basePort, "base-port", 17400, "local: journal port; node i uses base+i and base+100+i")
	f.StringArrayVar(&cfg.nodeArgs, "node-arg", nil, "extra flag for every node, repeatable")
	return cmd
}

// suiteConfig is what test-all's runs share.
type suiteConfig struct {
	runtime, binary, image, results string
	basePort                        int
	nodeArgs                        []string
	logger                          *slog.Logger
}

// runScenario runs one seed of s into sr and returns its JUnit entry and
// its exit status.
func (c suiteConfig) runScenario(cmd *cobra.Command, s scenario.Scenario, sr *suiteRun, withBug bool) (report.Run, int) {
	o := s.Options(sr.Seed, c.runtime, withBug)
	o.NodeArgs = append(o.NodeArgs, c.nodeArgs...)
	o.Image = c.image
	jr := report.Run{Input: report.Input{Test: fmt.Sprintf("%s seed %d", o.Name, sr.Seed), Started: time.Now().UTC(), Verdict: checker.Unknown}}
	if opts, err := json.Marshal(o); err == nil {
		jr.Options = opts // what was asked for, even of a run that cannot start
	}
	skip := func(why string) (report.Run, int) {
		sr.Skipped, sr.Verdict = why, checker.Unknown
		jr.Skipped = why
		return jr, exitValid
	}
	if s.Docker && c.runtime != "docker" {
		return skip("needs --runtime docker")
	}
	fail := func(err error) (report.Run, int) {
		sr.Error = err.Error()
		sr.Verdict = checker.Unknown
		jr.Checks = []checker.Result{{Checker: "run", Verdict: checker.Unknown, Summary: "could not run: " + err.Error()}}
		return jr, exitCannotRun
	}
	w, err := workloads.Named(o.Workload)
	if err != nil {
		return fail(err)
	}
	rt, err := newRuntime(o, c.binary, c.basePort, c.logger)
	if err != nil {
		return fail(err)
	}
	t := &run.Test{Options: o, Runtime: rt, Workload: w, Log: c.logger}
	res, err := t.Run(cmd.Context(), c.results)
	sr.Dir, sr.Duration = res.Dir, res.Duration
	jr.Dir, jr.Duration, jr.Summary = res.Dir, res.Duration, res.Summary
	if opts, rerr := os.ReadFile(filepath.Join(res.Dir, "test.json")); rerr == nil && json.Valid(opts) {
		jr.Options = opts // as the run stored it: with its run id and versions
	}
	if err != nil {
		if c.image != "" && errors.Is(err, run.ErrUnsupported) {
			// Another implementation need not offer every capability;
			// the reference node must (a refusal there is a catalogue
			// bug, so it fails the suite).
			return skip(err.Error())
		}
		return fail(err)
	}
	sr.Verdict = res.Verdict
	for _, c := range res.Checks {
		if c.Verdict == checker.Invalid {
			sr.Invalid = append(sr.Invalid, c.Checker)
		}
	}
	if !withBug {
		jr.Verdict, jr.Checks = res.Verdict, res.Checks
		return jr, exitFor(res.Verdict)
	}
	// With the bug on, the run's test is whether the scenario's checker
	// caught it; the other checkers' verdicts are listed as evidence.
	caught := checker.Result{Checker: "catches " + s.Bug, Verdict: checker.Invalid,
		Summary: fmt.Sprintf("%s did not say invalid with %s on", s.Checker, s.Bug)}
	for _, c := range res.Checks {
		if c.Checker == s.Checker && c.Verdict == checker.Invalid {
			sr.Caught = true
			caught.Verdict = checker.Valid
			caught.Summary = fmt.Sprintf("%s caught %s: %s", s.Checker, s.Bug, c.Summary)
		}
		caught.Evidence = append(caught.Evidence, fmt.Sprintf("%s: %s: %s", c.Checker, c.Verdict, c.Summary))
	}
	jr.Verdict, jr.Checks = caught.Verdict, []checker.Result{caught}
	if sr.Caught {
		return jr, exitValid
	}
	return jr, exitInvalid
}

// reservePortRanges picks n ranges of local ports from base
// (pickPortRanges) and reserves each (local.ReservePorts) until release:
// a range is taken only if its reservation succeeds and a cluster of the
// catalogue's largest size can start on it.
func reservePortRanges(base, n int) (bases []int, release func(), err error) {
	var releases []func()
	release = func() {
		for _, r := range releases {
			r()
		}
	}
	bases, err = pickPortRanges(base, n, func(b int) error {
		r, err := local.ReservePorts(b)
		if err != nil {
			return err
		}
		if err := local.CheckPorts(b, maxLocalNodes); err != nil {
			r()
			return err
		}
		releases = append(releases, r)
		return nil
	})
	if err != nil {
		release()
		return nil, nil, err
	}
	return bases, release, nil
}

// parallelPortStride separates the local port ranges of test-all's
// workers: a run uses its base port, base+1.. for its nodes' HTTP and
// base+101.. for their gossip, joins included.
const parallelPortStride = 200

// pickPortRanges returns the base ports of n workers' ranges: the first n
// of base, base+parallelPortStride, ... that check accepts. A range
// whose ports another program holds is passed over; the search ends at the
// first range that cannot be used at all (past the last port, or in the
// ephemeral range), with the first refusal as the error, so a bad
// --base-port still says what is wrong with it.
func pickPortRanges(base, n int, check func(base int) error) ([]int, error) {
	var bases []int
	var first error
	for b := base; len(bases) < n; b += parallelPortStride {
		err := check(b)
		if err == nil {
			bases = append(bases, b)
			continue
		}
		if first == nil {
			first = err
		}
		if !errors.Is(err, local.ErrPortTaken) {
			return nil, fmt.Errorf("%d free port ranges from --base-port %d, found %d: %w", n, base, len(bases), first)
		}
	}
	return bases, nil
}

// maxLocalNodes is the most nodes a catalogue run starts on the local
// runtime (its nodes and the ones it joins), for the port check.
const maxLocalNodes = 12

// bugTrySeedStep separates the seeds of a bug's further tries.
const bugTrySeedStep = 1000

// line is the run's line in test-all's output.
func (r suiteRun) line() string {
	what := string(r.Verdict)
	switch {
	case r.Skipped != "":
		what = "skipped: " + r.Skipped
	case r.Error != "":
		what = "could not run: " + r.Error
	case r.Bug != "" && r.Caught:
		what = "caught " + r.Bug
	case r.Bug != "":
		what = r.Bug + " NOT caught (verdict " + string(r.Verdict) + ")"
	}
	if r.Tries > 1 {
		what += fmt.Sprintf(" (try %d of %d)", r.Try, r.Tries)
	}
	switch {
	case r.Skipped != "" || r.Error != "" || r.Bug != "":
	case len(r.Invalid) > 0:
		what += " (" + strings.Join(r.Invalid, ", ") + ")"
	}
	dir := ""
	if r.Dir != "" {
		dir = "  " + r.Dir
	}
	return fmt.Sprintf("%-32s seed %-4d %-8s %s%s", r.Scenario, r.Seed, r.Duration.Round(time.Second), what, dir)
}

// suiteSummary is summary.json: the suite's outcome (the exit status's
// meaning: a proven violation outranks everything) and every run.
type suiteSummary struct {
	// Outcome is valid, invalid, unknown or could-not-run; with
	// --with-bugs, caught or not-caught instead of valid and invalid.
	Outcome    string `json:"outcome"`
	ExitStatus int    `json:"exit_status"`
	// WithBugs: the runs had the deliberate bugs on (--with-bugs).
	WithBugs bool `json:"with_bugs,omitempty"`
	// Took is the suite's time (merged: the sum of its parts').
	Took time.Duration `json:"took_ns,omitempty"`
	Runs []suiteRun    `json:"runs"`
}

func suiteOutcome(exit int, withBugs bool) string {
	switch {
	case exit == exitCannotRun:
		return "could-not-run"
	case withBugs && exit == exitValid:
		return "caught"
	case withBugs && exit == exitInvalid:
		return "not-caught"
	}
	return verdictFor(exit)
}

// writeSuite writes the suite's JUnit file, its summaries and its index
// page.
func writeSuite(dir string, runs []suiteRun, junit []byte, withBugs bool, exit int, took time.Duration) error {
	if err := os.WriteFile(filepath.Join(dir, report.JUnitFile), junit, 0o644); err != nil {
		return err
	}
	b, err := json.MarshalIndent(suiteSummary{Outcome: suiteOutcome(exit, withBugs), ExitStatus: exit, WithBugs: withBugs, Took: took, Runs: runs}, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), b, 0o644); err != nil {
		return err
	}
	var md bytes.Buffer
	writeSummaryTable(&md, runs, withBugs, took)
	if err := os.WriteFile(filepath.Join(dir, "summary.md"), md.Bytes(), 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, report.IndexFile), suiteIndex(dir, runs, suiteOutcome(exit, withBugs), took), 0o644)
}

// readSummary reads a suite's summary.json.
func readSummary(path string) (suiteSummary, error) {
	var s suiteSummary
	b, err := os.ReadFile(path)
	if err != nil {
		return s, err
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("%s: %w", path, err)
	}
	if s.Outcome == "" {
		return s, fmt.Errorf("%s: not a test-all summary (no outcome)", path)
	}
	return s, nil
}

// readTimings reads --timings: each scenario's median run time in an
// earlier suite's summary.json (runs that ran; skipped ones say nothing).
func readTimings(path string) (map[string]time.Duration, error) {
	s, err := readSummary(path)
	if err != nil {
		return nil, fmt.Errorf("--timings: %w", err)
	}
	by := map[string][]time.Duration{}
	for _, r := range s.Runs {
		if r.Skipped == "" && r.Duration > 0 {
			by[r.Scenario] = append(by[r.Scenario], r.Duration)
		}
	}
	out := map[string]time.Duration{}
	for name, ds := range by {
		slices.Sort(ds)
		out[name] = ds[len(ds)/2]
	}
	return out, nil
}

// suiteIndex is the suite's index page: its outcome and one row per run,
// linked to the run's report where the run folder is reachable from dir.
func suiteIndex(dir string, runs []suiteRun, outcome string, took time.Duration) []byte {
	var b bytes.Buffer
	esc := html.EscapeString
	fmt.Fprintf(&b, "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>shardtest suite: %s</title>\n", esc(outcome))
	b.WriteString("<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.2em .6em;text-align:left}" +
		".valid,.caught{color:#176317}.invalid,.not-caught{color:#a31515;font-weight:bold}.unknown,.could-not-run{color:#8a5a00}</style></head><body>\n")
	fmt.Fprintf(&b, "<h1>shardtest suite: <span class=\"%s\">%s</span></h1>\n<p>%s, %s in all. <a href=\"summary.md\">summary.md</a> · <a href=\"%s\">%s</a> · <a href=\"summary.json\">summary.json</a></p>\n",
		esc(outcome), esc(outcome), esc(runCount(runs)), took.Round(time.Second), report.JUnitFile, report.JUnitFile)
	b.WriteString("<table><tr><th>scenario</th><th>seed</th><th>outcome</th><th>time</th><th>report</th></tr>\n")
	for _, r := range runs {
		what, class := string(r.Verdict), string(r.Verdict)
		switch {
		case r.Skipped != "":
			what, class = "skipped: "+r.Skipped, ""
		case r.Error != "":
			what, class = "could not run: "+r.Error, "could-not-run"
		case r.Bug != "" && r.Caught:
			what, class = "caught "+r.Bug, "caught"
		case r.Bug != "":
			what, class = r.Bug+" not caught", "not-caught"
		case len(r.Invalid) > 0:
			what += " (" + strings.Join(r.Invalid, ", ") + ")"
		}
		link := "—"
		if r.Dir != "" {
			page := filepath.Join(r.Dir, report.IndexFile)
			if rel, err := filepath.Rel(dir, page); err == nil {
				if _, err := os.Stat(page); err == nil {
					link = fmt.Sprintf("<a href=\"%s\">%s</a>", esc(filepath.ToSlash(rel)), esc(r.Dir))
				} else {
					link = esc(r.Dir)
				}
			}
		}
		fmt.Fprintf(&b, "<tr><td>%s</td><td>%d</td><td class=\"%s\">%s</td><td>%s</td><td>%s</td></tr>\n",
			esc(r.Scenario), r.Seed, class, esc(what), r.Duration.Round(time.Second), link)
	}
	b.WriteString("</table></body></html>\n")
	return b.Bytes()
}

// writeSummaryTable writes one row per scenario: its seeds' outcomes.
func writeSummaryTable(w io.Writer, runs []suiteRun, withBugs bool, took time.Duration) {
	if withBugs {
		fmt.Fprintln(w, "| scenario | bug | caught | median run time |")
		fmt.Fprintln(w, "|---|---|---|---|")
	} else {
		fmt.Fprintln(w, "| scenario | seeds | valid | invalid | unknown | median run time |")
		fmt.Fprintln(w, "|---|---|---|---|---|---|")
	}
	var order []string
	by := map[string][]suiteRun{}
	for _, r := range runs {
		if by[r.Scenario] == nil {
			order = append(order, r.Scenario)
		}
		by[r.Scenario] = append(by[r.Scenario], r)
	}
	for _, name := range order {
		rs := by[name]
		var valid, invalid, unknown, caught, ran int
		var ds []time.Duration
		skipped := ""
		for _, r := range rs {
			if r.Skipped != "" {
				skipped = r.Skipped
				continue
			}
			ran++
			ds = append(ds, r.Duration)
			switch r.Verdict {
			case checker.Valid:
				valid++
			case checker.Invalid:
				invalid++
			default:
				unknown++
			}
			if r.Caught {
				caught++
			}
		}
		median := "—"
		if len(ds) > 0 {
			slices.Sort(ds)
			median = ds[len(ds)/2].Round(time.Second).String()
		}
		switch {
		case skipped != "" && ran == 0 && withBugs:
			fmt.Fprintf(w, "| %s | skipped: %s | — | — |\n", mdCell(name), mdCell(skipped))
		case skipped != "" && ran == 0:
			fmt.Fprintf(w, "| %s | skipped: %s | — | — | — | — |\n", mdCell(name), mdCell(skipped))
		case withBugs:
			fmt.Fprintf(w, "| %s | `%s` | %d of %d seeds | %s |\n", mdCell(name), mdCell(rs[0].Bug), caught, ran, median)
		default:
			fmt.Fprintf(w, "| %s | %d | %d | %d | %d | %s |\n", mdCell(name), ran, valid, invalid, unknown, median)
		}
	}
	fmt.Fprintf(w, "\n%s, %s in all.\n", runCount(runs), took.Round(time.Second))
}

// runCount says how many runs ran and how many were skipped.
func runCount(runs []suiteRun) string {
	skipped := 0
	for _, r := range runs {
		if r.Skipped != "" {
			skipped++
		}
	}
	s := fmt.Sprintf("%d runs", len(runs)-skipped)
	if skipped > 0 {
		s += fmt.Sprintf(" (%d skipped)", skipped)
	}
	return s
}

// mdCell makes text one Markdown table cell: on one line, with its pipes
// escaped (a skip reason can be a multi-line error).
func mdCell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
