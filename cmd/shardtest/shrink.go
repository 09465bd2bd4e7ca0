package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/harness/shrink"
)

func newShrinkCmd() *cobra.Command {
	var (
		results, checkerName, binary string
		basePort                     int
		o                            shrink.Options
	)
	cmd := &cobra.Command{
		Use:   "shrink RUN_DIR",
		Short: "Search for the smallest test that still fails like a stored invalid run",
		Long: `Take a stored invalid run (its test.json and results.json) and search for
the smallest test that still fails the same checker: fewer fault steps
(delta debugging over the run's fault schedule, each inject with its heal,
their times and targets kept), shorter holds and main phase, fewer entities
and workers, a lower rate, fewer nodes where the faults allow. Each candidate
is run again --tries times on the run's runtime, image and node arguments,
and counts as failing when --need of them fail (failures are probabilistic);
the search stops at --budget with the smallest failing test so far.

A line per candidate says what was removed, its tries and its failures. The
result lands in <results>/shrink/<time>/: schedule.json (the minimal fault
schedule, docs/schedules.md), shrink.json (every candidate), summary.md,
index.html linking every try's run, and the command that reproduces it:
  shardtest run --schedule .../schedule.json --seed N ...

Exit status: 0 a failing test was found (the original, if nothing smaller
fails); 2 the run did not fail again in --need of --tries; 3 the run cannot be
shrunk (not invalid, unreadable, or its runtime cannot start).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			orig, _, err := run.ReadOptions(dir)
			if err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %w", err)}
			}
			res, err := run.ReadResult(dir)
			if err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %w", err)}
			}
			if checkerName == "" {
				for _, c := range res.Checks {
					if c.Verdict == checker.Invalid {
						checkerName = c.Checker
						break
					}
				}
			}
			if checkerName == "" {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %s is %s: no checker said invalid, nothing to shrink", dir, res.Verdict)}
			}
			if _, ok := checker.Lookup(checkerName); !ok {
				return cannotRun(fmt.Errorf("shrink: --checker %q: no such checker (shardtest list checkers: %s)", checkerName, strings.Join(checker.Names(), ", ")))
			}
			if _, ok := orig.Checker(checkerName); !ok {
				return cannotRun(fmt.Errorf("shrink: --checker %s does not judge the run in %s (a %s run)", checkerName, dir, orig.Workload))
			}
			if o.Tries < 1 || o.Need < 1 || o.Need > o.Tries {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: --need %d of --tries %d: want 1 ≤ need ≤ tries", o.Need, o.Tries)}
			}
			logger, err := newLogger("warn", "text")
			if err != nil {
				return err
			}
			rt, err := run.NewRuntime(orig, run.RuntimeConfig{Binary: binary, BasePort: basePort, Log: logger})
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			start, err := shrink.From(orig, rt)
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			outDir := filepath.Join(results, "shrink", time.Now().UTC().Format("20060102T150405Z"))
			runner := &shrink.Runs{Original: orig, Checker: checkerName, Runtime: rt, Results: filepath.Join(outDir, "runs"), Log: logger}
			// What the first try would refuse (its ports taken, its faults
			// unfit) is refused before the shrink's folder exists.
			if err := (&run.Test{Options: runner.Options(start), Runtime: rt}).Precheck(); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %w", err)}
			}
			if err := os.MkdirAll(outDir, 0o755); err != nil {
				return &exitError{exitCannotRun, err}
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "shrinking %s (%s invalid): %d fault steps, %v main phase, %d nodes, %d entities, %d workers; %d tries a candidate, failing at %d\n",
				dir, checkerName, len(start.Steps), start.TimeLimit, start.Nodes, start.Entities, start.Concurrency, o.Tries, o.Need)
			n := 0
			o.Progress = func(c shrink.Candidate) {
				n++
				verdict := "passes"
				if c.Failing {
					verdict = "fails: kept"
				}
				could := ""
				if len(c.Errors) > 0 {
					could = fmt.Sprintf(" (%d could not run: %s)", len(c.Errors), c.Errors[0])
				}
				fmt.Fprintf(out, "candidate %d: %s: %d of %d tries failed%s: %s\n", n, c.What, c.Failures, c.Tries, could, verdict)
			}
			r, err := shrink.Shrink(cmd.Context(), start, runner, o)
			if werr := runner.Write(outDir, dir, r); werr != nil {
				return &exitError{exitCannotRun, werr}
			}
			fmt.Fprintf(out, "\n%s", runner.Summary(outDir, r))
			switch {
			case err != nil:
				return &exitError{exitCannotRun, fmt.Errorf("shrink: %w", err)}
			case !r.Reproduced:
				return &exitError{exitUnknown, fmt.Errorf("shrink: %s did not fail again (%s of %d tries)", dir, r.Rate(), o.Tries)}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&results, "results", "results", "results root folder")
	f.StringVar(&checkerName, "checker", "", "the checker that must say invalid (default: the run's first invalid one)")
	f.IntVar(&o.Tries, "tries", 3, "runs of each candidate")
	f.IntVar(&o.Need, "need", 2, "failing runs (of --tries) for a candidate to count as failing")
	f.DurationVar(&o.Budget, "budget", time.Hour, "stop the search after this long, with the smallest failing test so far")
	f.StringVar(&binary, "binary", "", "docker: static shardtest binary for the reference image (as run's)")
	f.IntVar(&basePort, "base-port", 17400, "local: journal port of the tries' clusters (as run's)")
	return cmd
}
