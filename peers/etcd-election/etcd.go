package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// clusterToken names the etcd cluster (etcd's initial-cluster-token).
const clusterToken = "shardtest-etcd-election"

// parseEtcdLevel parses etcd's log level (zap's names).
func parseEtcdLevel(s string) (zapcore.Level, error) {
	l, err := zapcore.ParseLevel(s)
	if err != nil {
		return l, fmt.Errorf("--etcd-log %q: want debug, info, warn or error: %w", s, err)
	}
	return l, nil
}

// zapLogger is the logger of etcd's server and of the peer's etcd
// clients: etcd's default (JSON lines on stderr) at level.
func zapLogger(level string) (*zap.Logger, error) {
	l, err := parseEtcdLevel(level)
	if err != nil {
		return nil, err
	}
	return logutil.CreateDefaultZapLogger(l)
}

// startEtcd starts this node's embedded etcd member and returns once it
// is started (not necessarily ready: a restarted member waits for a
// quorum). How it starts depends on what it has: with data (a restart)
// it resumes from its WAL; the first seed without data bootstraps a new
// cluster of one; every other member without data joins the running
// cluster (joinCluster).
func startEtcd(ctx context.Context, set settings, lg *zap.Logger, log *slog.Logger) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = set.Name
	cfg.Dir = set.DataDir
	peer, client := set.PeerURL(), set.ClientURL()
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{*peer}, []url.URL{*peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{*client}, []url.URL{*client}
	cfg.InitialClusterToken = clusterToken
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	cfg.Logger = "zap"
	self := set.Name + "=" + peer.String()
	switch {
	case hasData(set.DataDir):
		cfg.ClusterState, cfg.InitialCluster = embed.ClusterStateFlagExisting, self
		log.Info("restarting the etcd member from its data", "data_dir", set.DataDir)
	case set.Bootstrap:
		cfg.ClusterState, cfg.InitialCluster = embed.ClusterStateFlagNew, self
		log.Info("bootstrapping a new etcd cluster of one (first seed, no data)", "initial_cluster", self)
	default:
		initial, err := joinCluster(ctx, set, lg, log)
		if err != nil {
			return nil, err
		}
		cfg.ClusterState, cfg.InitialCluster = embed.ClusterStateFlagExisting, initial
	}
	if err := os.MkdirAll(set.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("data dir: %w", err)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("start the etcd member: %w", err)
	}
	return e, nil
}

// hasData says whether dir holds an etcd member's WAL.
func hasData(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "member", "wal"))
	return err == nil
}

// joinTimeout bounds a join: the harness waits 60 s for a node to be
// ready.
const joinTimeout = 50 * time.Second

// joinCluster adds this member to the running cluster through the other
// seeds' client ports (etcd's runtime reconfiguration: MemberAdd, then
// start with initial-cluster-state existing) and returns the initial
// cluster to start with. etcd refuses to add a member while an added one
// has not started (strict reconfiguration check: a quorum must stay
// reachable), so members starting together retry until it is their turn.
// A member added before this process was killed (listed by its peer URL,
// never started) is taken as it is.
func joinCluster(ctx context.Context, set settings, lg *zap.Logger, log *slog.Logger) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	cli, err := clientv3.New(clientv3.Config{Endpoints: set.JoinEndpoints, DialTimeout: 2 * time.Second, Logger: lg, Context: ctx})
	if err != nil {
		return "", fmt.Errorf("join: etcd client for %v: %w", set.JoinEndpoints, err)
	}
	defer cli.Close()
	peer := set.PeerURL().String()
	var last error
	for attempt := 1; ; attempt++ {
		if attempt > 1 {
			select {
			case <-ctx.Done():
				return "", fmt.Errorf("join the etcd cluster through %v: %w (last: %v)", set.JoinEndpoints, ctx.Err(), last)
			case <-time.After(500 * time.Millisecond):
			}
		}
		initial, err := addSelf(ctx, cli, set.Name, peer)
		if err != nil {
			if !errors.Is(err, errRetry) {
				return "", err
			}
			if last == nil || err.Error() != last.Error() {
				log.Info("join: not yet", "attempt", attempt, "err", err)
			}
			last = err
			continue
		}
		log.Info("join: added to the etcd cluster", "attempt", attempt, "initial_cluster", initial)
		return initial, nil
	}
}

// errRetry marks a join step that may succeed later.
var errRetry = errors.New("retry")

// addSelf adds the member with peer URL peer (unless it is listed
// already, not yet started) and returns the initial cluster: every
// member's name=peer URL, this one's under name.
func addSelf(ctx context.Context, cli *clientv3.Client, name, peer string) (string, error) {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	list, err := cli.MemberList(rctx)
	if err != nil {
		return "", fmt.Errorf("%w: member list: %v", errRetry, err)
	}
	members := list.Members
	var id uint64
	for _, m := range members {
		if slices.Contains(m.PeerURLs, peer) {
			if m.Name != "" {
				return "", fmt.Errorf("the etcd cluster already has a started member %s at %s, and this member has no data: it cannot rejoin as it", m.Name, peer)
			}
			id = m.ID
		}
	}
	if id == 0 {
		add, err := cli.MemberAdd(rctx, []string{peer})
		if err != nil {
			return "", fmt.Errorf("%w: member add: %v", errRetry, err)
		}
		members, id = add.Members, add.Member.ID
	}
	var parts []string
	for _, m := range members {
		n := m.Name
		switch {
		case m.ID == id:
			n = name
		case n == "":
			// Another member added and not started yet: etcd matches
			// members by peer URL, the name only has to be there.
			n = fmt.Sprintf("%x", m.ID)
		}
		for _, u := range m.PeerURLs {
			parts = append(parts, n+"="+u)
		}
	}
	return strings.Join(parts, ","), nil
}
