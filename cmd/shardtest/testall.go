package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/scenario"
	"github.com/shardtest/shardtest/harness/suite"
)

func newTestAllCmd() *cobra.Command {
	var (
		filter    string
		smoke     bool
		withBugs  bool
		testCount int
		seed      int64
		shard     string
		timings   string
		cfg       suite.Config
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

--with-bugs runs instead each deliberate bug of the reference node that a
scenario names (its detection cases: shardtest list scenarios) with that bug
switched on: a run passes when the bug's checker says invalid, i.e. the bug
was caught. A bug that does damage only when the system loses a race is
tried on further seeds (seed+1000, ...), up to its number of tries, until
caught; a missed try followed by another is a skipped test case.

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
			if testCount < 1 {
				return cannotRun(fmt.Errorf("--test-count %d: want at least 1", testCount))
			}
			if withBugs && cfg.Image != "" {
				return cannotRun(errors.New("--with-bugs switches on the reference node's deliberate bugs: not with --image"))
			}
			scs, err := scenario.Select(filter, smoke)
			if err != nil {
				return cannotRun(err)
			}
			if withBugs && len(scenario.Cases(scs)) == 0 {
				return cannotRun(fmt.Errorf("--with-bugs: none of %s names a deliberate bug", strings.Join(scenario.Names(scs), ", ")))
			}
			// --timings is read (and refused) even without --shard: a
			// bad file is bad input whether or not it is used.
			measured := map[string]time.Duration{}
			if timings != "" {
				if measured, err = suite.ReadTimings(timings); err != nil {
					return cannotRun(err)
				}
			}
			jobs := suite.Jobs(scs, withBugs, seed, testCount)
			if shard != "" {
				if jobs, err = shardJobs(jobs, shard, measured); err != nil {
					return cannotRun(err)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "shard %s: %d of the suite's runs\n", shard, len(jobs))
			}
			if cfg.Log, err = newLogger("info", "text"); err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			cfg.Progress = func(r suite.Run) { fmt.Fprintln(out, r.Line()) }
			s, err := suite.New(cfg)
			if err != nil {
				return cannotRun(err)
			}
			defer s.Close()
			started := time.Now()
			dir := filepath.Join(cfg.Results, "test-all", started.UTC().Format("20060102T150405Z"))
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return cannotRun(fmt.Errorf("results directory: %w", err))
			}
			res := s.Run(cmd.Context(), jobs)
			if err := suite.Write(dir, res); err != nil {
				return cannotRun(err)
			}
			if res.Coverage != nil && len(res.Coverage.Runs) > 0 {
				fmt.Fprintln(out, res.Coverage.Summary().Line())
			}
			fmt.Fprintf(out, "%s in %s\nsummary: %s\njunit: %s\n", suite.Count(res.Runs), res.Took.Round(time.Second),
				filepath.Join(dir, suite.SummaryMarkdownFile), filepath.Join(dir, report.JUnitFile))
			if cmd.Context().Err() != nil {
				return cannotRun(fmt.Errorf("interrupted: %w", cmd.Context().Err()))
			}
			return verdictError(res.Exit, "suite: "+suite.Explain(res.Exit, withBugs))
		},
	}
	f := cmd.Flags()
	f.StringVar(&filter, "scenario", "", "only these scenarios, comma-separated (default: all)")
	f.BoolVar(&smoke, "smoke", false, "only the smoke subset (the quick scenarios CI runs on every change)")
	f.BoolVar(&withBugs, "with-bugs", false, "run each scenario's deliberate bugs switched on; a run passes when the bug is caught")
	f.IntVar(&testCount, "test-count", 1, "seeds per scenario: --seed, --seed+1, ...")
	f.Int64Var(&seed, "seed", 1, "first seed")
	f.StringVar(&shard, "shard", "", "run only part K of N of the suite's runs (K/N), split the same way in every job")
	f.StringVar(&timings, "timings", "", "summary.json of an earlier suite: its median run times balance --shard")
	suiteFlags(cmd, &cfg, "docker")
	return cmd
}

// suiteFlags are the flags of the commands that run suites (test-all,
// detect): where and how their runs are made.
func suiteFlags(cmd *cobra.Command, cfg *suite.Config, runtime string) {
	f := cmd.Flags()
	f.IntVar(&cfg.Parallel, "parallel", 1, "run up to this many runs at once (each its own cluster; local: each worker its own range of 200 ports from --base-port)")
	f.StringVar(&cfg.Runtime, "runtime", runtime, "where nodes run: docker, local or sim (the reference node in deterministic simulation)")
	f.StringVar(&cfg.Results, "results", "results", "results root folder")
	f.StringVar(&cfg.Binary, "binary", "", "docker: static shardtest binary for the reference image (the journal's, and the nodes' without --image)")
	f.StringVar(&cfg.Image, "image", "", "docker: run the nodes from this image, any implementation of docs/protocol.md (default: the reference node); scenarios it cannot take are skipped")
	f.IntVar(&cfg.BasePort, "base-port", 17400, "local: journal port; node i uses base+i and base+100+i")
	f.StringArrayVar(&cfg.NodeArgs, "node-arg", nil, "extra flag for every node, repeatable")
}

// shardJobs keeps part K of N (--shard) of jobs, balanced by each
// scenario's median time measured (--timings), else its expected time.
func shardJobs(jobs []suite.Job, shard string, measured map[string]time.Duration) ([]suite.Job, error) {
	k, n, err := scenario.ParseShard(shard)
	if err != nil {
		return nil, err
	}
	pairs := make([]scenario.Pair, len(jobs))
	index := map[scenario.Pair]int{}
	for i, j := range jobs {
		w, ok := measured[j.Scenario.Name]
		if !ok {
			w = j.Scenario.Expected()
		}
		pairs[i] = j.Pair(w)
		index[pairs[i]] = i
	}
	var out []suite.Job
	for _, p := range scenario.Shard(pairs, k, n) {
		out = append(out, jobs[index[p]])
	}
	return out, nil
}
