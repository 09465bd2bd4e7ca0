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
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/impl/node"
)

func newDetectCmd() *cobra.Command {
	var (
		seeds    int
		first    int64
		only     string
		runtime  string
		results  string
		basePort int
		binary   string
	)
	cmd := &cobra.Command{
		Use:   "detect",
		Short: "Run the detection matrix: every deliberate bug must be caught, the correct node never accused",
		Long: `Run the detection matrix (docs/detection.md): for each deliberate bug of the
reference node, the fault schedule that exposes it, over --seeds seeds. Each
seed runs twice under the same schedule: with the bug on, where the case's
checker must say invalid, and on the correct node, where no checker may say
invalid. Time to detection is read off the history: the shortest prefix of
the run on which the checker already says invalid.

Prints the table and writes it, with every run's directory, to
<results>/detect/<time>/matrix.md and matrix.json. Exit status 1 if a case
caught its bug in no seed or accused the correct node in any.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seeds < 1 {
				return &exitError{exitCannotRun, fmt.Errorf("--seeds %d: want at least 1", seeds)}
			}
			cases := detect.Cases()
			if only != "" {
				var picked []detect.Case
				for _, w := range strings.Split(only, ",") {
					w = strings.TrimSpace(w)
					found := false
					for _, c := range cases {
						if c.Name() == w || c.Bug == w {
							picked, found = append(picked, c), true
						}
					}
					if !found {
						return &exitError{exitCannotRun, fmt.Errorf("--case %q: no case %q; known: %v", only, w, bugsOf(cases))}
					}
				}
				cases = picked
			}
			logger, err := newLogger("warn", "text")
			if err != nil {
				return err
			}
			if _, err := newRuntime(run.Options{Runtime: runtime}, binary, basePort, logger); err != nil {
				return &exitError{exitCannotRun, err}
			}
			rt := func(args []string) run.Runtime {
				r, _ := newRuntime(run.Options{Runtime: runtime, NodeArgs: args}, binary, basePort, logger)
				return r
			}
			opts := detect.Options{Runtime: rt, Results: results, Log: logger,
				Progress: func(line string) { fmt.Fprintln(cmd.ErrOrStderr(), line) }}
			for i := range seeds {
				opts.Seeds = append(opts.Seeds, first+int64(i))
			}
			var outs []detect.Outcome
			failed := false
			var skipped []string
			for _, c := range cases {
				if c.Docker && runtime != "docker" {
					skipped = append(skipped, c.Name())
					continue
				}
				o, err := detect.RunCase(cmd.Context(), c, opts)
				if err != nil {
					return &exitError{exitCannotRun, err}
				}
				outs = append(outs, o)
				failed = failed || o.Detected() == 0 || o.FalseAlarms() > 0
			}
			table := detect.Markdown(outs)
			fmt.Fprint(cmd.OutOrStdout(), table)
			if len(skipped) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "\ncases that need --runtime docker, skipped: %s\n", strings.Join(skipped, ", "))
			}
			if missing := detect.Missing(node.KnownBugs()); len(missing) > 0 {
				fmt.Fprintf(cmd.OutOrStdout(), "\nbugs with no case yet: %s\n", strings.Join(missing, ", "))
			}
			dir := filepath.Join(results, "detect", time.Now().UTC().Format("20060102T150405Z"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
			b, _ := json.MarshalIndent(outs, "", "  ")
			if err := errors.Join(os.WriteFile(filepath.Join(dir, "matrix.json"), b, 0o644),
				os.WriteFile(filepath.Join(dir, "matrix.md"), []byte(table), 0o644)); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "matrix: %s\n", dir)
			if failed {
				return &exitError{exitInvalid, errors.New("a bug went undetected in every seed, or the correct node was accused")}
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&seeds, "seeds", 5, "seeds per case")
	f.Int64Var(&first, "seed", 1, "first seed")
	f.StringVar(&only, "case", "", "only these cases (comma-separated: a bug name takes all its cases, bug/variant one)")
	f.StringVar(&runtime, "runtime", "local", "local or docker")
	f.StringVar(&results, "results", "results", "results root folder")
	f.IntVar(&basePort, "base-port", 17400, "local: journal port; node i uses base+i and base+100+i")
	f.StringVar(&binary, "binary", "", "docker: static shardtest binary for the node image")
	return cmd
}

func bugsOf(cs []detect.Case) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.Name())
	}
	return out
}
