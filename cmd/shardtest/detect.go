package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/detect"
	"github.com/shardtest/shardtest/harness/scenario"
	"github.com/shardtest/shardtest/harness/suite"
	"github.com/shardtest/shardtest/impl/node"
)

func newDetectCmd() *cobra.Command {
	var (
		seeds int
		first int64
		only  string
		cfg   suite.Config
	)
	cmd := &cobra.Command{
		Use:   "detect",
		Short: "Run the detection matrix: every deliberate bug must be caught, the correct node never accused",
		Long: `Run the detection matrix (docs/detection.md): every case of the scenario
catalogue (a scenario with one of the reference node's deliberate bugs and
the checker that must catch it: shardtest list scenarios), over --seeds
seeds. Each seed runs twice under the same schedule: with the bug on, where
the case's checker must say invalid (a bug that needs a race is tried on
further seeds, up to its number of tries, as test-all --with-bugs does), and
on the correct node, where no checker may say invalid. Time to detection is
read off the history: the shortest prefix of the run on which the checker
already says invalid.

Prints the table and writes it, with every run's directory, to
<results>/detect/<time>/matrix.md and matrix.json, beside the suite's
summary and JUnit file. Cases that need --runtime docker are skipped on
the local runtime. Exit status 1 if a case caught its bug in no seed or
accused the correct node in any, 3 if a run could not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seeds < 1 {
				return cannotRun(fmt.Errorf("--seeds %d: want at least 1", seeds))
			}
			if cfg.Image != "" {
				return cannotRun(errors.New("--image: detect switches on the reference node's deliberate bugs, so it runs the reference node"))
			}
			cases, err := scenario.SelectCases(scenario.Catalog(), only)
			if err != nil {
				return cannotRun(fmt.Errorf("--case: %w", err))
			}
			if cfg.Log, err = newLogger("warn", "text"); err != nil {
				return err
			}
			cfg.Progress = func(r suite.Run) { fmt.Fprintln(cmd.ErrOrStderr(), r.Line()) }
			s, err := suite.New(cfg)
			if err != nil {
				return cannotRun(err)
			}
			defer s.Close()
			var ss []int64
			for i := range seeds {
				ss = append(ss, first+int64(i))
			}
			dir := filepath.Join(cfg.Results, "detect", time.Now().UTC().Format("20060102T150405Z"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return cannotRun(err)
			}
			outs, res, err := detect.Run(cmd.Context(), s, cases, ss)
			if werr := suite.Write(dir, res); werr != nil && err == nil {
				err = werr
			}
			if err != nil {
				return cannotRun(err)
			}
			table := detect.Markdown(outs)
			out := cmd.OutOrStdout()
			fmt.Fprint(out, table)
			var skipped, failed []string
			couldNot := false
			for _, o := range outs {
				if o.Ran() == 0 {
					skipped = append(skipped, o.Case)
				}
				if o.Failed() {
					failed = append(failed, o.Case)
				}
				for _, sd := range o.Seeds {
					couldNot = couldNot || sd.Error != ""
				}
			}
			if len(skipped) > 0 {
				why := "they need --runtime docker"
				if cfg.Runtime == "sim" {
					why = "not simulated yet: each skipped run says why"
				}
				fmt.Fprintf(out, "\ncases not run (%s): %s\n", why, strings.Join(skipped, ", "))
			}
			if missing := scenario.MissingBugs(scenario.Catalog(), node.KnownBugs()); len(missing) > 0 {
				fmt.Fprintf(out, "\nbugs with no case yet: %s\n", strings.Join(missing, ", "))
			}
			b, _ := json.MarshalIndent(outs, "", "  ")
			if err := errors.Join(os.WriteFile(filepath.Join(dir, "matrix.json"), b, 0o644),
				os.WriteFile(filepath.Join(dir, "matrix.md"), []byte(table), 0o644)); err != nil {
				return cannotRun(err)
			}
			fmt.Fprintf(out, "matrix: %s\n", dir)
			switch {
			case len(failed) > 0:
				return &exitError{exitInvalid, fmt.Errorf("a bug went undetected in every seed, or the correct node was accused: %s", strings.Join(failed, ", "))}
			case couldNot:
				return cannotRun(errors.New("a run could not run (its line above, and summary.json)"))
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&seeds, "seeds", 5, "seeds per case")
	f.Int64Var(&first, "seed", 1, "first seed")
	f.StringVar(&only, "case", "", "only these cases (comma-separated: scenario/bug, or a scenario or bug name for all its cases)")
	suiteFlags(cmd, &cfg, "local")
	return cmd
}
