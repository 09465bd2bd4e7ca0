// Package local runs a cluster as child processes on 127.0.0.1: a journal
// server and N nodes of the shardtest binary (or any binary taking the same
// flags). It is the harness's Docker-free runtime.
package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/shardtest/shardtest/harness/nodeclient"
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
	binary     string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

// Cluster is a running local cluster.
type Cluster struct {
	opts    Options
	Journal *Process
	Nodes   []*Process
}

// Start starts the journal and the nodes and waits until every node is
// ready. On error, whatever was started is stopped.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Nodes < 1 {
		return nil, fmt.Errorf("local: need at least one node, got %d", opts.Nodes)
	}
	if opts.BasePort < 1024 || opts.BasePort+100+opts.Nodes > 65535 {
		return nil, fmt.Errorf("local: base port %d out of range (1024..%d)", opts.BasePort, 65535-100-opts.Nodes)
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
	c := &Cluster{opts: opts}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	for i := 0; i <= 100+opts.Nodes; i++ {
		if i > opts.Nodes && i < 100 {
			continue
		}
		if err := portFree(opts.BasePort + i); err != nil {
			return nil, fmt.Errorf("local: port %d is taken (choose another --base-port): %w", opts.BasePort+i, err)
		}
	}
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
		seeds = append(seeds, "127.0.0.1:"+strconv.Itoa(opts.BasePort+100+i))
	}
	for i := 1; i <= opts.Nodes; i++ {
		name := "n" + strconv.Itoa(i)
		p := &Process{
			Name:       name,
			HTTPAddr:   "127.0.0.1:" + strconv.Itoa(opts.BasePort+i),
			GossipAddr: seeds[i-1],
			binary:     opts.Binary,
			LogPath:    filepath.Join(opts.Dir, name+".log"),
		}
		p.args = append([]string{"node",
			"--name", name,
			"--http", p.HTTPAddr,
			"--gossip-bind", "127.0.0.1",
			"--gossip-port", strconv.Itoa(opts.BasePort + 100 + i),
			"--seeds", joinComma(seeds),
			"--journal", "http://" + jaddr,
		}, opts.NodeArgs...)
		if err := p.start(); err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, p)
		if i == 1 {
			// The first seed bootstraps; the others join it.
			if err := c.WaitReady(ctx, p, 30*time.Second); err != nil {
				return nil, err
			}
		}
	}
	for _, p := range c.Nodes {
		if err := c.WaitReady(ctx, p, 30*time.Second); err != nil {
			return nil, err
		}
	}
	return c, nil
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

// Exited returns a channel closed when the process has exited.
func (p *Process) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.done
}

// Stop sends SIGTERM, then SIGKILL after grace.
func (p *Process) Stop(grace time.Duration) {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	select {
	case <-done:
		return
	default:
	}
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
	err := nodeclient.New(p.HTTPAddr, nil).WaitReady(ctx, p.Exited(), timeout)
	switch {
	case errors.Is(err, nodeclient.ErrExited):
		return fmt.Errorf("local: %s exited before it was ready (see %s)", p.Name, p.LogPath)
	case err != nil:
		return fmt.Errorf("local: %s (see %s): %w", p.Name, p.LogPath, err)
	}
	return nil
}

// Stop stops every process: nodes first, then the journal.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, p := range c.Nodes {
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
