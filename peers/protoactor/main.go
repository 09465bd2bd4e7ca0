// Command protoactor is a member of a protoactor-go cluster
// (github.com/asynkron/protoactor-go) hosting register grains — virtual
// actors placed by the disthash identity lookup on the members the
// automanaged cluster provider finds — served to the shardtest harness
// through the kit (package protocol/kit). Register state is event-sourced
// in the shardtest journal, so what the harness can flag is placement (two
// activations of one register at once), never lost memory.
//
// It is configured by the SHARDTEST_* environment (docs/protocol.md,
// Starting a node); its flags are its own:
//
//	--automanaged-port N     the automanaged provider's HTTP port on every member (6330)
//	--framework-log LEVEL    protoactor's log level: debug, info, warn, error (info)
//	--up-when-self-listed    report up once this member sees itself, before the others agree (false)
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/shardtest/shardtest/protocol/kit"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		slog.Error("protoactor peer", "err", err)
		os.Exit(1)
	}
}

// run parses the flags and the environment and runs the peer until
// SIGINT or SIGTERM.
func run(args []string) error {
	fs := flag.NewFlagSet("protoactor", flag.ContinueOnError)
	amPort := fs.Int("automanaged-port", defaultAutoManagedPort, "the automanaged provider's HTTP port, on every member")
	fwLog := fs.String("framework-log", "info", "protoactor's log level: debug, info, warn or error")
	selfListed := fs.Bool("up-when-self-listed", false, "report up as soon as this member sees itself in its topology, before the other members agree on it (shows the join race)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	level, err := parseLevel(*fwLog)
	if err != nil {
		return err
	}
	cfg, err := kit.ConfigFromEnv()
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	set, err := deriveSettings(cfg, *amPort, level)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	set.UpWhenSelfListed = *selfListed
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return newPeer(ctx, set, os.Stderr).run()
}
