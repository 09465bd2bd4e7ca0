package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/bench"
	"github.com/shardtest/shardtest/harness/run"
)

func newBenchClusterCmd() *cobra.Command {
	var (
		nodes    []int
		repeat   int
		idle     time.Duration
		binary   string
		nodeArgs []string
		results  string
	)
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "how a Docker cluster's start, membership and idle cost grow with its size",
		Long: `For each --nodes size, --repeat times, start a cluster of the reference
node on Docker, one cluster at a time, and measure:

  started   docker.Start: network, journal and node containers created,
            every node reporting itself ready
  ready     from the same start until every node counts every node up and
            reaches every member (what a run waits for before traffic)
  idle      over --idle, with nothing sent by the harness: each node's CPU
            (share of one core), resident memory (cgroup rss) and network
            bytes sent and received per second (all its traffic: membership
            heartbeats and gossip, the journal), and the journal's bytes sent
  detect    the nodes cut into two halves (nftables, both directions): until
            every node finds the other half unreachable
  converge  the cut healed: until every node is converged again

The nodes run with --stable-after 10m so that the resolver downs nobody
during the cut: converge measures the membership view healing, not a side
restarting. Per-node figures are the median node of all repeats. The last
line is each size's ready time, converge time and bytes sent per node
against the first size's, beside the ratio of their node counts.

Exit status: 0 measured; 3 the measurement could not be made.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if repeat < 1 || len(nodes) == 0 {
				return cannotRun(fmt.Errorf("--repeat %d, --nodes %v: want at least one of each", repeat, nodes))
			}
			for _, n := range nodes {
				if n < 2 || n > 200 {
					return cannotRun(fmt.Errorf("--nodes %d: want 2 to 200", n))
				}
			}
			if idle < time.Second {
				return cannotRun(fmt.Errorf("--idle %v: want at least 1s", idle))
			}
			if err := (run.Docker{}).Check(0); err != nil {
				return cannotRun(err)
			}
			logger, err := newLogger("warn", "text")
			if err != nil {
				return err
			}
			if results == "" {
				tmp, err := os.MkdirTemp("", "shardtest-bench-cluster-")
				if err != nil {
					return cannotRun(err)
				}
				defer os.RemoveAll(tmp)
				results = tmp
			}
			var costs []bench.ClusterCost
			for _, n := range nodes {
				for i := range repeat {
					dir := filepath.Join(results, strconv.Itoa(n)+"-nodes-"+strconv.Itoa(i+1))
					c, err := bench.MeasureCluster(cmd.Context(), bench.ClusterOptions{Nodes: n, Idle: idle,
						Binary: binary, NodeArgs: nodeArgs, Dir: dir, Log: logger})
					if err != nil {
						// What was measured before still shows: the size
						// that failed is the figure a reader came for.
						printClusterCosts(cmd, results, costs)
						return cannotRun(fmt.Errorf("%d nodes, repeat %d: %w", n, i+1, err))
					}
					fmt.Fprintf(cmd.ErrOrStderr(), "%d nodes, repeat %d: ready %v, converge %v\n", n, i+1,
						c.Ready.Round(time.Millisecond), c.Converge.Round(time.Millisecond))
					costs = append(costs, c)
				}
			}
			printClusterCosts(cmd, results, costs)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntSliceVar(&nodes, "nodes", []int{3, 5, 9, 15}, "cluster sizes, one cluster at a time")
	f.IntVar(&repeat, "repeat", 3, "clusters of each size")
	f.DurationVar(&idle, "idle", 10*time.Second, "window of the idle rates")
	f.StringVar(&binary, "binary", "", "static shardtest binary for the image (default: this one if static, else built)")
	f.StringArrayVar(&nodeArgs, "node-arg", nil, "extra flag for every node, repeatable")
	f.StringVar(&results, "results", "", "keep the nodes' logs and bench-cluster.json here (default: a temporary folder, removed)")
	return cmd
}

// printClusterCosts prints the table and the ratios of what was measured
// and stores the costs as bench-cluster.json in results.
func printClusterCosts(cmd *cobra.Command, results string, costs []bench.ClusterCost) {
	if len(costs) == 0 {
		return
	}
	out := cmd.OutOrStdout()
	if b, err := json.MarshalIndent(costs, "", "  "); err == nil {
		if err := os.WriteFile(filepath.Join(results, "bench-cluster.json"), b, 0o644); err != nil {
			fmt.Fprintln(cmd.ErrOrStderr(), "storing the costs:", err)
		}
	}
	sums := bench.SummarizeClusters(costs)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "nodes\tstarted\tready (min–max)\tdetect\tconverge (min–max)\tCPU/node\tmemory/node\tsent/node/s (busiest)\treceived/node/s\tjournal sent/s")
	ms := func(d time.Duration) string { return d.Round(time.Millisecond).String() }
	for _, s := range sums {
		fmt.Fprintf(tw, "%d\t%s\t%s (%s–%s)\t%s\t%s (%s–%s)\t%.1f%%\t%.1f MB\t%s (%s)\t%s\t%s\n", s.Nodes, ms(s.Started),
			ms(s.Ready), ms(s.ReadyMin), ms(s.ReadyMax), ms(s.Detect), ms(s.Converge), ms(s.ConvergeMin), ms(s.ConvergeMax),
			100*s.CPU, float64(s.Memory)/1e6, kbps(s.Sent), kbps(s.SentMax), kbps(s.Received), kbps(s.JournalSent))
	}
	tw.Flush()
	fmt.Fprintln(out, bench.ClusterRatios(sums))
}

// kbps formats bytes per second as kB/s.
func kbps(b float64) string { return strconv.FormatFloat(b/1e3, 'f', 1, 64) + " kB/s" }
