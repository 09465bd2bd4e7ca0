package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/docker"
	"github.com/shardtest/shardtest/harness/local"
	"github.com/shardtest/shardtest/harness/smoke"
	"github.com/shardtest/shardtest/protocol/client"
)

// dockerStopTimeout bounds copying the logs and removing a Docker cluster,
// which also runs after Ctrl-C.
const dockerStopTimeout = 2 * time.Minute

func newClusterCmd() *cobra.Command {
	var (
		nodes    int
		basePort int
		dir      string
		runSmoke bool
		duration time.Duration
		nodeArgs []string
		rt       string
		binary   string
		keep     bool
	)
	cmd := &cobra.Command{
		Use:   "cluster",
		Short: "Start a cluster (child processes or Docker containers), optionally smoke-test it",
		Long: `Start a cluster of the reference node: a journal server and --nodes nodes.

With --runtime local (the default) each is a child process of this binary on
127.0.0.1, with logs and journal data under --dir. Node i serves HTTP on
--base-port+i and gossips on --base-port+100+i; the journal listens on
--base-port.

With --runtime docker each is a container of the local Docker Engine
(DOCKER_HOST is honoured) on a private bridge network shardtest-<run id>
with a /24 of 172.30.0.0/16: the journal at .2, node i at .10+i. The image
is built FROM scratch out of a static shardtest binary (--binary, default
this executable if it is static, else one built with CGO_ENABLED=0 from
this module's source); nothing is pulled. Each node's HTTP port is
published on 127.0.0.1 with a port the engine picks; the addresses are
printed. Logs are copied into --dir when the cluster stops. Everything is
labelled shardtest.run=<run id>; after a crash, 'shardtest cleanup' removes
the leftovers.

Without --smoke the cluster runs until Ctrl-C and the addresses are printed,
so you can talk to the nodes with curl (docs/protocol.md).

With --smoke it runs a short end-to-end check and exits: clients on every node
take ids from the id-generator singleton while the oldest member leaves
gracefully; the check fails if an id repeats, a client sees ids go backwards,
or the survivors do not agree on a new oldest running the only singleton.

On exit (and on Ctrl-C) the cluster is stopped and, with Docker, removed,
unless --keep (Docker only) leaves it running.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if nodes < 1 || nodes > 50 {
				return fmt.Errorf("--nodes %d: want 1 to 50", nodes)
			}
			if runSmoke && nodes < 2 {
				return errors.New("--smoke needs at least 2 nodes (the oldest leaves)")
			}
			switch rt {
			case "local":
				if keep {
					return errors.New("--keep needs --runtime docker (local nodes are child processes and stop with the harness)")
				}
				if binary != "" {
					return errors.New("--binary needs --runtime docker")
				}
			case "docker":
				if cmd.Flags().Changed("base-port") {
					return errors.New("--base-port is for --runtime local (Docker publishes ports the engine picks)")
				}
			default:
				return fmt.Errorf("--runtime %q: want local or docker", rt)
			}
			if dir == "" {
				dir = filepath.Join("results", "cluster-"+time.Now().UTC().Format("20060102T150405Z"))
			}
			logger, err := newLogger("info", "text")
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			var sn []smoke.Node
			if rt == "local" {
				c, err := local.Start(ctx, local.Options{Nodes: nodes, BasePort: basePort, Dir: dir, NodeArgs: nodeArgs, Logger: logger})
				if err != nil {
					return err
				}
				defer c.Stop()
				fmt.Fprintf(out, "journal  http://%s\n", c.Journal.HTTPAddr)
				for _, p := range c.Nodes {
					fmt.Fprintf(out, "%-8s http://%s  gossip %s  log %s\n", p.Name, p.HTTPAddr, p.GossipAddr, p.LogPath)
					sn = append(sn, smoke.Node{Name: p.Name, Client: client.New(p.HTTPAddr, nil), Exited: p.Exited()})
				}
			} else {
				c, err := docker.Start(ctx, docker.Options{Nodes: nodes, Dir: dir, NodeArgs: nodeArgs, Binary: binary, Logger: logger})
				if err != nil {
					return err
				}
				defer stopDocker(ctx, c, keep, out, logger)
				fmt.Fprintf(out, "run %s  network %s (%s)  image %s\n", c.RunID(), c.Network(), c.Subnet(), c.Image())
				j := c.Journal()
				fmt.Fprintf(out, "journal  http://%s  ip %s  container %.12s\n", j.HTTPAddr, j.IP, j.ContainerID)
				for _, n := range c.Nodes() {
					fmt.Fprintf(out, "%-8s http://%s  ip %s  container %.12s\n", n.Name, n.HTTPAddr, n.IP, n.ContainerID)
					sn = append(sn, smoke.Node{Name: n.Name, Client: client.New(n.HTTPAddr, nil), Exited: n.Exited()})
				}
			}
			if !runSmoke {
				if keep {
					fmt.Fprintln(out, "cluster running; Ctrl-C leaves it running (--keep)")
				} else {
					fmt.Fprintln(out, "cluster running; Ctrl-C stops it")
				}
				<-ctx.Done()
				return nil
			}
			res, err := smoke.Run(ctx, sn, duration, logger)
			if err != nil {
				return err
			}
			fmt.Fprint(out, res.String())
			if !res.Passed() {
				fmt.Fprintf(out, "smoke: FAILED (logs in %s)\n", dir)
				return &exitError{exitInvalid, errors.New("smoke test failed")}
			}
			fmt.Fprintf(out, "smoke: passed (logs in %s)\n", dir)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&nodes, "nodes", 3, "number of nodes")
	f.StringVar(&rt, "runtime", "local", "where the cluster runs: local (child processes) or docker (containers)")
	f.IntVar(&basePort, "base-port", 17400, "local: journal port; node i uses base+i (HTTP) and base+100+i (gossip)")
	f.StringVar(&binary, "binary", "", "docker: static shardtest binary for the image (default: this executable if static, else built with CGO_ENABLED=0)")
	f.BoolVar(&keep, "keep", false, "docker: leave the containers running at exit (remove them later with 'shardtest cleanup --run ID')")
	f.StringVar(&dir, "dir", "", "directory for logs (and, local, journal data) (default results/cluster-<time>)")
	f.BoolVar(&runSmoke, "smoke", false, "run the smoke check, then stop the cluster and exit (non-zero on failure)")
	f.DurationVar(&duration, "duration", 15*time.Second, "how long the smoke check drives traffic")
	f.StringArrayVar(&nodeArgs, "node-arg", nil, "extra flag for every node, repeatable (e.g. --node-arg=--stable-after=2s)")
	return cmd
}

// stopDocker copies the logs and removes the cluster (or, with keep, only
// copies the logs), even after Ctrl-C.
func stopDocker(ctx context.Context, c *docker.Cluster, keep bool, out io.Writer, logger *slog.Logger) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), dockerStopTimeout)
	defer cancel()
	if keep {
		if err := c.CopyLogs(sctx); err != nil {
			logger.Warn("copying logs", "err", err)
		}
		fmt.Fprintf(out, "cluster %s left running (--keep); remove it with: shardtest cleanup --run %s\n", c.RunID(), c.RunID())
		return
	}
	logger.Info("removing the cluster's containers, network and volume", "run", c.RunID())
	if err := c.Stop(sctx); err != nil {
		logger.Error("stopping the cluster (run 'shardtest cleanup --run "+c.RunID()+"')", "err", err)
	}
}
