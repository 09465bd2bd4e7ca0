package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/shardtest/shardtest/harness/docker"
)

func newCleanupCmd() *cobra.Command {
	var sel docker.Selection
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Remove the Docker containers, networks and volumes that ended runs left behind",
		Long: `Remove the Docker containers, networks and volumes labelled
shardtest.managed=true that runs whose harness has ended left behind: the
leftovers of a run or 'shardtest cluster --runtime docker' that was killed,
or run with --keep. Each run's resources name the harness process that made
them (host, boot, pid and start); a run whose harness still runs on this
host is left alone, so one CI job's cleanup never tears down another's
cluster on a shared engine. A run whose harness ran on another host (an
engine shared between machines), or that names none (an older shardtest),
is left too, and listed.

--run ID removes that run's resources whoever owns them; --all removes every
run's. Containers are killed first. Images are kept (they are a cache keyed
by the binary's hash).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if sel.Run != "" && sel.All {
				return &exitError{exitCannotRun, errors.New("--run and --all: give one")}
			}
			// Finish removing even after Ctrl-C, within a bound.
			ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), 2*time.Minute)
			defer cancel()
			cli, err := docker.NewClient(ctx)
			if err != nil {
				return err
			}
			defer cli.Close()
			out := cmd.OutOrStdout()
			n, kept, err := docker.CleanupEach(ctx, cli, sel, func(r docker.Resource) {
				fmt.Fprintf(out, "removed %s\n", r)
			})
			what := "ended runs"
			switch {
			case sel.Run != "":
				what = "run " + sel.Run
			case sel.All:
				what = "shardtest"
			}
			if n == 0 && err == nil {
				fmt.Fprintf(out, "nothing of %s to remove\n", what)
			} else {
				fmt.Fprintf(out, "removed %d of %s\n", n, what)
			}
			// One line per run kept: its resources share the reason.
			seen := map[string]bool{}
			for _, k := range kept {
				if seen[k.Run] {
					continue
				}
				seen[k.Run] = true
				fmt.Fprintf(out, "kept run %s: %s\n", k.Run, k.Why)
			}
			return err
		},
	}
	cmd.Flags().StringVar(&sel.Run, "run", "", "remove this run's resources, whoever owns them")
	cmd.Flags().BoolVar(&sel.All, "all", false, "remove every run's resources, whoever owns them")
	return cmd
}
