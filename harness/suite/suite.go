// Package suite runs scenario runs as one suite: the catalogue or a part of
// it, on the correct node or with the scenarios' deliberate bugs switched
// on. It owns what every suite shares: a pool of workers, each with a
// cluster and (local runtime) a range of ports of its own; a bug's further
// tries on further seeds (caught or not is checker.Caught's to say);
// and the suite's results (summary.json, summary.md, one JUnit file, an
// index page), which merge reads and writes the same way. test-all and
// detect run through it.
package suite

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/coverage"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/harness/scenario"
	"github.com/shardtest/shardtest/workloads"
)

// Job is one run of a suite: a scenario on a seed, with one of its bugs
// switched on (Bug nil: the correct node). A job with a bug passes when the
// bug's checker catches it, and is tried on further seeds, up to the bug's
// tries, until it does.
type Job struct {
	Scenario scenario.Scenario
	Seed     int64
	Bug      *scenario.Bug
}

// Jobs are the runs of scenarios ss (with bugs: of each of their bugs) on
// count seeds from seed, scenario by scenario.
func Jobs(ss []scenario.Scenario, withBugs bool, seed int64, count int) []Job {
	var out []Job
	for _, s := range ss {
		if !withBugs {
			for i := range count {
				out = append(out, Job{Scenario: s, Seed: seed + int64(i)})
			}
			continue
		}
		for _, c := range scenario.Cases([]scenario.Scenario{s}) {
			for i := range count {
				out = append(out, Job{Scenario: s, Seed: seed + int64(i), Bug: &c.Bug})
			}
		}
	}
	return out
}

// Pair is the job for --shard's split.
func (j Job) Pair(weight time.Duration) scenario.Pair {
	p := scenario.Pair{Scenario: j.Scenario.Name, Seed: j.Seed, Weight: weight}
	if j.Bug != nil {
		p.Bug = j.Bug.Name
	}
	return p
}

// Config is how a suite's runs are made.
type Config struct {
	// Runtime is docker or local; Binary the reference image's static
	// binary and Image another implementation's image (docker).
	Runtime, Binary, Image string
	// Results is the results root: each run's folder goes under
	// <Results>/<run name>/.
	Results string
	// BasePort is where the local runtime's port ranges start, and
	// LocalBinary the shardtest executable it starts (default: this one).
	BasePort    int
	LocalBinary string
	// NodeArgs go to every node of every run.
	NodeArgs []string
	// Parallel runs up to this many runs at once (default 1).
	Parallel int
	Log      *slog.Logger
	// Progress hears of every run as it ends, one at a time.
	Progress func(Run)
}

// Suite is a Config ready to run: its port ranges reserved until Close.
type Suite struct {
	cfg     Config
	bases   []int
	release func()
}

// New checks c and reserves what its runs need before any of them starts
// (local: a range of ports per worker, held until Close, so another suite
// started at the same moment takes others).
func New(c Config) (*Suite, error) {
	if c.Parallel == 0 {
		c.Parallel = 1
	}
	switch {
	case c.Parallel < 1:
		return nil, fmt.Errorf("--parallel %d: want at least 1", c.Parallel)
	case c.Runtime != "docker" && c.Runtime != "local" && c.Runtime != "sim":
		return nil, fmt.Errorf("--runtime %q: want docker, local or sim", c.Runtime)
	case c.Runtime != "docker" && (c.Image != "" || c.Binary != ""):
		return nil, errors.New("--binary and --image are for --runtime docker")
	}
	if c.Log == nil {
		c.Log = slog.New(slog.DiscardHandler)
	}
	s := &Suite{cfg: c, bases: make([]int, c.Parallel), release: func() {}}
	if c.Runtime == "local" {
		bases, release, err := ReservePortRanges(c.BasePort, c.Parallel)
		if err != nil {
			return nil, fmt.Errorf("--parallel %d: %w", c.Parallel, err)
		}
		s.bases, s.release = bases, release
	}
	return s, nil
}

// Close releases what New reserved.
func (s *Suite) Close() { s.release() }

// Result is what a suite's runs came to.
type Result struct {
	// Runs and their JUnit entries, in the jobs' order (a job's tries one
	// after another), whatever order they ended in.
	Runs  []Run
	JUnit []report.Run
	// ByJob holds each job's runs (its tries), by the job's index.
	ByJob [][]Run
	// Exit is the suite's exit status: the worst of its runs' (run.Worse).
	Exit int
	Took time.Duration
	// Coverage is what the runs exercised, by scenario (each run's
	// coverage.json; a run without one adds nothing).
	Coverage *coverage.Suite
}

// Run runs jobs, up to Parallel at once, until done or ctx ends.
func (s *Suite) Run(ctx context.Context, jobs []Job) Result {
	started := time.Now()
	// Each job's runs land in its slot, so the results keep the jobs'
	// order whatever order the runs end in.
	slots := make([][]tried, len(jobs))
	var mu sync.Mutex // Progress
	next := make(chan int)
	var wg sync.WaitGroup
	for w := range min(s.cfg.Parallel, max(len(jobs), 1)) {
		basePort := s.bases[w]
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				for _, e := range s.runJob(ctx, jobs[i], basePort) {
					slots[i] = append(slots[i], e)
					if s.cfg.Progress != nil {
						mu.Lock()
						s.cfg.Progress(e.r)
						mu.Unlock()
					}
				}
			}
		}()
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	res := Result{Exit: run.ExitValid, Took: time.Since(started), ByJob: make([][]Run, len(jobs)), Coverage: coverage.NewSuite()}
	for i, es := range slots {
		for _, e := range es {
			if e.r.Dir != "" {
				if c, err := coverage.Read(filepath.Join(e.r.Dir, coverage.File)); err == nil {
					res.Coverage.Add(e.r.Label(), c)
				}
			}
			res.ByJob[i] = append(res.ByJob[i], e.r)
			res.Runs = append(res.Runs, e.r)
			res.JUnit = append(res.JUnit, e.jr)
			res.Exit = run.Worse(res.Exit, e.exit)
		}
	}
	return res
}

// tried is one run of a job.
type tried struct {
	r    Run
	jr   report.Run
	exit int
}

// runJob runs j: once, or with a bug that needs a race, until caught or
// out of tries (a missed try followed by another fails nothing: it is a
// skipped JUnit case).
func (s *Suite) runJob(ctx context.Context, j Job, basePort int) []tried {
	tries := 1
	if j.Bug != nil {
		tries = j.Bug.MaxTries()
	}
	var out []tried
	for try := range tries {
		if ctx.Err() != nil {
			break
		}
		r := Run{Scenario: j.Scenario.Name, Seed: j.Seed}
		if j.Bug != nil {
			r.Seed = j.Bug.TrySeed(j.Seed, try)
			r.Bug, r.Checker = j.Bug.Name, j.Bug.Checker
			if tries > 1 {
				r.Try, r.Tries = try+1, tries
			}
		}
		jr, exit := s.runOne(ctx, j, &r, basePort)
		again := j.Bug != nil && !r.Caught && r.Error == "" && r.Skipped == "" && try+1 < tries
		if again {
			jr.Skipped = fmt.Sprintf("%s not caught at try %d of %d (it needs a race the system may win): tried again with seed %d",
				j.Bug.Name, try+1, tries, j.Bug.TrySeed(j.Seed, try+1))
			exit = run.ExitValid
		}
		out = append(out, tried{r, jr, exit})
		if !again {
			break
		}
	}
	return out
}

// runOne runs one seed of j into r and returns its JUnit entry and its
// exit status.
func (s *Suite) runOne(ctx context.Context, j Job, r *Run, basePort int) (report.Run, int) {
	c := s.cfg
	o := j.Scenario.Options(r.Seed, c.Runtime, j.Bug)
	o.NodeArgs = append(o.NodeArgs, c.NodeArgs...)
	o.Image = c.Image
	jr := report.Run{Input: report.Input{Test: fmt.Sprintf("%s seed %d", o.Name, r.Seed), Started: time.Now().UTC(), Verdict: checker.Unknown}}
	if opts, err := json.Marshal(o); err == nil {
		jr.Options = opts // what was asked for, even of a run that cannot start
	}
	skip := func(why string) (report.Run, int) {
		r.Skipped, r.Verdict = why, checker.Unknown
		jr.Skipped = why
		return jr, run.ExitValid
	}
	if err := j.Scenario.RunsOn(c.Runtime); err != nil {
		return skip(err.Error())
	}
	fail := func(err error) (report.Run, int) {
		r.Error = err.Error()
		r.Verdict = checker.Unknown
		jr.Checks = []checker.Result{{Checker: "run", Verdict: checker.Unknown, Summary: "could not run: " + err.Error()}}
		return jr, run.ExitCannotRun
	}
	w, err := workloads.Named(o.Workload)
	if err != nil {
		return fail(err)
	}
	rt, err := run.NewRuntime(o, run.RuntimeConfig{Binary: c.Binary, BasePort: basePort, LocalBinary: c.LocalBinary, Log: c.Log})
	if err != nil {
		if c.Runtime == "sim" && errors.Is(err, run.ErrUnsupported) {
			// The simulation covers part of the catalogue so far: what
			// it cannot run is skipped, saying why.
			return skip(err.Error())
		}
		return fail(err)
	}
	t := &run.Test{Options: o, Runtime: rt, Workload: w, Log: c.Log}
	res, err := t.Run(ctx, c.Results)
	r.Dir, r.Duration = res.Dir, res.Duration
	jr.Dir, jr.Duration, jr.Summary = res.Dir, res.Duration, res.Summary
	if opts, rerr := os.ReadFile(filepath.Join(res.Dir, report.TestFile)); rerr == nil && json.Valid(opts) {
		jr.Options = opts // as the run stored it: with its run id and versions
	}
	if err != nil {
		if c.Image != "" && errors.Is(err, run.ErrUnsupported) {
			// Another implementation need not offer every capability;
			// the reference node must (a refusal there is a catalogue
			// bug, so it fails the suite).
			return skip(err.Error())
		}
		return fail(err)
	}
	r.Verdict = res.Verdict
	for _, ch := range res.Checks {
		if ch.Verdict == checker.Invalid {
			r.Invalid = append(r.Invalid, ch.Checker)
		}
	}
	if j.Bug == nil {
		jr.Verdict, jr.Checks = res.Verdict, res.Checks
		return jr, run.ExitFor(res.Verdict)
	}
	// With the bug on, the run's test is whether the bug's checker caught
	// it; the other checkers' verdicts are listed as evidence.
	b := j.Bug
	by, caught, _ := checker.Caught(res.Checks, b.Checker)
	r.Caught = caught
	verdict := checker.Result{Checker: "catches " + b.Name, Verdict: checker.Invalid,
		Summary: fmt.Sprintf("%s did not say invalid with %s on", b.Checker, b.Name)}
	if caught {
		verdict.Verdict = checker.Valid
		verdict.Summary = fmt.Sprintf("%s caught %s: %s", b.Checker, b.Name, by.Summary)
	}
	for _, ch := range res.Checks {
		verdict.Evidence = append(verdict.Evidence, fmt.Sprintf("%s: %s: %s", ch.Checker, ch.Verdict, ch.Summary))
	}
	jr.Verdict, jr.Checks = verdict.Verdict, []checker.Result{verdict}
	if caught {
		return jr, run.ExitValid
	}
	return jr, run.ExitInvalid
}

// Label names the run's scenario, with its bug if one was on.
func (r Run) Label() string {
	if r.Bug != "" {
		return r.Scenario + " with " + r.Bug
	}
	return r.Scenario
}

// Run is one run of a suite, as summary.json lists it.
type Run struct {
	Scenario string `json:"scenario"`
	Seed     int64  `json:"seed"`
	// Bug is the deliberate bug switched on ("": the correct node), and
	// Checker the checker that must catch it.
	Bug     string          `json:"bug,omitempty"`
	Checker string          `json:"checker,omitempty"`
	Verdict checker.Verdict `json:"verdict"`
	// Caught: with a bug on, its checker said invalid.
	Caught   bool          `json:"caught,omitempty"`
	Skipped  string        `json:"skipped,omitempty"`
	Error    string        `json:"error,omitempty"`
	Dir      string        `json:"dir,omitempty"`
	Duration time.Duration `json:"duration_ns"`
	// Invalid names the checkers that said invalid.
	Invalid []string `json:"invalid,omitempty"`
	// Try of Tries: a bug that needs a race (scenario.Bug.Tries) is run on
	// further seeds until caught; a try that did not catch it, followed by
	// another, fails nothing.
	Try   int `json:"try,omitempty"`
	Tries int `json:"tries,omitempty"`
}

// Outcome says what the run came to, in a few words: its verdict (with
// the checkers that said invalid), whether it caught its bug, or why it
// did not run.
func (r Run) Outcome() string {
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
	case len(r.Invalid) > 0:
		what += " (" + strings.Join(r.Invalid, ", ") + ")"
	}
	if r.Tries > 1 {
		what += fmt.Sprintf(" (try %d of %d)", r.Try, r.Tries)
	}
	return what
}

// Line is the run's line in a suite's output.
func (r Run) Line() string {
	dir := ""
	if r.Dir != "" {
		dir = "  " + r.Dir
	}
	return fmt.Sprintf("%-32s seed %-4d %-8s %s%s", r.Scenario, r.Seed, r.Duration.Round(time.Second), r.Outcome(), dir)
}
