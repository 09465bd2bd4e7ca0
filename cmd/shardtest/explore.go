package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/explore"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/harness/shrink"
)

func newExploreCmd() *cobra.Command {
	var (
		e          exploreFlags
		shrinkOpts shrink.Options
	)
	cmd := &cobra.Command{
		Use:   "explore",
		Short: "Search for bugs with fault schedules chosen by what earlier runs exercised",
		Long: `Run a campaign of short runs whose fault schedules are chosen by behaviour
coverage (docs/coverage.md, docs/exploration.md): it keeps a corpus of the
schedules that showed behaviours no earlier run had, picks one by novelty,
mutates it (add, drop, move or stretch a fault; change its target or side,
or the fault itself; splice two), runs the child and keeps it if it showed
something new. A fifth of its runs are fresh random schedules, drawn as
--nemesis draws them. --random runs the baseline instead: every run a fresh
--nemesis draw with a new seed, as shardtest run makes it.

The runs take run's flags (cluster, workload, traffic, --runtime, --image,
--node-arg), or a scenario's (--scenario: its cluster, workload, tuning and
expectations; --bug switches on one of its deliberate bugs); --nemesis names
the faults to draw from (default: the scenario's fault families, or
partition,kill,pause,member), --nemesis-interval their typical hold.

It stops at the first invalid run (or, with --keep-going, at --budget or
--runs), writes the command that reproduces it, and shrinks it (shardtest
shrink, for --shrink-budget). Everything lands in a new folder
<results>/explore/<time>/: runs.jsonl (a line per run), runs/ (every run's
folder), corpus/ (unless --corpus), summary.md, coverage.svg (behaviours
found against time and runs), failure.schedule.json and shrink/.
--corpus DIR keeps the corpus there instead, and resumes from the one it
holds. Interrupted (Ctrl-C, or killed), a campaign keeps its corpus and its
finished runs.

--seed makes the campaign reproducible given the same run outcomes: every
choice comes from one generator, in the order runs end (with --parallel 1,
the order they start).

Exit status: 0 no run was invalid; 1 a run was invalid (a bug found); 3 bad
input, or the runs could not run.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if shrinkOpts.Budget < 0 {
				return cannotRun(fmt.Errorf("--shrink-budget %v: must not be negative", shrinkOpts.Budget))
			}
			cfg, release, err := e.config(cmd, "explore")
			if err != nil {
				return cannotRun(fmt.Errorf("explore: %w", err))
			}
			defer release()
			out := cmd.OutOrStdout()
			cfg.Progress = func(r explore.Record) { fmt.Fprintln(out, recordLine(r)) }
			c, err := explore.New(cfg)
			if err != nil {
				return cannotRun(fmt.Errorf("explore: %w", err))
			}
			o := cfg.Base
			fmt.Fprintf(out, "explore (%s): %s on %d nodes, faults %s, %v main phase; campaign %s\n", c.Mode(), o.Workload, o.Nodes, o.Nemesis, o.TimeLimit, cfg.Dir)
			res, err := c.Run(cmd.Context())
			fmt.Fprintf(out, "%s; %d distinct behaviours; stopped: %s after %s\nsummary: %s\n", explore.Counts(res.Records), res.Behaviours, res.Stopped,
				res.Took.Round(time.Second), filepath.Join(cfg.Dir, explore.SummaryFile))
			if err != nil {
				return cannotRun(err)
			}
			if f := res.FirstInvalid; f != nil {
				fmt.Fprintf(out, "first invalid run: %s (%s)\nreproduce: %s\n", f.Dir, strings.Join(f.Invalid, ", "), res.Reproduce)
				if shrinkOpts.Budget > 0 {
					shrinkFirst(cmd, c, f.Dir, cfg.Dir, e.binary, e.basePort, shrinkOpts)
				}
				return &exitError{exitInvalid, fmt.Errorf("explore: run %d was invalid", f.N)}
			}
			return nil
		},
	}
	e.register(cmd)
	f := cmd.Flags()
	f.BoolVar(&e.cfg.Random, "random", false, "the baseline: every run a fresh --nemesis draw with a new seed, no corpus")
	f.StringVar(&e.cfg.Corpus, "corpus", "", "the corpus folder (default: the campaign's corpus/); one that holds a corpus is resumed")
	f.DurationVar(&shrinkOpts.Budget, "shrink-budget", 10*time.Minute, "shrink the first invalid run for this long (0: do not shrink)")
	return cmd
}

// shrinkFirst shrinks the campaign's first invalid run into its folder.
func shrinkFirst(cmd *cobra.Command, c *explore.Campaign, runDir, dir, binary string, basePort int, o shrink.Options) {
	out := cmd.OutOrStdout()
	logger, _ := newLogger("warn", "text")
	job, err := shrink.Prepare(runDir, "", dir, run.RuntimeConfig{Binary: binary, BasePort: basePort, Log: logger}, time.Now())
	if err != nil {
		fmt.Fprintf(out, "not shrunk: %v\n", err)
		return
	}
	o.Tries, o.Need = 3, 2
	fmt.Fprintf(out, "shrinking it for up to %v (%s invalid; 3 tries a candidate, failing at 2)\n", o.Budget, job.Checker)
	n := 0
	o.Progress = func(cand shrink.Candidate) { n++; fmt.Fprintln(out, cand.Line(n)) }
	r, err := job.Search(cmd.Context(), o)
	fmt.Fprintf(out, "\n%s", job.Runner.Summary(job.Out, r))
	if err != nil {
		fmt.Fprintf(out, "the shrink stopped: %v\n", err)
	}
	if err := c.NoteShrink(job.Out, job.Runner.Summary(job.Out, r)); err != nil {
		fmt.Fprintf(out, "summary.md: %v\n", err)
	}
}

// recordLine is a campaign's run in one line.
func recordLine(r explore.Record) string {
	sched := r.Origin
	if r.Parent != "" {
		sched = fmt.Sprintf("%s of %s (%s)", r.Origin, r.Parent, r.Mutation)
	}
	verdict := string(r.Verdict)
	if r.Error != "" {
		verdict = "could not run: " + r.Error
	} else if len(r.Invalid) > 0 {
		verdict += " (" + strings.Join(r.Invalid, ", ") + ")"
	}
	kept := ""
	if r.Entry != "" {
		kept = ", kept as " + r.Entry
	}
	return fmt.Sprintf("run %-4d %-8s %s: %d behaviours, %d new%s, %d in all  %s", r.N, r.Ended.Round(time.Second), sched, r.Behaviours, r.New, kept, r.Total, verdict)
}
