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
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := newRootCmd().ExecuteContext(ctx); err != nil {
		fmt.Fprintln(os.Stderr, "shardtest:", err)
		var ee *exitError
		if errors.As(err, &ee) {
			os.Exit(ee.code)
		}
		os.Exit(1)
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
	root.AddCommand(newNetCmd(), newDetectCmd(), newTestAllCmd(), newConformCmd())
	return root
}
