package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/report"
)

func newMergeCmd() *cobra.Command {
	var results, out string
	cmd := &cobra.Command{
		Use:   "merge SUITE_DIR...",
		Short: "Combine the results of test-all --shard's parts into one suite",
		Long: `Combine test-all suite folders (each with junit.xml and summary.json, as
test-all --shard K/N writes them in <results>/test-all/<time>/) into one:
one JUnit file with every part's test suites, one summary.md and
summary.json, and one index page, in --out (default
<results>/test-all/<time>-merged/). The parts go in the order given.

Nothing is written unless every folder reads as a suite, and all were run
the same way (all with --with-bugs, or none).

Exit status: the worst of the parts' (0 every run valid; 1 a run was
invalid, or with --with-bugs a bug went uncaught; 2 a run was unknown; 3 a
run could not run), or 3 when the folders cannot be merged.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, dirs []string) error {
			var (
				runs     []suiteRun
				junits   [][]byte
				worst    = exitValid
				took     time.Duration
				withBugs bool
			)
			for i, dir := range dirs {
				s, err := readSummary(filepath.Join(dir, "summary.json"))
				if err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("merge: %w", err)}
				}
				if i > 0 && s.WithBugs != withBugs {
					return &exitError{exitCannotRun, fmt.Errorf("merge: %s was run with --with-bugs %v, %s with %v: not parts of one suite", dirs[0], withBugs, dir, s.WithBugs)}
				}
				withBugs = s.WithBugs
				j, err := os.ReadFile(filepath.Join(dir, report.JUnitFile))
				if err != nil {
					return &exitError{exitCannotRun, fmt.Errorf("merge: %w", err)}
				}
				runs = append(runs, s.Runs...)
				junits = append(junits, j)
				worst = worse(worst, s.ExitStatus)
				took += s.Took
			}
			var jb bytes.Buffer
			readers := make([]io.Reader, len(junits))
			for i, j := range junits {
				readers[i] = bytes.NewReader(j)
			}
			if err := report.MergeJUnit(&jb, readers...); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("merge: %w", err)}
			}
			if out == "" {
				out = filepath.Join(results, "test-all", time.Now().UTC().Format("20060102T150405Z")+"-merged")
			}
			if _, err := os.Stat(out); err == nil {
				return &exitError{exitCannotRun, fmt.Errorf("merge: --out %s exists: give a new folder", out)}
			} else if !errors.Is(err, os.ErrNotExist) {
				return &exitError{exitCannotRun, fmt.Errorf("merge: %w", err)}
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("merge: %w", err)}
			}
			if err := writeSuite(out, runs, jb.Bytes(), withBugs, worst, took); err != nil {
				return &exitError{exitCannotRun, fmt.Errorf("merge: %w", err)}
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d parts, %s: %s\nsummary: %s\njunit: %s\n", len(dirs), runCount(runs), suiteOutcome(worst, withBugs),
				filepath.Join(out, "summary.md"), filepath.Join(out, report.JUnitFile))
			if worst != exitValid {
				return &exitError{worst, fmt.Errorf("suite: %s", suiteOutcome(worst, withBugs))}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&results, "results", "results", "results root folder")
	cmd.Flags().StringVar(&out, "out", "", "the merged suite's folder (a new one)")
	return cmd
}
