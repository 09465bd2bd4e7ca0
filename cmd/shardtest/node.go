package main

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/node"
)

// exitDowned is the exit status of `shardtest node --on-downed exit` when
// the member was downed, so a supervisor can tell it from a crash.
const exitDowned = 3

func newNodeCmd() *cobra.Command {
	var (
		cfg          node.Config
		roles, seeds []string
		logLevel     string
		logFormat    string
	)
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Run one member of the reference cluster",
		Long: `Run one member of the reference cluster-sharding implementation.

The node joins the cluster through --seeds (gossip addresses; the first seed
bootstraps a new cluster when no other seed answers), gets its up-number (its
age) from the journal, runs the split-brain resolver, the cluster singleton
manager and proxy for the "id-generator" singleton, cluster sharding for the
"register" and "log" entity types (a region per type, and each type's shard
coordinator as a singleton on the oldest member), and serves the node
protocol (docs/protocol.md) over HTTP/JSON on --http.

Every flag can also be set through the environment as SHARDTEST_<FLAG>, with
the flag name upper-cased and dashes turned into underscores (for example
SHARDTEST_JOURNAL=http://10.0.0.2:7400); a flag on the command line wins.

Durations are Go durations (500ms, 5s, 1m). Deliberate bugs (--bugs) exist
only to prove that the harness's checkers catch them; never enable them
otherwise.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := applyEnv(cmd.Flags()); err != nil {
				return err
			}
			if cfg.Name == "" {
				return errors.New("--name is required")
			}
			if cfg.JournalURL == "" {
				return errors.New("--journal is required (the journal server's URL, e.g. http://127.0.0.1:7400)")
			}
			logger, err := newLogger(logLevel, logFormat)
			if err != nil {
				return err
			}
			cfg.Roles = roles
			cfg.Seeds = seeds
			cfg.Logger = logger
			if !cmd.Flags().Changed("down-all-when-unstable") {
				cfg.Downing.DownAllWhenUnstable = cfg.Downing.StableAfter * 3 / 4
			}
			n, err := node.New(cfg)
			if err != nil {
				return err
			}
			logger.Info("node listening", "http", n.Addr(), "peers", n.PeerAddr())
			if publicOutsideContainer(cfg.HTTPListen) {
				logger.Warn("the node protocol is served on a public address outside a container: its admin endpoints (leave, down, clock, filter) need no authentication, as a test tool's; serve it on loopback or in a container", "http", cfg.HTTPListen)
			}
			err = n.Run(cmd.Context())
			if errors.Is(err, node.ErrDowned) {
				logger.Warn("downed; exiting", "status", exitDowned)
				os.Exit(exitDowned)
			}
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Name, "name", "", "node name, stable across restarts (required; no '@', '/' or spaces)")
	f.StringSliceVar(&roles, "roles", nil, "comma-separated roles of this member")
	f.StringVar(&cfg.HTTPListen, "http", "127.0.0.1:7500", "node protocol listen address (host:port; port 0 picks one)")
	f.StringVar(&cfg.HTTPAdvertise, "http-advertise", "", "node protocol address other nodes use (default: the bound --http address)")
	f.StringVar(&cfg.GossipBind, "gossip-bind", "127.0.0.1", "IP address the gossip transport binds")
	f.IntVar(&cfg.GossipPort, "gossip-port", 7946, "gossip port (TCP and UDP; 0 picks one)")
	f.StringVar(&cfg.GossipAdvertise, "gossip-advertise", "", "IP address advertised for gossip (default: --gossip-bind)")
	f.StringSliceVar(&seeds, "seeds", nil, "comma-separated gossip addresses (ip:port) of seed members; the first bootstraps a new cluster")
	f.IntVar(&cfg.PeerPort, "peer-port", 0, "port for node-to-node requests on --gossip-bind (0 picks one; it is gossiped to the other members)")
	f.StringVar(&cfg.ClusterSecret, "cluster-secret", "", "a secret every member shares, required of every node-to-node request (better from SHARDTEST_CLUSTER_SECRET than on the command line)")
	f.StringVar(&cfg.JournalURL, "journal", "", "journal server URL (required), e.g. http://127.0.0.1:7400")

	f.StringVar(&cfg.Downing.Strategy, "downing", cluster.KeepMajority, "split-brain resolver: keep-majority, static-quorum or keep-oldest (auto-down only with --bugs auto-down)")
	f.DurationVar(&cfg.Downing.StableAfter, "stable-after", 5*time.Second, "how long reachability must be stable before the resolver acts")
	f.DurationVar(&cfg.Downing.DownAllWhenUnstable, "down-all-when-unstable", 0, "down every member if reachability is still changing this long after stable-after (default 3/4 of --stable-after; 0 turns it off)")
	f.IntVar(&cfg.Downing.QuorumSize, "quorum-size", 0, "static-quorum: members a side needs to survive")
	f.BoolVar(&cfg.Downing.DownIfAlone, "down-if-alone", true, "keep-oldest: down the oldest if it is alone on its side")
	f.DurationVar(&cfg.Downing.AutoDownAfter, "auto-down-after", 0, "auto-down (a deliberate bug): down members unreachable this long (default --stable-after)")
	f.DurationVar(&cfg.HeartbeatInterval, "heartbeat-interval", 200*time.Millisecond, "interval of the failure detector's heartbeats")
	f.DurationVar(&cfg.FailureTimeout, "failure-timeout", 2*time.Second, "a member not heard from this long is unreachable")
	f.DurationVar(&cfg.RejoinInterval, "rejoin-interval", 2*time.Second, "how often to re-join known members gossip has lost (partition healing)")
	f.DurationVar(&cfg.SeedTimeout, "seed-timeout", 3*time.Second, "how long the first seed waits for other seeds before bootstrapping a new cluster")

	f.StringVar(&cfg.SingletonRole, "singleton-role", "", "run the singleton only on members with this role (default: all)")
	f.DurationVar(&cfg.RetryInterval, "retry-interval", time.Second, "singleton hand-over / take-over retry interval")
	f.IntVar(&cfg.MaxHandOverRetries, "max-hand-over-retries", 15, "hand-over requests before the new oldest gives up on the previous one")
	f.IntVar(&cfg.MaxTakeOverRetries, "max-take-over-retries", 10, "take-over requests before the previous oldest stops its singleton anyway (must be < --max-hand-over-retries)")
	f.DurationVar(&cfg.DownRemovalMargin, "down-removal-margin", 0, "after the previous oldest was downed, wait this long before starting the singleton (default --stable-after)")
	f.IntVar(&cfg.ProxyBufferSize, "proxy-buffer-size", 1000, "requests the singleton proxy buffers while the singleton is unknown or moving (oldest dropped first)")
	f.DurationVar(&cfg.RequestTimeout, "request-timeout", 10*time.Second, "how long the node works on a client request before answering with an unknown outcome")
	f.DurationVar(&cfg.LeaveTimeout, "leave-timeout", 30*time.Second, "how long a graceful leave waits for hand-over")

	f.StringVar(&cfg.ShardingRole, "sharding-role", "", "host shards only on members with this role; others are proxy-only (default: all)")
	f.BoolVar(&cfg.ProxyOnly, "proxy-only", false, "host no entities: route every entity message to other members")
	f.IntVar(&cfg.NumberOfShards, "shards", 100, "number of shards per entity type (the seed's advice: about ten per node of the largest cluster planned)")
	f.IntVar(&cfg.ShardBufferSize, "shard-buffer-size", 10000, "messages a region buffers while shard homes are unknown or moving; overflow is dropped, counted and logged")
	f.DurationVar(&cfg.HandOffTimeout, "hand-off-timeout", 10*time.Second, "how long a shard's entities get to stop during a hand-off before it is forced")
	f.DurationVar(&cfg.RebalanceInterval, "rebalance-interval", 10*time.Second, "how often the coordinator considers a rebalance")
	f.IntVar(&cfg.RebalanceThreshold, "rebalance-threshold", 2, "rebalance when the most and least loaded regions differ by this many shards (at least 2)")
	f.IntVar(&cfg.MaxSimultaneousRebalance, "max-simultaneous-rebalance", 3, "shards handed off at the same time, at most")
	f.DurationVar(&cfg.PassivateIdleAfter, "passivate-idle-after", 0, "passivate entities idle this long (0: never)")
	f.DurationVar(&cfg.RedeliverInterval, "redeliver-interval", time.Second, "at-least-once senders resend unconfirmed messages this often")
	f.DurationVar(&cfg.ShardRetryInterval, "shard-retry-interval", 500*time.Millisecond, "how often a region retries registering with and asking the coordinator")

	f.StringVar(&cfg.OnDowned, "on-downed", node.OnDownedRestart, "when downed: restart (as a new incarnation, in process), exit (status 3) or stay (down, still serving status)")
	f.DurationVar(&cfg.RestartDelay, "restart-delay", time.Second, "with --on-downed restart: wait this long first")
	f.StringSliceVar(&cfg.Bugs, "bugs", nil, "deliberate bugs to switch on: "+strings.Join(node.KnownBugs(), ", "))
	f.StringSliceVar(&cfg.WithoutCapabilities, "without-capabilities", nil, "capabilities not to declare or serve, to stand for a partial implementation of the protocol: "+strings.Join(node.ReferenceCapabilities(), ", "))
	f.StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&logFormat, "log-format", "text", "text or json (logs go to stderr)")
	return cmd
}

// applyEnv sets every flag not given on the command line from
// SHARDTEST_<FLAG>, if that is set.
func applyEnv(fs *pflag.FlagSet) error {
	var err error
	fs.VisitAll(func(fl *pflag.Flag) {
		if err != nil || fl.Changed {
			return
		}
		name := "SHARDTEST_" + strings.ToUpper(strings.ReplaceAll(fl.Name, "-", "_"))
		if v, ok := os.LookupEnv(name); ok {
			if serr := fs.Set(fl.Name, v); serr != nil {
				err = fmt.Errorf("environment %s=%q: %w", name, v, serr)
			}
		}
	})
	return err
}

func newLogger(level, format string) (*slog.Logger, error) {
	lv, err := parseLogLevel(level)
	if err != nil {
		return nil, err
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// publicOutsideContainer reports whether addr listens beyond loopback
// while this process is not in a container (where the run's own network
// encloses it).
func publicOutsideContainer(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		_, err := os.Stat("/.dockerenv")
		return err != nil && os.Getenv("container") == ""
	}
	return false
}
