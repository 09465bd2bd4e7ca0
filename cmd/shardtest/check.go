package main

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/coverage"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/regular"
)

func newCheckCmd() *cobra.Command {
	var jobs int
	cmd := &cobra.Command{
		Use:   "check DIR",
		Short: "Re-run the checkers on a stored run",
		Long: `Re-run the workload's checkers on the history stored in DIR (a run folder,
e.g. results/latest) and print the verdict with its evidence. The verdict and
checks in DIR/results.json are not changed, but the reports are rewritten from
the new results: DIR/index.html (which then says it was re-checked) and
DIR/junit.xml; the checkers' own files (visualizations) and the run's behaviour
coverage (DIR/coverage.json, docs/coverage.md) are written again too.
A check interrupted with Ctrl-C leaves the reports as they were.
DIR is untrusted: it must hold only regular files and folders (DIR itself
may be a link, such as results/latest); a symbolic link, a named pipe, a
device or a socket in it is refused, naming it, before anything is read or
written. Exit status as for run (3: the folder cannot be checked).

--jobs N judges on N goroutines: the checkers read the history beside the
reader, and linearizability checks N entities at once; the results are the
same as with --jobs 1, which does everything on one (docs/performance.md).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir := args[0]
			if _, err := checker.Jobs(jobs); err != nil {
				return cannotRun(fmt.Errorf("--%w", err))
			}
			if os.Getenv("GOGC") == "" {
				// The pass keeps compact state per op for the whole history
				// and makes short-lived garbage decoding it: a heap goal of
				// 1.5x the live state rather than 2x keeps the peak below
				// what the decoded history alone would take (bench check).
				defer debug.SetGCPercent(debug.SetGCPercent(50))
			}
			// A stored run is untrusted, and check writes into it: a
			// folder holding a link or a special file is refused before
			// anything is read or written (internal/regular).
			if err := regular.CheckFolder(dir); err != nil {
				return cannotRun(err)
			}
			o, b, err := run.ReadOptions(dir)
			if err != nil {
				return cannotRun(err)
			}
			// One pass over the history feeds the checkers, the counts and
			// the report's timeline: it is never held whole.
			var counter history.Counter
			analyzed := report.NewAnalyzer()
			fo := checker.FileOptions{Observe: []func(*history.Op){counter.Observe, analyzed.Observe}, Jobs: jobs}
			if isTerminal(cmd.ErrOrStderr()) {
				fo.Progress = progressLine(cmd.ErrOrStderr())
				defer fmt.Fprint(cmd.ErrOrStderr(), "\r\033[K")
			}
			checked, err := run.CheckFile(cmd.Context(), o, dir, fo)
			if err != nil {
				return &exitError{exitCannotRun, err}
			}
			verdict, results, h := checked.Verdict, checked.Checks, checked.History
			s := counter.Summary()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s (history v%d, started %s)\n%d entries: %d invocations, %d ok, %d fail, %d info, %d nemesis, %d left open\n",
				h.Header.Test, h.Header.Version, h.Header.Started.Format(time.RFC3339), analyzed.Entries(), s.Invocations, s.OK, s.Fail, s.Info, s.Nemesis, s.Open)
			if h.Truncated {
				fmt.Fprintln(out, "the history ends with a cut-off line (the harness stopped while writing it)")
			}
			fmt.Fprintf(out, "verdict: %s\n", verdict)
			printChecks(out, results)
			cov := coverage.Summarize(checked.Coverage, nil)
			fmt.Fprintln(out, cov.Line())
			if cmd.Context().Err() == nil {
				// Interrupted checkers say unknown: that must not replace a
				// report of what they found before.
				in := report.Input{Test: o.Name, Started: h.Header.Started, Verdict: verdict, Checks: results,
					Summary: s, History: h, Analyzed: analyzed, Options: b, Rechecked: time.Now(), Coverage: &checked.Coverage}
				if in.Test == "" {
					in.Test = h.Header.Test
				}
				if prev, err := run.ReadResult(dir); err == nil {
					in.Started, in.Duration, in.CoverageSummary = prev.Started, prev.Duration, prev.Coverage
				} else {
					// A run that did not finish: it lasted at least until
					// its last entry.
					in.Duration = analyzed.End()
				}
				// The verdict is the command's answer; a folder that cannot
				// take the reports (read-only artifacts) does not change it.
				// Coverage is the files' to say, so it is written again too
				// (a run of an older harness gets its first).
				if err := errors.Join(coverage.Write(dir, checked.Coverage), report.Write(dir, in)); err != nil {
					fmt.Fprintf(cmd.ErrOrStderr(), "the reports were not rewritten: %v\n", err)
				} else {
					printReports(out, dir)
				}
			}
			if code := run.ExitFor(verdict); code != exitValid {
				return &exitError{code, fmt.Errorf("verdict: %s", verdict)}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&jobs, "jobs", runtime.NumCPU(), "goroutines that judge at once (default: the cores); 1: one, as before")
	return cmd
}
