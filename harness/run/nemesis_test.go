package run

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/harness/docker"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
	"github.com/shardtest/shardtest/protocol/nodetest"
	"github.com/shardtest/shardtest/workloads"
)

// faultEnv is a running cluster with its nemesis environment.
type faultEnv struct {
	t   *testing.T
	ctx context.Context
	env *nemesis.Env
}

func (f *faultEnv) fault(name string) nemesis.Fault {
	f.t.Helper()
	fs, err := nemesis.Parse(name)
	if err != nil || len(fs) != 1 {
		f.t.Fatalf("parse %s: %v %v", name, nemesis.Names(fs), err)
	}
	if err := fs[0].Check(f.env); err != nil {
		f.t.Fatal(err)
	}
	return fs[0]
}

// inject injects a fault with a fixed seed and returns it with its targets.
func (f *faultEnv) inject(name string, seed uint64) (*nemesis.Active, any) {
	f.t.Helper()
	a, err := f.fault(name).Inject(f.ctx, f.env, rand.New(rand.NewPCG(seed, 1)))
	if err != nil {
		if a != nil {
			a.Heal(f.ctx)
		}
		f.t.Fatalf("inject %s: %v", name, err)
	}
	b, _ := json.Marshal(a.Targets)
	f.t.Logf("%s: %s", name, b)
	return a, a.Targets
}

func (f *faultEnv) heal(a *nemesis.Active) {
	f.t.Helper()
	if _, err := a.Heal(f.ctx); err != nil {
		f.t.Fatalf("heal: %v", err)
	}
}

func (f *faultEnv) node(name string) nemesis.Node {
	f.t.Helper()
	for _, n := range f.env.Cluster.Nodes() {
		if n.Name == name {
			return n
		}
	}
	f.t.Fatalf("no node %s", name)
	return nemesis.Node{}
}

func (f *faultEnv) names() []string {
	var out []string
	for _, n := range f.env.Cluster.Nodes() {
		out = append(out, n.Name)
	}
	return out
}

// converged waits until every node is ready and sees every node up.
func (f *faultEnv) converged(what string) {
	f.t.Helper()
	for _, n := range f.env.Cluster.Nodes() {
		nodetest.Eventually(f.t, f.ctx, 2*time.Minute, what+": "+n.Name+" sees all up", nodetest.SeesAllUp(n.HTTPAddr, f.names()...))
	}
}

func (f *faultEnv) incarnation(name string) string {
	f.t.Helper()
	st, err := nodetest.Status(f.ctx, f.node(name).HTTPAddr, 5*time.Second)
	if err != nil {
		f.t.Fatal(err)
	}
	return st.Self.Incarnation
}

// dial tries a TCP connection from inside a node's network namespace.
func dial(ctx context.Context, c *docker.Cluster, from, addr string) error {
	_, err := c.Net(ctx, from, []string{"dial", addr, "--timeout", "1s"})
	return err
}

func others(all []string, except ...string) []string {
	return slices.DeleteFunc(append([]string(nil), all...), func(s string) bool { return slices.Contains(except, s) })
}

// Every nemesis against real containers: each fault's effect is observed
// through the node protocol and from inside the network namespaces, and so
// is its heal.
func TestNemesesDocker(t *testing.T) {
	if os.Getenv("SHARDTEST_NO_DOCKER") == "1" {
		t.Skip("SHARDTEST_NO_DOCKER=1")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	dir := t.TempDir()
	cl, err := Docker{Binary: binary, Log: quiet()}.Start(ctx, fmt.Sprintf("nemesis-e2e-%d", rand.IntN(1e6)), 3, dir)
	if err != nil {
		t.Fatal(err)
	}
	dc := cl.(dockerCluster).c
	defer func() {
		cl.Stop(context.Background(), dir)
		cli, err := docker.NewClient(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer cli.Close()
		if left, err := docker.Leftovers(context.Background(), cli, dc.RunID()); err != nil || len(left) > 0 {
			t.Errorf("left behind: %v %v", left, err)
		}
	}()
	caps, err := client.New(cl.Nodes()[0].HTTPAddr, nil).Capabilities(ctx)
	if err != nil {
		t.Fatal(err)
	}
	f := &faultEnv{t: t, ctx: ctx, env: &nemesis.Env{Cluster: cl.(dockerCluster).Nemesis(), Capabilities: caps.Capabilities, Log: quiet()}}
	all := f.names()
	// Entity traffic starts the register type's coordinator.
	if _, err := client.New(cl.Nodes()[0].HTTPAddr, nil).Entity(ctx, protocol.EntityRequest{Type: "register", ID: "e2e", Op: "read"}); err != nil {
		t.Fatal(err)
	}
	httpAddr := func(n nemesis.Node) string { return n.Addr + ":" + fmt.Sprint(docker.HTTPPort) }

	t.Run("partition:isolate-one", func(t *testing.T) {
		f.t = t
		a, targets := f.inject("partition:isolate-one", 1)
		cut := targets.(nemesis.Cut)
		isolated := cut.Components[0][0]
		rest := others(all, isolated)
		// The isolated node's status (the harness's path stays open)
		// shows the others unreachable, and they show it unreachable.
		for _, o := range rest {
			nodetest.Eventually(t, ctx, time.Minute, isolated+" sees "+o+" unreachable", nodetest.SeesUnreachable(f.node(isolated).HTTPAddr, o))
			nodetest.Eventually(t, ctx, time.Minute, o+" sees "+isolated+" unreachable", nodetest.SeesUnreachable(f.node(o).HTTPAddr, isolated))
		}
		// A TCP connection across the cut fails, within a side it works.
		if err := dial(ctx, dc, isolated, httpAddr(f.node(rest[0]))); err == nil {
			t.Errorf("%s reached %s across the cut", isolated, rest[0])
		}
		if err := dial(ctx, dc, rest[0], httpAddr(f.node(isolated))); err == nil {
			t.Errorf("%s reached %s across the cut", rest[0], isolated)
		}
		if err := dial(ctx, dc, rest[0], httpAddr(f.node(rest[1]))); err != nil {
			t.Errorf("%s cannot reach %s on its own side: %v", rest[0], rest[1], err)
		}
		f.heal(a)
		if err := dial(ctx, dc, isolated, httpAddr(f.node(rest[0]))); err != nil {
			t.Errorf("after heal %s cannot reach %s: %v", isolated, rest[0], err)
		}
		f.converged("after heal")
	})

	t.Run("partition:journal-cut", func(t *testing.T) {
		f.t = t
		a, targets := f.inject("partition:journal-cut", 2)
		cut := targets.(nemesis.Cut)
		journal := f.env.Cluster.Journal().Addr + ":" + fmt.Sprint(docker.JournalPort)
		for _, n := range cut.Components[0] {
			if err := dial(ctx, dc, n, journal); err == nil {
				t.Errorf("%s reached the journal across the cut", n)
			}
		}
		for _, n := range others(all, cut.Components[0]...) {
			if err := dial(ctx, dc, n, journal); err != nil {
				t.Errorf("%s (not cut) cannot reach the journal: %v", n, err)
			}
		}
		f.heal(a)
		for _, n := range all {
			if err := dial(ctx, dc, n, journal); err != nil {
				t.Errorf("after heal %s cannot reach the journal: %v", n, err)
			}
		}
		f.converged("after heal")
	})

	t.Run("partition:asymmetric and loss: rules as installed in the kernel", func(t *testing.T) {
		f.t = t
		type shown struct {
			DropIn      []string `json:"drop_in"`
			DropOut     []string `json:"drop_out"`
			LossPercent int      `json:"loss_percent"`
			LossPeers   []string `json:"loss_peers"`
		}
		show := func(n string) shown {
			out, err := dc.Net(ctx, n, []string{"show"})
			if err != nil {
				t.Fatalf("net show on %s: %v", n, err)
			}
			var s shown
			if err := json.Unmarshal([]byte(out), &s); err != nil {
				t.Fatalf("net show on %s: %q: %v", n, out, err)
			}
			return s
		}
		a, targets := f.inject("partition:asymmetric", 3)
		cut := targets.(nemesis.Cut)
		from, to := cut.Components[0], cut.Components[1]
		for _, n := range from {
			if s := show(n); len(s.DropOut) != len(to) || len(s.DropIn) != 0 {
				t.Errorf("%s (sending side) has %+v, want drop-out only, to %v", n, s, to)
			}
		}
		for _, n := range to {
			if s := show(n); len(s.DropIn) != len(from) || len(s.DropOut) != 0 {
				t.Errorf("%s (receiving side) has %+v, want drop-in only, from %v", n, s, from)
			}
		}
		f.heal(a)
		a, _ = f.inject("loss:random", 4)
		for _, n := range all {
			if s := show(n); s.LossPercent < 5 || len(s.LossPeers) != len(all)-1 {
				t.Errorf("%s has %+v, want loss to and from the other nodes", n, s)
			}
		}
		f.heal(a)
		for _, n := range all {
			if s := show(n); len(s.DropIn)+len(s.DropOut)+len(s.LossPeers) != 0 {
				t.Errorf("%s still has rules after heal: %+v", n, s)
			}
		}
		f.converged("after heal")
	})

	t.Run("kill:oldest", func(t *testing.T) {
		f.t = t
		a, targets := f.inject("kill:oldest", 5)
		victim := targets.(nemesis.Targets).Targets[0]
		before := ""
		for _, o := range others(all, victim) {
			nodetest.Eventually(t, ctx, time.Minute, o+" sees "+victim+" unreachable", nodetest.SeesUnreachable(f.node(o).HTTPAddr, victim))
			st, err := nodetest.Status(ctx, f.node(o).HTTPAddr, 5*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range st.Members {
				if m.Name == victim {
					before = m.Incarnation
				}
			}
		}
		if _, err := nodetest.Status(ctx, f.node(victim).HTTPAddr, 2*time.Second); err == nil {
			t.Errorf("killed %s still answers", victim)
		}
		f.heal(a)
		f.converged("after restart")
		if after := f.incarnation(victim); after == before {
			t.Errorf("%s restarted with the same incarnation %s", victim, after)
		}
	})

	t.Run("pause:coordinator", func(t *testing.T) {
		f.t = t
		// The coordinator moved with the killed oldest node; entity
		// traffic starts it again where it now belongs.
		nodetest.Eventually(t, ctx, time.Minute, "an entity read", func(ctx context.Context) (bool, string) {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if _, err := client.New(f.node("n2").HTTPAddr, nil).Entity(rctx, protocol.EntityRequest{Type: "register", ID: "e2e-2", Op: "read"}); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
		a, targets := f.inject("pause:coordinator", 6)
		frozen := targets.(nemesis.Targets).Targets[0]
		if _, err := nodetest.Status(ctx, f.node(frozen).HTTPAddr, time.Second); err == nil {
			t.Errorf("paused %s answered", frozen)
		}
		for _, o := range others(all, frozen) {
			nodetest.Eventually(t, ctx, time.Minute, o+" sees "+frozen+" unreachable", nodetest.SeesUnreachable(f.node(o).HTTPAddr, frozen))
		}
		f.heal(a)
		if _, err := nodetest.Status(ctx, f.node(frozen).HTTPAddr, 5*time.Second); err != nil {
			t.Errorf("%s does not answer after the thaw: %v", frozen, err)
		}
		f.converged("after thaw")
	})

	t.Run("clock", func(t *testing.T) {
		f.t = t
		clock := func(n string) protocol.ClockReply {
			c, err := client.New(f.node(n).HTTPAddr, nil).GetClock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			return c
		}
		a, targets := f.inject("clock:bump", 7)
		ct := targets.(nemesis.ClockTargets)
		for _, n := range ct.Targets {
			if got, want := clock(n).OffsetMS, ct.OffsetMs[n]; got < want-1000 || got > want+1000 {
				t.Errorf("%s: offset %v ms, want %v", n, got, want)
			}
		}
		f.heal(a)
		for _, n := range ct.Targets {
			if c := clock(n); c.OffsetMS != 0 || c.Drift != 0 {
				t.Errorf("%s after heal: %+v", n, c)
			}
		}
		a, targets = f.inject("clock:drift", 8)
		ct = targets.(nemesis.ClockTargets)
		for _, n := range ct.Targets {
			if got := clock(n).Drift; got != ct.Drift[n] {
				t.Errorf("%s: drift %v, want %v", n, got, ct.Drift[n])
			}
		}
		f.heal(a)
		a, targets = f.inject("clock:strobe", 9)
		ct = targets.(nemesis.ClockTargets)
		n := ct.Targets[0]
		seen := map[bool]bool{}
		deadline := time.Now().Add(20 * time.Duration(ct.PeriodMs) * time.Millisecond)
		for time.Now().Before(deadline) && len(seen) < 2 {
			seen[clock(n).OffsetMS != 0] = true
			time.Sleep(time.Duration(ct.PeriodMs) * time.Millisecond / 3)
		}
		if len(seen) < 2 {
			t.Errorf("%s's clock did not flip: saw offset-set=%v only", n, seen)
		}
		f.heal(a)
		time.Sleep(2 * time.Duration(ct.PeriodMs) * time.Millisecond)
		for _, n := range ct.Targets {
			if c := clock(n); c.OffsetMS != 0 || c.Drift != 0 {
				t.Errorf("%s after the strobe's heal: %+v (the strobe must stop)", n, c)
			}
		}
	})

	t.Run("member:join", func(t *testing.T) {
		f.t = t
		// Entities in many shards, so that some move to the new node. A
		// rebalanced shard is allocated again (to the least loaded region,
		// the new one) when its next message arrives, so traffic goes on.
		touch := func() {
			for i := range 60 {
				rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				client.New(f.node("n1").HTTPAddr, nil).Entity(rctx, protocol.EntityRequest{Type: "register", ID: fmt.Sprintf("join-%d", i), Op: "read"})
				cancel()
			}
		}
		touch()
		a, targets := f.inject("member:join", 10)
		defer a.Heal(ctx) // on failure; a second heal is harmless
		added := targets.(nemesis.Targets).Targets[0]
		nodetest.Eventually(t, ctx, time.Minute, "n1 sees "+added+" up", nodetest.SeesAllUp(f.node("n1").HTTPAddr, append(all, added)...))
		nodetest.Eventually(t, ctx, 90*time.Second, "shards rebalance to "+added, func(ctx context.Context) (bool, string) {
			touch()
			st, err := nodetest.Status(ctx, f.node(added).HTTPAddr, 2*time.Second)
			if err != nil {
				return false, err.Error()
			}
			for _, s := range st.Sharding {
				if s.Type == "register" && len(s.Region.Shards) > 0 {
					return true, ""
				}
			}
			return false, "hosts no register shard yet"
		})
		f.heal(a)
		if slices.Contains(f.names(), added) {
			t.Errorf("%s still in the cluster after heal", added)
		}
		nodetest.Eventually(t, ctx, time.Minute, added+" gone from n1's members", func(ctx context.Context) (bool, string) {
			st, err := nodetest.Status(ctx, f.node("n1").HTTPAddr, 2*time.Second)
			if err != nil {
				return false, err.Error()
			}
			for _, m := range st.Members {
				if m.Name == added {
					return false, strings.Join(nodetest.Members(st), " ")
				}
			}
			return true, ""
		})
		f.converged("after the added node left")
	})

	t.Run("member:leave-oldest", func(t *testing.T) {
		f.t = t
		a, targets := f.inject("member:leave-oldest", 11)
		left := targets.(nemesis.Targets).Targets[0]
		other := others(all, left)[0]
		st, err := nodetest.Status(ctx, f.node(other).HTTPAddr, 5*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(st.Oldest, left+"@") || st.Oldest == "" {
			t.Errorf("after %s left, %s names %q the oldest", left, other, st.Oldest)
		}
		f.heal(a)
		f.converged("after the node came back")
	})

	t.Run("member:rolling-restart", func(t *testing.T) {
		f.t = t
		before := map[string]string{}
		for _, n := range all {
			before[n] = f.incarnation(n)
		}
		a, _ := f.inject("member:rolling-restart", 12)
		f.heal(a)
		f.converged("after the rolling restart")
		for _, n := range all {
			if f.incarnation(n) == before[n] {
				t.Errorf("%s kept incarnation %s through a rolling restart", n, before[n])
			}
		}
	})

	t.Run("kill:journal", func(t *testing.T) {
		f.t = t
		health := func() error {
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+f.env.Cluster.Journal().HTTPAddr+"/v1/health", nil)
			c := &http.Client{Timeout: 2 * time.Second}
			res, err := c.Do(req)
			if err != nil {
				return err
			}
			res.Body.Close()
			return nil
		}
		a, _ := f.inject("kill:journal", 13)
		if err := health(); err == nil {
			t.Error("the killed journal answers")
		}
		f.heal(a)
		if err := health(); err != nil {
			t.Errorf("the journal after restart: %v", err)
		}
		// The nodes serve entity requests through the restarted journal.
		nodetest.Eventually(t, ctx, time.Minute, "an entity write after the journal restart", func(ctx context.Context) (bool, string) {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			_, err := client.New(f.node("n2").HTTPAddr, nil).Entity(rctx, protocol.EntityRequest{Type: "register", ID: "e2e", Op: "write", Payload: json.RawMessage(`{"value": 7}`)})
			if err != nil {
				return false, err.Error()
			}
			return true, ""
		})
	})
}

// A run with faults in the local runtime: partitions through the nodes'
// in-process filters, SIGKILL, SIGSTOP and clock skew. Every fault is
// recorded and healed, the cluster converges, and the correct node stays
// valid. Faults the runtime cannot do are refused before the run.
func TestNemesisRunLocal(t *testing.T) {
	w, err := workloads.Named("register")
	if err != nil {
		t.Fatal(err)
	}
	o := options("local-nemesis")
	o.Runtime, o.TimeLimit = "local", 20*time.Second
	o.Nemesis, o.NemesisInterval = "partition,kill:one,pause:one,clock", 2*time.Second
	root := t.TempDir()
	test := &Test{Options: o, Runtime: Local{Binary: binary, BasePort: 20400, Log: quiet()}, Workload: w, Log: quiet()}
	res, err := test.Run(context.Background(), root)
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict == "invalid" {
		t.Fatalf("the correct node is invalid under faults: %+v", res.Checks)
	}
	h, err := history.ReadFile(res.Dir + "/history.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	injects, heals := 0, 0
	for _, op := range h.Ops {
		if op.Kind != history.Nemesis {
			continue
		}
		var v struct {
			Action  string          `json:"action"`
			Began   int64           `json:"began"`
			Targets json.RawMessage `json:"targets"`
		}
		if err := json.Unmarshal(op.Value, &v); err != nil {
			t.Fatalf("nemesis entry %d: %v", op.Index, err)
		}
		if op.Error != "" {
			t.Errorf("%s %s failed: %s", v.Action, op.F, op.Error)
		}
		if v.Began > op.Time || len(v.Targets) == 0 {
			t.Errorf("entry %d: began %d after it took effect (%d), or no targets: %s", op.Index, v.Began, op.Time, op.Value)
		}
		switch v.Action {
		case "inject":
			injects++
		case "heal":
			heals++
		}
	}
	if injects < 2 || injects != heals {
		t.Errorf("%d injects, %d heals", injects, heals)
	}
	if s := h.Summarize(); s.Open != 0 {
		t.Errorf("%d operations left open", s.Open)
	}

	for _, spec := range []string{"loss", "partition:journal-cut", "kill:journal,loss:random"} {
		o := options("local-refused")
		o.Runtime, o.Nemesis, o.NemesisInterval = "local", spec, time.Second
		test := &Test{Options: o, Runtime: Local{Binary: binary, BasePort: 20400, Log: quiet()}, Workload: w, Log: quiet()}
		if _, err := test.Run(context.Background(), t.TempDir()); err == nil || !strings.Contains(err.Error(), "not supported") {
			t.Errorf("--nemesis %s in the local runtime: err %v, want a refusal", spec, err)
		}
	}
}

// TestScriptedScheduleLocal: a scenario's scripted schedule runs as
// written: overlapping faults (a kill inside a clock bump), each healed by
// its own step, a fixed target choice ("all"), recorded in order; the
// schedule is stored in test.json.
func TestScriptedScheduleLocal(t *testing.T) {
	w, err := workloads.Named("register")
	if err != nil {
		t.Fatal(err)
	}
	o := options("local-scripted")
	o.Runtime, o.TimeLimit = "local", 12*time.Second
	o.Schedule = nemesis.SeedSchedule([]nemesis.Step{
		{At: 2 * time.Second, Fault: "clock:bump", Target: "all"},
		{At: 3 * time.Second, Fault: "kill:one"},
		{At: 6 * time.Second, Fault: "kill:one", Heal: true},
		{At: 8 * time.Second, Fault: "clock:bump", Heal: true},
	}, o.Seed)
	test := &Test{Options: o, Runtime: Local{Binary: binary, BasePort: 20600, Log: quiet()}, Workload: w, Log: quiet()}
	res, err := test.Run(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if res.Verdict == "invalid" {
		t.Fatalf("the correct node is invalid: %+v", res.Checks)
	}
	h, err := history.ReadFile(res.Dir + "/history.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, op := range h.Ops {
		if op.Kind != history.Nemesis {
			continue
		}
		var v struct {
			Action  string
			Targets struct{ Targets []string }
		}
		if err := json.Unmarshal(op.Value, &v); err != nil || op.Error != "" {
			t.Fatalf("entry %d: %v %s", op.Index, err, op.Error)
		}
		got = append(got, v.Action+" "+op.F)
		if op.F == "clock:bump" && v.Action == "inject" && len(v.Targets.Targets) != 3 {
			t.Errorf("clock:bump with target all hit %v", v.Targets.Targets)
		}
	}
	want := []string{"inject clock:bump", "inject kill:one", "heal kill:one", "heal clock:bump"}
	if !slices.Equal(got, want) {
		t.Fatalf("nemesis entries %v, want %v", got, want)
	}
	b, err := os.ReadFile(res.Dir + "/test.json")
	if err != nil {
		t.Fatal(err)
	}
	var stored Options
	if err := json.Unmarshal(b, &stored); err != nil || !slices.Equal(stored.Schedule, o.Schedule) {
		t.Fatalf("test.json schedule %+v (err %v), want %+v", stored.Schedule, err, o.Schedule)
	}
}
