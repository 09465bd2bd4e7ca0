// Command shardtest runs the reference cluster-sharding node, its journal,
// and the Jepsen-style harness that tests any implementation of the node
// protocol (docs/protocol.md).
package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

func main() {
	// Ctrl-C and SIGTERM (what timeout, kill and CI runners send) alike
	// ask the command to stop: its context ends, and a run cleans up its
	// cluster. From then on both have their default effect again, so a
	// second one ends the process at once, even a command stuck in a
	// system call that no context reaches (shardtest check once blocked
	// for ever opening a named pipe, and every signal was swallowed).
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)
	cmd, err := newRootCmd().ExecuteContextC(ctx)
	if err != nil {
		fmt.Fprintln(os.Stderr, "shardtest:", err)
		os.Exit(exitCode(cmd, err))
	}
}

func newRootCmd() *cobra.Command {
	root := &cobra.Command{
		Use:           "shardtest",
		Short:         "Test distributed actor sharding and singletons for correctness",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCmd(), newCheckCmd(), newNodeCmd(), newJournalCmd(), newClusterCmd(), newCleanupCmd(), newServeCmd(), newListCmd())
	root.AddCommand(newNetCmd(), newDetectCmd(), newTestAllCmd(), newConformCmd(), newBenchCmd(), newMergeCmd(), newShrinkCmd(), newExploreCmd())
	return root
}

// exitCode is the exit status of a failed command: the one it chose, or,
// for anything else (a usage error: an unknown flag or command, a flag
// that does not parse, a bad argument), 3, "could not run" — never 1,
// which says a bug was found. The node exits 1 for every failure of its
// own, usage included, since its 3 says it was downed.
func exitCode(cmd *cobra.Command, err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	if cmd != nil && cmd.Name() == "node" {
		return 1
	}
	return exitCannotRun
}
