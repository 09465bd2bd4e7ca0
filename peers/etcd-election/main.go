// Command etcd-election is a node of a cluster of embedded etcd members
// (go.etcd.io/etcd/server/v3/embed) whose id-generator singleton is the
// leader of an etcd election (go.etcd.io/etcd/client/v3/concurrency),
// served to the shardtest harness through the kit (package protocol/kit).
// The generator keeps its counter in etcd and writes it one of two ways
// (--writes): unguarded (read the counter on winning, then a plain Put
// per id: how most users write it), checked (the same, stepping down at
// once and checking the instance right before every write) or fenced
// (every Put in a transaction guarded by the leader key's create
// revision: etcd's documented pattern). docs/peers/etcd-election.md says what shardtest finds.
//
// It is configured by the SHARDTEST_* environment (docs/protocol.md,
// Starting a node); its flags are its own:
//
//	--writes unguarded|checked|fenced  how the counter is written (unguarded)
//	--session-ttl N            the election session's lease TTL in seconds (5)
//	--client-port N            etcd's client port on every member (2379)
//	--forward-port N           the port next-id is forwarded to the leader on (7947)
//	--data-dir DIR             the etcd member's data (/var/lib/etcd-election)
//	--etcd-log LEVEL           etcd's log level: debug, info, warn, error (info)
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
		slog.Error("etcd-election peer", "err", err)
		os.Exit(1)
	}
}

// run parses the flags and the environment and runs the peer until
// SIGINT or SIGTERM.
func run(args []string) error {
	fs := flag.NewFlagSet("etcd-election", flag.ContinueOnError)
	var f flags
	fs.StringVar(&f.writes, "writes", writesUnguarded, "how the counter is written: unguarded (a plain Put), checked (a plain Put, the instance checked right before it) or fenced (a Txn guarded by the leader key's create revision)")
	fs.IntVar(&f.sessionTTL, "session-ttl", defaultSessionTTL, "the election session's lease TTL, in seconds")
	fs.IntVar(&f.clientPort, "client-port", defaultClientPort, "etcd's client port, on every member")
	fs.IntVar(&f.forwardPort, "forward-port", defaultForwardPort, "the port next-id is forwarded to the leader on, on every member")
	fs.StringVar(&f.dataDir, "data-dir", defaultDataDir, "the etcd member's data directory")
	fs.StringVar(&f.etcdLog, "etcd-log", "info", "etcd's log level: debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg, err := kit.ConfigFromEnv()
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	set, err := deriveSettings(cfg, f)
	if err != nil {
		return fmt.Errorf("configuration: %w", err)
	}
	p, err := newPeer(set, os.Stderr)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return p.run(ctx)
}
