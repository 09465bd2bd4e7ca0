package run

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"

	"github.com/shardtest/shardtest/harness/docker"
	"github.com/shardtest/shardtest/harness/local"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// Docker runs nodes as containers (the default runtime).
type Docker struct {
	// Binary is the static shardtest binary for the image ("": find one).
	Binary string
	// Image runs the nodes from another implementation's image.
	Image    string
	NodeArgs []string
	// Settings go to every node as environment variables (SettingsEnv).
	Settings map[string]string
	Log      *slog.Logger
}

// Name implements Runtime.
func (Docker) Name() string { return "docker" }

// Features are what the nemesis can do on containers.
func (Docker) Features() []string { return dockerFaults{}.Features() }

// Check refuses a run before any side effect when no Docker engine
// answers.
func (Docker) Check(int) error {
	cli, err := docker.NewClient(context.Background())
	if err != nil {
		return err
	}
	return cli.Close()
}

// Start implements Runtime.
func (d Docker) Start(ctx context.Context, runID string, nodes int, dir string) (Cluster, error) {
	c, err := docker.Start(ctx, docker.Options{Nodes: nodes, RunID: runID, Dir: dir, NodeArgs: d.NodeArgs,
		NodeEnv: SettingsEnv(d.Settings), Binary: d.Binary, NodeImage: d.Image, Logger: d.Log})
	if err != nil {
		return nil, err
	}
	return dockerCluster{c}, nil
}

type dockerCluster struct{ c *docker.Cluster }

func (d dockerCluster) Nodes() []Node {
	var out []Node
	for _, n := range d.c.Nodes() {
		out = append(out, Node{Name: n.Name, HTTPAddr: n.HTTPAddr})
	}
	return out
}

// Image is the image the nodes run from.
func (d dockerCluster) Image() string {
	if im := d.c.NodeImage(); im != "" {
		return im
	}
	return d.c.Image()
}

// Stop copies the logs into the run's directory (given to Start) and
// removes everything of the run.
func (d dockerCluster) Stop(ctx context.Context, _ string) error { return d.c.Stop(ctx) }

// Local runs nodes as child processes on 127.0.0.1.
type Local struct {
	// Binary is the shardtest executable (default: this one).
	Binary   string
	BasePort int
	NodeArgs []string
	// Settings go to every node as its flags (SettingsFlags), before
	// NodeArgs, so an explicit --node-arg wins.
	Settings map[string]string
	Log      *slog.Logger
}

// Name implements Runtime.
func (Local) Name() string { return "local" }

// Features are what the nemesis can do on local nodes.
func (Local) Features() []string { return localFaults{}.Features() }

// Check implements Checker: the ports must be free.
func (l Local) Check(nodes int) error { return local.CheckPorts(l.BasePort, nodes) }

// Start implements Runtime; logs land in dir as the nodes write them.
func (l Local) Start(ctx context.Context, _ string, nodes int, dir string) (Cluster, error) {
	c, err := local.Start(ctx, local.Options{Binary: l.Binary, Nodes: nodes, BasePort: l.BasePort, Dir: dir,
		NodeArgs: append(SettingsFlags(l.Settings), l.NodeArgs...), Logger: l.Log})
	if err != nil {
		return nil, err
	}
	return localCluster{c}, nil
}

type localCluster struct{ c *local.Cluster }

func (l localCluster) Nodes() []Node {
	var out []Node
	for _, p := range l.c.NodeList() {
		out = append(out, Node{Name: p.Name, HTTPAddr: p.HTTPAddr})
	}
	return out
}

func (l localCluster) Stop(context.Context, string) error { l.c.Stop(); return nil }

// ClusterSecret implements MemberHost: local members share the harness's
// address.
func (l localCluster) ClusterSecret() string { return l.c.Secret() }

// Nemesis lets faults act on the containers.
func (d dockerCluster) Nemesis() nemesis.Cluster { return dockerFaults{d.c} }

// dockerFaults is the Docker runtime's side of the nemesis: real packet
// drops with nftables in each container's network namespace, SIGKILL and
// restart of the same container, the cgroup freezer, added containers.
type dockerFaults struct{ c *docker.Cluster }

func (dockerFaults) Runtime() string { return "docker" }

func (dockerFaults) Features() []string {
	return []string{nemesis.FeatureKernelFilter, nemesis.FeatureKill, nemesis.FeaturePause, nemesis.FeatureAddNode}
}

func dockerNode(n docker.Node) nemesis.Node {
	return nemesis.Node{Name: n.Name, HTTPAddr: n.HTTPAddr, Addr: n.IP}
}

func (d dockerFaults) Nodes() []nemesis.Node {
	var out []nemesis.Node
	for _, n := range d.c.Nodes() {
		out = append(out, dockerNode(n))
	}
	return out
}

func (d dockerFaults) Journal() nemesis.Node { return dockerNode(d.c.Journal()) }

// SetRules runs `shardtest net apply|heal` in the node's network namespace.
func (d dockerFaults) SetRules(ctx context.Context, node string, r nemesis.Rules) error {
	args := []string{"heal"}
	if !r.Empty() {
		args = []string{"apply"}
		if len(r.DropIn) > 0 {
			args = append(args, "--drop-in", strings.Join(r.DropIn, ","))
		}
		if len(r.DropOut) > 0 {
			args = append(args, "--drop-out", strings.Join(r.DropOut, ","))
		}
		if r.LossPercent > 0 && len(r.LossPeers) > 0 {
			args = append(args, "--loss", strconv.Itoa(r.LossPercent), "--loss-peers", strings.Join(r.LossPeers, ","))
		}
	}
	_, err := d.c.Net(ctx, node, args)
	return err
}

func (d dockerFaults) Kill(ctx context.Context, name string) error   { return d.c.Kill(ctx, name) }
func (d dockerFaults) Start(ctx context.Context, name string) error  { return d.c.Start(ctx, name) }
func (d dockerFaults) Pause(ctx context.Context, name string) error  { return d.c.Pause(ctx, name) }
func (d dockerFaults) Resume(ctx context.Context, name string) error { return d.c.Unpause(ctx, name) }

func (d dockerFaults) AddNode(ctx context.Context) (nemesis.Node, error) {
	n, err := d.c.AddNode(ctx)
	return dockerNode(n), err
}

func (d dockerFaults) RemoveNode(ctx context.Context, name string) error {
	return d.c.RemoveNode(ctx, name)
}

// Nemesis lets faults act on the processes.
func (l localCluster) Nemesis() nemesis.Cluster { return localFaults{l.c} }

// localFaults is the local runtime's side of the nemesis: every node
// shares the host's network namespace, so partitions go through the
// implementation's in-process filter (capability "filter") and cannot name
// the journal or lose packets at random; processes are killed and frozen
// with signals.
type localFaults struct{ c *local.Cluster }

func (localFaults) Runtime() string { return "local" }

func (localFaults) Features() []string {
	return []string{nemesis.FeatureNodeFilter, nemesis.FeatureKill, nemesis.FeaturePause, nemesis.FeatureAddNode}
}

func localNode(p *local.Process) nemesis.Node {
	return nemesis.Node{Name: p.Name, HTTPAddr: p.HTTPAddr, Addr: p.GossipAddr}
}

func (l localFaults) Nodes() []nemesis.Node {
	var out []nemesis.Node
	for _, p := range l.c.NodeList() {
		out = append(out, localNode(p))
	}
	return out
}

// Journal has no Addr: nothing can cut it off in one network namespace.
func (l localFaults) Journal() nemesis.Node {
	return nemesis.Node{Name: l.c.Journal.Name, HTTPAddr: l.c.Journal.HTTPAddr}
}

// SetRules sets the node's in-process filter through the admin API.
func (l localFaults) SetRules(ctx context.Context, node string, r nemesis.Rules) error {
	if r.LossPercent > 0 {
		return fmt.Errorf("packet loss: %w by the local runtime", nemesis.ErrUnsupported)
	}
	for _, p := range l.c.NodeList() {
		if p.Name == node {
			_, err := client.New(p.HTTPAddr, nil).SetFilter(ctx, protocol.Filter{DropIn: r.DropIn, DropOut: r.DropOut})
			return err
		}
	}
	return fmt.Errorf("no node named %q", node)
}

func (l localFaults) Kill(ctx context.Context, name string) error   { return l.c.Kill(ctx, name) }
func (l localFaults) Start(ctx context.Context, name string) error  { return l.c.Start(ctx, name) }
func (l localFaults) Pause(ctx context.Context, name string) error  { return l.c.Pause(ctx, name) }
func (l localFaults) Resume(ctx context.Context, name string) error { return l.c.Resume(ctx, name) }

func (l localFaults) AddNode(ctx context.Context) (nemesis.Node, error) {
	p, err := l.c.AddNode(ctx)
	if err != nil {
		return nemesis.Node{}, err
	}
	return localNode(p), nil
}

func (l localFaults) RemoveNode(ctx context.Context, name string) error {
	return l.c.RemoveNode(ctx, name)
}

// RuntimeConfig is where a test's nodes run, as a command's flags say.
type RuntimeConfig struct {
	// Binary is the static shardtest binary of the reference image
	// (docker); BasePort the journal's port (local).
	Binary   string
	BasePort int
	// LocalBinary is the shardtest executable the local runtime starts
	// (default: this one; tests give a build of the command).
	LocalBinary string
	Log         *slog.Logger
}

// NewRuntime returns the runtime o names, with o's image, node flags and
// settings.
func NewRuntime(o Options, c RuntimeConfig) (Runtime, error) {
	switch o.Runtime {
	case "docker":
		if c.Binary != "" {
			// Checked here, before any run folder or container exists.
			if static, err := docker.IsStaticELF(c.Binary); !static {
				if err == nil {
					err = errors.New("it needs a program interpreter (libc)")
				}
				return nil, fmt.Errorf("--binary %s is not a static Linux executable (%v); build it with CGO_ENABLED=0 go build ./cmd/shardtest", c.Binary, err)
			}
		}
		return Docker{Binary: c.Binary, Image: o.Image, NodeArgs: o.NodeArgs, Settings: o.NodeSettings, Log: c.Log}, nil
	case "local":
		if c.Binary != "" || o.Image != "" {
			return nil, errors.New("--binary and --image are for --runtime docker")
		}
		return Local{Binary: c.LocalBinary, BasePort: c.BasePort, NodeArgs: o.NodeArgs, Settings: o.NodeSettings, Log: c.Log}, nil
	case "sim":
		if c.Binary != "" {
			return nil, errors.New("--binary is for --runtime docker")
		}
		if err := checkSim(o); err != nil {
			return nil, err
		}
		return Sim{}, nil
	}
	return nil, fmt.Errorf("--runtime %q: want docker, local or sim", o.Runtime)
}
