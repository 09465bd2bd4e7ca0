package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
)

// The controls below are what a fault injector needs on a running
// cluster. A container is named by its node's name ("n1", ...) or
// "journal" where the doc says so.

// JournalName names the journal's container in the controls.
const JournalName = "journal"

// ExitError is a command that ran and exited with a non-zero status.
type ExitError struct {
	Node    string
	Command []string
	Code    int
	Stdout  string
	Stderr  string
}

func (e *ExitError) Error() string {
	out := strings.TrimSpace(strings.TrimSpace(e.Stdout) + "\n" + strings.TrimSpace(e.Stderr))
	return fmt.Sprintf("docker: %q on %s exited with status %d: %s", strings.Join(e.Command, " "), e.Node, e.Code, out)
}

var errStopped = errors.New("docker: the cluster was stopped")

// lookup returns the node (or the journal) called name.
func (c *Cluster) lookup(name string) (*Node, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ctx == nil || c.ctx.Err() != nil {
		return nil, errStopped
	}
	if name == JournalName && c.journal != nil {
		return c.journal, nil
	}
	for _, n := range c.nodes {
		if n.Name == name {
			return n, nil
		}
	}
	return nil, fmt.Errorf("docker: run %s has no node %q", c.runID, name)
}

// control locks name's container against other state changes and returns
// it, still in the cluster, with the function that unlocks it.
func (c *Cluster) control(name string) (*Node, func(), error) {
	c.mu.Lock()
	if c.ctl == nil {
		c.ctl = map[string]*sync.Mutex{}
	}
	l := c.ctl[name]
	if l == nil {
		l = new(sync.Mutex)
		c.ctl[name] = l
	}
	c.mu.Unlock()
	l.Lock()
	// Looked up under the lock: a RemoveNode that held it may have
	// removed the node meanwhile.
	n, err := c.lookup(name)
	if err != nil {
		l.Unlock()
		return nil, nil, err
	}
	return n, l.Unlock, nil
}

// snapshot copies n under the lock (its exited channel changes at Start).
func (c *Cluster) snapshot(n *Node) Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return *n
}

// Kill sends SIGKILL to name's container (a node or "journal") and returns
// once it is no longer running. The container stays, with its
// filesystem, address, port and (for the journal) volume, for Start.
// Killing a container that is not running does nothing; a paused one is
// killed (the engine thaws it).
func (c *Cluster) Kill(ctx context.Context, name string) error {
	n, unlock, err := c.control(name)
	if err != nil {
		return err
	}
	defer unlock()
	return c.kill(ctx, n)
}

func (c *Cluster) kill(ctx context.Context, n *Node) error {
	s := c.snapshot(n)
	if _, err := c.cli.ContainerKill(ctx, s.ContainerID, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		// Refused because it is not running (409), which is where Kill
		// puts it.
		if st, ierr := c.state(ctx, n); ierr != nil || st.Running {
			return fmt.Errorf("docker: kill %s: %w", n.Name, err)
		}
	}
	select {
	case <-s.exited:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("docker: kill %s: waiting for it to stop: %w", n.Name, ctx.Err())
	}
}

// Start starts name's container (a node or "journal") again after Kill or
// a crash: the same container, so the same filesystem, IP address, host
// port (HTTPAddr) and, for the journal, volume. It returns once a node is
// ready (60 s at most) or the journal healthy (30 s). Starting a container
// that runs (paused or not) does nothing and does not wait.
//
// The node gets a new exited channel: Exited of a Node taken before stays
// closed.
func (c *Cluster) Start(ctx context.Context, name string) error {
	n, unlock, err := c.control(name)
	if err != nil {
		return err
	}
	started, err := c.start(ctx, n)
	unlock()
	if err != nil || !started {
		return err
	}
	// Waiting without the lock: a Kill meanwhile is the caller's to make
	// (and makes the wait fail at once, as the node exits).
	s := c.snapshot(n)
	if name == JournalName {
		return c.waitJournal(ctx, s, 30*time.Second)
	}
	return c.WaitReady(ctx, &s, 60*time.Second)
}

// start starts n's container unless it runs, and reports whether it did.
func (c *Cluster) start(ctx context.Context, n *Node) (bool, error) {
	s := c.snapshot(n)
	st, err := c.state(ctx, n)
	if err != nil {
		return false, fmt.Errorf("docker: start %s: %w", n.Name, err)
	}
	if st.Running {
		return false, nil
	}
	// The watcher of the previous run closes exited once it sees the
	// container stopped; waiting for it keeps one watcher per container.
	select {
	case <-s.exited:
	case <-ctx.Done():
		return false, fmt.Errorf("docker: start %s: waiting for the previous run to be seen stopped: %w", n.Name, ctx.Err())
	}
	if _, err := c.cli.ContainerStart(ctx, s.ContainerID, client.ContainerStartOptions{}); err != nil {
		if isPortConflict(err) {
			return false, fmt.Errorf("docker: start %s: its host port %s was taken while it was stopped (by another process or an outgoing connection): %w", n.Name, s.HTTPAddr, err)
		}
		return false, fmt.Errorf("docker: start %s: %w", n.Name, err)
	}
	exited := make(chan struct{})
	c.mu.Lock()
	n.exited = exited
	c.mu.Unlock()
	go c.watch(n.Name, s.ContainerID, exited)
	return true, nil
}

// Pause freezes every process of name's container (the cgroup freezer):
// its sockets stay open, but nothing answers. Pausing a paused container
// does nothing; a container that is not running is an error.
func (c *Cluster) Pause(ctx context.Context, name string) error {
	n, unlock, err := c.control(name)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := c.cli.ContainerPause(ctx, n.ContainerID, client.ContainerPauseOptions{}); err != nil {
		// Refused (409) if already paused, which is no error, or not
		// running, which is.
		if st, ierr := c.state(ctx, n); ierr != nil || !st.Paused {
			return fmt.Errorf("docker: pause %s: %w", name, err)
		}
	}
	return nil
}

// Unpause thaws name's container. Unpausing a container that is not
// paused does nothing.
func (c *Cluster) Unpause(ctx context.Context, name string) error {
	n, unlock, err := c.control(name)
	if err != nil {
		return err
	}
	defer unlock()
	if _, err := c.cli.ContainerUnpause(ctx, n.ContainerID, client.ContainerUnpauseOptions{}); err != nil {
		// Refused if not paused: with a 500 by Docker 20.10 (API 1.41),
		// so the state decides, not the status code.
		if st, ierr := c.state(ctx, n); ierr != nil || st.Paused {
			return fmt.Errorf("docker: unpause %s: %w", name, err)
		}
	}
	return nil
}

// state inspects n's container.
func (c *Cluster) state(ctx context.Context, n *Node) (container.State, error) {
	ins, err := c.cli.ContainerInspect(ctx, n.ContainerID, client.ContainerInspectOptions{})
	if err != nil {
		return container.State{}, fmt.Errorf("docker: inspect %s: %w", n.Name, err)
	}
	if ins.Container.State == nil {
		return container.State{}, fmt.Errorf("docker: inspect %s: no state", n.Name)
	}
	return *ins.Container.State, nil
}

// AddNode starts one more node the way Start started the others: named
// n<i> for the next index never used in the run (n<N+1> first), at IP
// .(10+i) of the subnet, with the same environment, arguments,
// capabilities and labels, seeded with every node's gossip address and
// its own. It returns once the node is ready (60 s at most); Nodes then
// includes it. If it fails, its container is removed (its log copied to
// Dir first).
func (c *Cluster) AddNode(ctx context.Context) (Node, error) {
	c.mu.Lock()
	if c.ctx == nil || c.ctx.Err() != nil {
		c.mu.Unlock()
		return Node{}, errStopped
	}
	i := c.nextIndex
	c.nextIndex++
	ip := hostIP(c.subnet, 10+i).String()
	var seeds []string
	for _, n := range c.nodes {
		seeds = append(seeds, gossipAddr(n.IP))
	}
	seeds = append(seeds, gossipAddr(ip))
	c.mu.Unlock()
	if 10+i > 254 {
		return Node{}, fmt.Errorf("docker: add node n%d: no address left in %s", i, c.subnet)
	}
	n := &Node{Name: "n" + strconv.Itoa(i), IP: ip}
	err := c.runNode(ctx, n, seeds)
	if err == nil {
		s := c.snapshot(n)
		err = c.WaitReady(ctx, &s, 60*time.Second)
	}
	if err != nil {
		if id := c.snapshot(n).ContainerID; id != "" {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			defer cancel()
			if lerr := c.copyLog(rctx, n); lerr != nil {
				err = fmt.Errorf("%w (and %v)", err, lerr)
			}
			if _, rerr := c.cli.ContainerRemove(rctx, id, client.ContainerRemoveOptions{Force: true}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
				err = fmt.Errorf("%w (and removing its container: %v)", err, rerr)
			}
		}
		return Node{}, fmt.Errorf("docker: add node %s: %w", n.Name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.nodes = append(c.nodes, n)
	return *n, nil
}

// RemoveNode kills node name's container, copies its log to
// Dir/<name>.log and removes the container; Nodes no longer includes it.
// Any node can be removed, not only added ones; the journal cannot.
func (c *Cluster) RemoveNode(ctx context.Context, name string) error {
	if name == JournalName {
		return errors.New("docker: the journal cannot be removed")
	}
	n, unlock, err := c.control(name)
	if err != nil {
		return err
	}
	defer unlock()
	if err := c.kill(ctx, n); err != nil {
		return fmt.Errorf("docker: remove %s: %w", name, err)
	}
	// The log is complete now that the container has stopped, and gone
	// once it is removed: CopyLogs at Stop will not see this node.
	lerr := c.copyLog(ctx, n)
	if _, err := c.cli.ContainerRemove(ctx, n.ContainerID, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		return errors.Join(fmt.Errorf("docker: remove %s: %w", name, err), lerr)
	}
	c.mu.Lock()
	c.nodes = slices.DeleteFunc(c.nodes, func(x *Node) bool { return x == n })
	c.mu.Unlock()
	return lerr
}

// Exec runs argv in name's container (a node or "journal") and returns
// its output and exit status. err is for failing to run it at all (no
// such node, container not running or paused, no such executable, ctx
// ended); a command that ran and failed has err nil and a non-zero
// exitCode.
func (c *Cluster) Exec(ctx context.Context, name string, argv []string) (stdout, stderr string, exitCode int, err error) {
	if len(argv) == 0 {
		return "", "", -1, errors.New("docker: exec: no command")
	}
	n, err := c.lookup(name)
	if err != nil {
		return "", "", -1, err
	}
	fail := func(what string, err error) (string, string, int, error) {
		return "", "", -1, fmt.Errorf("docker: exec %q on %s: %s: %w", strings.Join(argv, " "), name, what, err)
	}
	ex, err := c.cli.ExecCreate(ctx, n.ContainerID, client.ExecCreateOptions{AttachStdout: true, AttachStderr: true, Cmd: argv})
	if err != nil {
		return fail("create", err)
	}
	// ExecAttach starts the command too (no ExecStart: a second start is
	// refused).
	att, err := c.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return fail("start", err)
	}
	defer att.Close()
	// The hijacked connection outlives ctx unless closed.
	stop := context.AfterFunc(ctx, att.Close)
	defer stop()
	var o, e bytes.Buffer
	_, err = stdcopy.StdCopy(&o, &e, att.Reader)
	if ctx.Err() != nil {
		return fail("output", ctx.Err())
	}
	if err != nil {
		return fail("output", err)
	}
	// The output ends when the command exits, but the engine may record
	// its status a moment later.
	for {
		ins, err := c.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
		if err != nil {
			return fail("inspect", err)
		}
		if !ins.Running {
			// An executable the runtime could not start (missing, not
			// executable) is no status of the command's: the engine
			// reports it as status 126 with the runtime's message as
			// output, as `docker exec` shows it.
			if ins.ExitCode == 126 {
				for _, out := range []string{o.String(), e.String()} {
					if strings.Contains(out, "OCI runtime exec failed") {
						return fail("start", errors.New(strings.TrimSpace(out)))
					}
				}
			}
			return o.String(), e.String(), ins.ExitCode, nil
		}
		select {
		case <-ctx.Done():
			return fail("status", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// Net runs `/shardtest net <args...>` in node name's network namespace and
// returns its standard output; a non-zero exit is an *ExitError carrying
// the output. With the reference image it runs in the node's own
// container; with another implementation's image (which has no /shardtest)
// in a one-shot sidecar container of the reference image sharing the
// node's network namespace.
func (c *Cluster) Net(ctx context.Context, name string, args []string) (string, error) {
	return c.inNetNS(ctx, name, append([]string{"/shardtest", "net"}, args...))
}

// inNetNS runs argv, a command of the reference binary, in name's network
// namespace (see Net).
func (c *Cluster) inNetNS(ctx context.Context, name string, argv []string) (string, error) {
	var (
		stdout, stderr string
		code           int
		err            error
	)
	// The journal always runs the reference image.
	if name == JournalName || (c.opts.NodeImage == "" && !c.netSidecar) {
		stdout, stderr, code, err = c.Exec(ctx, name, argv)
	} else {
		stdout, stderr, code, err = c.sidecar(ctx, name, argv)
	}
	if err != nil {
		return "", err
	}
	if code != 0 {
		return stdout, &ExitError{Node: name, Command: argv, Code: code, Stdout: stdout, Stderr: stderr}
	}
	return stdout, nil
}

// sidecar runs argv in a container of the reference image that shares
// name's network namespace (with CAP_NET_ADMIN), waits for it, and
// removes it. It is labelled with the run, so Cleanup removes it if the
// harness dies meanwhile.
func (c *Cluster) sidecar(ctx context.Context, name string, argv []string) (stdout, stderr string, exitCode int, err error) {
	if len(argv) == 0 {
		return "", "", -1, errors.New("docker: sidecar: no command")
	}
	n, err := c.lookup(name)
	if err != nil {
		return "", "", -1, err
	}
	fail := func(what string, err error) (string, string, int, error) {
		return "", "", -1, fmt.Errorf("docker: %q in a sidecar of %s: %s: %w", strings.Join(argv, " "), name, what, err)
	}
	b := make([]byte, 4)
	rand.Read(b)
	labels := c.labels()
	labels["shardtest.name"] = name + "-net"
	labels["shardtest.sidecar-of"] = name
	res, err := c.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: c.containerName(name) + "-net-" + hex.EncodeToString(b),
		Config: &container.Config{
			Image:      c.image,
			Entrypoint: argv[:1],
			Cmd:        argv[1:],
			Labels:     labels,
		},
		HostConfig: &container.HostConfig{
			NetworkMode: container.NetworkMode("container:" + n.ContainerID),
			CapAdd:      []string{"NET_ADMIN"},
		},
	})
	if err != nil {
		return fail("create", err)
	}
	defer func() {
		// Removed even if ctx ended.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if _, rerr := c.cli.ContainerRemove(rctx, res.ID, client.ContainerRemoveOptions{Force: true}); rerr != nil && !cerrdefs.IsNotFound(rerr) && err == nil {
			err = fmt.Errorf("docker: remove the sidecar of %s: %w", name, rerr)
		}
	}()
	// Waiting for the next exit before the start cannot miss it, however
	// short the command.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	w := c.cli.ContainerWait(wctx, res.ID, client.ContainerWaitOptions{Condition: container.WaitConditionNextExit})
	if _, err := c.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{}); err != nil {
		return fail("start", err)
	}
	select {
	case r := <-w.Result:
		if r.Error != nil && r.Error.Message != "" {
			return fail("wait", errors.New(r.Error.Message))
		}
		exitCode = int(r.StatusCode)
	case err := <-w.Error:
		return fail("wait", err)
	}
	rd, err := c.cli.ContainerLogs(ctx, res.ID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return fail("output", err)
	}
	defer rd.Close()
	var o, e bytes.Buffer
	if _, err := stdcopy.StdCopy(&o, &e, rd); err != nil {
		return fail("output", err)
	}
	return o.String(), e.String(), exitCode, nil
}
