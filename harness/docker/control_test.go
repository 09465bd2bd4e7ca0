package docker

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/shardtest/shardtest/protocol/nodetest"
)

func node(t *testing.T, c *Cluster, name string) Node {
	t.Helper()
	for _, n := range c.Nodes() {
		if n.Name == name {
			return n
		}
	}
	t.Fatalf("no node %s in %v", name, c.Nodes())
	return Node{}
}

func closed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// The controls a fault injector uses, in sequence on one 3-node cluster,
// and Stop removing everything after them (a paused container included).
func TestClusterControls(t *testing.T) {
	cli := dockerClient(t)
	bin := staticBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	runID := testRunID(t)
	dir := t.TempDir()
	t.Cleanup(func() { Cleanup(context.Background(), cli, Selection{Run: runID}) })
	c, err := Start(ctx, Options{Nodes: 3, RunID: runID, Dir: dir, Binary: bin, Logger: testLogger(t), Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	n1 := node(t, c, "n1")
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
				"Unpause":            func() error { return c.Unpause(ctx, "n9") },
				"RemoveNode":         func() error { return c.RemoveNode(ctx, "n9") },
				"RemoveNode journal": func() error { return c.RemoveNode(ctx, JournalName) },
				"Exec":               func() error { _, _, _, err := c.Exec(ctx, "n9", []string{"/shardtest"}); return err },
				"Exec no command":    func() error { _, _, _, err := c.Exec(ctx, "n1", nil); return err },
				"Net":                func() error { _, err := c.Net(ctx, "n9", []string{"show"}); return err },
			} {
				if err := f(); err == nil {
					t.Errorf("%s: no error", what)
				}
			}
		}},
		{"kill n3", func(t *testing.T) {
			n3 := node(t, c, "n3")
			st, err := nodetest.Status(ctx, n3.HTTPAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			n3Incarnation = st.Self.Incarnation
			if err := c.Kill(ctx, "n3"); err != nil {
				t.Fatal(err)
			}
			if !closed(n3.Exited()) {
				t.Fatal("Kill returned before n3's Exited channel closed")
			}
			if err := c.Kill(ctx, "n3"); err != nil {
				t.Errorf("killing a killed container: %v", err)
			}
			nodetest.Eventually(t, ctx, 30*time.Second, "n1 sees n3 unreachable", nodetest.SeesUnreachable(n1.HTTPAddr, "n3"))
		}},
		{"start n3", func(t *testing.T) {
			before := node(t, c, "n3")
			if err := c.Start(ctx, "n3"); err != nil {
				t.Fatal(err)
			}
			n3 := node(t, c, "n3")
			if n3.HTTPAddr != before.HTTPAddr || n3.IP != before.IP || n3.ContainerID != before.ContainerID {
				t.Errorf("after Start: %+v, before %+v; want the same container, address and host port", n3, before)
			}
			if closed(n3.Exited()) {
				t.Error("the restarted n3's Exited channel is closed")
			}
			st, err := nodetest.Status(ctx, n3.HTTPAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !st.Ready || st.Self.Incarnation == "" || st.Self.Incarnation == n3Incarnation {
				t.Errorf("n3 after Start: ready=%v incarnation %q, before %q; want ready, a new incarnation", st.Ready, st.Self.Incarnation, n3Incarnation)
			}
			if err := c.Start(ctx, "n3"); err != nil {
				t.Errorf("starting a running container: %v", err)
			}
			if closed(node(t, c, "n3").Exited()) {
				t.Error("Start of a running n3 closed its Exited channel")
			}
		}},
		{"pause n2", func(t *testing.T) {
			n2 := node(t, c, "n2")
			if err := c.Pause(ctx, "n2"); err != nil {
				t.Fatal(err)
			}
			if err := c.Pause(ctx, "n2"); err != nil {
				t.Errorf("pausing a paused container: %v", err)
			}
			if _, err := nodetest.Status(ctx, n2.HTTPAddr, 500*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("status of a paused n2: %v; want a timeout", err)
			}
			if closed(n2.Exited()) {
				t.Error("a paused n2's Exited channel is closed")
			}
			if _, _, _, err := c.Exec(ctx, "n2", []string{"/shardtest", "--help"}); err == nil {
				t.Error("exec in a paused container: no error")
			}
			nodetest.Eventually(t, ctx, 30*time.Second, "n1 sees n2 unreachable", nodetest.SeesUnreachable(n1.HTTPAddr, "n2"))
		}},
		{"unpause n2", func(t *testing.T) {
			if err := c.Unpause(ctx, "n2"); err != nil {
				t.Fatal(err)
			}
			if err := c.Unpause(ctx, "n2"); err != nil {
				t.Errorf("unpausing a running container: %v", err)
			}
			n2 := node(t, c, "n2")
			nodetest.Eventually(t, ctx, 30*time.Second, "n2 answers", func(ctx context.Context) (bool, string) {
				if _, err := nodetest.Status(ctx, n2.HTTPAddr, 2*time.Second); err != nil {
					return false, err.Error()
				}
				return true, ""
			})
		}},
		{"add node", func(t *testing.T) {
			n4, err := c.AddNode(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if n4.Name != "n4" || n4.IP != hostIP(c.Subnet(), 14).String() || !strings.HasPrefix(n4.HTTPAddr, "127.0.0.1:") || closed(n4.Exited()) {
				t.Errorf("added %+v", n4)
			}
			if got := c.Nodes(); len(got) != 4 || got[3].Name != "n4" {
				t.Errorf("Nodes after AddNode: %v", got)
			}
			st, err := nodetest.Status(ctx, n4.HTTPAddr, 5*time.Second)
			if err != nil || !st.Ready {
				t.Fatalf("n4: ready=%v, %v", st.Ready, err)
			}
			// n2 may still be coming back as a new incarnation after the
			// pause got it downed.
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
		{"remove node", func(t *testing.T) {
			n4 := node(t, c, "n4")
			if err := c.RemoveNode(ctx, "n4"); err != nil {
				t.Fatal(err)
			}
			if !closed(n4.Exited()) {
				t.Error("n4's Exited channel open after RemoveNode")
			}
			for _, n := range c.Nodes() {
				if n.Name == "n4" {
					t.Errorf("n4 still in Nodes: %v", c.Nodes())
				}
			}
			if _, err := cli.ContainerInspect(ctx, n4.ContainerID, client.ContainerInspectOptions{}); !cerrdefs.IsNotFound(err) {
				t.Errorf("n4's container after RemoveNode: %v; want not found", err)
			}
			if fi, err := os.Stat(filepath.Join(dir, "n4.log")); err != nil || fi.Size() == 0 {
				t.Errorf("n4's log: %v", err)
			}
			if err := c.RemoveNode(ctx, "n4"); err == nil {
				t.Error("removing n4 twice: no error")
			}
		}},
		{"exec", func(t *testing.T) {
			for _, tc := range []struct {
				argv     []string
				wantErr  bool
				wantCode int
				wantOut  string // in stdout
				wantErrs string // in stderr
			}{
				{argv: []string{"/shardtest", "journal", "--help"}, wantOut: "journal"},
				// Usage errors exit 3 ("could not run").
				{argv: []string{"/shardtest", "no-such-command"}, wantCode: 3, wantErrs: "unknown command"},
				{argv: []string{"/no-such-binary"}, wantErr: true},
			} {
				stdout, stderr, code, err := c.Exec(ctx, "n1", tc.argv)
				switch {
				case tc.wantErr:
					if err == nil {
						t.Errorf("%q: status %d, no error", tc.argv, code)
					}
				case err != nil:
					t.Errorf("%q: %v", tc.argv, err)
				case code != tc.wantCode || !strings.Contains(stdout, tc.wantOut) || !strings.Contains(stderr, tc.wantErrs):
					t.Errorf("%q: status %d, stdout %q, stderr %q; want %d, %q, %q", tc.argv, code, stdout, stderr, tc.wantCode, tc.wantOut, tc.wantErrs)
				}
			}
		}},
		{"net namespace", func(t *testing.T) {
			// A journal asked to listen on the node's HTTP port can only
			// fail with "address already in use" in the node's network
			// namespace (in another it would serve until the timeout).
			inUse := []string{"/shardtest", "journal", "--listen", fmt.Sprintf("127.0.0.1:%d", HTTPPort), "--data", "/tmp/j"}
			for _, tc := range []struct {
				sidecar  bool
				argv     []string
				wantCode int    // 0: no error
				want     string // in stdout, or in the error
			}{
				{false, []string{"/shardtest", "journal", "--help"}, 0, "journal"},
				{false, []string{"/shardtest", "no-such-command"}, 3, "unknown command"},
				{false, inUse, 3, "address already in use"},
				{true, []string{"/shardtest", "journal", "--help"}, 0, "journal"},
				{true, []string{"/shardtest", "no-such-command"}, 3, "unknown command"},
				{true, inUse, 3, "address already in use"},
			} {
				c.netSidecar = tc.sidecar
				rctx, cancel := context.WithTimeout(ctx, 30*time.Second)
				out, err := c.inNetNS(rctx, "n1", tc.argv)
				cancel()
				var ee *ExitError
				switch {
				case tc.wantCode == 0 && (err != nil || !strings.Contains(out, tc.want)):
					t.Errorf("sidecar=%v %q: %q, %v; want %q", tc.sidecar, tc.argv, out, err, tc.want)
				case tc.wantCode != 0 && (!errors.As(err, &ee) || ee.Code != tc.wantCode || !strings.Contains(err.Error(), tc.want)):
					t.Errorf("sidecar=%v %q: %q, %v; want an exit error, status %d, with %q", tc.sidecar, tc.argv, out, err, tc.wantCode, tc.want)
				}
			}
			c.netSidecar = false
			left, err := Leftovers(ctx, cli, runID)
			if err != nil {
				t.Fatal(err)
			}
			containers := 0
			for _, r := range left {
				if r.Kind == "container" {
					containers++
				}
			}
			if containers != 4 {
				t.Errorf("after the sidecars: %v; want the journal and 3 nodes", left)
			}
		}},
		{"kill and start the journal", func(t *testing.T) {
			before := c.Journal()
			if err := c.Kill(ctx, JournalName); err != nil {
				t.Fatal(err)
			}
			if !closed(before.Exited()) {
				t.Fatal("Kill returned before the journal's Exited channel closed")
			}
			if err := c.Start(ctx, JournalName); err != nil {
				t.Fatal(err)
			}
			j := c.Journal()
			if j.HTTPAddr != before.HTTPAddr || closed(j.Exited()) {
				t.Errorf("journal after Start: %+v, before %+v", j, before)
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
		{"stop removes a paused container", func(t *testing.T) {
			if err := c.Pause(ctx, "n1"); err != nil {
				t.Fatal(err)
			}
			if err := c.Stop(ctx); err != nil {
				t.Fatal(err)
			}
			assertNothingLeft(t, cli, runID)
			for _, name := range []string{"journal", "n1", "n2", "n3", "n4"} {
				if fi, err := os.Stat(filepath.Join(dir, name+".log")); err != nil || fi.Size() == 0 {
					t.Errorf("log of %s: %v", name, err)
				}
			}
			if err := c.Kill(ctx, "n2"); err == nil {
				t.Error("Kill after Stop: no error")
			}
			if _, err := c.AddNode(ctx); err == nil {
				t.Error("AddNode after Stop: no error")
			}
		}},
	}
	for _, s := range steps {
		if !t.Run(s.name, s.run) {
			break
		}
	}
	c.Stop(context.Background())
	assertNothingLeft(t, cli, runID)
}
