package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/bench"
	"github.com/shardtest/shardtest/harness/local"
)

func newBenchEntitiesCmd() *cobra.Command {
	var (
		o       bench.EntitiesOptions
		results string
	)
	cmd := &cobra.Command{
		Use:   "entities",
		Short: "what idle entities cost a local cluster, and how a live entity's reads fare while they are passivated",
		Long: `Start a local cluster of --nodes reference nodes with --passivate-idle-after
--passivate-after, start --entities register entities with one read each
(--workers at once), and measure:

  start     the time to start them all
  memory    each node's Go memory (live heap and goroutine stacks, from its
            status) once ready and after --rest of idleness: the growth
            over the entities it holds is the bytes per idle entity (the
            node's event log, 100,000 events at most, fills meanwhile and
            is counted in it)
  probe     one client per node reads a live entity back to back all
            along: the p99 of those reads during the rest, and during the
            passivation sweep (from the last poll of n1's status that found
            its entities all there to the first that found them gone)

The last line is the bytes per idle entity and the sweep's probe p99
against the rest's. One run takes about --passivate-after plus half of it.

Exit status: 0 measured; 3 the measurement could not be made.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.Nodes < 1 || o.Entities < 1 || o.Workers < 1 || o.Poll < time.Second {
				return cannotRun(fmt.Errorf("--nodes %d, --entities %d, --workers %d, --poll %v: want at least 1, 1, 1 and 1s", o.Nodes, o.Entities, o.Workers, o.Poll))
			}
			if o.PassivateAfter <= o.Rest {
				return cannotRun(fmt.Errorf("--passivate-after %v must exceed --rest %v (and the time to start the entities)", o.PassivateAfter, o.Rest))
			}
			if err := local.CheckPorts(o.BasePort, o.Nodes); err != nil {
				return cannotRun(err)
			}
			if results == "" {
				tmp, err := os.MkdirTemp("", "shardtest-bench-entities-")
				if err != nil {
					return cannotRun(err)
				}
				defer os.RemoveAll(tmp)
				results = tmp
			} else if err := os.MkdirAll(results, 0o755); err != nil {
				return cannotRun(err)
			}
			o.Dir = results
			o.Progress = func(s string) { fmt.Fprintf(cmd.ErrOrStderr(), "%s %s\n", time.Now().Format("15:04:05"), s) }
			c, err := bench.MeasureEntities(cmd.Context(), o)
			if b, jerr := json.MarshalIndent(c, "", "  "); jerr == nil {
				if werr := os.WriteFile(filepath.Join(results, "bench-entities.json"), b, 0o644); werr != nil {
					fmt.Fprintln(cmd.ErrOrStderr(), "storing the costs:", werr)
				}
			}
			if err != nil {
				return cannotRun(err)
			}
			out := cmd.OutOrStdout()
			mb := func(b uint64) string { return fmt.Sprintf("%.1f MB", float64(b)/1e6) }
			fmt.Fprintf(out, "started %d entities in %v (%.0f/s), %d failed\n", c.Entities, c.Start.Round(time.Second),
				float64(c.Entities)/c.Start.Seconds(), c.StartFailed)
			for i := range c.Hosted {
				fmt.Fprintf(out, "n%d: %d entities, memory %s ready, %s at rest, %d goroutines\n", i+1, c.Hosted[i],
					mb(c.Before[i]), mb(c.Rest[i]), c.Goroutines[i])
			}
			fmt.Fprintf(out, "probe reads at rest: %d, p50 %v, p99 %v\n", c.ProbeRest.N, c.ProbeRest.P50, c.ProbeRest.P99)
			fmt.Fprintf(out, "probe reads in the sweep (%v, from %v after the last start; n1 passivated %d): %d, p50 %v, p99 %v\n",
				c.Sweep.Round(time.Second), c.SweepFrom.Round(time.Second), c.Passivated, c.ProbeSweep.N, c.ProbeSweep.P50, c.ProbeSweep.P99)
			fmt.Fprintf(out, "bytes per idle entity %.0f; probe p99 sweep/rest %.2f×\n", c.BytesPerEntity(),
				float64(c.ProbeSweep.P99)/float64(c.ProbeRest.P99))
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Nodes, "nodes", 3, "nodes of the local cluster")
	f.IntVar(&o.Entities, "entities", 1_000_000, "idle entities to start")
	f.IntVar(&o.Workers, "workers", 32, "clients starting them at once")
	f.DurationVar(&o.PassivateAfter, "passivate-after", 12*time.Minute, "every node's --passivate-idle-after: more than the start of every entity plus --rest")
	f.DurationVar(&o.Rest, "rest", 150*time.Second, "idle time before the memory is read (more than the Go runtime's forced collection every 2 min)")
	f.DurationVar(&o.Poll, "poll", 5*time.Second, "how often n1's status is read to see the sweep")
	f.IntVar(&o.BasePort, "base-port", 31100, "the cluster's ports, as --base-port of the local runtime")
	f.StringVar(&results, "results", "", "keep the nodes' logs and bench-entities.json here (default: a temporary folder, removed)")
	return cmd
}
