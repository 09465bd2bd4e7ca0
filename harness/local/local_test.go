package local

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/internal/testbin"
	"github.com/shardtest/shardtest/protocol/nodetest"
)

// basePort is this package's range: 24400..24599 (harness/run's tests use
// 18400..19600, the command's default is 17400).
const basePort = 24400

// binary is a shardtest build for the child processes (the test binary
// itself is not one).
var binary string

func TestMain(m *testing.M) { testbin.Main(m, "shardtest-local-test", &binary) }

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func lookup(t *testing.T, c *Cluster, name string) *Process {
	t.Helper()
	p, err := c.lookup(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func logSize(t *testing.T, p *Process) int64 {
	t.Helper()
	fi, err := os.Stat(p.LogPath)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Size()
}

// The controls a fault injector uses, in sequence on one 3-node cluster,
// and Stop ending every process after them (a paused one included).
func TestClusterControls(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{Binary: binary, Nodes: 3, BasePort: basePort, Dir: t.TempDir(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	n1 := lookup(t, c, "n1")
	var n3Incarnation string // before the kill

	// Each step builds on the ones before: stop at the first failure.
	steps := []struct {
		name string
		run  func(t *testing.T)
	}{
		{"unknown names", func(t *testing.T) {
			for what, f := range map[string]func() error{
				"Kill":               func() error { return c.Kill(ctx, "n9") },
				"Start":              func() error { return c.Start(ctx, "n9") },
				"Pause":              func() error { return c.Pause(ctx, "n9") },
				"Resume":             func() error { return c.Resume(ctx, "n9") },
				"RemoveNode":         func() error { return c.RemoveNode(ctx, "n9") },
				"RemoveNode journal": func() error { return c.RemoveNode(ctx, JournalName) },
			} {
				if err := f(); err == nil {
					t.Errorf("%s: no error", what)
				}
			}
		}},
		{"kill n3", func(t *testing.T) {
			n3 := lookup(t, c, "n3")
			st, err := nodetest.Status(ctx, n3.HTTPAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			n3Incarnation = st.Self.Incarnation
			exited := n3.Exited()
			if err := c.Kill(ctx, "n3"); err != nil {
				t.Fatal(err)
			}
			if !closed(exited) {
				t.Fatal("Kill returned before n3 exited")
			}
			if err := c.Kill(ctx, "n3"); err != nil {
				t.Errorf("killing a killed process: %v", err)
			}
			if err := c.Pause(ctx, "n3"); err == nil {
				t.Error("pausing a killed process: no error")
			}
			nodetest.Eventually(t, ctx, 30*time.Second, "n1 sees n3 unreachable", nodetest.SeesUnreachable(n1.HTTPAddr, "n3"))
		}},
		{"start n3", func(t *testing.T) {
			n3 := lookup(t, c, "n3")
			pid, size := n3.Pid(), logSize(t, n3)
			if err := c.Start(ctx, "n3"); err != nil {
				t.Fatal(err)
			}
			if n3.Pid() == pid || closed(n3.Exited()) {
				t.Errorf("after Start: pid %d (before %d), exited %v", n3.Pid(), pid, closed(n3.Exited()))
			}
			if got := logSize(t, n3); got <= size {
				t.Errorf("log %s: %d bytes after Start, %d before; want it appended to", n3.LogPath, got, size)
			}
			st, err := nodetest.Status(ctx, n3.HTTPAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Ready || st.Self.Incarnation == "" || st.Self.Incarnation == n3Incarnation {
				t.Errorf("n3 after Start: ready=%v incarnation %q, before %q; want ready, a new incarnation", st.Ready, st.Self.Incarnation, n3Incarnation)
			}
			pid = n3.Pid()
			if err := c.Start(ctx, "n3"); err != nil || n3.Pid() != pid {
				t.Errorf("starting a running process: %v, pid %d then %d", err, pid, n3.Pid())
			}
		}},
		{"pause n2", func(t *testing.T) {
			n2 := lookup(t, c, "n2")
			if err := c.Pause(ctx, "n2"); err != nil {
				t.Fatal(err)
			}
			if err := c.Pause(ctx, "n2"); err != nil {
				t.Errorf("pausing a paused process: %v", err)
			}
			if _, err := nodetest.Status(ctx, n2.HTTPAddr, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("status of a paused n2: %v; want a timeout", err)
			}
			if closed(n2.Exited()) {
				t.Error("a paused n2 reported exited")
			}
			nodetest.Eventually(t, ctx, 30*time.Second, "n1 sees n2 unreachable", nodetest.SeesUnreachable(n1.HTTPAddr, "n2"))
		}},
		{"resume n2", func(t *testing.T) {
			if err := c.Resume(ctx, "n2"); err != nil {
				t.Fatal(err)
			}
			if err := c.Resume(ctx, "n2"); err != nil {
				t.Errorf("resuming a running process: %v", err)
			}
			n2 := lookup(t, c, "n2")
			nodetest.Eventually(t, ctx, 30*time.Second, "n2 answers", func(ctx context.Context) (bool, string) {
				if _, err := nodetest.Status(ctx, n2.HTTPAddr, 2*time.Second); err != nil {
					return false, err.Error()
				}
				return true, ""
			})
		}},
		{"add node", func(t *testing.T) {
			before := c.Nodes
			n4, err := c.AddNode(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n4.Name != "n4" || n4.HTTPAddr != "127.0.0.1:"+strconv.Itoa(basePort+4) || n4.GossipAddr != "127.0.0.1:"+strconv.Itoa(basePort+104) {
				t.Errorf("added %s at %s, gossip %s", n4.Name, n4.HTTPAddr, n4.GossipAddr)
			}
			if got := c.NodeList(); len(got) != 4 || got[3] != n4 || len(c.Nodes) != 4 || len(before) != 3 {
				t.Errorf("after AddNode: NodeList %d, Nodes %d, the slice from before %d", len(got), len(c.Nodes), len(before))
			}
			nodetest.Eventually(t, ctx, 60*time.Second, "n1 lists 4 reachable members", func(ctx context.Context) (bool, string) {
				st, err := nodetest.Status(ctx, n1.HTTPAddr, 2*time.Second)
				if err != nil {
					return false, err.Error()
				}
				var names []string
				for _, m := range st.Members {
					if m.Reachable && m.Status == "up" {
						names = append(names, m.Name)
					}
				}
				slices.Sort(names)
				return slices.Equal(names, []string{"n1", "n2", "n3", "n4"}), fmt.Sprint(nodetest.Members(st))
			})
		}},
		{"add node on a taken port", func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(basePort+105))
			if err != nil {
				t.Skipf("cannot hold n5's gossip port: %v", err)
			}
			defer l.Close()
			if p, err := c.AddNode(ctx); err == nil || !strings.Contains(err.Error(), strconv.Itoa(basePort+105)) {
				t.Errorf("AddNode with n5's gossip port taken: %v, %v; want an error naming the port", p, err)
			}
			if len(c.NodeList()) != 4 {
				t.Errorf("%d nodes after a failed AddNode", len(c.NodeList()))
			}
		}},
		{"remove node", func(t *testing.T) {
			n4 := lookup(t, c, "n4")
			if err := c.RemoveNode(ctx, "n4"); err != nil {
				t.Fatal(err)
			}
			if !closed(n4.Exited()) {
				t.Error("n4 still running after RemoveNode")
			}
			for _, p := range c.NodeList() {
				if p.Name == "n4" {
					t.Error("n4 still in NodeList")
				}
			}
			if err := c.RemoveNode(ctx, "n4"); err == nil {
				t.Error("removing n4 twice: no error")
			}
		}},
		{"kill and start the journal", func(t *testing.T) {
			j := c.Journal
			if err := c.Kill(ctx, JournalName); err != nil {
				t.Fatal(err)
			}
			if !closed(j.Exited()) {
				t.Fatal("Kill returned before the journal exited")
			}
			if err := c.Start(ctx, JournalName); err != nil {
				t.Fatal(err)
			}
			res, err := http.Get("http://" + j.HTTPAddr + "/v1/health")
			if err != nil {
				t.Fatal(err)
			}
			res.Body.Close()
			if res.StatusCode != http.StatusOK {
				t.Errorf("journal health: %s", res.Status)
			}
		}},
		{"stop ends a paused process", func(t *testing.T) {
			if err := c.Pause(ctx, "n1"); err != nil {
				t.Fatal(err)
			}
			all := append(c.NodeList(), c.Journal)
			c.Stop()
			for _, p := range all {
				if !closed(p.Exited()) {
					t.Errorf("%s (pid %d) still running after Stop", p.Name, p.Pid())
				}
			}
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			break
		}
	}
}

// A cluster's ports must keep out of the ephemeral range, where the
// machine's own outgoing connections take ports at random.
func TestCheckEphemeral(t *testing.T) {
	for _, tt := range []struct {
		name        string
		base, nodes int
		refused     bool
	}{
		{"below", 30400, 12, false},
		{"the last port just below", 32768 - 113, 12, false},
		{"the gossip ports reach in", 32768 - 112, 12, true},
		{"inside", 33200, 3, true},
		{"above", 61000, 3, false},
		{"the journal port is the range's last", 60999, 3, true},
	} {
		err := checkEphemeral(tt.base, tt.nodes, 32768, 60999)
		if wide := checkEphemeral(tt.base, tt.nodes, 1024, 65535); wide != nil {
			t.Errorf("%s: an ephemeral range of every port refuses them all: %v", tt.name, wide)
		}
		if (err != nil) != tt.refused {
			t.Errorf("%s: base %d: %v, refused %v", tt.name, tt.base, err, tt.refused)
		}
		if want := fmt.Sprintf("--base-port from 1024 to %d,", 32768-101-tt.nodes); err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%s: the error does not say what to choose: %v", tt.name, err)
		}
	}
}

// A range reserved by one program is refused to the next, whose own
// check of the real ports would have found them free; CheckPorts leaves
// the reservation port to its holder; the range is free again once
// released.
func TestReservePorts(t *testing.T) {
	base := 23400
	release, err := ReservePorts(base)
	for ; err != nil && base < 27400; base += 200 { // a range another test holds
		release, err = ReservePorts(base)
	}
	if err != nil {
		t.Fatalf("no range to reserve from 23400 to 27400: %v", err)
	}
	if err := CheckPorts(base, 3); err != nil {
		t.Errorf("the holder's own check of its reserved range: %v", err)
	}
	if _, err := ReservePorts(base); !errors.Is(err, ErrPortTaken) {
		t.Errorf("a second reservation of a held range: %v, want ErrPortTaken", err)
	}
	other, err := ReservePorts(base + 200)
	if err != nil {
		t.Errorf("the next range: %v", err)
	} else {
		other()
	}
	release()
	again, err := ReservePorts(base)
	if err != nil {
		t.Fatalf("the range once released: %v", err)
	}
	again()
	if _, err := ReservePorts(65500); err == nil {
		t.Error("a range past the last port was reserved")
	}
}
