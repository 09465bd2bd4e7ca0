package run

import (
	"context"
	"log/slog"

	"github.com/shardtest/shardtest/harness/docker"
	"github.com/shardtest/shardtest/harness/local"
)

// Docker runs nodes as containers (the default runtime).
type Docker struct {
	// Binary is the static shardtest binary for the image ("": find one).
	Binary string
	// Image runs the nodes from another implementation's image.
	Image    string
	NodeArgs []string
	Log      *slog.Logger
}

// Name implements Runtime.
func (Docker) Name() string { return "docker" }

// Start implements Runtime.
func (d Docker) Start(ctx context.Context, runID string, nodes int, dir string) (Cluster, error) {
	c, err := docker.Start(ctx, docker.Options{Nodes: nodes, RunID: runID, Dir: dir, NodeArgs: d.NodeArgs, Binary: d.Binary, NodeImage: d.Image, Logger: d.Log})
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
	Log      *slog.Logger
}

// Name implements Runtime.
func (Local) Name() string { return "local" }

// Start implements Runtime; logs land in dir as the nodes write them.
func (l Local) Start(ctx context.Context, _ string, nodes int, dir string) (Cluster, error) {
	c, err := local.Start(ctx, local.Options{Binary: l.Binary, Nodes: nodes, BasePort: l.BasePort, Dir: dir, NodeArgs: l.NodeArgs, Logger: l.Log})
	if err != nil {
		return nil, err
	}
	return localCluster{c}, nil
}

type localCluster struct{ c *local.Cluster }

func (l localCluster) Nodes() []Node {
	var out []Node
	for _, p := range l.c.Nodes {
		out = append(out, Node{Name: p.Name, HTTPAddr: p.HTTPAddr})
	}
	return out
}

func (l localCluster) Stop(context.Context, string) error { l.c.Stop(); return nil }
