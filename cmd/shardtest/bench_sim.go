package main

import (
	"fmt"
	"os"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/workloads"
)

func newBenchSimCmd() *cobra.Command {
	var (
		o       run.Options
		nodes   []int
		rates   []float64
		repeat  int
		results string
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "how much faster than real time a simulated run goes, by cluster size and rate",
		Long: `Simulate one test (run's flags; by default a 60 s register run, as fast
as its workers go) for each --nodes and --rate, --repeat times each, and time
the simulation alone (not the checks): the wall time, and the virtual time
it covered against it. The last line is the speed-up of the first
configuration (the median of its repeats): virtual seconds per wall
second. The simulation runs every workload (docs/simulation.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repeat < 1 || len(nodes) == 0 || len(rates) == 0 {
				return cannotRun(fmt.Errorf("--repeat, --nodes and --rate need at least one value each"))
			}
			o.Runtime, o.Name, o.Entities, o.PerEntity = "sim", "bench-sim", 100, 3
			w, err := workloads.Named(o.Workload)
			if err != nil {
				return cannotRun(err)
			}
			if results == "" {
				tmp, err := os.MkdirTemp("", "shardtest-bench-sim-")
				if err != nil {
					return cannotRun(err)
				}
				defer os.RemoveAll(tmp)
				results = tmp
			}
			out := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "nodes\trate\tvirtual\twall (median)\twall (min–max)\tspeed-up")
			first := 0.0
			for _, n := range nodes {
				for _, r := range rates {
					var walls []time.Duration
					for i := range repeat {
						to := o
						to.Nodes, to.Rate, to.Seed = n, r, o.Seed+int64(i)
						dir, err := os.MkdirTemp(results, "run-")
						if err != nil {
							return cannotRun(err)
						}
						start := time.Now()
						if _, err := run.Simulate(cmd.Context(), to, w, dir); err != nil {
							return cannotRun(err)
						}
						walls = append(walls, time.Since(start))
					}
					slices.Sort(walls)
					med := walls[len(walls)/2]
					speed := o.TimeLimit.Seconds() / med.Seconds()
					if first == 0 {
						first = speed
					}
					rate := "as fast as the workers go"
					if r > 0 {
						rate = fmt.Sprintf("%g/s", r)
					}
					fmt.Fprintf(tw, "%d\t%s\t%v\t%v\t%v–%v\t%.1f×\n", n, rate, o.TimeLimit, med.Round(time.Millisecond),
						walls[0].Round(time.Millisecond), walls[len(walls)-1].Round(time.Millisecond), speed)
				}
			}
			tw.Flush()
			fmt.Fprintf(out, "speed-up (virtual / wall time), %d nodes, first rate: %.1f×\n", nodes[0], first)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Workload, "workload", "register", "workload: register, append, idgen or deliver")
	f.IntSliceVar(&nodes, "nodes", []int{3, 5, 9}, "cluster sizes")
	f.Float64SliceVar(&rates, "rate", []float64{0}, "operations per second in total (0: as fast as the workers go)")
	f.IntVar(&o.Concurrency, "concurrency", 6, "client workers")
	f.DurationVar(&o.TimeLimit, "time-limit", time.Minute, "virtual length of each run's main phase")
	f.DurationVar(&o.OpTimeout, "op-timeout", protocol.DefaultOpTimeout, "operation timeout")
	f.StringVar(&o.Nemesis, "nemesis", "", "faults (as run's --nemesis)")
	f.DurationVar(&o.NemesisInterval, "nemesis-interval", 10*time.Second, "time between fault actions")
	f.Int64Var(&o.Seed, "seed", 1, "first seed (each repeat the next)")
	f.IntVar(&repeat, "repeat", 3, "runs of each configuration")
	f.StringVar(&results, "results", "", "keep the runs here (default: a temporary folder, removed)")
	return cmd
}
