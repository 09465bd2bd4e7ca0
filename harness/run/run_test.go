package run

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/harness/docker"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/testbin"
	"github.com/shardtest/shardtest/workloads"
)

// binary is a shardtest build for the child processes (the test binary
// itself is not one).
var binary string

func TestMain(m *testing.M) { testbin.Main(m, "shardtest-run-test", &binary) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func options(name string) Options {
	return Options{Name: name, Workload: "register", Nodes: 3, Concurrency: 4, TimeLimit: 3 * time.Second,
		OpTimeout: 3 * time.Second, Entities: 20, PerEntity: 2, Seed: 7}
}

// A run of each workload against a local cluster stores a complete
// history, the options and the results, and leaves no process behind.
func TestRunLocal(t *testing.T) {
	for i, w := range workloads.All() {
		t.Run(w.Name(), func(t *testing.T) {
			root := t.TempDir()
			o := options("local-" + w.Name())
			o.Runtime, o.Workload, o.TimeLimit = "local", w.Name(), 2*time.Second
			test := &Test{Options: o, Runtime: Local{Binary: binary, BasePort: 18400 + 200*i, Log: quiet()}, Workload: w, Log: quiet()}
			res, err := test.Run(context.Background(), root)
			if err != nil {
				t.Fatal(err)
			}
			// The correct node passes every checker of every workload.
			if res.Verdict != checker.Valid || len(res.Checks) == 0 {
				t.Fatalf("verdict %s, want valid: %+v", res.Verdict, res.Checks)
			}
			h, err := history.ReadFile(filepath.Join(res.Dir, "history.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			s := h.Summarize()
			if h.Truncated || s.Open != 0 || s.OK == 0 || s.OK+s.Fail+s.Info != s.Invocations {
				t.Fatalf("history incomplete: %+v truncated=%v", s, h.Truncated)
			}
			for _, f := range []string{"test.json", "results.json", "events.jsonl", "n1.log", "journal.log", "index.html", "junit.xml"} {
				if _, err := os.Stat(filepath.Join(res.Dir, f)); err != nil {
					t.Errorf("missing %s: %v", f, err)
				}
			}
			var stored Options
			b, _ := os.ReadFile(filepath.Join(res.Dir, "test.json"))
			if json.Unmarshal(b, &stored) != nil || stored.Seed != 7 || stored.RunID == "" {
				t.Fatalf("test.json %s", b)
			}
			if target, err := os.Readlink(filepath.Join(root, "latest")); err != nil || !strings.HasPrefix(target, o.Name+"/") {
				t.Fatalf("results/latest -> %q, %v", target, err)
			}
			// Every completion says where it was served; entity ops also the
			// entity incarnation, singleton ops the instance.
			for _, op := range h.Ops {
				if op.Kind != history.OK || op.F == "tell" {
					continue
				}
				switch {
				case op.Node == "" || op.Reply == nil || op.Reply.Node == "":
					t.Fatalf("completion without its node: %+v", op)
				case op.Entity != "" && op.Reply.EntityIncarnation == "":
					t.Fatalf("entity completion without its incarnation: %+v", op)
				case op.F == "next-id" && op.Reply.Singleton == "":
					t.Fatalf("next-id without its singleton instance: %+v", op)
				}
			}
		})
	}
}

// The same seed gives the same operation schedule.
func TestSeedReproducesSchedule(t *testing.T) {
	w, _ := workloads.Named("register")
	o := workloads.Options{Entities: 50, Concurrency: 6, PerEntity: 3}
	gen := func(seed int64) []workloads.Op {
		var ops []workloads.Op
		for worker := range 6 {
			g := w.Generator(seed, worker, o)
			for range 200 {
				ops = append(ops, g())
			}
		}
		return ops
	}
	a, b, c := gen(1), gen(1), gen(2)
	same := func(x, y []workloads.Op) bool {
		for i := range x {
			if x[i].F != y[i].F || x[i].Entity != y[i].Entity || string(x[i].Value) != string(y[i].Value) {
				return false
			}
		}
		return true
	}
	if !same(a, b) {
		t.Fatal("the same seed gave different schedules")
	}
	if same(a, c) {
		t.Fatal("different seeds gave the same schedule")
	}
	// At most PerEntity workers touch one entity.
	workersOf := map[string]map[int]bool{}
	for i, op := range a {
		worker := i / 200
		if workersOf[op.Entity] == nil {
			workersOf[op.Entity] = map[int]bool{}
		}
		workersOf[op.Entity][worker] = true
	}
	for e, ws := range workersOf {
		if len(ws) > 3 {
			t.Fatalf("%s touched by %d workers, want at most 3", e, len(ws))
		}
	}
}

func TestBadOptions(t *testing.T) {
	base := options("x")
	mods := map[string]func(*Options){
		"no name":        func(o *Options) { o.Name = "" },
		"zero nodes":     func(o *Options) { o.Nodes = 0 },
		"no workers":     func(o *Options) { o.Concurrency = 0 },
		"negative rate":  func(o *Options) { o.Rate = -1 },
		"no time":        func(o *Options) { o.TimeLimit = 0 },
		"no op timeout":  func(o *Options) { o.OpTimeout = 0 },
		"no entities":    func(o *Options) { o.Entities = 0 },
		"skew below one": func(o *Options) { o.Skew = 0.5 },
		"setting name":   func(o *Options) { o.NodeSettings = map[string]string{"Stable_After": "1s"} },
		"empty setting":  func(o *Options) { o.NodeSettings = map[string]string{"stable-after": ""} },
		"two lines":      func(o *Options) { o.NodeSettings = map[string]string{"stable-after": "1s\nX=1"} },
		"start setting":  func(o *Options) { o.NodeSettings = map[string]string{"journal": "http://elsewhere"} },
		// A name is a folder under the results root: ../../escape wrote
		// outside it.
		"name escapes":  func(o *Options) { o.Name = "../../escape" },
		"name with /":   func(o *Options) { o.Name = "a/b" },
		"hidden name":   func(o *Options) { o.Name = ".x" },
		"name too long": func(o *Options) { o.Name = strings.Repeat("n", 65) },
	}
	for name, mod := range mods {
		o := base
		mod(&o)
		if err := o.Validate(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

// A harness killed in the middle of a Docker run leaves a history that
// still reads, and `shardtest cleanup --run` removes everything it left.
func TestKilledHarnessCleanup(t *testing.T) {
	if os.Getenv("SHARDTEST_NO_DOCKER") == "1" {
		t.Skip("SHARDTEST_NO_DOCKER=1")
	}
	root := t.TempDir()
	cmd := exec.Command(binary, "run", "--binary", binary, "--time-limit", "60s", "--results", root, "--name", "killed", "--concurrency", "2")
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Wait until operations are being recorded, then kill the harness.
	hist := filepath.Join(root, "killed")
	deadline := time.Now().Add(90 * time.Second)
	var dir string
	for time.Now().Before(deadline) {
		matches, _ := filepath.Glob(filepath.Join(hist, "2*", "history.jsonl"))
		if len(matches) == 1 {
			if st, err := os.Stat(matches[0]); err == nil && st.Size() > 20_000 {
				dir = filepath.Dir(matches[0])
				break
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if dir == "" {
		t.Fatal("the run never recorded operations")
	}
	h, err := history.ReadFile(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		t.Fatalf("partial history does not read: %v", err)
	}
	if h.Summarize().Invocations == 0 {
		t.Fatal("partial history has no operations")
	}
	var o Options
	b, _ := os.ReadFile(filepath.Join(dir, "test.json"))
	if err := json.Unmarshal(b, &o); err != nil || o.RunID == "" {
		t.Fatalf("test.json: %s %v", b, err)
	}
	ctx := context.Background()
	cli, err := docker.NewClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	out, err := exec.Command(binary, "cleanup", "--run", o.RunID).CombinedOutput()
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	left, err := docker.Leftovers(ctx, cli, o.RunID)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) > 0 {
		t.Fatalf("left after cleanup: %v", left)
	}
}

// Two runs on one engine: the harness of one is killed, the other still
// runs. A cleanup with no flags removes what the killed one left and leaves
// the live one's cluster running (one CI job's cleanup must not tear down
// another's on a shared engine).
func TestCleanupLeavesLiveRuns(t *testing.T) {
	if os.Getenv("SHARDTEST_NO_DOCKER") == "1" {
		t.Skip("SHARDTEST_NO_DOCKER=1")
	}
	ctx := context.Background()
	cli, err := docker.NewClient(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	start := func(name string) (*exec.Cmd, string) {
		root := t.TempDir()
		cmd := exec.Command(binary, "run", "--binary", binary, "--time-limit", "120s", "--results", root, "--name", name, "--concurrency", "2")
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, filepath.Join(root, name)
	}
	live, liveDir := start("live")
	killed, killedDir := start("killed")
	var liveID string
	t.Cleanup(func() {
		live.Process.Signal(syscall.SIGKILL)
		live.Wait()
		if liveID != "" {
			docker.Cleanup(context.Background(), cli, docker.Selection{Run: liveID})
		}
	})
	// runID waits until the run records operations and returns its id.
	runID := func(dir string) string {
		deadline := time.Now().Add(90 * time.Second)
		for time.Now().Before(deadline) {
			matches, _ := filepath.Glob(filepath.Join(dir, "2*", "history.jsonl"))
			if len(matches) == 1 {
				if st, err := os.Stat(matches[0]); err == nil && st.Size() > 20_000 {
					var o Options
					b, _ := os.ReadFile(filepath.Join(filepath.Dir(matches[0]), "test.json"))
					if json.Unmarshal(b, &o) == nil && o.RunID != "" {
						return o.RunID
					}
				}
			}
			time.Sleep(200 * time.Millisecond)
		}
		t.Fatalf("%s never recorded operations", dir)
		return ""
	}
	liveID = runID(liveDir)
	killedID := runID(killedDir)
	killed.Process.Signal(syscall.SIGKILL)
	killed.Wait()
	running := func(id string) int {
		cs, err := cli.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", docker.LabelRun+"="+id)})
		if err != nil {
			t.Fatal(err)
		}
		return len(cs.Items)
	}
	before := running(liveID)
	if before == 0 || running(killedID) == 0 {
		t.Fatalf("running containers before the cleanup: live %d, killed %d", before, running(killedID))
	}
	out, err := exec.Command(binary, "cleanup").CombinedOutput()
	if err != nil {
		t.Fatalf("cleanup: %v\n%s", err, out)
	}
	if left, err := docker.Leftovers(ctx, cli, killedID); err != nil || len(left) > 0 {
		t.Errorf("the killed run's resources after cleanup: %v %v", left, err)
	}
	if n := running(liveID); n != before {
		t.Errorf("the live run has %d containers running after cleanup, %d before\n%s", n, before, out)
	}
	if !strings.Contains(string(out), "kept run "+liveID) {
		t.Errorf("cleanup does not say it kept the live run:\n%s", out)
	}
	select {
	case <-exited(live):
		t.Error("the live run's harness exited during the cleanup")
	default:
	}
}

// exited is closed once cmd's process has exited (without reaping it).
func exited(cmd *exec.Cmd) <-chan struct{} {
	ch := make(chan struct{})
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		close(ch)
	}
	return ch
}

// fakeRuntime "starts" one node: an HTTP server the test provides.
type fakeRuntime struct{ addr string }

func (fakeRuntime) Name() string { return "fake" }
func (f fakeRuntime) Start(context.Context, string, int, string) (Cluster, error) {
	return fakeCluster{f.addr}, nil
}

type fakeCluster struct{ addr string }

func (f fakeCluster) Nodes() []Node                    { return []Node{{Name: "x1", HTTPAddr: f.addr}} }
func (fakeCluster) Stop(context.Context, string) error { return nil }

// A workload the implementation does not declare it can serve is refused
// with a message that says what is missing, before any traffic: a
// capability, an entity type (deliver against a register-only node, whose
// sends would all fail and leave delivery nothing to judge), a singleton.
func TestRefusesWorkloadWithoutCapability(t *testing.T) {
	tests := []struct {
		workload, caps, want string
	}{
		{"idgen", `"capabilities":["membership","sharding"],"entity_types":["register"]`, `the "singleton" capability`},
		{"idgen", `"capabilities":["membership","singleton"],"singletons":["leader"]`, `singleton "id-generator"`},
		{"deliver", `"capabilities":["membership","sharding"],"entity_types":["register"]`, `entity type "sender" and entity type "log"`},
		{"register", `"capabilities":["sharding"],"entity_types":["register"]`, `the "membership" capability, which every implementation needs`},
	}
	for _, tt := range tests {
		t.Run(tt.workload+" "+tt.want, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				io.WriteString(w, `{"protocol":"shardtest/1","implementation":"theirs",`+tt.caps+`}`)
			}))
			defer srv.Close()
			w, _ := workloads.Named(tt.workload)
			o := options("refused")
			o.Workload, o.Nodes = tt.workload, 1
			test := &Test{Options: o, Runtime: fakeRuntime{strings.TrimPrefix(srv.URL, "http://")}, Workload: w, Log: quiet()}
			_, err := test.Run(context.Background(), t.TempDir())
			if err == nil || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), "theirs") {
				t.Fatalf("err = %v, want ErrUnsupported naming %s and the implementation", err, tt.want)
			}
		})
	}
}

// The op timeout is stated where a reader of a run looks first: test.json
// (op_timeout_ns) and the run's opening log line. The run is refused at
// once (the node declares no sharding), after both are written.
func TestOpTimeoutIsShown(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"protocol":"shardtest/1","implementation":"theirs","capabilities":["membership"]}`)
	}))
	defer srv.Close()
	var logged strings.Builder
	o := options("op-timeout")
	o.Nodes, o.OpTimeout = 1, 2500*time.Millisecond
	test := &Test{Options: o, Runtime: fakeRuntime{strings.TrimPrefix(srv.URL, "http://")}, Workload: workloads.Register{},
		Log: slog.New(slog.NewTextHandler(&logged, nil))}
	res, err := test.Run(context.Background(), t.TempDir())
	if !errors.Is(err, ErrUnsupported) {
		t.Fatalf("err = %v, want ErrUnsupported", err)
	}
	first, _, _ := strings.Cut(logged.String(), "\n")
	if !strings.Contains(first, "op_timeout=2.5s") {
		t.Errorf("the opening log line %q does not show the op timeout", first)
	}
	b, err := os.ReadFile(filepath.Join(res.Dir, "test.json"))
	if err != nil {
		t.Fatal(err)
	}
	var stored struct {
		OpTimeout *int64 `json:"op_timeout_ns"`
	}
	if err := json.Unmarshal(b, &stored); err != nil || stored.OpTimeout == nil || *stored.OpTimeout != int64(o.OpTimeout) {
		t.Errorf("test.json %s: op_timeout_ns is not %d", b, int64(o.OpTimeout))
	}
}

func TestSettingsRendering(t *testing.T) {
	s := map[string]string{"stable-after": "60s", "down-removal-margin": "5s"}
	tests := []struct {
		name string
		got  []string
		want []string
	}{
		{"env", SettingsEnv(s), []string{"SHARDTEST_DOWN_REMOVAL_MARGIN=5s", "SHARDTEST_STABLE_AFTER=60s"}},
		{"flags", SettingsFlags(s), []string{"--down-removal-margin=5s", "--stable-after=60s"}},
		{"string", []string{SettingsString(s)}, []string{"down-removal-margin=5s stable-after=60s"}},
		{"none", SettingsEnv(nil), nil},
	}
	for _, tt := range tests {
		if !slices.Equal(tt.got, tt.want) {
			t.Errorf("%s: %q, want %q", tt.name, tt.got, tt.want)
		}
	}
}

// The catalogue against another implementation's image: the scenario's
// settings reach its nodes through the environment alone, and a scenario
// whose faults it does not declare is skipped, not failed. The other
// implementation is the reference image started without the clock
// capability (--without-capabilities, given through --node-arg).
func TestTestAllAgainstAnotherImage(t *testing.T) {
	if os.Getenv("SHARDTEST_NO_DOCKER") == "1" {
		t.Skip("SHARDTEST_NO_DOCKER=1")
	}
	bin, err := os.ReadFile(binary)
	if err != nil {
		t.Fatal(err)
	}
	// The reference image of this binary, as another implementation's:
	// the runtime builds it (for the journal) before it looks for --image.
	image := docker.ImageTag(bin)
	root := t.TempDir()
	cmd := exec.Command(binary, "test-all", "--runtime", "docker", "--binary", binary, "--image", image,
		"--scenario", "passivation-churn,clock-storm", "--node-arg=--without-capabilities=clock", "--results", root)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("test-all: %v\n%s", err, out)
	}
	sums, _ := filepath.Glob(filepath.Join(root, "test-all", "*", "summary.json"))
	if len(sums) != 1 {
		t.Fatalf("summaries %v, want 1\n%s", sums, out)
	}
	b, err := os.ReadFile(sums[0])
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Outcome    string
		ExitStatus int `json:"exit_status"`
		Runs       []struct {
			Scenario, Verdict, Skipped, Dir string
		}
	}
	if err := json.Unmarshal(b, &sum); err != nil || len(sum.Runs) != 2 || sum.Outcome != "valid" || sum.ExitStatus != 0 {
		t.Fatalf("summary.json: %v, %s", err, b)
	}
	for _, r := range sum.Runs {
		switch r.Scenario {
		case "passivation-churn":
			if r.Verdict != "valid" || r.Skipped != "" {
				t.Errorf("passivation-churn: %+v, want valid", r)
			}
			var o Options
			if b, err := os.ReadFile(filepath.Join(r.Dir, "test.json")); err != nil || json.Unmarshal(b, &o) != nil || o.NodeImage != image || o.NodeSettings["passivate-idle-after"] != "30ms" {
				t.Errorf("passivation-churn's test.json: %v, %+v; want image %s and its setting", err, o, image)
			}
			// Only the environment carried the setting to the nodes.
			ev, err := os.ReadFile(filepath.Join(r.Dir, "events.jsonl"))
			if err != nil || !strings.Contains(string(ev), `"entity-passivated"`) {
				t.Errorf("passivation-churn: no entity passivated (%v): the setting did not reach the nodes", err)
			}
		case "clock-storm":
			if !strings.Contains(r.Skipped, `"clock" capability`) {
				t.Errorf("clock-storm: %+v, want skipped for the clock capability", r)
			}
		default:
			t.Errorf("unexpected run %+v", r)
		}
	}
}

// A history cut short (the harness interrupted or killed, even at a line
// boundary) proves what it proves — an invalid stays invalid — and is
// unknown otherwise, with the reason, never valid: the final read-back
// that would show a lost write never ran.
func TestCheckOfAHistoryCutShort(t *testing.T) {
	op := func(i int, kind, f, value string) history.Op {
		o := history.Op{Index: int64(i), Time: int64(i+1) * 1e6, Kind: kind, Process: 0, F: f, Entity: "register/r1", Node: "n1"}
		if value != "" {
			o.Value = json.RawMessage(value)
		}
		if kind == history.OK {
			o.Reply = &history.Reply{Node: "n1", Incarnation: "i", EntityIncarnation: "n1@i/1"}
		}
		return o
	}
	phase := func(i int, name string) history.Op {
		return history.Op{Index: int64(i), Time: int64(i+1) * 1e6, Kind: history.Phase, Process: -1, F: name}
	}
	good := []history.Op{phase(0, history.PhaseMain), op(1, history.Invoke, "write", `{"value":1}`), op(2, history.OK, "write", `{"value":1}`),
		op(3, history.Invoke, "read", ""), op(4, history.OK, "read", `{"value":1}`)}
	stale := append(slices.Clone(good), op(5, history.Invoke, "read", ""), op(6, history.OK, "read", `{"value":null}`))
	tests := []struct {
		name string
		ops  []history.Op
		end  bool
		want checker.Verdict
		why  string
	}{
		{"whole", good, true, checker.Valid, ""},
		{"stopped before its final read-back", good, false, checker.Unknown, "the run ended before its final read-back"},
		{"stopped during its final read-back", append(slices.Clone(good), phase(5, history.PhaseFinal)), false, checker.Unknown, "during its final read-back"},
		{"a violation in the prefix stays invalid", stale, false, checker.Invalid, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ops := slices.Clone(tt.ops)
			if tt.end {
				ops = append(ops, phase(len(ops), history.PhaseEnd))
			}
			h := &history.File{Header: history.Header{Format: history.Format, Version: history.Version}, Ops: ops}
			// No events or samples here: judge by linearizable, which has
			// the history alone to go by.
			_, results := Check(context.Background(), Options{Workload: "register"}, h, checker.Inputs{})
			for _, r := range results {
				if r.Checker == "linearizable" && r.Verdict != tt.want {
					t.Fatalf("linearizable: %s %q, want %s", r.Verdict, r.Summary, tt.want)
				}
				if r.Verdict == checker.Valid && !tt.end {
					t.Errorf("%s valid on a history cut short", r.Checker)
				}
				if tt.why != "" && r.Checker == "linearizable" && !strings.Contains(r.Summary, tt.why) {
					t.Errorf("linearizable: %q lacks %q", r.Summary, tt.why)
				}
			}
		})
	}
}

// What can be refused is refused before any side effect: no results
// folder, no latest link, no cluster (loss on the local runtime started a
// whole cluster first; a taken --base-port repointed results/latest).
func TestRefusedBeforeAnySideEffect(t *testing.T) {
	takenPort := testbin.TakePort(t)
	w, _ := workloads.Named("register")
	tests := []struct {
		name string
		mod  func(o *Options, l *Local)
		want string
	}{
		{"loss on the local runtime", func(o *Options, l *Local) { o.Nemesis, o.NemesisInterval = "loss", 5*time.Second }, "loss"},
		{"a shape that needs more nodes", func(o *Options, l *Local) { o.Nemesis, o.NemesisInterval = "partition:majorities-ring", 5*time.Second }, "at least 4 nodes"},
		{"a base port out of range", func(o *Options, l *Local) { l.BasePort = 70000 }, "out of range"},
		{"a base port taken", func(o *Options, l *Local) { l.BasePort = takenPort }, "is taken"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := options("refused")
			o.Nodes = 3
			l := Local{Binary: "/nonexistent/shardtest", BasePort: 28400, Log: quiet()}
			tt.mod(&o, &l)
			root := t.TempDir()
			test := &Test{Options: o, Runtime: l, Workload: w, Log: quiet()}
			_, err := test.Run(context.Background(), root)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err %v, want one naming %q", err, tt.want)
			}
			if entries, _ := os.ReadDir(root); len(entries) != 0 {
				t.Fatalf("the refused run left %v in the results root", entries)
			}
		})
	}
}

// Runs of one test started in the same millisecond get folders of their
// own.
func TestNewRunDirIsExclusive(t *testing.T) {
	parent := filepath.Join(t.TempDir(), "register")
	at := time.Date(2026, 12, 1, 10, 0, 0, 123e6, time.UTC)
	seen := map[string]bool{}
	for i := range 3 {
		dir, suffix, err := newRunDir(parent, at)
		if err != nil {
			t.Fatal(err)
		}
		if seen[dir] {
			t.Fatalf("try %d: %s given twice", i, dir)
		}
		seen[dir] = true
		if want := []string{"", "-2", "-3"}[i]; suffix != want || !strings.HasSuffix(dir, "20261201T100000.123Z"+want) {
			t.Errorf("try %d: %s, suffix %q", i, dir, suffix)
		}
	}
}
