package main

import (
	"fmt"
	"os"
	"runtime"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/bench"
	"github.com/shardtest/shardtest/harness/local"
)

func newBenchLoadCmd() *cobra.Command {
	var o bench.LoadOptions
	cmd := &cobra.Command{
		Use:   "load",
		Short: "the operations per second one harness process drives and records, by number of workers, against the same loop recording nothing",
		Long: `Start a local cluster of --nodes reference nodes and, for each --concurrency,
run --repeat times each, alternately, for --window:

  plain     the run's client loop (its register workload's workers, node
            rotation, op timeout and back-off after an error) recording
            nothing: the yardstick
  recorded  the same loop writing every invocation and completion to a
            history file, as a run's main phase does

and print each loop's operations per second, p50 and p99 operation time as
the worker saw it (for recorded, writing its two entries included), the
operations that did not complete ok, and the CPU used, in cores, by this
process (the harness), by the cluster (the nodes and the journal) and by
the whole machine (from /proc/stat: anything else running counts too). The knee, if any, is the first
point where the workers at least doubled and the recorded rate grew by
less than a tenth: where the CPU went then says whether the harness or the
cluster is the limit (the harness and the nodes share this machine's
cores). The last line is the recorded rate against the plain one at each
point, and the p99 the recording added.

Exit status: 0 measured; 3 the measurement could not be made.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Repeat < 1 || o.Window < 100*time.Millisecond || len(o.Concurrency) == 0 || o.Nodes < 1 || o.Entities < 1 {
				return cannotRun(fmt.Errorf("--repeat %d, --window %v, --concurrency %v, --nodes %d, --entities %d: want at least 1, 100ms, one value, 1 and 1",
					o.Repeat, o.Window, o.Concurrency, o.Nodes, o.Entities))
			}
			for _, n := range o.Concurrency {
				if n < 1 || n > 4096 {
					return cannotRun(fmt.Errorf("--concurrency %d: want 1 to 4096", n))
				}
			}
			if err := local.CheckPorts(o.BasePort, o.Nodes); err != nil {
				return cannotRun(err)
			}
			tmp, err := os.MkdirTemp("", "shardtest-bench-load-")
			if err != nil {
				return cannotRun(err)
			}
			defer os.RemoveAll(tmp)
			o.Dir = tmp
			points, err := bench.MeasureLoad(cmd.Context(), o)
			if err != nil {
				return cannotRun(err)
			}
			out := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintf(tw, "workers\tloop\tops/s\tp50\tp99\tnot ok\tharness CPU\tcluster CPU\tmachine CPU (of %d cores)\n", runtime.NumCPU())
			ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond)) }
			for _, p := range points {
				for _, l := range []struct {
					name string
					c    bench.LoopCost
				}{{"plain", p.Plain}, {"recorded", p.Recorded}} {
					fmt.Fprintf(tw, "%d\t%s\t%.0f\t%s\t%s\t%d of %d\t%.2f cores\t%.2f cores\t%.2f cores\n", p.Concurrency, l.name, l.c.Rate(),
						ms(l.c.Latency.P50), ms(l.c.Latency.P99), l.c.NotOK, l.c.Ops, l.c.Harness, l.c.Cluster, l.c.Machine)
				}
			}
			tw.Flush()
			if k := bench.LoadKnee(points); k != "" {
				fmt.Fprintf(out, "knee: %s\n", k)
			} else {
				fmt.Fprintln(out, "knee: none (the recorded rate grew at every point)")
			}
			fmt.Fprintln(out, bench.LoadRatios(points))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&o.Concurrency, "concurrency", []int{1, 2, 4, 8, 16, 32, 64}, "numbers of workers, one point each")
	f.DurationVar(&o.Window, "window", 5*time.Second, "length of each loop")
	f.IntVar(&o.Repeat, "repeat", 3, "alternations of the two loops at each point")
	f.IntVar(&o.Nodes, "nodes", 3, "nodes of the local cluster")
	f.IntVar(&o.Entities, "entities", 1000, "register entities")
	f.IntVar(&o.PerEntity, "per-entity", 0, "most operations in flight on one entity (0: the workload's default)")
	f.Int64Var(&o.Seed, "seed", 1, "seed of the first repeat's operations (each repeat the next)")
	f.IntVar(&o.BasePort, "base-port", 30900, "the cluster's ports, as --base-port of the local runtime")
	return cmd
}
