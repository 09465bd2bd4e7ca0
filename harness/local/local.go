// Package local runs a cluster as child processes on 127.0.0.1: a journal
// server and N nodes of the shardtest binary (or any binary taking the same
// flags). It is the harness's Docker-free runtime.
package local

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/shardtest/shardtest/protocol/client"
)

// Options configures a local cluster.
type Options struct {
	// Binary is the shardtest executable (default: this executable).
	Binary string
	Nodes  int
	// BasePort: the journal listens on BasePort, node i (from 1) serves
	// HTTP on BasePort+i and gossips on BasePort+100+i.
	BasePort int
	// Dir holds the journal's data and every process's log.
	Dir string
	// NodeArgs are extra flags for every node.
	NodeArgs []string
	Logger   *slog.Logger
}

// Process is one child process.
type Process struct {
	Name       string
	HTTPAddr   string
	GossipAddr string
	LogPath    string
	args       []string
	env        []string // added to the harness's environment
	binary     string

	// ctl serialises the calls that start or kill the process, so that
	// two Starts do not run two processes.
	ctl  sync.Mutex
	mu   sync.Mutex // guards cmd, done and err
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// JournalName names the journal in the controls (Kill, Start, ...).
const JournalName = "journal"

// Cluster is a running local cluster.
type Cluster struct {
	opts Options
	// secret is the run's cluster secret, given to every node
	// (SHARDTEST_CLUSTER_SECRET): a stranger cannot talk to their peer
	// endpoints, and neither can another run's nodes.
	secret  string
	Journal *Process
	// Nodes are the nodes, n1 first, then those AddNode added; not those
	// RemoveNode removed. AddNode and RemoveNode replace the slice (never
	// change one handed out) under a lock: code that may run while they
	// do reads NodeList instead.
	Nodes []*Process

	// mu guards Nodes and nextIndex.
	mu sync.Mutex
	// nextIndex is the index of the next node AddNode starts: never one
	// used before in the run, so a removed node's ports are not reused
	// while its old incarnation may still be remembered by the others.
	nextIndex int
	// adding serialises AddNode, whose ports depend on the index.
	adding sync.Mutex
}

// ErrPortTaken: another program holds one of the ports (the range itself
// is usable).
var ErrPortTaken = errors.New("taken")

// CheckPorts checks that a cluster of nodes on base can start: the ports
// are in range and free now (the journal's, each node's HTTP and gossip
// port). It has no side effect, so a caller can refuse a bad --base-port
// before touching anything.
func CheckPorts(base, nodes int) error {
	if base < 1024 || base+100+nodes > 65535 {
		return fmt.Errorf("local: base port %d out of range (1024..%d)", base, 65535-100-nodes)
	}
	if lo, hi, ok := ephemeralRange(); ok {
		if err := checkEphemeral(base, nodes, lo, hi); err != nil {
			return err
		}
	}
	for i := 0; i <= 100+nodes; i++ {
		if i > nodes && i < 100 || i == 100 {
			continue // base+100 is the range's reservation port (ReservePorts)
		}
		if err := portFree(base + i); err != nil {
			return fmt.Errorf("local: port %d is %w (choose another --base-port): %w", base+i, ErrPortTaken, err)
		}
	}
	return nil
}

// ReservePorts claims the range of ports of a cluster on base for the
// caller until release: it holds the range's reservation port, base+100
// (no node uses it: node i gossips on base+100+i, i ≥ 1), open. A second
// program reserving the same range — another suite started at the same
// moment, whose CheckPorts also found the range free — is refused with
// ErrPortTaken, however close together the two start: the kernel lets one
// listener have the port. It claims nothing against a program that does
// not reserve; CheckPorts still checks the range's real ports.
func ReservePorts(base int) (release func(), err error) {
	if base < 1024 || base+100 > 65535 {
		return nil, fmt.Errorf("local: base port %d out of range", base)
	}
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(base+100))
	if err != nil {
		return nil, fmt.Errorf("local: the ports from %d are %w: their reservation port %d is held by another run: %w", base, ErrPortTaken, base+100, err)
	}
	return func() { l.Close() }, nil
}

// Start starts the journal and the nodes and waits until every node is
// ready. On error, whatever was started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("local: need at least one node, got %d", opts.Nodes)
	}
	if err := CheckPorts(opts.BasePort, opts.Nodes); err != nil {
		return nil, err
	}
	if opts.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("local: find own executable: %w", err)
		}
		opts.Binary = exe
	}
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("local: results directory: %w", err)
	}
	c := &Cluster{opts: opts, nextIndex: opts.Nodes + 1, secret: rand.Text()}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	jaddr := "127.0.0.1:" + strconv.Itoa(opts.BasePort)
	c.Journal = &Process{
		Name: "journal", HTTPAddr: jaddr, binary: opts.Binary, LogPath: filepath.Join(opts.Dir, "journal.log"),
		args: []string{"journal", "--listen", jaddr, "--data", filepath.Join(opts.Dir, "journal-data")},
	}
	if err := c.Journal.start(); err != nil {
		return nil, err
	}
	if err := waitHTTP(ctx, "http://"+jaddr+"/v1/health", 20*time.Second); err != nil {
		return nil, fmt.Errorf("local: journal did not come up (see %s): %w", c.Journal.LogPath, err)
	}
	var seeds []string
	for i := 1; i <= opts.Nodes; i++ {
		seeds = append(seeds, gossipAddr(opts.BasePort, i))
	}
	for i := 1; i <= opts.Nodes; i++ {
		p := c.newNode(i, seeds)
		if err := p.start(); err != nil {
			return nil, err
		}
		c.mu.Lock()
		c.Nodes = append(c.Nodes, p)
		c.mu.Unlock()
		if i == 1 {
			// The first seed bootstraps; the others join it.
			if err := c.WaitReady(ctx, p, 30*time.Second); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range c.NodeList() {
		if err := c.WaitReady(ctx, p, 30*time.Second); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// newNode returns (not started) node i, seeded with seeds.
func (c *Cluster) newNode(i int, seeds []string) *Process {
	name := "n" + strconv.Itoa(i)
	p := &Process{
		Name:       name,
		HTTPAddr:   "127.0.0.1:" + strconv.Itoa(c.opts.BasePort+i),
		GossipAddr: gossipAddr(c.opts.BasePort, i),
		binary:     c.opts.Binary,
		LogPath:    filepath.Join(c.opts.Dir, name+".log"),
		env:        []string{protocol.EnvName("cluster-secret") + "=" + c.secret},
	}
	p.args = append([]string{"node",
		"--name", name,
		"--http", p.HTTPAddr,
		"--gossip-bind", "127.0.0.1",
		"--gossip-port", strconv.Itoa(c.opts.BasePort + 100 + i),
		"--seeds", joinComma(seeds),
		"--journal", "http://" + c.Journal.HTTPAddr,
	}, c.opts.NodeArgs...)
	return p
}

func gossipAddr(basePort, i int) string {
	return "127.0.0.1:" + strconv.Itoa(basePort+100+i)
}

// NodeList returns a copy of Nodes, read under the lock AddNode and
// RemoveNode take.
func (c *Cluster) NodeList() []*Process {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*Process(nil), c.Nodes...)
}

func joinComma(s []string) string {
	out := ""
	for i, x := range s {
		if i > 0 {
			out += ","
		}
		out += x
	}
	return out
}

// ephemeralPorts is where Linux says which ports it hands to outgoing
// connections.
const ephemeralPorts = "/proc/sys/net/ipv4/ip_local_port_range"

// ephemeralRange is this machine's ephemeral port range, if it can tell.
func ephemeralRange() (lo, hi int, ok bool) {
	b, err := os.ReadFile(ephemeralPorts)
	if err != nil {
		return 0, 0, false
	}
	if _, err := fmt.Sscan(string(b), &lo, &hi); err != nil || lo > hi {
		return 0, 0, false
	}
	return lo, hi, true
}

// checkEphemeral refuses a cluster's ports (base..base+nodes and
// base+100..base+100+nodes) that fall in the ephemeral range lo..hi: a
// port free when checked is taken at random moments later by one of the
// machine's own outgoing connections (the harness's, to the nodes), so
// runs there fail to start now and then. Measured: shrinks on base ports
// above 32768 failed most of their tries with "port ... is taken".
func checkEphemeral(base, nodes, lo, hi int) error {
	first, last := base, base+100+nodes
	if last < lo || first > hi {
		return nil
	}
	below := lo - 101 - nodes
	if below < 1024 && hi+101+nodes > 65535 {
		// The range leaves no room for a cluster outside it: take the
		// risk rather than refuse every port.
		return nil
	}
	return fmt.Errorf("local: ports %d..%d overlap this machine's ephemeral port range %d..%d (%s), which its outgoing connections take at random: choose a --base-port from 1024 to %d, or above %d",
		first, last, lo, hi, ephemeralPorts, below, hi)
}

func portFree(port int) error {
	l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
	if err != nil {
		return err
	}
	return l.Close()
}

func (p *Process) start() error {
	logf, err := os.OpenFile(p.LogPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("local: log file for %s: %w", p.Name, err)
	}
	cmd := exec.Command(p.binary, p.args...)
	if len(p.env) > 0 {
		cmd.Env = append(os.Environ(), p.env...)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	// Own process group: a Ctrl-C to the harness does not reach the nodes
	// directly; the harness stops them itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("local: start %s: %w", p.Name, err)
	}
	done := make(chan struct{})
	p.mu.Lock()
	p.cmd, p.done = cmd, done
	p.mu.Unlock()
	go func() {
		err := cmd.Wait()
		logf.Close()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(done)
	}()
	return nil
}

// Exited returns a channel closed when the process has exited. A process
// started again (Cluster.Start) gets a new channel: call Exited again.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Pid is the process id of the current (or last) run of the process, 0 if
// it never started.
func (p *Process) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil || p.cmd.Process == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// running returns the current run's command if it has not exited.
func (p *Process) running() (*exec.Cmd, chan struct{}, bool) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return nil, nil, false
	}
	select {
	case <-done:
		return cmd, done, false
	default:
		return cmd, done, true
	}
}

// Stop sends SIGTERM, then SIGKILL after grace. A paused (SIGSTOPped)
// process is continued first, or it would not act on SIGTERM.
func (p *Process) Stop(grace time.Duration) {
	cmd, done, ok := p.running()
	if !ok {
		return
	}
	cmd.Process.Signal(syscall.SIGCONT)
	cmd.Process.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		cmd.Process.Kill()
		<-done
	}
}

// WaitReady waits until the node reports itself ready.
func (c *Cluster) WaitReady(ctx context.Context, p *Process, timeout time.Duration) error {
	err := client.New(p.HTTPAddr, nil).WaitReady(ctx, p.Exited(), timeout)
	switch {
	case errors.Is(err, client.ErrExited):
		return fmt.Errorf("local: %s exited before it was ready (see %s)", p.Name, p.LogPath)
	case err != nil:
		return fmt.Errorf("local: %s (see %s): %w", p.Name, p.LogPath, err)
	}
	return nil
}

// Secret is the run's cluster secret: shardtest conform --probe forges
// member requests with it (a local cluster's members share the harness's
// address, so such a request passes for a member's).
func (c *Cluster) Secret() string { return c.secret }

// Stop stops every process (paused ones too): nodes first, then the
// journal.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, p := range c.NodeList() {
		wg.Add(1)
		go func() { defer wg.Done(); p.Stop(5 * time.Second) }()
	}
	wg.Wait()
	if c.Journal != nil {
		c.Journal.Stop(5 * time.Second)
	}
}

func waitHTTP(ctx context.Context, url string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		res, err := http.DefaultClient.Do(req)
		if err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Errorf("status %d", res.StatusCode)
		} else {
			last = err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if last == nil {
		last = errors.New("timed out")
	}
	return last
}

// kill sends SIGKILL (which also ends a stopped process) and waits until
// the process has exited. A process that is not running is left alone.
func (p *Process) kill(ctx context.Context) error {
	cmd, done, ok := p.running()
	if !ok {
		return nil
	}
	if err := cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("local: kill %s: %w", p.Name, err)
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("local: kill %s: waiting for it to exit: %w", p.Name, ctx.Err())
	}
}

// lookup returns the node (or the journal) called name.
func (c *Cluster) lookup(name string) (*Process, error) {
	if name == JournalName && c.Journal != nil {
		return c.Journal, nil
	}
	for _, p := range c.NodeList() {
		if p.Name == name {
			return p, nil
		}
	}
	return nil, fmt.Errorf("local: no node %q", name)
}

// Kill sends SIGKILL to name's process (a node or "journal") and returns
// once it has exited. Killing a process that is not running does nothing.
func (c *Cluster) Kill(ctx context.Context, name string) error {
	p, err := c.lookup(name)
	if err != nil {
		return err
	}
	p.ctl.Lock()
	defer p.ctl.Unlock()
	return p.kill(ctx)
}

// Start starts name's process (a node or "journal") again after Kill or a
// crash, with the same arguments (so the same ports and data) and log file
// (appended to), and returns once a node is ready (60 s at most) or the
// journal healthy (20 s). Starting a running process, paused or not, does
// nothing and does not wait.
func (c *Cluster) Start(ctx context.Context, name string) error {
	p, err := c.lookup(name)
	if err != nil {
		return err
	}
	p.ctl.Lock()
	if _, _, ok := p.running(); ok {
		p.ctl.Unlock()
		return nil
	}
	err = p.start()
	p.ctl.Unlock()
	if err != nil {
		return err
	}
	if p == c.Journal {
		if err := waitHTTP(ctx, "http://"+p.HTTPAddr+"/v1/health", 20*time.Second); err != nil {
			return fmt.Errorf("local: journal did not come up again (see %s): %w", p.LogPath, err)
		}
		return nil
	}
	return c.WaitReady(ctx, p, 60*time.Second)
}

// Pause stops name's process with SIGSTOP (a node or "journal"): its
// sockets stay open, but nothing answers. It returns once the process is
// stopped (where /proc tells). Pausing a paused process does nothing; one
// that is not running is an error.
func (c *Cluster) Pause(ctx context.Context, name string) error {
	pid, err := c.signal(name, syscall.SIGSTOP, false)
	if err != nil {
		return err
	}
	if err := waitStopped(ctx, pid); err != nil {
		return fmt.Errorf("local: pause %s: %w", name, err)
	}
	return nil
}

// Resume continues name's process with SIGCONT. Resuming a process that
// is not paused, or not running, does nothing.
func (c *Cluster) Resume(ctx context.Context, name string) error {
	_, err := c.signal(name, syscall.SIGCONT, true)
	return err
}

// signal sends sig to name's process and returns its pid.
func (c *Cluster) signal(name string, sig syscall.Signal, notRunningOK bool) (int, error) {
	p, err := c.lookup(name)
	if err != nil {
		return 0, err
	}
	p.ctl.Lock()
	defer p.ctl.Unlock()
	cmd, _, ok := p.running()
	if ok {
		// os.Process.Signal, not kill(2) on the pid: it cannot reach
		// another process that reused the pid after this one exited.
		err = cmd.Process.Signal(sig)
	}
	if !ok || errors.Is(err, os.ErrProcessDone) {
		if notRunningOK {
			return 0, nil
		}
		return 0, fmt.Errorf("local: %v to %s: not running", sig, name)
	}
	if err != nil {
		return 0, fmt.Errorf("local: %v to %s: %w", sig, name, err)
	}
	return cmd.Process.Pid, nil
}

// waitStopped waits until Linux reports pid stopped (or gone), as SIGSTOP
// takes effect asynchronously; where /proc cannot tell, it returns at
// once.
func waitStopped(ctx context.Context, pid int) error {
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return nil
		}
		// "pid (comm) state ...": comm may itself hold ") ".
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return nil
		}
		switch b[i+2] {
		case 'T', 't', 'Z', 'X':
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// AddNode starts one more node the way Start started the others: named
// n<i> for the next index never used in the run (n<N+1> first), serving
// HTTP on BasePort+i and gossiping on BasePort+100+i, with the same
// NodeArgs, seeded with every node's gossip address and its own. It
// returns once the node is ready (60 s at most), appended to Nodes. If it
// fails, the process is killed.
func (c *Cluster) AddNode(ctx context.Context) (*Process, error) {
	c.adding.Lock()
	defer c.adding.Unlock()
	c.mu.Lock()
	i := c.nextIndex
	var seeds []string
	for _, p := range c.Nodes {
		seeds = append(seeds, p.GossipAddr)
	}
	c.mu.Unlock()
	seeds = append(seeds, gossipAddr(c.opts.BasePort, i))
	// Above 99, node i's HTTP port would be node i-100's gossip port.
	if i > 99 || c.opts.BasePort+100+i > 65535 {
		return nil, fmt.Errorf("local: add node n%d: no ports left above base port %d (at most 99 nodes)", i, c.opts.BasePort)
	}
	for _, port := range []int{c.opts.BasePort + i, c.opts.BasePort + 100 + i} {
		if err := portFree(port); err != nil {
			return nil, fmt.Errorf("local: add node n%d: port %d is taken: %w", i, port, err)
		}
	}
	p := c.newNode(i, seeds)
	if err := p.start(); err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.nextIndex = i + 1
	c.mu.Unlock()
	if err := c.WaitReady(ctx, p, 60*time.Second); err != nil {
		kctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if kerr := p.kill(kctx); kerr != nil {
			err = fmt.Errorf("%w (and %v)", err, kerr)
		}
		return nil, fmt.Errorf("local: add node %s: %w", p.Name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Nodes = append(append([]*Process(nil), c.Nodes...), p)
	return p, nil
}

// RemoveNode kills node name's process and drops it from Nodes. Any node
// can be removed; the journal cannot.
func (c *Cluster) RemoveNode(ctx context.Context, name string) error {
	if name == JournalName {
		return errors.New("local: the journal cannot be removed")
	}
	p, err := c.lookup(name)
	if err != nil {
		return err
	}
	p.ctl.Lock()
	defer p.ctl.Unlock()
	if err := p.kill(ctx); err != nil {
		return fmt.Errorf("local: remove %s: %w", name, err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.Nodes = slices.DeleteFunc(append([]*Process(nil), c.Nodes...), func(x *Process) bool { return x == p })
	return nil
}
