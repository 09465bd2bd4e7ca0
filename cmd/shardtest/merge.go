package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/suite"
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
			if out == "" {
				out = filepath.Join(results, "test-all", time.Now().UTC().Format("20060102T150405Z")+"-merged")
			}
			s, err := suite.Merge(dirs, out)
			if err != nil {
				return cannotRun(fmt.Errorf("merge: %w", err))
			}
			if s.Coverage != nil {
				fmt.Fprintln(cmd.OutOrStdout(), s.Coverage.Line())
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d parts, %s: %s\nsummary: %s\njunit: %s\n", len(dirs), suite.Count(s.Runs), s.Outcome,
				filepath.Join(out, suite.SummaryMarkdownFile), filepath.Join(out, report.JUnitFile))
			return verdictError(s.ExitStatus, "suite: "+suite.Explain(s.ExitStatus, s.WithBugs))
		},
	}
	cmd.Flags().StringVar(&results, "results", "results", "results root folder")
	cmd.Flags().StringVar(&out, "out", "", "the merged suite's folder (a new one)")
	return cmd
}
