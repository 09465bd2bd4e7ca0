package docker

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	nodeclient "github.com/shardtest/shardtest/protocol/client"
)

// Ports inside the containers.
const (
	JournalPort = 7400
	HTTPPort    = 7500
	GossipPort  = 7946
)

// subnetBase is the /16 the clusters' /24 subnets are chosen from.
var subnetBase = netip.MustParsePrefix("172.30.0.0/16")

// Options configures a Docker cluster.
type Options struct {
	Nodes int
	// RunID names the run (letters, digits, '.', '_', '-'); default random.
	RunID string
	// Dir receives every container's log (<name>.log).
	Dir string
	// NodeArgs are extra command-line flags for every node.
	NodeArgs []string
	// NodeEnv are extra environment variables for every node; they must
	// not repeat the protocol's own (run refuses such settings).
	NodeEnv []string
	// NodeImage runs the nodes from another image that meets
	// docs/protocol.md (default: the reference node built from Binary, which
	// also runs the journal).
	NodeImage string
	// Binary is a static shardtest binary for the image (default
	// StaticBinary).
	Binary string
	Logger *slog.Logger
	// Client is the engine to use (default NewClient). Stop closes it only
	// if Start opened it.
	Client *client.Client
}

// Node is one container of the cluster.
type Node struct {
	Name string
	// HTTPAddr is the node protocol address published on the host
	// (127.0.0.1:port, or the engine's host's address for a remote engine). It stays the same for the container's life, across
	// Kill and Start.
	HTTPAddr    string
	IP          string // on the cluster network
	ContainerID string
	exited      chan struct{}
}

// Exited returns a channel closed once the container has stopped running.
// A container started again by Cluster.Start gets a new channel: the one of
// a Node taken before stays closed, so take Nodes (or Journal) again.
func (n Node) Exited() <-chan struct{} { return n.exited }

// Cluster is a running Docker cluster.
type Cluster struct {
	opts      Options
	cli       *client.Client
	ownClient bool
	runID     string
	image     string
	network   string
	subnet    netip.Prefix
	// engine is where the published ports are (the engine's host).
	engine Engine

	// mu guards journal, nodes, nextIndex, ctl and the exited channel of
	// every Node they point to (Start replaces it); a Node's other fields
	// are set before it is published and never change.
	mu      sync.Mutex
	journal *Node
	nodes   []*Node
	// nextIndex is the index of the next node AddNode creates: never one
	// used before in the run, so a removed node's container name, address
	// and log file are not reused.
	nextIndex int
	// ctl holds, per container name, a lock that serialises the calls
	// changing that container's state (Kill, Start, Pause, Unpause,
	// RemoveNode), so that, e.g., two Starts do not both install a watcher.
	ctl map[string]*sync.Mutex
	// netSidecar makes Net use a sidecar container even when the nodes run
	// the reference image (tests of the sidecar path).
	netSidecar bool
	// secret is the run's cluster secret, given to every node
	// (SHARDTEST_CLUSTER_SECRET).
	secret string

	// ctx ends the containers' watchers at Stop.
	ctx    context.Context
	cancel context.CancelFunc

	stopOnce sync.Once
	stopErr  error
}

var runIDPattern = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,39}$`)

// NewRunID returns a fresh random run id.
func NewRunID() string {
	b := make([]byte, 4)
	rand.Read(b)
	return time.Now().UTC().Format("0102-150405") + "-" + hex.EncodeToString(b)
}

// Subnet returns the /24 of 172.30.0.0/16 for a run on its attempt-th try
// (from 0): the run id's hash picks the first, later tries the next ones.
func Subnet(runID string, attempt int) netip.Prefix {
	h := fnv.New32a()
	h.Write([]byte(runID))
	third := (h.Sum32() + uint32(attempt)) % 256
	a := subnetBase.Addr().As4()
	a[2] = byte(third)
	return netip.PrefixFrom(netip.AddrFrom4(a), 24)
}

// hostIP returns address .last of a /24.
func hostIP(subnet netip.Prefix, last int) netip.Addr {
	a := subnet.Addr().As4()
	a[3] = byte(last)
	return netip.AddrFrom4(a)
}

// Start creates the network, the journal and the nodes, and waits until
// every node is ready. If it fails, it removes everything it created.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Nodes < 1 || opts.Nodes > 200 {
		return nil, fmt.Errorf("docker: want 1 to 200 nodes, got %d", opts.Nodes)
	}
	if opts.RunID == "" {
		opts.RunID = NewRunID()
	}
	if !runIDPattern.MatchString(opts.RunID) {
		return nil, fmt.Errorf("docker: run id %q: want up to 40 letters, digits, '.', '_' or '-'", opts.RunID)
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if opts.Dir == "" {
		return nil, errors.New("docker: Options.Dir (for the logs) is required")
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("docker: results directory: %w", err)
	}
	c := &Cluster{opts: opts, cli: opts.Client, runID: opts.RunID, nextIndex: opts.Nodes + 1, secret: rand.Text()}
	if c.cli == nil {
		if c.cli, err = NewClient(ctx); err != nil {
			return nil, err
		}
		c.ownClient = true
	} else if err := Ping(ctx, c.cli); err != nil {
		return nil, err
	}
	if c.engine, err = EngineAt(c.cli.DaemonHost()); err != nil {
		c.closeClient()
		return nil, err
	}
	if opts.Binary == "" {
		if opts.Binary, err = StaticBinary(ctx); err != nil {
			c.closeClient()
			return nil, err
		}
	} else if static, err := IsStaticELF(opts.Binary); !static {
		c.closeClient()
		if err == nil {
			err = errors.New("it needs a program interpreter (libc)")
		}
		return nil, fmt.Errorf("docker: --binary %s is not a static Linux executable (%v); build it with CGO_ENABLED=0 go build ./cmd/shardtest", opts.Binary, err)
	}
	c.ctx, c.cancel = context.WithCancel(context.WithoutCancel(ctx))
	defer func() {
		if err != nil {
			if ctx.Err() != nil {
				err = fmt.Errorf("docker: interrupted while starting run %s; removing what was created: %w", c.runID, err)
			}
			// Clean up even if ctx was cancelled (Ctrl-C).
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if serr := c.Stop(sctx); serr != nil {
				err = fmt.Errorf("%w (and cleaning up: %v)", err, serr)
			}
		}
	}()
	log := opts.Logger.With("run", c.runID)
	t0 := time.Now()
	if c.image, err = EnsureImage(ctx, c.cli, opts.Binary); err != nil {
		return nil, err
	}
	log.Info("docker: image ready", "image", c.image, "took", time.Since(t0).Round(time.Millisecond))
	if opts.NodeImage != "" {
		if _, err := c.cli.ImageInspect(ctx, opts.NodeImage); err != nil {
			return nil, fmt.Errorf("docker: node image %s: %w (shardtest never pulls images: build or load it into the engine first)", opts.NodeImage, err)
		}
	}
	if err := c.createNetwork(ctx); err != nil {
		return nil, err
	}
	log.Info("docker: network created", "network", c.network, "subnet", c.subnet)

	jip := hostIP(c.subnet, 2)
	vol := "shardtest-" + c.runID + "-journal-data"
	if _, err := c.cli.VolumeCreate(ctx, client.VolumeCreateOptions{Name: vol, Labels: c.labels()}); err != nil {
		return nil, fmt.Errorf("docker: create volume %s: %w", vol, err)
	}
	journal := &Node{Name: "journal", IP: jip.String()}
	c.mu.Lock()
	c.journal = journal
	c.mu.Unlock()
	var seeds []string
	for i := 1; i <= opts.Nodes; i++ {
		seeds = append(seeds, gossipAddr(hostIP(c.subnet, 10+i).String()))
	}
	// The first seed starts alone (with the journal, which it waits for)
	// and is awaited: it is then the journal's first member and
	// bootstraps at once (docs/reference-node.md, Joining). The others
	// start together and join it; one after another they cost a container
	// start each.
	nodes := make([]*Node, opts.Nodes)
	for i := range nodes {
		nodes[i] = &Node{Name: "n" + strconv.Itoa(i+1), IP: hostIP(c.subnet, 11+i).String()}
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, nodes...)
	c.mu.Unlock()
	var jerr, nerr error
	var started sync.WaitGroup
	started.Add(2)
	go func() {
		defer started.Done()
		jerr = c.run(ctx, journal, JournalPort,
			&container.Config{
				Entrypoint: []string{"/shardtest", "journal"},
				Cmd:        []string{"--listen", "0.0.0.0:" + strconv.Itoa(JournalPort), "--data", "/data"},
			},
			&container.HostConfig{
				Mounts: []mount.Mount{{Type: mount.TypeVolume, Source: vol, Target: "/data"}},
			})
	}()
	go func() {
		defer started.Done()
		nerr = c.runNode(ctx, nodes[0], seeds)
	}()
	started.Wait()
	if err := errors.Join(jerr, nerr); err != nil {
		return nil, err
	}
	if err := c.waitJournal(ctx, *journal, 30*time.Second); err != nil {
		return nil, err
	}
	log.Info("docker: journal up", "addr", journal.HTTPAddr)
	if err := c.WaitReady(ctx, nodes[0], 60*time.Second); err != nil {
		return nil, err
	}
	log.Info("docker: first node ready", "node", nodes[0].Name, "addr", nodes[0].HTTPAddr, "took", time.Since(t0).Round(time.Millisecond))
	errs := make([]error, len(nodes))
	var wg sync.WaitGroup
	for i, n := range nodes[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.runNode(ctx, n, seeds)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	log.Info("docker: nodes started", "nodes", opts.Nodes, "took", time.Since(t0).Round(time.Millisecond))
	for _, n := range c.Nodes() {
		if err := c.WaitReady(ctx, &n, 60*time.Second); err != nil {
			return nil, err
		}
	}
	log.Info("docker: cluster ready", "nodes", opts.Nodes, "took", time.Since(t0).Round(time.Millisecond))
	return c, nil
}

func gossipAddr(ip string) string { return ip + ":" + strconv.Itoa(GossipPort) }

// runNode creates and starts node n (Name and IP set) with the given seeds.
func (c *Cluster) runNode(ctx context.Context, n *Node, seeds []string) error {
	jip := hostIP(c.subnet, 2).String()
	env := []string{
		"SHARDTEST_NAME=" + n.Name,
		"SHARDTEST_HTTP=0.0.0.0:" + strconv.Itoa(HTTPPort),
		"SHARDTEST_HTTP_ADVERTISE=" + n.IP + ":" + strconv.Itoa(HTTPPort),
		"SHARDTEST_GOSSIP_BIND=" + n.IP,
		"SHARDTEST_GOSSIP_PORT=" + strconv.Itoa(GossipPort),
		"SHARDTEST_SEEDS=" + strings.Join(seeds, ","),
		"SHARDTEST_JOURNAL=http://" + jip + ":" + strconv.Itoa(JournalPort),
		"SHARDTEST_CLUSTER_SECRET=" + c.secret,
	}
	env = append(env, c.opts.NodeEnv...)
	return c.run(ctx, n, HTTPPort,
		// Nodes start from the environment alone (docs/protocol.md), with
		// NodeArgs as extra arguments, whatever the image.
		&container.Config{Image: c.opts.NodeImage, Cmd: c.opts.NodeArgs, Env: env},
		&container.HostConfig{CapAdd: []string{"NET_ADMIN"}})
}

func (c *Cluster) labels() map[string]string {
	l := map[string]string{LabelManaged: "true", LabelRun: c.runID}
	if h, ok := ThisHost(); ok {
		if o, ok := h.Self(); ok {
			maps.Copy(l, o.Labels())
		}
	}
	return l
}

func (c *Cluster) closeClient() {
	if c.ownClient && c.cli != nil {
		c.cli.Close()
	}
}

// createNetwork creates the run's bridge network on the first /24 that
// does not overlap another network.
func (c *Cluster) createNetwork(ctx context.Context) error {
	name := "shardtest-" + c.runID
	var last error
	for attempt := range 32 {
		subnet := Subnet(c.runID, attempt)
		_, err := c.cli.NetworkCreate(ctx, name, client.NetworkCreateOptions{
			Driver: "bridge",
			IPAM: &network.IPAM{Config: []network.IPAMConfig{{
				Subnet:  subnet,
				Gateway: hostIP(subnet, 1),
			}}},
			Labels: c.labels(),
		})
		if err == nil {
			c.network, c.subnet = name, subnet
			return nil
		}
		if !strings.Contains(strings.ToLower(err.Error()), "overlap") {
			return fmt.Errorf("docker: create network %s (%s): %w", name, subnet, err)
		}
		last = err
	}
	return fmt.Errorf("docker: create network %s: no free /24 in %s: %w", name, subnetBase, last)
}

// containerName is the container name of the run's node (or journal).
func (c *Cluster) containerName(name string) string {
	return "shardtest-" + c.runID + "-" + name
}

// run creates and starts n's container on the cluster network with the
// given port published on the engine's host (127.0.0.1 when local), and starts watching for its exit. It
// sets n's ContainerID once the container exists (so CopyLogs finds it even
// if starting it fails), then HTTPAddr and the exited channel.
//
// The host port is chosen here rather than by the engine: a port the
// engine picks is picked again at every start, so a node killed and
// started again would move, and the harness's clients would lose it. A
// port fixed in the container's configuration stays the node's for the
// container's life.
func (c *Cluster) run(ctx context.Context, n *Node, port int, cfg *container.Config, hc *container.HostConfig) error {
	p, err := network.ParsePort(strconv.Itoa(port) + "/tcp")
	if err != nil {
		return err
	}
	if cfg.Image == "" {
		cfg.Image = c.image
	}
	cfg.Hostname = n.Name
	cfg.Labels = c.labels()
	cfg.Labels["shardtest.name"] = n.Name
	cfg.ExposedPorts = network.PortSet{p: {}}
	hc.NetworkMode = container.NetworkMode(c.network)
	ip := netip.MustParseAddr(n.IP)
	name := c.containerName(n.Name)
	const tries = 5
	var last error
	for range tries {
		hostPort, err := pickHostPort(c.engine.Remote)
		if err != nil {
			return fmt.Errorf("docker: container %s: %w", name, err)
		}
		hc.PortBindings = network.PortMap{p: {{HostIP: c.engine.Bind, HostPort: strconv.Itoa(hostPort)}}}
		res, err := c.cli.ContainerCreate(ctx, client.ContainerCreateOptions{
			Name:       name,
			Config:     cfg,
			HostConfig: hc,
			NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
				c.network: {IPAMConfig: &network.EndpointIPAMConfig{IPv4Address: ip}},
			}},
		})
		if err != nil {
			return fmt.Errorf("docker: create container %s: %w", name, err)
		}
		c.mu.Lock()
		n.ContainerID = res.ID
		c.mu.Unlock()
		_, err = c.cli.ContainerStart(ctx, res.ID, client.ContainerStartOptions{})
		if err == nil {
			exited := make(chan struct{})
			c.mu.Lock()
			n.HTTPAddr = net.JoinHostPort(c.engine.Host, strconv.Itoa(hostPort))
			n.exited = exited
			c.mu.Unlock()
			go c.watch(n.Name, res.ID, exited)
			return nil
		}
		if !isPortConflict(err) {
			return fmt.Errorf("docker: start container %s: %w", name, err)
		}
		// Something took the port between pickHostPort and the engine's
		// bind (the port is only fixed at start): try another. The name
		// is reused, so the container must go first.
		last = err
		if _, rerr := c.cli.ContainerRemove(context.WithoutCancel(ctx), res.ID, client.ContainerRemoveOptions{Force: true}); rerr != nil && !cerrdefs.IsNotFound(rerr) {
			return fmt.Errorf("docker: start container %s: %w (and removing it to retry on another port: %v)", name, err, rerr)
		}
		c.mu.Lock()
		n.ContainerID = ""
		c.mu.Unlock()
	}
	return fmt.Errorf("docker: start container %s: host port taken %d times in a row: %w", name, tries, last)
}

// isPortConflict reports whether err is the engine failing to bind a
// published host port: "port is already allocated" when another container
// holds it, "address already in use" when another process does.
func isPortConflict(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "port is already allocated") || strings.Contains(msg, "address already in use")
}

// pickHostPort returns a TCP port free on 127.0.0.1 at the time of the
// call, for a container to keep for its life; for a remote engine, whose
// host's ports cannot be checked from here, one above this machine's
// ephemeral range, taken at random (the engine refuses a taken one, and
// run tries another).
//
// It prefers a port above the kernel's ephemeral range: between a Kill
// and a Start, while the engine does not hold the port, the host's own
// outgoing connections (the harness's clients, to the other nodes) draw
// their source ports from that range, and one that drew the node's port
// would make the Start fail to bind it. Where there is no such room (or no
// /proc), it takes a port the kernel picks.
func pickHostPort(remote bool) (int, error) {
	if remote {
		hi := 60999 // Linux's default end of the range
		if _, h, ok := ephemeralRange(); ok && h < 65535-100 {
			hi = h
		}
		return hi + 1 + mrand.IntN(65535-hi), nil
	}
	if _, hi, ok := ephemeralRange(); ok && hi < 65535-100 {
		for range 20 {
			port := hi + 1 + mrand.IntN(65535-hi)
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
			if err == nil {
				l.Close()
				return port, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pick a host port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralRange reads the kernel's range of ports for outgoing
// connections.
func ephemeralRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0, false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0, false
	}
	lo, err1 := strconv.Atoi(f[0])
	hi, err2 := strconv.Atoi(f[1])
	if err1 != nil || err2 != nil || lo < 1 || hi < lo || hi > 65535 {
		return 0, 0, false
	}
	return lo, hi, true
}

// watch closes exited once the container id (of the node or journal
// name) is no longer running, or the cluster's ctx ends (Stop).
func (c *Cluster) watch(name, id string, exited chan struct{}) {
	defer close(exited)
	w := c.cli.ContainerWait(c.ctx, id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
	select {
	case <-w.Result:
		return
	case err := <-w.Error:
		if c.ctx.Err() != nil {
			return
		}
		c.opts.Logger.Debug("docker: wait failed; polling", "container", name, "err", err)
	}
	// Fall back to polling.
	for {
		ins, err := c.cli.ContainerInspect(c.ctx, id, client.ContainerInspectOptions{})
		if c.ctx.Err() != nil {
			return
		}
		if err == nil && (ins.Container.State == nil || !ins.Container.State.Running) {
			return
		}
		if err != nil && (cerrdefs.IsNotFound(err) || strings.Contains(err.Error(), "No such container")) {
			return
		}
		select {
		case <-c.ctx.Done():
			return
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// waitJournal waits until the journal j answers its health check.
func (c *Cluster) waitJournal(ctx context.Context, j Node, timeout time.Duration) error {
	url := "http://" + j.HTTPAddr + "/v1/health"
	deadline := time.Now().Add(timeout)
	var last error
	for {
		rctx, cancel := context.WithTimeout(ctx, time.Second)
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				cancel()
				return nil
			}
			err = fmt.Errorf("status %d", res.StatusCode)
		}
		cancel()
		last = err
		select {
		case <-j.exited:
			return fmt.Errorf("docker: the journal container exited before it was healthy: %s", c.tail(ctx, &j))
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("docker: journal not healthy after %v: %v", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// WaitReady waits until the node reports itself ready.
func (c *Cluster) WaitReady(ctx context.Context, n *Node, timeout time.Duration) error {
	err := nodeclient.New(n.HTTPAddr, nil).WaitReady(ctx, n.exited, timeout)
	switch {
	case errors.Is(err, nodeclient.ErrExited):
		return fmt.Errorf("docker: %s exited before it was ready: %s", n.Name, c.tail(ctx, n))
	case err != nil:
		return fmt.Errorf("docker: %s: %w", n.Name, err)
	}
	return nil
}

// tail returns the last lines of a container's log, for an error message.
func (c *Cluster) tail(ctx context.Context, n *Node) string {
	rd, err := c.cli.ContainerLogs(context.WithoutCancel(ctx), n.ContainerID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true, Tail: "5"})
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	defer rd.Close()
	var b strings.Builder
	stdcopy.StdCopy(&b, &b, rd)
	return "last log lines: " + strings.Join(strings.Fields(strings.ReplaceAll(b.String(), "\n", " | ")), " ")
}

// RunID is the run's id (the value of the shardtest.run label).
func (c *Cluster) RunID() string { return c.runID }

// Network is the name of the cluster network.
func (c *Cluster) Network() string { return c.network }

// Subnet is the cluster network's subnet.
func (c *Cluster) Subnet() netip.Prefix { return c.subnet }

// Image is the reference image's tag (the journal's, and the nodes' unless
// NodeImage is set).
func (c *Cluster) Image() string { return c.image }

// NodeImage is the image under test, if one was given.
func (c *Cluster) NodeImage() string { return c.opts.NodeImage }

// Journal is the journal container (HTTPAddr is its published address).
func (c *Cluster) Journal() Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.journal == nil {
		return Node{}
	}
	return *c.journal
}

// Nodes returns the nodes, n1 first, then those AddNode added, in order;
// not those RemoveNode removed.
func (c *Cluster) Nodes() []Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Node, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = *n
	}
	return out
}

// CopyLogs writes each container's stdout and stderr to Dir/<name>.log.
func (c *Cluster) CopyLogs(ctx context.Context) error {
	var errs []error
	all := c.Nodes()
	if j := c.Journal(); j.Name != "" {
		all = append([]Node{j}, all...)
	}
	errs = make([]error, len(all))
	var wg sync.WaitGroup
	for i, n := range all {
		if n.ContainerID == "" {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.copyLog(ctx, &n)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Cluster) copyLog(ctx context.Context, n *Node) error {
	rd, err := c.cli.ContainerLogs(ctx, n.ContainerID, client.ContainerLogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return fmt.Errorf("docker: logs of %s: %w", n.Name, err)
	}
	defer rd.Close()
	f, err := os.Create(filepath.Join(c.opts.Dir, n.Name+".log"))
	if err != nil {
		return fmt.Errorf("docker: log of %s: %w", n.Name, err)
	}
	_, err = stdcopy.StdCopy(f, f, rd)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("docker: log of %s: %w", n.Name, err)
	}
	return nil
}

// Stop copies the logs, then removes the run's containers (killing
// them, paused or not; sidecars and added nodes too: everything labelled
// with the run), its network and its volumes. It is safe to call more than
// once. The other controls fail after Stop.
func (c *Cluster) Stop(ctx context.Context) error {
	c.stopOnce.Do(func() {
		var errs []error
		if err := c.CopyLogs(ctx); err != nil {
			errs = append(errs, err)
		}
		if _, err := Cleanup(ctx, c.cli, Selection{Run: c.runID}); err != nil {
			errs = append(errs, err)
		}
		if c.cancel != nil {
			c.cancel()
		}
		c.closeClient()
		c.stopErr = errors.Join(errs...)
	})
	return c.stopErr
}
