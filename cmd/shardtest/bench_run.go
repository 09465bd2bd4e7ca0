package main

import (
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/bench"
	"github.com/shardtest/shardtest/harness/local"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/workloads"
)

func newBenchRunCmd() *cobra.Command {
	var (
		o        run.Options
		runs     int
		results  string
		binary   string
		basePort int
	)
	cmd := &cobra.Command{
		Use:   "run",
		Short: "where a run's time goes outside its main phase, against the main phase",
		Long: `Make --runs runs of one test one after another (run's flags; by default a
30 s register run on 3 nodes in Docker, without faults) and read from each
its history's phases where its time went: start to ready (the cluster up,
its capabilities read, the recorders started), the main phase, the recovery
wait (runs with faults), the final read-back, and after it (stopping the
cluster, the checkers, the reports). The yardstick is the main phase, the
only part that drives traffic: the last line is the median run's total
against it. An exploration campaign is many short runs, and pays the rest
for each.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if runs < 1 {
				return cannotRun(fmt.Errorf("--runs %d: want at least 1", runs))
			}
			o.Name = "bench-run"
			w, err := workloads.Named(o.Workload)
			if err != nil {
				return cannotRun(err)
			}
			if err := o.Validate(); err != nil {
				return cannotRun(err)
			}
			logger, err := newLogger("warn", "text")
			if err != nil {
				return err
			}
			rt, err := run.NewRuntime(o, run.RuntimeConfig{Binary: binary, BasePort: basePort, Log: logger})
			if err != nil {
				return cannotRun(err)
			}
			if o.Runtime == "local" {
				release, err := local.ReservePorts(basePort)
				if err != nil {
					return cannotRun(fmt.Errorf("--base-port %d: %w", basePort, err))
				}
				defer release()
			}
			if results == "" {
				tmp, err := os.MkdirTemp("", "shardtest-bench-run-")
				if err != nil {
					return cannotRun(err)
				}
				defer os.RemoveAll(tmp)
				results = tmp
			}
			out := cmd.OutOrStdout()
			var costs []bench.RunCost
			for i := range runs {
				to := o
				to.Seed = o.Seed + int64(i)
				res, err := (&run.Test{Options: to, Runtime: rt, Workload: w, Log: logger}).Run(cmd.Context(), results)
				if err != nil {
					return cannotRun(err)
				}
				c, err := bench.ReadRunCost(res.Dir)
				if err != nil {
					return cannotRun(err)
				}
				fmt.Fprintf(out, "run %d (%s): %s\n", i+1, res.Verdict, costLine(c))
				costs = append(costs, c)
			}
			slices.SortFunc(costs, func(a, b bench.RunCost) int { return int(a.Total - b.Total) })
			m := costs[len(costs)/2]
			fmt.Fprintf(out, "median run of %d: %s\n", runs, costLine(m))
			fmt.Fprintf(out, "run/main phase: %.2fx (ready %.1f s, %d nodes)\n", m.Total.Seconds()/m.Main.Seconds(), m.Ready.Seconds(), o.Nodes)
			return nil
		},
	}
	testFlags(cmd, &o, 10*time.Second)
	f := cmd.Flags()
	f.Int64Var(&o.Seed, "seed", 1, "seed of the first run (the next ones take the next seeds)")
	f.StringVar(&o.Nemesis, "nemesis", "", "faults to inject (none by default)")
	f.IntVar(&runs, "runs", 3, "runs; the median is reported")
	f.StringVar(&results, "results", "", "keep the runs here (default: a temporary folder, removed)")
	f.StringVar(&binary, "binary", "", "docker: static shardtest binary for the reference image (as run's)")
	f.IntVar(&basePort, "base-port", 17400, "local: journal port (as run's)")
	return cmd
}

func costLine(c bench.RunCost) string {
	s := func(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }
	return fmt.Sprintf("%s in all: ready %s, main %s, recovery %s, final %s, after %s", s(c.Total), s(c.Ready), s(c.Main), s(c.Recovery), s(c.Final), s(c.After))
}
