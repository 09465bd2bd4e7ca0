// Package docker is the Docker runtime of the harness: it runs a cluster
// of the shardtest binary (a journal and N nodes) as containers on a
// private bridge network of the local Docker Engine, each node with its
// own IP address, so that the harness can later cut and heal the network
// between nodes the way it would between machines.
//
// The image is built FROM scratch out of a static shardtest binary; no
// image is ever pulled. Everything the runtime creates (containers, the
// network, volumes) is labelled shardtest.managed=true and
// shardtest.run=<run id>, so Cleanup can find and remove the leftovers of
// a harness that was killed.
package docker

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"
)

// Labels on everything the runtime creates.
const (
	LabelManaged = "shardtest.managed"
	LabelRun     = "shardtest.run"
)

// NewClient connects to the Docker Engine named by the environment
// (DOCKER_HOST etc., default the local socket) and checks that it answers.
func NewClient(ctx context.Context) (*client.Client, error) {
	cli, err := client.New(client.FromEnv, client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, fmt.Errorf("docker: client: %w", err)
	}
	if err := Ping(ctx, cli); err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

// Ping checks that the engine answers, with a one-line error if not.
func Ping(ctx context.Context, cli *client.Client) error {
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cli.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true}); err != nil {
		msg := strings.ReplaceAll(err.Error(), "\n", " ")
		return fmt.Errorf("no Docker engine answered at %s (set DOCKER_HOST, or use --runtime local): %s", cli.DaemonHost(), msg)
	}
	return nil
}

// Resource is one thing the runtime created.
type Resource struct {
	Kind string // "container", "network" or "volume"
	Name string
	ID   string
	Run  string // the run id label
	// Owner is the harness that made it (HasOwner false: its labels name
	// none).
	Owner    Owner
	HasOwner bool
}

func resource(kind, name, id string, labels map[string]string) Resource {
	r := Resource{Kind: kind, Name: name, ID: id, Run: labels[LabelRun]}
	r.Owner, r.HasOwner = OwnerOf(labels)
	return r
}

func (r Resource) String() string {
	return fmt.Sprintf("%s %s (run %s)", r.Kind, r.Name, r.Run)
}

func labelFilters(runID string) client.Filters {
	f := make(client.Filters).Add("label", LabelManaged+"=true")
	if runID != "" {
		f = f.Add("label", LabelRun+"="+runID)
	}
	return f
}

// Leftovers lists every container, network and volume labelled
// shardtest.managed=true (and, if runID is not empty, of that run).
func Leftovers(ctx context.Context, cli *client.Client, runID string) ([]Resource, error) {
	var out []Resource
	cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: labelFilters(runID)})
	if err != nil {
		return nil, fmt.Errorf("docker: list containers: %w", err)
	}
	for _, c := range cs.Items {
		name := c.ID
		if len(c.Names) > 0 {
			name = strings.TrimPrefix(c.Names[0], "/")
		}
		out = append(out, resource("container", name, c.ID, c.Labels))
	}
	ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: labelFilters(runID)})
	if err != nil {
		return nil, fmt.Errorf("docker: list networks: %w", err)
	}
	for _, n := range ns.Items {
		out = append(out, resource("network", n.Name, n.ID, n.Labels))
	}
	vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: labelFilters(runID)})
	if err != nil {
		return nil, fmt.Errorf("docker: list volumes: %w", err)
	}
	for _, v := range vs.Items {
		out = append(out, resource("volume", v.Name, v.Name, v.Labels))
	}
	return out, nil
}

// Cleanup removes the containers (killed), networks and volumes sel
// selects of those labelled shardtest.managed=true (see Host.Keeps). It
// works from labels and /proc alone, so it also removes the leftovers of a
// harness that was killed.
func Cleanup(ctx context.Context, cli *client.Client, sel Selection) (removed int, err error) {
	removed, _, err = CleanupEach(ctx, cli, sel, nil)
	return removed, err
}

// CleanupEach is Cleanup, calling fn (if not nil) for each resource
// removed; it returns those it kept, with why.
func CleanupEach(ctx context.Context, cli *client.Client, sel Selection, fn func(Resource)) (removed int, kept []Kept, err error) {
	all, err := Leftovers(ctx, cli, sel.Run)
	if err != nil {
		return 0, nil, err
	}
	host, known := ThisHost()
	if !known {
		host = Host{StartOf: func(int) (uint64, bool) { return 0, false }}
	}
	var rs []Resource
	for _, r := range all {
		why := host.Keeps(r, sel)
		if !known && why == "" && sel.Run == "" && !sel.All {
			why = "this system has no /proc to tell whether its harness still runs: --run or --all removes it"
		}
		if why != "" {
			kept = append(kept, Kept{r, why})
			continue
		}
		rs = append(rs, r)
	}
	var errs []error
	done := func(r Resource) {
		removed++
		if fn != nil {
			fn(r)
		}
	}
	// Containers first, all at once (a run's cluster is removed after
	// every run): they hold the network and the volumes.
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, r := range rs {
		if r.Kind != "container" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := cli.ContainerRemove(ctx, r.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				done(r)
			case cerrdefs.IsNotFound(err):
			default:
				errs = append(errs, fmt.Errorf("docker: remove %s: %w", r, err))
			}
		}()
	}
	wg.Wait()
	for _, kind := range []string{"network", "volume"} {
		for _, r := range rs {
			if r.Kind != kind {
				continue
			}
			err := retry(ctx, func() error {
				var err error
				if kind == "network" {
					_, err = cli.NetworkRemove(ctx, r.ID, client.NetworkRemoveOptions{})
				} else {
					_, err = cli.VolumeRemove(ctx, r.ID, client.VolumeRemoveOptions{Force: true})
				}
				return err
			})
			switch {
			case err == nil:
				done(r)
			case cerrdefs.IsNotFound(err):
			default:
				errs = append(errs, fmt.Errorf("docker: remove %s: %w", r, err))
			}
		}
	}
	return removed, kept, errors.Join(errs...)
}

// Kept is a resource a cleanup left in place, and why.
type Kept struct {
	Resource
	Why string
}

// retry retries f a few times while it fails with a conflict (a resource
// still in use by a container being removed).
func retry(ctx context.Context, f func() error) error {
	var err error
	for range 10 {
		err = f()
		if err == nil || !cerrdefs.IsConflict(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(200 * time.Millisecond):
		}
	}
	return err
}
