package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/local"
	"github.com/shardtest/shardtest/harness/nodeclient"
	"github.com/shardtest/shardtest/harness/smoke"
)

func newClusterCmd() *cobra.Command {
	var (
		nodes    int
		basePort int
		dir      string
		runSmoke bool
		duration time.Duration
		nodeArgs []string
	)
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Start a local cluster (journal + nodes as child processes), optionally smoke-test it",
		Long: `Start a local cluster of the reference node on 127.0.0.1: a journal server
and --nodes nodes, each a child process of this binary, with logs and journal
data under --dir.

Without --smoke the cluster runs until Ctrl-C and the addresses are printed,
so you can talk to the nodes with curl (docs/protocol.md).

With --smoke it runs a short end-to-end check and exits: clients on every node
take ids from the id-generator singleton while the oldest member leaves
gracefully; the check fails if an id repeats, a client sees ids go backwards,
or the survivors do not agree on a new oldest running the only singleton.

Node i serves HTTP on --base-port+i and gossips on --base-port+100+i; the
journal listens on --base-port.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if nodes < 1 || nodes > 50 {
				return fmt.Errorf("--nodes %d: want 1 to 50", nodes)
			}
			if runSmoke && nodes < 2 {
				return errors.New("--smoke needs at least 2 nodes (the oldest leaves)")
			}
			if dir == "" {
				dir = filepath.Join("results", "cluster-"+time.Now().UTC().Format("20060102T150405Z"))
			}
			logger, err := newLogger("info", "text")
			if err != nil {
				return err
			}
			c, err := local.Start(ctx, local.Options{Nodes: nodes, BasePort: basePort, Dir: dir, NodeArgs: nodeArgs, Logger: logger})
			if err != nil {
				return err
			}
			defer c.Stop()
			fmt.Fprintf(cmd.OutOrStdout(), "journal  http://%s\n", c.Journal.HTTPAddr)
			for _, p := range c.Nodes {
				fmt.Fprintf(cmd.OutOrStdout(), "%-8s http://%s  gossip %s  log %s\n", p.Name, p.HTTPAddr, p.GossipAddr, p.LogPath)
			}
			if !runSmoke {
				fmt.Fprintln(cmd.OutOrStdout(), "cluster running; Ctrl-C stops it")
				<-ctx.Done()
				return nil
			}
			var sn []smoke.Node
			for _, p := range c.Nodes {
				sn = append(sn, smoke.Node{Name: p.Name, Client: nodeclient.New(p.HTTPAddr, nil), Exited: p.Exited()})
			}
			res, err := smoke.Run(ctx, sn, duration, logger)
			if err != nil {
				return err
			}
			fmt.Fprint(cmd.OutOrStdout(), res.String())
			if !res.Passed() {
				fmt.Fprintf(cmd.OutOrStdout(), "smoke: FAILED (logs in %s)\n", dir)
				return errors.New("smoke test failed")
			}
			fmt.Fprintf(cmd.OutOrStdout(), "smoke: passed (logs in %s)\n", dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "number of nodes")
	f.IntVar(&basePort, "base-port", 17400, "journal port; node i uses base+i (HTTP) and base+100+i (gossip)")
	f.StringVar(&dir, "dir", "", "directory for logs and journal data (default results/cluster-<time>)")
	f.BoolVar(&runSmoke, "smoke", false, "run the smoke check, then stop the cluster and exit (non-zero on failure)")
	f.DurationVar(&duration, "duration", 15*time.Second, "how long the smoke check drives traffic")
	f.StringArrayVar(&nodeArgs, "node-arg", nil, "extra flag for every node, repeatable (e.g. --node-arg=--stable-after=2s)")
	return cmd
}
