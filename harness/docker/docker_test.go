package docker

import (
	"bytes"
	"context"
	"crypto/rand"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/shardtest/shardtest/protocol"
	nodeclient "github.com/shardtest/shardtest/protocol/client"
)

// writeELF writes a minimal ELF64 executable header with the given
// program header types.
func writeELF(t *testing.T, path string, progs ...elf.ProgType) {
	t.Helper()
	var b bytes.Buffer
	h := elf.Header64{
		Type: uint16(elf.ET_EXEC), Machine: uint16(elf.EM_X86_64), Version: uint32(elf.EV_CURRENT),
		Entry: 0x401000, Phoff: 64, Ehsize: 64, Phentsize: 56, Phnum: uint16(len(progs)), Shentsize: 64,
	}
	copy(h.Ident[:], elf.ELFMAG)
	h.Ident[elf.EI_CLASS] = byte(elf.ELFCLASS64)
	h.Ident[elf.EI_DATA] = byte(elf.ELFDATA2LSB)
	h.Ident[elf.EI_VERSION] = byte(elf.EV_CURRENT)
	binary.Write(&b, binary.LittleEndian, h)
	for _, pt := range progs {
		binary.Write(&b, binary.LittleEndian, elf.Prog64{Type: uint32(pt), Flags: uint32(elf.PF_R), Off: 0, Vaddr: 0x400000, Paddr: 0x400000, Filesz: 120, Memsz: 120, Align: 0x1000})
	}
	if err := os.WriteFile(path, b.Bytes(), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestIsStaticELF(t *testing.T) {
	dir := t.TempDir()
	static := filepath.Join(dir, "static")
	writeELF(t, static, elf.PT_LOAD, elf.PT_NOTE)
	dynamic := filepath.Join(dir, "dynamic")
	writeELF(t, dynamic, elf.PT_PHDR, elf.PT_INTERP, elf.PT_LOAD, elf.PT_DYNAMIC)
	text := filepath.Join(dir, "script")
	os.WriteFile(text, []byte("#!/bin/sh\necho hi\n"), 0o755)

	if ok, err := IsStaticELF(static); err != nil || !ok {
		t.Errorf("static ELF: got %v, %v; want true", ok, err)
	}
	if ok, err := IsStaticELF(dynamic); err != nil || ok {
		t.Errorf("dynamic ELF: got %v, %v; want false", ok, err)
	}
	if ok, err := IsStaticELF(text); err == nil || ok {
		t.Errorf("script: got %v, %v; want false and an error", ok, err)
	}
	if ok, err := IsStaticELF(filepath.Join(dir, "missing")); err == nil || ok {
		t.Errorf("missing file: got %v, %v; want false and an error", ok, err)
	}
}

func TestSubnet(t *testing.T) {
	base := netip.MustParsePrefix("172.30.0.0/16")
	seen := map[netip.Prefix]bool{}
	for attempt := range 256 {
		s := Subnet("run-a", attempt)
		if s.Bits() != 24 || !base.Contains(s.Addr()) || s.Masked() != s {
			t.Fatalf("attempt %d: subnet %v is not a /24 of %v", attempt, s, base)
		}
		if s != Subnet("run-a", attempt) {
			t.Fatalf("attempt %d: not deterministic", attempt)
		}
		seen[s] = true
	}
	if len(seen) != 256 {
		t.Errorf("256 attempts gave %d distinct /24s, want all 256", len(seen))
	}
	distinct := map[netip.Prefix]bool{}
	for i := range 20 {
		distinct[Subnet(fmt.Sprintf("run-%d", i), 0)] = true
	}
	if len(distinct) < 15 {
		t.Errorf("20 run ids share only %d first-choice subnets", len(distinct))
	}
	if got := hostIP(Subnet("x", 0), 12); !Subnet("x", 0).Contains(got) || got.As4()[3] != 12 {
		t.Errorf("hostIP: %v", got)
	}
}

func TestImageTagAndModuleRoot(t *testing.T) {
	a, b := ImageTag([]byte("one")), ImageTag([]byte("two"))
	if a == b || !strings.HasPrefix(a, ImageRepo+":") || len(a) != len(ImageRepo)+1+12 {
		t.Errorf("tags %q, %q", a, b)
	}
	wd, _ := os.Getwd()
	root, err := FindModuleRoot(wd)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "cmd", "shardtest")); err != nil {
		t.Errorf("module root %s: %v", root, err)
	}
	if _, err := FindModuleRoot(t.TempDir()); err == nil {
		t.Error("FindModuleRoot outside the module: no error")
	}
}

var (
	binOnce sync.Once
	binPath string
	binErr  error
)

// staticBinary builds the static shardtest binary once per test process.
func staticBinary(t testing.TB) string {
	t.Helper()
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "shardtest-docker-test-")
		if err != nil {
			binErr = err
			return
		}
		wd, _ := os.Getwd()
		root, err := FindModuleRoot(wd)
		if err != nil {
			binErr = err
			return
		}
		binPath = filepath.Join(dir, "shardtest")
		binErr = BuildStatic(context.Background(), root, binPath)
	})
	if binErr != nil {
		t.Fatalf("build static binary: %v", binErr)
	}
	return binPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binPath != "" {
		os.RemoveAll(filepath.Dir(binPath))
	}
	os.Exit(code)
}

// dockerClient returns a client of the local engine; the test fails if
// none answers, unless SHARDTEST_NO_DOCKER=1.
func dockerClient(t testing.TB) *client.Client {
	t.Helper()
	if os.Getenv("SHARDTEST_NO_DOCKER") == "1" {
		t.Skip("SHARDTEST_NO_DOCKER=1: skipping the tests that need a Docker engine")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cli, err := NewClient(ctx)
	if err != nil {
		t.Fatalf("%v (set SHARDTEST_NO_DOCKER=1 to skip the Docker tests)", err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func testRunID(t *testing.T) string {
	b := make([]byte, 4)
	rand.Read(b)
	return "test-" + hex.EncodeToString(b)
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// assertNothingLeft fails unless nothing labelled with runID is left.
func assertNothingLeft(t *testing.T, cli *client.Client, runID string) {
	t.Helper()
	left, err := Leftovers(context.Background(), cli, runID)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range left {
		t.Errorf("left over: %s", r)
	}
}

func TestClusterEndToEnd(t *testing.T) {
	cli := dockerClient(t)
	bin := staticBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	runID := testRunID(t)
	dir := t.TempDir()
	t.Cleanup(func() { Cleanup(context.Background(), cli, Selection{Run: runID}) })

	start := time.Now()
	c, err := Start(ctx, Options{Nodes: 3, RunID: runID, Dir: dir, Binary: bin, Logger: testLogger(t), Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster up in %v on %s (%s)", time.Since(start).Round(time.Millisecond), c.Network(), c.Subnet())
	nodes := c.Nodes()
	if len(nodes) != 3 {
		t.Fatalf("%d nodes", len(nodes))
	}
	clients := make([]*nodeclient.Client, len(nodes))
	for i, n := range nodes {
		if !strings.HasPrefix(n.HTTPAddr, "127.0.0.1:") || !c.Subnet().Contains(netip.MustParseAddr(n.IP)) || n.ContainerID == "" {
			t.Errorf("node %+v", n)
		}
		clients[i] = nodeclient.New(n.HTTPAddr, nil)
	}

	// All ready, three members each, one oldest.
	var oldest string
	deadline := time.Now().Add(20 * time.Second)
	for {
		var why string
		oldest = ""
		for i, cl := range clients {
			st, err := cl.Status(ctx)
			switch {
			case err != nil:
				why = fmt.Sprintf("%s: %v", nodes[i].Name, err)
			case !st.Ready || len(st.Members) != 3 || len(st.Unreachable) > 0:
				why = fmt.Sprintf("%s: ready=%v members=%d unreachable=%v", nodes[i].Name, st.Ready, len(st.Members), st.Unreachable)
			case oldest != "" && st.Oldest != oldest:
				why = fmt.Sprintf("%s sees oldest %s, another %s", nodes[i].Name, st.Oldest, oldest)
			default:
				oldest = st.Oldest
				continue
			}
			break
		}
		if why == "" && oldest != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("nodes do not agree: %s", why)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if !strings.HasPrefix(oldest, "n1@") {
		t.Errorf("oldest %s, want n1 (it started first)", oldest)
	}

	// next-id through every node: ids increase.
	var last int64
	for round := range 2 {
		for i, cl := range clients {
			r, err := retryOp(ctx, func(ctx context.Context) (protocol.NextID, error) { return cl.NextID(ctx) })
			if err != nil {
				t.Fatalf("next-id via %s: %v", nodes[i].Name, err)
			}
			if r.ID <= last {
				t.Errorf("round %d: next-id via %s gave %d after %d", round, nodes[i].Name, r.ID, last)
			}
			last = r.ID
		}
	}

	// Register writes through every node, read back through every node.
	for i, cl := range clients {
		key := fmt.Sprintf("e2e-%s-%d", runID, i)
		want := int64(100 + i)
		rep, err := retryOp(ctx, func(ctx context.Context) (protocol.EntityReply, error) {
			return cl.Entity(ctx, protocol.EntityRequest{Type: "register", ID: key, Op: "cas",
				Payload: json.RawMessage(fmt.Sprintf(`{"expect":null,"value":%d}`, want))})
		})
		if err != nil {
			t.Fatalf("cas %s via %s: %v", key, nodes[i].Name, err)
		}
		var ok struct{ OK bool }
		json.Unmarshal(rep.Result, &ok)
		if !ok.OK {
			t.Fatalf("cas %s via %s: %s", key, nodes[i].Name, rep.Result)
		}
		for j, rc := range clients {
			rep, err := retryOp(ctx, func(ctx context.Context) (protocol.EntityReply, error) {
				return rc.Entity(ctx, protocol.EntityRequest{Type: "register", ID: key, Op: "read"})
			})
			if err != nil {
				t.Fatalf("read %s via %s: %v", key, nodes[j].Name, err)
			}
			var v struct{ Value *int64 }
			json.Unmarshal(rep.Result, &v)
			if v.Value == nil || *v.Value != want {
				t.Errorf("read %s via %s: %s, want %d", key, nodes[j].Name, rep.Result, want)
			}
		}
	}

	select {
	case <-nodes[0].Exited():
		t.Error("n1 reported exited while running")
	default:
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	assertNothingLeft(t, cli, runID)
	for _, name := range []string{"journal", "n1", "n2", "n3"} {
		fi, err := os.Stat(filepath.Join(dir, name+".log"))
		if err != nil || fi.Size() == 0 {
			t.Errorf("log of %s: %v (empty: %v)", name, err, err == nil && fi.Size() == 0)
		}
	}
	select {
	case <-nodes[0].Exited():
	case <-time.After(5 * time.Second):
		t.Error("n1's Exited channel not closed after Stop")
	}
	t.Logf("total %v", time.Since(start).Round(time.Millisecond))
}

// retryOp retries op on an unknown outcome for a few seconds (a singleton
// or shard may still be starting).
func retryOp[T any](ctx context.Context, op func(context.Context) (T, error)) (T, error) {
	deadline := time.Now().Add(15 * time.Second)
	for {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		r, err := op(rctx)
		cancel()
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return r, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func TestCleanupAfterCrash(t *testing.T) {
	cli := dockerClient(t)
	bin := staticBinary(t)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	runID := testRunID(t)
	t.Cleanup(func() { Cleanup(context.Background(), cli, Selection{Run: runID}) })

	// Start with a context of its own and never call Stop: the harness
	// "crashed", leaving containers, network and volume behind.
	c, err := Start(ctx, Options{Nodes: 2, RunID: runID, Dir: t.TempDir(), Binary: bin, Logger: testLogger(t), Client: cli})
	if err != nil {
		t.Fatal(err)
	}
	defer c.cancel()
	left, err := Leftovers(ctx, cli, runID)
	if err != nil {
		t.Fatal(err)
	}
	kinds := map[string]int{}
	for _, r := range left {
		kinds[r.Kind]++
		if r.Run != runID {
			t.Errorf("%s: run label %q", r, r.Run)
		}
	}
	if kinds["container"] != 3 || kinds["network"] != 1 || kinds["volume"] != 1 {
		t.Fatalf("before cleanup: %v, want 3 containers, 1 network, 1 volume", kinds)
	}

	// Everything names this process as its owner: a cleanup without
	// --run or --all leaves it, the harness being alive.
	for _, r := range left {
		if !r.HasOwner || r.Owner.PID != os.Getpid() {
			t.Errorf("%s: owner %+v (recorded: %v), want this process", r, r.Owner, r.HasOwner)
		}
	}
	if _, kept, err := CleanupEach(ctx, cli, Selection{}, nil); err != nil {
		t.Fatal(err)
	} else if mine := keptOf(kept, runID); mine != 5 {
		t.Errorf("a cleanup of ended runs kept %d of this live run's 5 resources", mine)
	}

	var removed []Resource
	n, _, err := CleanupEach(ctx, cli, Selection{Run: runID}, func(r Resource) { removed = append(removed, r) })
	if err != nil {
		t.Fatal(err)
	}
	if n != 5 || len(removed) != 5 {
		t.Errorf("removed %d (%v), want 5", n, removed)
	}
	assertNothingLeft(t, cli, runID)
	if n, err := Cleanup(ctx, cli, Selection{Run: runID}); err != nil || n != 0 {
		t.Errorf("second cleanup: %d, %v; want 0, nil", n, err)
	}
}

func TestNetworkSubnetOverlap(t *testing.T) {
	cli := dockerClient(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	runID := testRunID(t)
	t.Cleanup(func() { Cleanup(context.Background(), cli, Selection{Run: runID}) })
	// Another network already holds the run's first-choice subnet.
	first := Subnet(runID, 0)
	_, err := cli.NetworkCreate(ctx, "shardtest-"+runID+"-blocker", client.NetworkCreateOptions{
		Driver: "bridge",
		IPAM:   &network.IPAM{Config: []network.IPAMConfig{{Subnet: first}}},
		Labels: map[string]string{LabelManaged: "true", LabelRun: runID},
	})
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{cli: cli, runID: runID}
	if err := c.createNetwork(ctx); err != nil {
		t.Fatal(err)
	}
	if c.subnet == first || c.subnet != Subnet(runID, 1) {
		t.Errorf("subnet %v; want the second choice %v (the first, %v, is taken)", c.subnet, Subnet(runID, 1), first)
	}
	if n, err := Cleanup(ctx, cli, Selection{Run: runID}); err != nil || n != 2 {
		t.Errorf("cleanup: %d, %v; want 2 networks", n, err)
	}
	assertNothingLeft(t, cli, runID)
}

// The image the harness builds is docker/Dockerfile's (comments aside).
func TestDockerfileMatchesRepository(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docker", "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if got := strings.Join(lines, "\n") + "\n"; got != dockerfile {
		t.Fatalf("docker/Dockerfile:\n%s\nharness builds:\n%s", got, dockerfile)
	}
}

// keptOf counts the kept resources of run.
func keptOf(kept []Kept, run string) int {
	n := 0
	for _, k := range kept {
		if k.Run == run {
			n++
		}
	}
	return n
}
