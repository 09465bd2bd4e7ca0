package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

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
			if o.Tries < 1 || o.Need < 1 || o.Need > o.Tries {
				return &exitError{exitCannotRun, fmt.Errorf("shrink: --need %d of --tries %d: want 1 ≤ need ≤ tries", o.Need, o.Tries)}
			}
			logger, err := newLogger("warn", "text")
			if err != nil {
				return err
			}
			job, err := shrink.Prepare(dir, checkerName, results, run.RuntimeConfig{Binary: binary, BasePort: basePort, Log: logger}, time.Now())
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			start, checkerName := job.Start, job.Checker
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "shrinking %s (%s invalid): %d fault steps, %v main phase, %d nodes, %d entities, %d workers; %d tries a candidate, failing at %d\n",
				dir, checkerName, len(start.Steps), start.TimeLimit, start.Nodes, start.Entities, start.Concurrency, o.Tries, o.Need)
			n := 0
			o.Progress = func(c shrink.Candidate) {
				n++
				fmt.Fprintln(out, c.Line(n))
			}
			r, err := job.Search(cmd.Context(), o)
			fmt.Fprintf(out, "\n%s", job.Runner.Summary(job.Out, r))
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
