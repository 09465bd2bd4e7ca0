package run

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/shardtest/shardtest/harness/docker"
)

// remoteEngine is a second Docker daemon in a network namespace of the
// test's own, reached over a veth pair: an engine whose published ports are
// on its host's address, not on the harness's loopback.
type remoteEngine struct {
	ns, addr string // the namespace; the daemon's host address
	pid      int
	dir      string
}

// startRemoteEngine starts one, or skips the test saying why the machine
// cannot.
func startRemoteEngine(t *testing.T) *remoteEngine {
	t.Helper()
	if os.Getenv("SHARDTEST_NO_DOCKER") == "1" {
		t.Skip("SHARDTEST_NO_DOCKER=1")
	}
	if os.Geteuid() != 0 {
		t.Skip("a second Docker daemon in a network namespace needs root")
	}
	for _, tool := range []string{"ip", "nsenter", "dockerd"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s on this machine", tool)
		}
	}
	n := os.Getpid() % 200
	e := &remoteEngine{ns: fmt.Sprintf("st-remote-%d", os.Getpid()), addr: fmt.Sprintf("10.251.%d.2", n), dir: t.TempDir()}
	hostSide, nsSide := fmt.Sprintf("strm%da", os.Getpid()%100000), fmt.Sprintf("strm%db", os.Getpid()%100000)
	sh := func(args ...string) error {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := sh("ip", "netns", "add", e.ns); err != nil {
		t.Skipf("cannot make a network namespace here: %v", err)
	}
	t.Cleanup(func() { sh("ip", "netns", "delete", e.ns) })
	for _, cmd := range [][]string{
		{"ip", "link", "add", hostSide, "type", "veth", "peer", "name", nsSide},
		{"ip", "link", "set", nsSide, "netns", e.ns},
		{"ip", "addr", "add", fmt.Sprintf("10.251.%d.1/24", n), "dev", hostSide},
		{"ip", "link", "set", hostSide, "up"},
		{"ip", "netns", "exec", e.ns, "ip", "addr", "add", e.addr + "/24", "dev", nsSide},
		{"ip", "netns", "exec", e.ns, "ip", "link", "set", nsSide, "up"},
		{"ip", "netns", "exec", e.ns, "ip", "link", "set", "lo", "up"},
	} {
		if err := sh(cmd...); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { sh("ip", "link", "delete", hostSide) })
	// An empty configuration: the machine's daemon.json sets a data root
	// of its own. nsenter --net, not ip netns exec, which remounts /sys
	// and hides the cgroups.
	cfg := filepath.Join(e.dir, "daemon.json")
	os.WriteFile(cfg, []byte("{}"), 0o644)
	args := []string{"--net=/var/run/netns/" + e.ns, "dockerd", "--config-file", cfg, "--host", "tcp://" + e.addr + ":2375",
		"--data-root", filepath.Join(e.dir, "data"), "--exec-root", filepath.Join(e.dir, "exec"), "--pidfile", filepath.Join(e.dir, "docker.pid"),
		"--containerd-namespace", e.ns, "--containerd-plugins-namespace", e.ns + "-p"}
	if _, err := exec.LookPath("fuse-overlayfs"); err == nil {
		args = append(args, "--storage-driver", "fuse-overlayfs")
	}
	logf, _ := os.Create(filepath.Join(e.dir, "dockerd.log"))
	d := exec.Command("nsenter", args...)
	d.Stdout, d.Stderr = logf, logf
	d.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := d.Start(); err != nil {
		t.Fatal(err)
	}
	e.pid = d.Process.Pid
	t.Cleanup(func() {
		// Its containers first (with the daemon's own API), then the
		// daemon, by its PID.
		if cli, err := e.client(); err == nil {
			docker.Cleanup(context.Background(), cli, docker.Selection{All: true})
			cli.Close()
		}
		d.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { d.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			d.Process.Kill()
			<-done
		}
		logf.Close()
		exec.Command("umount", "-R", filepath.Join(e.dir, "data")).Run()
		exec.Command("umount", "-R", filepath.Join(e.dir, "exec")).Run()
	})
	deadline := time.Now().Add(90 * time.Second)
	for {
		cli, err := e.client()
		if err == nil {
			cli.Close()
			return e
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(e.dir, "dockerd.log"))
			t.Skipf("the second Docker daemon did not answer within 90 s (%v); its log ends:\n%s", err, tail(string(log), 2000))
		}
		time.Sleep(time.Second)
	}
}

func (e *remoteEngine) host() string { return "tcp://" + e.addr + ":2375" }

func (e *remoteEngine) client() (*client.Client, error) {
	cli, err := client.New(client.WithHost(e.host()), client.WithAPIVersionNegotiation())
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := docker.Ping(ctx, cli); err != nil {
		cli.Close()
		return nil, err
	}
	return cli, nil
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// A run against a remote engine: the harness builds the image there, starts
// the cluster there, reaches the nodes at the engine's host address (its
// published ports are not on this loopback), injects faults and records the
// node events, and the run is valid.
func TestRemoteEngine(t *testing.T) {
	e := startRemoteEngine(t)
	root := t.TempDir()
	cmd := exec.Command(binary, "run", "--binary", binary, "--time-limit", "10s", "--results", root, "--name", "remote",
		"--nemesis", "partition:halves,kill:one", "--nemesis-interval", "3s")
	cmd.Env = append(os.Environ(), "DOCKER_HOST="+e.host())
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run against %s: %v\n%s", e.host(), err, tail(string(out), 4000))
	}
	if !strings.Contains(string(out), "addr="+e.addr+":") {
		t.Errorf("the nodes were not reached at the engine's host %s:\n%s", e.addr, tail(string(out), 4000))
	}
	dirs, _ := filepath.Glob(filepath.Join(root, "remote", "2*"))
	if len(dirs) != 1 {
		t.Fatalf("run folders %v", dirs)
	}
	var res struct {
		Verdict string `json:"verdict"`
	}
	b, _ := os.ReadFile(filepath.Join(dirs[0], "results.json"))
	if err := json.Unmarshal(b, &res); err != nil || res.Verdict != "valid" {
		t.Errorf("results.json: %v %s", err, tail(string(b), 500))
	}
	if st, err := os.Stat(filepath.Join(dirs[0], "events.jsonl")); err != nil || st.Size() < 100 {
		t.Errorf("no node events recorded: %v", err)
	}
	// Nothing of the run is left on the remote engine.
	cli, err := e.client()
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	left, err := docker.Leftovers(context.Background(), cli, "")
	if err != nil || len(left) > 0 {
		t.Errorf("left on the remote engine: %v %v", left, err)
	}
}
