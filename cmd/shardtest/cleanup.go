package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/docker"
)

func newCleanupCmd() *cobra.Command {
	var runID string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove the Docker containers, networks and volumes the harness left behind",
		Long: `Remove every Docker container, network and volume labelled
shardtest.managed=true (with --run, only those labelled shardtest.run=ID):
the leftovers of a 'shardtest cluster --runtime docker' that was killed or
run with --keep. Containers are killed first. Images are kept (they are a
cache keyed by the binary's hash).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Finish removing even after Ctrl-C, within a bound.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 2*time.Minute)
			defer cancel()
			cli, err := docker.NewClient(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			out := cmd.OutOrStdout()
			n, err := docker.CleanupEach(ctx, cli, runID, func(r docker.Resource) {
				fmt.Fprintf(out, "removed %s\n", r)
			})
			what := "shardtest"
			if runID != "" {
				what = "run " + runID
			}
			if n == 0 && err == nil {
				fmt.Fprintf(out, "nothing of %s to remove\n", what)
			} else {
				fmt.Fprintf(out, "removed %d of %s\n", n, what)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&runID, "run", "", "remove only this run's resources (default: every run's)")
	return cmd
}
