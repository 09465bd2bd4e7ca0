package nemesis

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardtest/shardtest/protocol"
)

func TestPlanIsDeterministic(t *testing.T) {
	faults := Names(mustParse(t, "partition,kill,pause,clock"))
	a := Plan(42, faults, 5*time.Second, 5*time.Minute)
	b := Plan(42, faults, 5*time.Second, 5*time.Minute)
	if !reflect.DeepEqual(a, b) {
		t.Fatalf("same seed, different plans:\n%v\n%v", a, b)
	}
	c := Plan(43, faults, 5*time.Second, 5*time.Minute)
	if reflect.DeepEqual(a, c) {
		t.Fatalf("seeds 42 and 43 gave the same plan: %v", a)
	}
}

func TestPlanShape(t *testing.T) {
	tests := []struct {
		name            string
		faults          []string
		interval, limit time.Duration
		wantEmpty       bool
	}{
		{"no faults", nil, time.Second, time.Minute, true},
		{"no interval", []string{"kill:one"}, 0, time.Minute, true},
		{"too short", []string{"kill:one"}, 10 * time.Second, 15 * time.Second, true},
		{"one fault", []string{"kill:one"}, time.Second, time.Minute, false},
		{"many", []string{"kill:one", "pause:one", "clock:bump"}, 3 * time.Second, 10 * time.Minute, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := Plan(7, tt.faults, tt.interval, tt.limit)
			if (len(plan) == 0) != tt.wantEmpty {
				t.Fatalf("plan %v: want empty %v", plan, tt.wantEmpty)
			}
			if len(plan)%2 != 0 {
				t.Fatalf("plan has an unhealed fault: %v", plan)
			}
			var last time.Duration
			for i, s := range plan {
				if s.At <= last {
					t.Errorf("step %d at %v not after %v", i, s.At, last)
				}
				if gap := s.At - last; gap < tt.interval*3/4 || gap > tt.interval*5/4 {
					t.Errorf("step %d: gap %v outside interval ±25%%", i, gap)
				}
				last = s.At
				if s.Heal != (i%2 == 1) {
					t.Errorf("step %d: heal %v: injects and heals must alternate", i, s.Heal)
				}
				if s.Heal && s.Fault != plan[i-1].Fault {
					t.Errorf("step %d heals %s, but %s was injected", i, s.Fault, plan[i-1].Fault)
				}
				if !slices.Contains(tt.faults, s.Fault) {
					t.Errorf("step %d: fault %s not asked for", i, s.Fault)
				}
			}
			if last >= tt.limit {
				t.Errorf("last step at %v, not before the limit %v", last, tt.limit)
			}
		})
	}
}

func mustParse(t *testing.T, spec string) []Fault {
	t.Helper()
	fs, err := Parse(spec)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

func TestParse(t *testing.T) {
	tests := []struct {
		spec    string
		want    []string // nil: check only the count
		count   int
		wantErr bool
	}{
		{spec: "", count: 0},
		{spec: "none", count: 0},
		{spec: "kill:oldest", want: []string{"kill:oldest"}},
		{spec: "kill", count: 7}, // not kill:journal
		{spec: "kill,kill:journal", count: 8},
		{spec: "kill:one, kill:one", want: []string{"kill:one"}},
		{spec: "partition", count: 10},
		{spec: "clock", want: []string{"clock:bump", "clock:drift", "clock:strobe"}},
		{spec: "member", count: 4},
		{spec: "bogus", wantErr: true},
		{spec: "kill:sometimes", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.spec, func(t *testing.T) {
			fs, err := Parse(tt.spec)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if tt.want != nil && !reflect.DeepEqual(Names(fs), tt.want) {
				t.Errorf("got %v, want %v", Names(fs), tt.want)
			}
			if tt.want == nil && !tt.wantErr && len(fs) != tt.count {
				t.Errorf("got %d faults %v, want %d", len(fs), Names(fs), tt.count)
			}
		})
	}
}

// reach reports whether a packet from a to b passes the cut.
func reach(c Cut, a, b string) bool {
	return !slices.Contains(c.Drops[a].DropOut, b) && !slices.Contains(c.Drops[b].DropIn, a)
}

func TestShapes(t *testing.T) {
	names := func(n int) []string {
		var out []string
		for i := 1; i <= n; i++ {
			out = append(out, fmt.Sprintf("n%d", i))
		}
		return out
	}
	for _, n := range []int{2, 3, 4, 5, 6, 7, 9} {
		for _, s := range partitionShapes() {
			if n < s.min {
				continue
			}
			t.Run(fmt.Sprintf("%s/%d", s.name, n), func(t *testing.T) {
				ns := names(n)
				cut, err := shapeCut(context.Background(), s.name, ns, "n2", rand.New(rand.NewPCG(uint64(n), 1)))
				if err != nil {
					t.Fatal(err)
				}
				seen := func(a string) (k int) {
					for _, b := range ns {
						if reach(cut, a, b) && reach(cut, b, a) {
							k++
						}
					}
					return k
				}
				cutSomething := false
				for _, a := range ns {
					for _, b := range ns {
						if !reach(cut, a, b) {
							cutSomething = true
							if a == b {
								t.Errorf("%s cut from itself", a)
							}
						}
					}
				}
				if s.name != "journal-cut" && !cutSomething {
					t.Errorf("cut %+v cuts nothing", cut)
				}
				switch s.name {
				case "halves", "random-halves", "isolate-one", "isolate-oldest", "isolate-coordinator", "isolate-singleton":
					if len(cut.Components) != 2 || len(cut.Components[0])+len(cut.Components[1]) != n {
						t.Fatalf("components %v", cut.Components)
					}
					for _, a := range cut.Components[0] {
						for _, b := range cut.Components[1] {
							if reach(cut, a, b) || reach(cut, b, a) {
								t.Errorf("%s and %s on different sides still talk", a, b)
							}
						}
					}
					if s.role != "" && !reflect.DeepEqual(cut.Components[0], []string{"n2"}) {
						t.Errorf("isolated %v, want the role's node n2", cut.Components[0])
					}
				case "majorities-ring":
					var views [][]string
					for _, a := range ns {
						if k := seen(a); k < n/2+1 {
							t.Errorf("%s sees %d nodes, not a majority of %d", a, k, n)
						}
						var v []string
						for _, b := range ns {
							if reach(cut, a, b) {
								v = append(v, b)
							}
						}
						views = append(views, v)
					}
					same := true
					for _, v := range views {
						same = same && reflect.DeepEqual(v, views[0])
					}
					if same {
						t.Errorf("every node sees the same nodes: %v", views[0])
					}
				case "bridge":
					bridge := cut.Components[1][0]
					if seen(bridge) != n {
						t.Errorf("bridge %s sees %d of %d", bridge, seen(bridge), n)
					}
					for _, a := range cut.Components[0] {
						for _, b := range cut.Components[2] {
							if reach(cut, a, b) || reach(cut, b, a) {
								t.Errorf("%s and %s across the bridge still talk", a, b)
							}
						}
					}
				case "asymmetric":
					from, to := cut.Components[0], cut.Components[1]
					for _, a := range from {
						for _, b := range to {
							if reach(cut, a, b) {
								t.Errorf("%s → %s passes", a, b)
							}
							if !reach(cut, b, a) {
								t.Errorf("%s → %s is dropped; only one direction should be", b, a)
							}
						}
					}
				case "journal-cut":
					for _, a := range cut.Components[0] {
						if reach(cut, a, journalName) || reach(cut, journalName, a) {
							t.Errorf("%s still reaches the journal", a)
						}
					}
				}
			})
		}
	}
}

// fakeCluster records what the nemesis asks of the runtime.
type fakeCluster struct {
	mu       sync.Mutex
	nodes    []Node
	rules    map[string]Rules
	killed   map[string]bool
	paused   map[string]bool
	calls    []string
	failKill bool
}

func newFake(n int) *fakeCluster {
	f := &fakeCluster{rules: map[string]Rules{}, killed: map[string]bool{}, paused: map[string]bool{}}
	for i := 1; i <= n; i++ {
		f.nodes = append(f.nodes, Node{Name: fmt.Sprintf("n%d", i), Addr: fmt.Sprintf("10.0.0.%d", 10+i)})
	}
	return f
}

func (f *fakeCluster) call(s string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, s)
}
func (f *fakeCluster) Runtime() string { return "fake" }
func (f *fakeCluster) Features() []string {
	return []string{FeatureKernelFilter, FeatureKill, FeaturePause}
}
func (f *fakeCluster) Nodes() []Node { return f.nodes }
func (f *fakeCluster) Journal() Node { return Node{Name: "journal", Addr: "10.0.0.2"} }
func (f *fakeCluster) SetRules(_ context.Context, node string, r Rules) error {
	f.call("rules " + node)
	f.mu.Lock()
	defer f.mu.Unlock()
	if r.Empty() {
		delete(f.rules, node)
	} else {
		f.rules[node] = r
	}
	return nil
}
func (f *fakeCluster) Kill(_ context.Context, name string) error {
	f.call("kill " + name)
	if f.failKill {
		return errors.New("engine said no")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killed[name] = true
	return nil
}
func (f *fakeCluster) Start(_ context.Context, name string) error {
	f.call("start " + name)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.killed, name)
	return nil
}
func (f *fakeCluster) Pause(_ context.Context, name string) error {
	f.call("pause " + name)
	f.mu.Lock()
	defer f.mu.Unlock()
	f.paused[name] = true
	return nil
}
func (f *fakeCluster) Resume(_ context.Context, name string) error {
	f.call("resume " + name)
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.paused, name)
	return nil
}
func (f *fakeCluster) AddNode(context.Context) (Node, error) {
	return Node{}, fmt.Errorf("add node: %w", ErrUnsupported)
}
func (f *fakeCluster) RemoveNode(context.Context, string) error {
	return fmt.Errorf("remove node: %w", ErrUnsupported)
}

func TestRunnerHealsEverything(t *testing.T) {
	tests := []struct {
		name   string
		spec   string
		cancel bool // end the main phase while the fault is active
	}{
		{"partitions run to the end", "partition:halves,partition:bridge,partition:asymmetric,partition:journal-cut,loss", false},
		{"kills cancelled", "kill:one,kill:majority,kill:all,kill:journal", true},
		{"pauses", "pause:one,pause:minority", false},
		{"pause cancelled", "pause:one", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fc := newFake(5)
			var mu sync.Mutex
			var events []Event
			r := &Runner{Env: &Env{Cluster: fc, Capabilities: []string{"journal"}}, Faults: mustParse(t, tt.spec), Record: func(e Event) {
				mu.Lock()
				defer mu.Unlock()
				events = append(events, e)
			}}
			if _, err := r.Check(); err != nil {
				t.Fatal(err)
			}
			plan := Plan(1, Names(r.Faults), 10*time.Millisecond, 400*time.Millisecond)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tt.cancel {
				plan = plan[:1] // inject, never heal: the end of the run must
				go func() { time.Sleep(50 * time.Millisecond); cancel() }()
			}
			r.Run(ctx, time.Now(), plan)
			if len(fc.rules) != 0 || len(fc.killed) != 0 || len(fc.paused) != 0 {
				t.Errorf("left injected: rules %v killed %v paused %v (calls %v)", fc.rules, fc.killed, fc.paused, fc.calls)
			}
			injects, heals := 0, 0
			for _, e := range events {
				if e.Err != nil {
					t.Errorf("%s %s: %v", e.Action, e.Fault, e.Err)
				}
				if e.Targets == nil {
					t.Errorf("%s %s: no targets recorded", e.Action, e.Fault)
				}
				switch e.Action {
				case "inject":
					injects++
				case "heal":
					heals++
				}
			}
			if injects == 0 || injects != heals {
				t.Errorf("%d injects, %d heals: %v", injects, heals, events)
			}
		})
	}
}

func TestRunnerRecordsFailures(t *testing.T) {
	fc := newFake(3)
	fc.failKill = true
	var events []Event
	r := &Runner{Env: &Env{Cluster: fc}, Faults: mustParse(t, "kill:one"), Record: func(e Event) { events = append(events, e) }}
	r.Run(context.Background(), time.Now(), []Step{{At: 0, Fault: "kill:one", Seed: 3}, {At: time.Millisecond, Fault: "kill:one", Heal: true}})
	// The kill failed on its only target: it did nothing, so it is
	// recorded as failed, with what it tried, and not healed.
	if len(events) != 1 || events[0].Err == nil || events[0].Targets == nil || !events[0].Failed {
		t.Fatalf("a kill that did nothing must be recorded as failed, with its error and targets, and no heal: %+v", events)
	}
	if slices.Contains(fc.calls, "start n1") || slices.Contains(fc.calls, "start n2") || slices.Contains(fc.calls, "start n3") {
		t.Fatalf("a node no kill reached was started again: %v", fc.calls)
	}
	// A fault with no target at all (kill:coordinator where no node runs
	// one) is failed too.
	events = nil
	fc.failKill = false
	r = &Runner{Env: &Env{Cluster: fc}, Faults: mustParse(t, "kill:coordinator"), Record: func(e Event) { events = append(events, e) }}
	r.Run(context.Background(), time.Now(), []Step{{At: 0, Fault: "kill:coordinator"}, {At: time.Millisecond, Fault: "kill:coordinator", Heal: true}})
	if len(events) != 1 || !events[0].Failed || events[0].Err == nil {
		t.Fatalf("kill:coordinator with no coordinator: %+v", events)
	}
}

func TestRunnerCheck(t *testing.T) {
	roles := []string{"age", "coordinator", "singleton", "journal"}
	tests := []struct {
		spec        string
		caps        []string
		wantErr     bool
		wantKept    int
		wantDropped int
	}{
		{"partition", roles, false, 9, 1},                // majorities-ring needs 4 nodes
		{"partition:majorities-ring", roles, true, 0, 0}, // named in full: refused
		{"partition,clock:bump", roles, true, 0, 1},      // clock without the capability
		{"clock", roles, true, 0, 3},                     // nothing left
		{"kill,pause", roles, false, 10, 1},              // kill:oldest-half needs 4 nodes
		// No age, no coordinator, no singleton: the faults aimed at them
		// are left out up front.
		{"kill,pause", nil, false, 6, 5},
		{"partition", nil, false, 5, 5},       // journal-cut too: no journal capability
		{"kill:coordinator", nil, true, 0, 0}, // named in full: refused
		// Journal faults only for an implementation that keeps state in
		// the journal: one that does not could not be touched by them.
		{"partition:journal-cut", []string{"age"}, true, 0, 0},
		{"kill:journal", []string{"age"}, true, 0, 0},
		{"kill:journal", []string{"journal"}, false, 1, 0},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.spec, tt.caps), func(t *testing.T) {
			r := &Runner{Env: &Env{Cluster: newFake(3), Capabilities: tt.caps}, Faults: mustParse(t, tt.spec)}
			dropped, err := r.Check()
			if (err != nil) != tt.wantErr {
				t.Fatalf("err %v, want error %v", err, tt.wantErr)
			}
			if len(dropped) != tt.wantDropped {
				t.Errorf("dropped %v, want %d", dropped, tt.wantDropped)
			}
			if err == nil && len(r.Faults) != tt.wantKept {
				t.Errorf("kept %v, want %d", Names(r.Faults), tt.wantKept)
			}
		})
	}
}

func TestChecksRefuse(t *testing.T) {
	fc := newFake(3)
	env := &Env{Cluster: fc} // declares no capability
	for _, spec := range []string{"clock:bump", "member:join", "member:leave-one", "partition:majorities-ring"} {
		f := mustParse(t, spec)[0]
		if err := f.Check(env); err == nil {
			t.Errorf("%s: check passed on a 3-node cluster without clock/leave/add-node", spec)
		}
	}
	env.Capabilities = []string{"clock"}
	if err := mustParse(t, "clock:bump")[0].Check(env); err != nil {
		t.Errorf("clock:bump refused with the clock capability: %v", err)
	}
}

// TestCheckStepsNeedsAgeForOldest: a step that puts the oldest on the cut
// side, or cuts a node that is not the oldest from the journal, is refused,
// before the test, by an implementation that does not tell its members'
// age.
func TestCheckStepsNeedsAgeForOldest(t *testing.T) {
	for _, fault := range []struct{ name, target string }{
		{"partition:asymmetric", RoleOldest},
		{"partition:journal-cut", RoleYounger},
	} {
		steps := []Step{{Fault: fault.name, Target: fault.target}, {At: 1, Fault: fault.name, Heal: true}}
		r := &Runner{Env: &Env{Cluster: newFake(5)}}
		if err := r.CheckSteps(steps); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("%s (%s) without the age capability: %v, want ErrUnsupported", fault.name, fault.target, err)
		}
		r.Env.Capabilities = []string{"age"}
		if err := r.CheckSteps(steps); err != nil {
			t.Fatalf("%s (%s) with the age capability: %v", fault.name, fault.target, err)
		}
	}
}

// TestRunnerOverlaps: a scripted schedule overlaps faults of different
// keys; each heal undoes its own key, and what is active at the end is
// healed, the latest first.
func TestRunnerOverlaps(t *testing.T) {
	fc := newFake(3)
	var events []string
	r := &Runner{Env: &Env{Cluster: fc}, Faults: mustParse(t, "kill:one,pause:one"),
		Record: func(e Event) { events = append(events, e.Action+" "+e.Fault) }}
	ms := time.Millisecond
	plan := []Step{
		{At: 0, Fault: "kill:one", Key: "a", Seed: 1},
		{At: ms, Fault: "pause:one", Seed: 2},
		{At: 2 * ms, Fault: "kill:one", Key: "b", Seed: 3},
		{At: 3 * ms, Fault: "kill:one", Key: "a", Heal: true},
	}
	if err := ValidateSchedule(plan); err != nil {
		t.Fatal(err)
	}
	r.Run(context.Background(), time.Now(), plan)
	want := []string{"inject kill:one", "inject pause:one", "inject kill:one", "heal kill:one", "heal kill:one", "heal pause:one"}
	if !slices.Equal(events, want) {
		t.Fatalf("events %q, want %q", events, want)
	}
	if len(fc.killed) != 0 || len(fc.paused) != 0 {
		t.Fatalf("left injected: killed %v, paused %v", fc.killed, fc.paused)
	}
}

func TestValidateSchedule(t *testing.T) {
	tests := []struct {
		name  string
		steps []Step
		ok    bool
	}{
		{"empty", nil, true},
		{"inject, heal", []Step{{Fault: "kill:one"}, {At: 1, Fault: "kill:one", Heal: true}}, true},
		{"unhealed is fine (healed at the end)", []Step{{Fault: "kill:one"}}, true},
		{"out of order", []Step{{At: 2, Fault: "kill:one"}, {At: 1, Fault: "pause:one"}}, false},
		{"heal of nothing", []Step{{Fault: "kill:one", Heal: true}}, false},
		{"heal of another key", []Step{{Fault: "kill:one", Key: "a"}, {Fault: "kill:one", Heal: true}}, false},
		{"bad target", []Step{{Fault: "clock:bump", Target: "most"}}, false},
		{"oldest on the cut side", []Step{{Fault: "partition:asymmetric", Target: "oldest"}}, true},
		{"oldest where no side is cut", []Step{{Fault: "partition:majorities-ring", Target: "oldest"}}, false},
		{"younger cut from the journal", []Step{{Fault: "partition:journal-cut", Target: "younger"}}, true},
		{"younger of another fault", []Step{{Fault: "partition:isolate-one", Target: "younger"}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := ValidateSchedule(tt.steps); (err == nil) != tt.ok {
				t.Fatalf("err %v, want ok %v", err, tt.ok)
			}
		})
	}
}

// TestOldestHalf: kill:oldest-half picks the ⌊n/2⌋ members with the
// lowest up-numbers, as the node that lists the most members up sees them.
func TestOldestHalf(t *testing.T) {
	members := []protocol.Member{
		{UID: "n1@a", UpNumber: 7, Status: "up"}, {UID: "n2@a", UpNumber: 2, Status: "up"},
		{UID: "n3@a", UpNumber: 3, Status: "up"}, {UID: "n4@a", UpNumber: 1, Status: "up"},
		{UID: "n5@a", UpNumber: 5, Status: "up"}, {UID: "n6@a", UpNumber: 0, Status: "leaving"},
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewEncoder(w).Encode(protocol.Status{Members: members})
	}))
	defer srv.Close()
	fc := newFake(6)
	for i := range fc.nodes {
		fc.nodes[i].HTTPAddr = strings.TrimPrefix(srv.URL, "http://")
	}
	got, err := pick(context.Background(), &Env{Cluster: fc}, rand.New(rand.NewPCG(1, 2)), nodeNames(&Env{Cluster: fc}), RoleOldestHalf)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"n2", "n3", "n4"}; !slices.Equal(got, want) {
		t.Fatalf("oldest half %v, want %v (lowest up-numbers among members up)", got, want)
	}
}

// TestDownUnreachable: member:down-unreachable downs, through the first
// answering node, every member any answering node sees unreachable; it is
// opt-in and needs the "down" capability.
func TestDownUnreachable(t *testing.T) {
	var mu sync.Mutex
	var downed []string
	var via []string
	mux := func(name string, unreachable []string) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			switch r.URL.Path {
			case "/v1/status":
				json.NewEncoder(w).Encode(protocol.Status{Unreachable: unreachable})
			case "/v1/admin/down":
				var req struct{ Member string }
				json.NewDecoder(r.Body).Decode(&req)
				mu.Lock()
				downed, via = append(downed, req.Member), append(via, name)
				mu.Unlock()
				w.WriteHeader(http.StatusAccepted)
				w.Write([]byte(`{}`))
			}
		})
	}
	fc := newFake(4)
	views := map[string][]string{"n3": {"n1@a"}, "n4": {"n1@a", "n2@b"}}
	for i := range fc.nodes {
		name := fc.nodes[i].Name
		if name == "n1" || name == "n2" {
			fc.nodes[i].HTTPAddr = "127.0.0.1:1" // crashed: refuses
			continue
		}
		srv := httptest.NewServer(mux(name, views[name]))
		defer srv.Close()
		fc.nodes[i].HTTPAddr = strings.TrimPrefix(srv.URL, "http://")
	}
	f := mustParse(t, "member:down-unreachable")[0]
	if err := f.Check(&Env{Cluster: fc}); err == nil {
		t.Fatal("accepted without the down capability")
	}
	if fs := mustParse(t, "member"); slices.ContainsFunc(fs, func(f Fault) bool { return f.Name == "member:down-unreachable" }) {
		t.Fatal("the member family includes the opt-in member:down-unreachable")
	}
	a, err := f.Inject(context.Background(), &Env{Cluster: fc, Capabilities: []string{"down"}}, rand.New(rand.NewPCG(1, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(downed, []string{"n1@a", "n2@b"}) || !slices.Equal(via, []string{"n3", "n3"}) {
		t.Fatalf("downed %v through %v, want n1@a and n2@b through n3", downed, via)
	}
	if tg := a.Targets.(Targets); !slices.Equal(tg.Targets, []string{"n1", "n2"}) {
		t.Fatalf("targets %+v", tg)
	}
}

// TestJournalCutTarget: a step's Target fixes journal-cut's choice of one
// node, a minority or every node; without one, the seed chooses.
func TestJournalCutTarget(t *testing.T) {
	names := []string{"n1", "n2", "n3", "n4", "n5"}
	for _, tc := range []struct {
		target string
		want   int
	}{{"one", 1}, {"minority", 2}, {"all", 5}} {
		for seed := range uint64(10) {
			cut, err := shapeCut(withTarget(context.Background(), tc.target), "journal-cut", names, "", rand.New(rand.NewPCG(seed, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if got := len(cut.Components[0]); got != tc.want {
				t.Fatalf("target %s, seed %d: %d nodes cut from the journal, want %d", tc.target, seed, got, tc.want)
			}
		}
	}
	// younger: one node, never the oldest (target), and the seed picks
	// which of the others.
	cutNodes := map[string]bool{}
	for seed := range uint64(30) {
		cut, err := shapeCut(withTarget(context.Background(), RoleYounger), "journal-cut", names, "n3", rand.New(rand.NewPCG(seed, 1)))
		if err != nil {
			t.Fatal(err)
		}
		if len(cut.Components[0]) != 1 || cut.Components[0][0] == "n3" {
			t.Fatalf("younger, seed %d: cut %v from the journal, want one node that is not n3 (the oldest)", seed, cut.Components[0])
		}
		cutNodes[cut.Components[0][0]] = true
	}
	if len(cutNodes) != 4 {
		t.Fatalf("younger: the seeds cut only %v", cutNodes)
	}
	if _, err := shapeCut(withTarget(context.Background(), RoleYounger), "journal-cut", names, "n9", rand.New(rand.NewPCG(1, 1))); err == nil {
		t.Fatal("younger with an oldest that is not a node: no error")
	}
	sizes := map[int]bool{}
	for seed := range uint64(30) {
		cut, _ := shapeCut(context.Background(), "journal-cut", names, "", rand.New(rand.NewPCG(seed, 1)))
		sizes[len(cut.Components[0])] = true
	}
	if len(sizes) != 3 {
		t.Fatalf("without a target the seed chose only sizes %v", sizes)
	}
}

// TestOldestOnCutSide: with the step's Target "oldest", the oldest is on
// the side asymmetric loses the packets of, and in a half of bridge (not
// the bridge), whatever the seed.
func TestOldestOnCutSide(t *testing.T) {
	names := []string{"n1", "n2", "n3", "n4", "n5"}
	for seed := uint64(0); seed < 20; seed++ {
		for _, shape := range oldestOnCutSide {
			cut, err := shapeCut(context.Background(), shape, names, "n3", rand.New(rand.NewPCG(seed, 1)))
			if err != nil {
				t.Fatal(err)
			}
			switch shape {
			case "asymmetric":
				if len(cut.Drops["n3"].DropOut) == 0 || len(cut.Drops["n3"].DropIn) != 0 {
					t.Fatalf("seed %d: n3 is not on the side whose packets are lost: %+v", seed, cut.Drops)
				}
			case "bridge":
				if !slices.Contains(cut.Components[0], "n3") {
					t.Fatalf("seed %d: n3 is not in the first half: %v", seed, cut.Components)
				}
			}
		}
	}
}
