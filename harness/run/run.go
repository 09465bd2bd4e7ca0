// Package run runs a test: a value composed of a runtime (where the nodes
// run), a workload (client and generator), a nemesis (faults on a
// seed-determined schedule) and checkers. It records the history and stores the run under results/.
package run

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/checker"
	"github.com/shardtest/shardtest/coverage"
	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/internal/regular"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
	"github.com/shardtest/shardtest/workloads"
)

// Node is a running node as a test reaches it.
type Node struct {
	Name     string
	HTTPAddr string
}

// Cluster is a running cluster.
type Cluster interface {
	Nodes() []Node
	// Stop copies node logs into dir and stops everything.
	Stop(ctx context.Context, dir string) error
}

// MemberHost is a cluster whose members run at the harness's own address
// (the local runtime's) and whose secret the harness holds: a request
// the harness sends with the secret comes from a member's address, as
// conform's forged member requests must. A container's peer port is on
// the run's network, and the harness's address is no member's.
type MemberHost interface {
	ClusterSecret() string
}

// Runtime starts clusters.
type Runtime interface {
	Name() string
	// Start starts nodes for run runID; logs go to dir.
	Start(ctx context.Context, runID string, nodes int, dir string) (Cluster, error)
}

// Options are a test's settings; they are stored in test.json.
type Options struct {
	Name string `json:"name"`
	// RunID names this run's resources (Docker labels); set by Run.
	RunID       string        `json:"run_id"`
	Runtime     string        `json:"runtime"`
	Workload    string        `json:"workload"`
	Nodes       int           `json:"nodes"`
	Concurrency int           `json:"concurrency"`
	Rate        float64       `json:"rate"` // ops/s in total; 0: as fast as the workers go
	TimeLimit   time.Duration `json:"time_limit_ns"`
	OpTimeout   time.Duration `json:"op_timeout_ns"`
	Entities    int           `json:"entities"`
	Skew        float64       `json:"skew"`
	PerEntity   int           `json:"per_entity"`
	Seed        int64         `json:"seed"`
	NodeArgs    []string      `json:"node_args,omitempty"`
	// NodeSettings are optional protocol settings every node gets (see
	// SettingsEnv): a scenario's tuning, safe for any implementation.
	NodeSettings map[string]string `json:"node_settings,omitempty"`
	// Image is the implementation under test ("": the reference node).
	Image string `json:"image,omitempty"`
	// Nemesis lists the faults (nemesis.Parse); NemesisInterval is the
	// time between fault actions (nemesis.Plan).
	Nemesis         string        `json:"nemesis,omitempty"`
	NemesisInterval time.Duration `json:"nemesis_interval_ns,omitempty"`
	// Schedule is a scripted fault schedule (a scenario's), instead of
	// Nemesis: steps at fixed offsets from the main phase's start, faults
	// named in full, possibly overlapping.
	Schedule []nemesis.Step `json:"schedule,omitempty"`
	// Scenario names the scenario these options come from, if any.
	Scenario string `json:"scenario,omitempty"`
	// Expect adds the scenario's own checkers to the workload's: what
	// must hold in that situation beyond the workload's properties.
	Expect []checker.Spec `json:"expect,omitempty"`

	// Recorded by Run, not set by the user: the harness's build, the
	// image the nodes ran from (Docker) and the capabilities the
	// implementation declared (the checkers that apply follow from them).
	HarnessVersion string   `json:"harness_version"`
	NodeImage      string   `json:"node_image,omitempty"`
	Capabilities   []string `json:"capabilities,omitempty"`
}

// Validate checks the options.
func (o Options) Validate() error {
	switch {
	case o.Name == "":
		return errors.New("a test needs a name")
	case !validName(o.Name):
		return fmt.Errorf("--name %q: want 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' (it names a folder under --results)", o.Name)
	case o.Nodes < 1 || o.Nodes > 50:
		return fmt.Errorf("--nodes %d: want 1 to 50", o.Nodes)
	case o.Concurrency < 1 || o.Concurrency > 1000:
		return fmt.Errorf("--concurrency %d: want 1 to 1000", o.Concurrency)
	case o.Rate < 0:
		return fmt.Errorf("--rate %v: must not be negative", o.Rate)
	case o.TimeLimit <= 0:
		return fmt.Errorf("--time-limit %v: must be positive", o.TimeLimit)
	case o.OpTimeout <= 0:
		return fmt.Errorf("--op-timeout %v: must be positive", o.OpTimeout)
	case o.Entities < 1:
		return fmt.Errorf("--entities %d: must be positive", o.Entities)
	case o.Skew != 0 && o.Skew <= 1:
		return fmt.Errorf("--skew %v: 0 (uniform) or above 1 (Zipf exponent)", o.Skew)
	case o.PerEntity < 1:
		return fmt.Errorf("--per-entity %d: must be positive", o.PerEntity)
	case o.Nemesis != "" && o.NemesisInterval < time.Second:
		return fmt.Errorf("--nemesis-interval %v: want at least 1s", o.NemesisInterval)
	}
	if _, err := nemesis.Parse(o.Nemesis); err != nil {
		return err
	}
	if err := validateSettings(o.NodeSettings); err != nil {
		return err
	}
	if len(o.Schedule) > 0 {
		if o.Nemesis != "" {
			return errors.New("a test has either --nemesis or a scripted schedule (a scenario's), not both")
		}
		if err := nemesis.ValidateSchedule(o.Schedule); err != nil {
			return err
		}
		for i, st := range o.Schedule {
			if st.At < 0 || st.At >= o.TimeLimit {
				return fmt.Errorf("schedule step %d (%s at %v) is outside the main phase (--time-limit %v)", i, st.Fault, st.At, o.TimeLimit)
			}
			fs, err := nemesis.Parse(st.Fault)
			if err != nil {
				return fmt.Errorf("schedule step %d: %w", i, err)
			}
			if len(fs) != 1 || fs[0].Name != st.Fault {
				return fmt.Errorf("schedule step %d: %q: name one fault in full (family:variant)", i, st.Fault)
			}
		}
	}
	for _, e := range o.Expect {
		if _, err := checker.Build(e); err != nil {
			return fmt.Errorf("expectation: %w", err)
		}
	}
	return nil
}

// faults is the --nemesis list, or the faults a scripted schedule names.
func (o Options) faults() string {
	if len(o.Schedule) == 0 {
		return o.Nemesis
	}
	var names []string
	for _, st := range o.Schedule {
		if !slices.Contains(names, st.Fault) {
			names = append(names, st.Fault)
		}
	}
	return strings.Join(names, ",")
}

// plan is the fault schedule: the scripted one, or the seed's.
func (o Options) plan(faults []string) []nemesis.Step {
	if len(o.Schedule) > 0 {
		return o.Schedule
	}
	return nemesis.Plan(o.Seed, faults, o.NemesisInterval, o.TimeLimit)
}

// Result is what results.json holds.
type Result struct {
	Test     string          `json:"test"`
	Dir      string          `json:"dir"`
	Started  time.Time       `json:"started"`
	Duration time.Duration   `json:"duration_ns"`
	Summary  history.Summary `json:"summary"`
	// Verdict combines the checkers': valid, invalid or unknown (also when
	// the workload has no checker yet).
	Verdict checker.Verdict  `json:"verdict"`
	Checks  []checker.Result `json:"checks"`
	// Coverage counts the behaviours the run showed (coverage.json
	// beside it lists them); absent in runs of an older harness.
	Coverage *coverage.Summary `json:"coverage,omitempty"`
}

// coverage writes the run's coverage file and sums it up against the
// results store (Test.Store, or resultsRoot) as it was before this run. A
// store that cannot be read leaves the novelty unknown; a file that cannot
// be written is logged: coverage never changes a verdict.
func (t *Test) coverage(dir, resultsRoot string, c coverage.Coverage) *coverage.Summary {
	if err := coverage.Write(dir, c); err != nil {
		t.Log.Warn("writing the coverage", "err", err)
	}
	root := cmp.Or(t.Store, resultsRoot)
	st, err := coverage.ReadStore(root, dir)
	if err != nil {
		t.Log.Warn("reading the results store's coverage", "err", err)
		st = nil
	}
	s := coverage.Summarize(c, st)
	return &s
}

// Check runs the checkers of a run of o (the workload's, recovered with
// faults, the expectations) on a history in memory and what was recorded
// with it; their files (visualizations) go into in.Out.
func Check(ctx context.Context, o Options, h *history.File, in checker.Inputs) (checker.Verdict, []checker.Result) {
	checkers, results := o.checkers()
	for _, c := range checkers {
		results = append(results, c.Check(ctx, h, in))
	}
	return judge(results, h)
}

// Checked is a stored run judged again: the combined verdict, every
// checker's result, the history as far as it was held (its outline) and
// the run's behaviour coverage.
type Checked struct {
	Verdict  checker.Verdict
	Checks   []checker.Result
	History  *history.File
	Coverage coverage.Coverage
}

// CheckFile is Check on the run stored in the folder dir: its node events
// and status samples read once for every checker (checker.ReadInputs), its
// history in one pass that does not hold it (checker.CheckFile), and its
// coverage computed in the same pass.
func CheckFile(ctx context.Context, o Options, dir string, fo checker.FileOptions) (Checked, error) {
	checkers, results := o.checkers()
	in := checker.ReadInputs(dir)
	cov := coverage.NewBuilder(o.Capabilities)
	fo.Observe = append(slices.Clone(fo.Observe), cov.Observe)
	rs, h, err := checker.CheckFile(ctx, filepath.Join(dir, history.HistoryFile), checkers, in, fo)
	if err != nil {
		return Checked{Verdict: checker.Unknown}, err
	}
	v, all := judge(append(results, rs...), h)
	return Checked{Verdict: v, Checks: all, History: h, Coverage: cov.Finish(in.Events, in.Samples)}, nil
}

// Checker returns the checker called name that a run of o judges by (the
// workload's, the scenario's expectations, recovered), if it has one.
func (o Options) Checker(name string) (checker.Checker, bool) {
	cs, _ := o.checkers()
	for _, c := range cs {
		if c.Name() == name {
			return c, true
		}
	}
	return nil, false
}

// checkers are the registry's checkers of a run of o (checker.For): the
// workload's, recovered with faults, and the expectations of o; results
// holds the expectations that could not be built (unknown).
func (o Options) checkers() (checkers []checker.Checker, results []checker.Result) {
	p := o.checkPlan()
	return p.Checkers, append([]checker.Result{}, p.Refused...)
}

func (o Options) checkPlan() checker.Plan {
	return checker.For(o.Workload, o.Capabilities, o.faults() != "", o.Expect)
}

// judge dates the violations and combines the verdicts; h needs only the
// history's fault and phase entries.
func judge(results []checker.Result, h *history.File) (checker.Verdict, []checker.Result) {
	checker.Detect(results, h)
	if ended, why := h.Ended(); !ended {
		// What a history cut short does not show (a lost write the final
		// read-back would have found) must not pass for valid: it proves
		// what it proves, and is unknown otherwise.
		for i := range results {
			if results[i].Verdict == checker.Valid {
				results[i].Verdict = checker.Unknown
				results[i].Summary = why + ": nothing more can be shown; so far " + results[i].Summary
			}
		}
	}
	return checker.Combine(results), results
}

// Test is a runnable test.
type Test struct {
	Options  Options
	Runtime  Runtime
	Workload workloads.Workload
	Log      *slog.Logger
	// Progress, if set, is called about once a second during the main
	// phase with a one-line status.
	Progress func(line string)
	// Store is the results store whose runs a run's coverage is compared
	// with ("": the folder the run is stored under).
	Store string
	// Keep leaves the cluster running after the test (logs are copied only
	// when it is stopped, e.g. by shardtest cleanup).
	Keep bool
	// CheckJobs is how many goroutines judge the history after the run
	// (checker.FileOptions.Jobs; 0: every core).
	CheckJobs int
}

// Run runs the test and stores it under resultsRoot/<name>/<timestamp>.
func (t *Test) Run(ctx context.Context, resultsRoot string) (Result, error) {
	o := t.Options
	if err := o.Validate(); err != nil {
		return Result{}, err
	}
	// Refuse what can be refused before any side effect (a folder, the
	// latest link, a cluster): the runtime's own checks (free ports), and
	// faults the runtime or the cluster's size cannot take.
	if c, ok := t.Runtime.(interface{ Check(nodes int) error }); ok {
		if err := c.Check(o.Nodes); err != nil {
			return Result{}, err
		}
	}
	if _, ok := t.Runtime.(Sim); ok {
		if err := checkSim(o); err != nil {
			return Result{}, err
		}
	}
	if err := t.precheckFaults(); err != nil {
		return Result{}, err
	}
	start := time.Now()
	dir, suffix, err := newRunDir(filepath.Join(resultsRoot, o.Name), start)
	if err != nil {
		return Result{}, fmt.Errorf("results directory: %w", err)
	}
	res := Result{Test: o.Name, Dir: dir, Started: start.UTC(), Verdict: checker.Unknown}
	if o.RunID == "" {
		o.RunID = runID(o.Name, start) + suffix
	}
	t.Options.RunID = o.RunID
	o.HarnessVersion = harnessVersion()
	if err := writeJSON(filepath.Join(dir, report.TestFile), o); err != nil {
		return res, err
	}
	linkLatest(resultsRoot, o.Name, dir)
	if sim, ok := t.Runtime.(Sim); ok {
		o, err = sim.simulate(ctx, t, o, dir)
	} else {
		o, err = t.runCluster(ctx, o, dir, start)
	}
	if err != nil {
		return res, err
	}
	var counter history.Counter
	analyzed := report.NewAnalyzer()
	checked, err := CheckFile(ctx, o, dir, checker.FileOptions{Observe: []func(*history.Op){counter.Observe, analyzed.Observe}, Jobs: t.CheckJobs})
	if err != nil {
		return res, fmt.Errorf("reading back the history: %w", err)
	}
	h := checked.History
	res.Summary = counter.Summary()
	res.Verdict, res.Checks = checked.Verdict, checked.Checks
	res.Coverage = t.coverage(dir, resultsRoot, checked.Coverage)
	res.Duration = time.Since(start)
	if err := writeJSON(filepath.Join(dir, report.ResultsFile), res); err != nil {
		return res, err
	}
	// The reports are for people and CI; results.json holds the verdict,
	// so a report that cannot be written is logged, not a failed run.
	optJSON, _ := json.Marshal(o) // just written as test.json: it encodes
	if err := report.Write(dir, report.Input{Test: res.Test, Started: res.Started, Duration: res.Duration,
		Verdict: res.Verdict, Checks: res.Checks, Summary: res.Summary, History: h, Analyzed: analyzed, Options: optJSON,
		Coverage: &checked.Coverage, CoverageSummary: res.Coverage}); err != nil {
		t.Log.Warn("writing the report", "err", err)
	}
	if ctx.Err() != nil {
		return res, fmt.Errorf("interrupted: %w", ctx.Err())
	}
	return res, nil
}

// runCluster runs the test against a real cluster of the runtime's: it
// starts the cluster, drives the workload and the faults, records the
// history, the node events and the status samples into dir, and stops
// the cluster. It returns the options as the run found them (the image,
// the capabilities).
func (t *Test) runCluster(ctx context.Context, o Options, dir string, start time.Time) (Options, error) {
	hw, err := history.Create(filepath.Join(dir, history.HistoryFile), o.Name, start)
	if err != nil {
		return o, err
	}
	defer hw.Close()

	phase := func(name string) { hw.Write(history.Op{Kind: history.Phase, Process: -1, F: name}) }
	phase(history.PhaseWarmUp)
	// The op timeout is in the opening line: whether a slow reply was an
	// unknown outcome depends on it (test.json has it as op_timeout_ns).
	t.Log.Info("starting cluster", "runtime", t.Runtime.Name(), "nodes", o.Nodes, "workload", o.Workload, "op_timeout", o.OpTimeout)
	cl, err := t.Runtime.Start(ctx, o.RunID, o.Nodes, dir)
	if err != nil {
		return o, fmt.Errorf("start cluster: %w", err)
	}
	// The cluster stops (and its logs land in dir) before the checkers
	// run, so they have the machine to themselves and the report links
	// every log.
	stopCluster := sync.OnceFunc(func() {
		if t.Keep && ctx.Err() == nil {
			t.Log.Info("leaving the cluster running (--keep)", "run", o.RunID)
			return
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
		defer cancel()
		if err := cl.Stop(sctx, dir); err != nil {
			t.Log.Warn("stopping the cluster", "err", err)
		}
	})
	defer stopCluster()
	if im, ok := cl.(interface{ Image() string }); ok {
		o.NodeImage = im.Image()
	}
	nodes := cl.Nodes()
	clients := workerClients(nodes, o.Concurrency)
	caps, err := checkCapability(ctx, clients[0], t.Workload)
	// Now that they are known, record the image the nodes run from and
	// what they declare (the checkers that apply follow from it), also
	// for a run the implementation refuses.
	o.Capabilities = caps.Capabilities
	if werr := writeJSON(filepath.Join(dir, report.TestFile), o); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return o, err
	}
	for _, name := range o.checkPlan().LeftOut {
		t.Log.Info("leaving out a checker with nothing to judge in this implementation", "checker", name, "capabilities", o.Capabilities)
	}
	nem, err := t.nemesis(cl, caps, hw, time.Now)
	if err != nil {
		return o, err
	}
	stopEvents := func() {}
	if slices.Contains(caps.Capabilities, "events") {
		stop, err := t.recordEvents(ctx, dir, cl, hw)
		if err != nil {
			return o, err
		}
		stopEvents = sync.OnceFunc(stop)
		defer stopEvents()
	}
	stopSamples, err := t.recordStatus(ctx, filepath.Join(dir, history.StatusFile), clusterNodes(cl), hw)
	if err != nil {
		return o, err
	}
	stopSamples = sync.OnceFunc(stopSamples)
	defer stopSamples()

	phase(history.PhaseMain)
	mctx, cancel := context.WithTimeout(ctx, o.TimeLimit)
	defer cancel()
	nemDone := make(chan struct{})
	var lastHeal time.Time // when the nemesis had healed its last fault
	go func() {
		defer close(nemDone)
		if nem != nil {
			nem.Run(mctx, time.Now(), o.plan(nemesis.Names(nem.Faults)))
		}
		lastHeal = time.Now()
	}()
	touched := t.drive(mctx, hw, nodes, clients, caps, nil)
	<-nemDone // every fault healed
	var recovery []byte
	if nem != nil && ctx.Err() == nil {
		phase(history.PhaseRecovery)
		recovery, _ = json.Marshal(t.recover(ctx, nodes, clients, lastHeal))
	}
	if ctx.Err() == nil {
		hw.Write(history.Op{Kind: history.Phase, Process: -1, F: history.PhaseFinal, Value: recovery})
		t.final(ctx, hw, nodes, clients, touched)
		if ctx.Err() == nil {
			// The history is whole: what it lacks, the system lost.
			phase(history.PhaseEnd)
		}
	}
	stopEvents() // every event the nodes logged by now is in events.jsonl
	stopSamples()
	stopCluster()
	if err := hw.Close(); err != nil {
		return o, err
	}
	return o, nil
}

// Drive runs the test's workers against nodes until ctx ends, recording
// every operation into hw as a run's main phase does (without faults, and
// without the capabilities a run reads first: no tell operations). A nil
// hw records nothing: the same workers, operations and pacing, the
// yardstick of shardtest bench load. took, if not nil, is told each
// operation's outcome (history.OK, Fail, Info) and time as its worker saw
// it (recording included), from that worker's goroutine.
func (t *Test) Drive(ctx context.Context, hw *history.Writer, nodes []Node, took func(worker int, kind string, d time.Duration)) {
	clients := workerClients(nodes, t.Options.Concurrency)
	t.drive(ctx, hw, nodes, clients, protocol.Capabilities{}, took)
}

// workerClients are the workers' clients of the nodes. They share one
// transport that keeps a connection open for every worker on every node:
// net/http's default keeps two per host, so with more workers than that
// each operation beyond the second opened and closed a connection (tens
// of thousands of sockets in TIME_WAIT a minute, CPU on both sides, and
// the harness looked like the limit: docs/performance.md, Load).
func workerClients(nodes []Node, workers int) []*client.Client {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = max(workers, 2) + 2 // + the final phase's and the pollers' odd request
	tr.MaxIdleConns = tr.MaxIdleConnsPerHost * max(len(nodes), 1)
	hc := &http.Client{Transport: tr}
	clients := make([]*client.Client, len(nodes))
	for i, n := range nodes {
		clients[i] = client.New(n.HTTPAddr, hc)
	}
	return clients
}

// drive runs the workers until mctx ends (the main phase's time limit)
// and returns the entities touched.
func (t *Test) drive(mctx context.Context, hw *history.Writer, nodes []Node, clients []*client.Client, caps protocol.Capabilities, took func(worker int, kind string, d time.Duration)) []string {
	o := t.Options
	var (
		mu      sync.Mutex
		touched = map[string]bool{}
		counts  [3]atomic.Int64 // ok, fail, info
		wg      sync.WaitGroup
	)
	var tick <-chan time.Time
	if o.Rate > 0 {
		tk := time.NewTicker(time.Duration(float64(time.Second) / o.Rate))
		defer tk.Stop()
		tick = tk.C
	}
	wopts := workloads.Options{Entities: o.Entities, Skew: o.Skew, Concurrency: o.Concurrency, PerEntity: o.PerEntity,
		Tell: caps.Has(protocol.CapTell)}
	for w := range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gen := t.Workload.Generator(o.Seed, w, wopts)
			for i := 0; mctx.Err() == nil; i++ {
				if tick != nil {
					select {
					case <-tick:
					case <-mctx.Done():
						return
					}
				}
				op := gen()
				ni := (w + i) % len(nodes)
				var start time.Time
				if took != nil {
					start = time.Now()
				}
				kind := t.perform(mctx, hw, w, nodes[ni], clients[ni], op)
				if kind == "" {
					return
				}
				if took != nil {
					took(w, kind, time.Since(start))
				}
				counts[kindIndex(kind)].Add(1)
				if kind != history.OK {
					// A node that is down refuses at once: back off a
					// little rather than fill the history with refusals.
					select {
					case <-mctx.Done():
					case <-time.After(errorBackoff):
					}
				}
				mu.Lock()
				touched[op.Entity] = true
				mu.Unlock()
			}
		}()
	}
	if t.Progress != nil {
		go func() {
			tk := time.NewTicker(time.Second)
			defer tk.Stop()
			start := time.Now()
			for {
				select {
				case <-mctx.Done():
					return
				case <-tk.C:
					t.Progress(fmt.Sprintf("%v / %v  ok %d  fail %d  info %d",
						time.Since(start).Round(time.Second), o.TimeLimit, counts[0].Load(), counts[1].Load(), counts[2].Load()))
				}
			}
		}()
	}
	wg.Wait()
	var out []string
	for e := range touched {
		if e != "" {
			out = append(out, e)
		}
	}
	sort.Strings(out)
	return out
}

// errorBackoff is how long a worker waits after an operation that did not
// succeed.
const errorBackoff = 50 * time.Millisecond

func kindIndex(kind string) int {
	switch kind {
	case history.OK:
		return 0
	case history.Fail:
		return 1
	}
	return 2
}

// perform records an invocation, performs it and records its completion
// (into hw, unless nil); it returns the completion's kind, or "" if ctx
// ended before it started.
func (t *Test) perform(ctx context.Context, hw *history.Writer, process int, n Node, c *client.Client, op workloads.Op) string {
	if ctx.Err() != nil {
		return ""
	}
	if hw != nil {
		hw.Write(history.Op{Kind: history.Invoke, Process: process, F: op.F, Entity: op.Entity, Node: n.Name, Value: op.Value})
	}
	// The operation gets its own timeout, not the phase's: an operation in
	// flight when the phase ends still completes (or times out) normally.
	octx, cancel := context.WithTimeout(context.WithoutCancel(ctx), t.Options.OpTimeout)
	result, reply, err := t.Workload.Invoke(octx, c, op)
	cancel()
	done := completion(process, op, n.Name, result, reply, err)
	if hw != nil {
		hw.Write(done)
	}
	return done.Kind
}

// completion is the history entry that completes op, performed by process
// on node, from what the workload's Invoke returned.
func completion(process int, op workloads.Op, node string, result json.RawMessage, reply history.Reply, err error) history.Op {
	var perr *protocol.Error
	if errors.As(err, &perr) && perr.Status != 0 {
		// The node answered with an error body: say so, and who it was.
		reply.Status = perr.Status
		if reply.Node == "" {
			reply.Node, reply.Incarnation = perr.ServedBy.Node, perr.ServedBy.Incarnation
		}
	}
	done := history.Op{Process: process, F: op.F, Entity: op.Entity, Node: node, Reply: &reply}
	switch protocol.OutcomeOf(err) {
	case protocol.OK:
		done.Kind, done.Value = history.OK, result
	case protocol.Fail:
		done.Kind, done.Error = history.Fail, protocol.ErrorText(err)
	default:
		done.Kind, done.Error = history.Info, protocol.ErrorText(err)
	}
	return done
}

// final reads back every entity touched, retrying each until it answers
// (or the attempts run out), so lost writes show.
func (t *Test) final(ctx context.Context, hw *history.Writer, nodes []Node, clients []*client.Client, touched []string) {
	ops := t.Workload.Final(touched)
	// Consecutive operations of one kind run concurrently, on processes of
	// their own; a change of kind waits for the previous kind to finish
	// (deliver: every flush before any read).
	for start := 0; start < len(ops); {
		end := start + 1
		for end < len(ops) && ops[end].F == ops[start].F {
			end++
		}
		t.finalWave(ctx, hw, nodes, clients, ops[start:end], start)
		start = end
	}
}

// finalAttempts bounds the tries of one read-back: a definite failure (a
// node refusing) is retried on the next node, up to finalAttempts times;
// an unknown outcome (a timeout: the node took the request and did not
// answer) at most finalTimeouts times, so a buggy node that loses messages
// cannot stretch the final phase without end.
const (
	finalAttempts = 5
	finalTimeouts = 2
)

// finalWave performs ops (the first at index first of the final list) from
// min(len(ops), concurrency) processes numbered after the workers'.
func (t *Test) finalWave(ctx context.Context, hw *history.Writer, nodes []Node, clients []*client.Client, ops []workloads.Op, first int) {
	next := make(chan int)
	var wg sync.WaitGroup
	for k := range min(len(ops), max(t.Options.Concurrency, 1)) {
		process := t.Options.Concurrency + k
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				timeouts := 0
				for attempt := range finalAttempts {
					if ctx.Err() != nil {
						return
					}
					ni := (first + i + attempt) % len(nodes)
					kind := t.perform(ctx, hw, process, nodes[ni], clients[ni], ops[i])
					if kind == history.OK || kind == "" {
						break
					}
					if kind == history.Info {
						if timeouts++; timeouts >= finalTimeouts {
							break
						}
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
		}()
	}
	for i := range ops {
		select {
		case next <- i:
		case <-ctx.Done():
		}
		if ctx.Err() != nil {
			break
		}
	}
	close(next)
	wg.Wait()
}

// ErrUnsupported is wrapped by Run's error when the implementation or the
// runtime cannot take the test's workload or one of its faults, as it
// declares (GET /v1/capabilities) or as the runtime knows: the test could
// not be run as asked, which says nothing about correctness.
var ErrUnsupported = nemesis.ErrUnsupported

// checkCapability refuses a workload the implementation cannot serve, as
// it declares in GET /v1/capabilities, and returns what it declares.
func checkCapability(ctx context.Context, c *client.Client, w workloads.Workload) (protocol.Capabilities, error) {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	caps, err := c.Capabilities(cctx)
	if err != nil {
		return caps, fmt.Errorf("reading the implementation's capabilities: %w", err)
	}
	if !caps.Has(protocol.CapMembership) {
		return caps, fmt.Errorf("%w: %s does not declare the %q capability, which every implementation needs (it has %v)",
			ErrUnsupported, caps.Implementation, protocol.CapMembership, caps.Capabilities)
	}
	if missing := w.Needs().Missing(caps); len(missing) > 0 {
		return caps, fmt.Errorf("%w: workload %s needs %s, which %s does not declare (capabilities %v, entity types %v, singletons %v)",
			ErrUnsupported, w.Name(), strings.Join(missing, " and "), caps.Implementation, caps.Capabilities, caps.EntityTypes, caps.Singletons)
	}
	return caps, nil
}

// nemesis returns the test's fault runner (nil: no faults), refusing
// faults the runtime or the implementation cannot take. Its events go into
// the history as they take effect.
func (t *Test) nemesis(cl Cluster, caps protocol.Capabilities, hw *history.Writer, now func() time.Time) (*nemesis.Runner, error) {
	faults, err := nemesis.Parse(t.Options.faults())
	if err != nil || len(faults) == 0 {
		return nil, err
	}
	nc, ok := cl.(interface{ Nemesis() nemesis.Cluster })
	if !ok {
		return nil, fmt.Errorf("the %s runtime cannot inject faults", t.Runtime.Name())
	}
	r := &nemesis.Runner{
		Env:    &nemesis.Env{Cluster: nc.Nemesis(), Capabilities: caps.Capabilities, Log: t.Log},
		Faults: faults,
		Record: func(ev nemesis.Event) {
			v := history.NemesisValue{Action: ev.Action, Began: hw.Now() - int64(now().Sub(ev.Began)), Failed: ev.Failed, Targets: ev.Targets}
			op := history.Op{Kind: history.Nemesis, Process: -1, F: ev.Fault}
			if ev.Err != nil {
				op.Error = ev.Err.Error()
				t.Log.Warn("nemesis", "fault", ev.Fault, "action", ev.Action, "err", ev.Err)
			} else {
				t.Log.Info("nemesis", "fault", ev.Fault, "action", ev.Action)
			}
			b, err := json.Marshal(v)
			if err != nil {
				b, _ = json.Marshal(history.NemesisValue{Action: ev.Action, Began: v.Began, Failed: v.Failed})
			}
			op.Value = b
			hw.Write(op)
		},
	}
	dropped, err := r.Check()
	for _, d := range dropped {
		t.Log.Info("leaving out a fault that does not fit this cluster", "why", d)
	}
	if err == nil {
		err = r.CheckSteps(t.Options.Schedule)
	}
	if err != nil {
		return nil, err
	}
	if len(t.Options.Schedule) > 0 {
		// A schedule sets its own times: there is no interval to tell.
		t.Log.Info("nemesis", "faults", nemesis.Names(r.Faults), "steps", len(t.Options.Schedule))
	} else {
		t.Log.Info("nemesis", "faults", nemesis.Names(r.Faults), "interval", t.Options.NemesisInterval)
	}
	return r, nil
}

// clusterNodes returns the cluster's nodes now, those the nemesis added
// included.
func clusterNodes(cl Cluster) func() []Node {
	nc, ok := cl.(interface{ Nemesis() nemesis.Cluster })
	if !ok {
		return cl.Nodes
	}
	return func() []Node {
		var out []Node
		for _, n := range nc.Nemesis().Nodes() {
			out = append(out, Node{Name: n.Name, HTTPAddr: n.HTTPAddr})
		}
		return out
	}
}

// precheckFaults refuses, before the cluster starts, faults the runtime or
// the cluster's size cannot take (loss on the local runtime, a shape that
// needs more nodes), as Runner.Check would once the cluster is up: it
// checks against the runtime's features and a cluster of o.Nodes that
// declares every capability, so only what the implementation declares is
// left for later.
func (t *Test) precheckFaults() error {
	faults, err := nemesis.Parse(t.Options.faults())
	if err != nil || len(faults) == 0 {
		return err
	}
	f, ok := t.Runtime.(interface{ Features() []string })
	if !ok {
		return nil
	}
	r := &nemesis.Runner{Faults: faults, Env: &nemesis.Env{Capabilities: protocol.AllCapabilities(),
		Cluster: plannedCluster{runtime: t.Runtime.Name(), features: f.Features(), nodes: t.Options.Nodes}}}
	_, err = r.Check()
	return err
}

// plannedCluster is a cluster not started yet, for checks of size and
// features only.
type plannedCluster struct {
	runtime  string
	features []string
	nodes    int
}

func (p plannedCluster) Runtime() string    { return p.runtime }
func (p plannedCluster) Features() []string { return p.features }
func (p plannedCluster) Nodes() []nemesis.Node {
	out := make([]nemesis.Node, p.nodes)
	for i := range out {
		out[i].Name = fmt.Sprintf("n%d", i+1)
	}
	return out
}
func (plannedCluster) Journal() nemesis.Node { return nemesis.Node{Name: "journal"} }
func (plannedCluster) SetRules(context.Context, string, nemesis.Rules) error {
	return nemesis.ErrUnsupported
}
func (plannedCluster) Kill(context.Context, string) error   { return nemesis.ErrUnsupported }
func (plannedCluster) Start(context.Context, string) error  { return nemesis.ErrUnsupported }
func (plannedCluster) Pause(context.Context, string) error  { return nemesis.ErrUnsupported }
func (plannedCluster) Resume(context.Context, string) error { return nemesis.ErrUnsupported }
func (plannedCluster) AddNode(context.Context) (nemesis.Node, error) {
	return nemesis.Node{}, nemesis.ErrUnsupported
}
func (plannedCluster) RemoveNode(context.Context, string) error { return nemesis.ErrUnsupported }

// recordEvents collects every node's events into events.jsonl until the
// returned stop is called (after the final phase).
func (t *Test) recordEvents(ctx context.Context, dir string, cl Cluster, hw *history.Writer) (stop func(), err error) {
	ew, err := history.CreateEvents(filepath.Join(dir, history.EventsFile))
	if err != nil {
		return nil, err
	}
	nodes := clusterNodes(cl)
	cctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		collectEvents(cctx, ew, hw.Now, nodes, func(node string, err error) {
			t.Log.Debug("reading node events", "node", node, "err", err)
		})
	}()
	return func() {
		cancel()
		<-done
		if err := ew.Close(); err != nil {
			t.Log.Warn("closing events.jsonl", "err", err)
		}
	}, nil
}

// RecoverySettle is the least time between the last heal and the final
// phase; RecoveryTimeout the most the harness waits for the cluster to
// converge after the last heal.
const (
	RecoverySettle  = 15 * time.Second
	RecoveryTimeout = 2 * time.Minute
)

// recover waits, after the last heal (at healed), until the cluster has
// converged: every node the workload uses is ready, reaches every member,
// and counts every one of those nodes as up (restarted, rejoined, no
// longer downed), and RecoverySettle has passed since the heal. Both count
// from the heal, not from the main phase's end: a schedule whose last
// fault healed early in the main phase has had that time already.
// The final read-back then measures what survived, not how long recovery
// takes. A cluster that does not converge within RecoveryTimeout is logged
// (and the recovered checker says so); the final phase still runs.
func (t *Test) recover(ctx context.Context, nodes []Node, clients []*client.Client, healed time.Time) history.Recovery {
	deadline := healed.Add(RecoveryTimeout)
	var last string
	for {
		last = converged(ctx, nodes, clients)
		if last == "" {
			r := history.Recovery{Converged: true, Waited: int64(time.Since(healed))}
			// Membership converges before the shards of a crashed
			// member are allocated again (after it is downed, plus a
			// margin): give the cluster that long too.
			select {
			case <-ctx.Done():
			case <-time.After(time.Until(healed.Add(RecoverySettle))):
			}
			return r
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Log.Warn("the cluster did not converge after the faults; running the final phase anyway", "why", last)
			return history.Recovery{Waited: int64(time.Since(healed)), Why: last}
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// converged returns "" if every node is ready and sees all nodes up and
// reachable, or else why not.
func converged(ctx context.Context, nodes []Node, clients []*client.Client) string {
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	for i, c := range clients {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := c.Status(sctx)
		cancel()
		if err != nil {
			return fmt.Sprintf("%s: %v", nodes[i].Name, err)
		}
		if why := ViewConverged(st, names); why != "" {
			return nodes[i].Name + " " + why
		}
	}
	return ""
}

// ViewConverged returns "" if a node's status shows it converged with the
// named nodes: it is ready, reaches every member, and counts each named
// node as up; else why not (a phrase whose subject is the node).
func ViewConverged(st protocol.Status, names []string) string {
	switch {
	case !st.Ready:
		return fmt.Sprintf("is not ready (%s)", st.Self.Status)
	case len(st.Unreachable) > 0:
		return fmt.Sprintf("cannot reach %v", st.Unreachable)
	}
	up := map[string]bool{}
	for _, m := range st.Members {
		if m.Status == protocol.StatusUp {
			up[m.Name] = true
		}
	}
	for _, n := range names {
		if !up[n] {
			return fmt.Sprintf("does not count %s as up", n)
		}
	}
	return ""
}

// harnessVersion names this build: module version and VCS revision, as far
// as the build recorded them.
func harnessVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	v := bi.Main.Version
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v += " " + s.Value
		case "vcs.modified":
			if s.Value == "true" {
				v += " (modified)"
			}
		}
	}
	return v + " " + bi.GoVersion
}

// runID derives a run id from the test name and start time: letters,
// digits, '.', '_' and '-' only, at most 40 characters.
func runID(name string, start time.Time) string { return RunID(name, start) }

// newRunDir makes a run's folder under parent, named by its start; a run
// of the same test started in the same millisecond (test-all --parallel)
// gets the name with "-2", "-3", ... (suffix), never the other's folder.
func newRunDir(parent string, start time.Time) (dir, suffix string, err error) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", "", err
	}
	base := filepath.Join(parent, start.UTC().Format("20060102T150405.000Z"))
	for i := 1; i <= 100; i++ {
		dir, suffix = base, ""
		if i > 1 {
			suffix = "-" + strconv.Itoa(i)
			dir += suffix
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, suffix, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", "", err
		}
	}
	return "", "", fmt.Errorf("%s: 100 runs started in the same millisecond", base)
}

// RunID derives a run id from a name and a start time: letters, digits,
// ".", "_" and "-" only, at most 40 characters (Docker labels and names).
func RunID(name string, start time.Time) string {
	clean := []byte{}
	for _, c := range []byte(name) {
		if c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' {
			clean = append(clean, c)
		} else {
			clean = append(clean, '-')
		}
	}
	if len(clean) > 20 {
		clean = clean[:20]
	}
	return string(clean) + "-" + start.UTC().Format("0102-150405.000")
}

func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", filepath.Base(path), err)
	}
	return nil
}

// linkLatest points results/latest and results/<name>/latest at dir
// (relative links, so the results folder can move).
func linkLatest(root, name, dir string) {
	for _, base := range []string{root, filepath.Join(root, name)} {
		link := filepath.Join(base, "latest")
		rel, err := filepath.Rel(base, dir)
		if err != nil {
			continue
		}
		os.Remove(link)
		os.Symlink(rel, link)
	}
}

// validName reports whether name can name a folder under the results root:
// no separator, no "." or "..", nothing hidden.
func validName(name string) bool {
	if name == "" || len(name) > 64 || name[0] == '.' {
		return false
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return false
		}
	}
	return true
}

// PlannedSchedule is the fault schedule a run of t performs: the scripted
// one, or the one --nemesis draws from the seed over the faults that fit
// the cluster (as the run leaves out the others; an implementation that
// lacks a fault's capability would leave out more, as the run's log says).
// shrink starts from it.
func (t *Test) PlannedSchedule() ([]nemesis.Step, error) {
	o := t.Options
	if len(o.Schedule) > 0 {
		return slices.Clone(o.Schedule), nil
	}
	faults, err := t.Faults(nil)
	if err != nil || len(faults) == 0 {
		return nil, err
	}
	return o.plan(faults), nil
}

// Faults are the faults of --nemesis (or of the scripted schedule) that a
// run of t injects: those that fit its runtime and cluster and an
// implementation that declares caps (nil: every capability), in the order
// --nemesis draws from. A run draws its plan from exactly these, once the
// implementation has declared its capabilities.
func (t *Test) Faults(caps []string) ([]string, error) {
	faults, err := nemesis.Parse(t.Options.faults())
	if err != nil || len(faults) == 0 {
		return nil, err
	}
	if caps == nil {
		caps = protocol.AllCapabilities()
	}
	r := &nemesis.Runner{Faults: faults, Env: &nemesis.Env{Capabilities: caps,
		Cluster: plannedCluster{runtime: t.Runtime.Name(), features: features(t.Runtime), nodes: t.Options.Nodes}}}
	if _, err := r.Check(); err != nil {
		return nil, err
	}
	return nemesis.Names(r.Faults), nil
}

// ReproduceCommand is the shardtest run command that runs o again, its
// fault schedule read from schedulePath (a --schedule file; "": o's own
// --nemesis).
func ReproduceCommand(o Options, schedulePath string) string {
	parts := []string{"shardtest run"}
	if schedulePath != "" {
		parts = append(parts, "--schedule "+schedulePath)
	} else if o.Nemesis != "" {
		parts = append(parts, "--nemesis "+o.Nemesis, "--nemesis-interval "+o.NemesisInterval.String())
	}
	parts = append(parts, "--runtime "+o.Runtime, "--workload "+o.Workload, fmt.Sprintf("--seed %d", o.Seed),
		fmt.Sprintf("--nodes %d", o.Nodes), "--time-limit "+o.TimeLimit.String(),
		fmt.Sprintf("--entities %d", o.Entities), fmt.Sprintf("--concurrency %d", o.Concurrency),
		fmt.Sprintf("--per-entity %d", o.PerEntity), "--op-timeout "+o.OpTimeout.String())
	if o.Rate > 0 {
		parts = append(parts, fmt.Sprintf("--rate %g", o.Rate))
	}
	if o.Image != "" {
		parts = append(parts, "--image "+o.Image)
	}
	for _, a := range o.NodeArgs {
		// One word: a value that starts with "--" is not taken for a flag.
		parts = append(parts, "--node-arg="+a)
	}
	if len(o.NodeSettings) > 0 {
		parts = append(parts, "# with the node settings of the original run's test.json")
	}
	return strings.Join(parts, " ")
}

// Precheck refuses what Run would refuse before any side effect.
func (t *Test) Precheck() error {
	if err := t.Options.Validate(); err != nil {
		return err
	}
	if c, ok := t.Runtime.(interface{ Check(nodes int) error }); ok {
		if err := c.Check(t.Options.Nodes); err != nil {
			return err
		}
	}
	return t.precheckFaults()
}

func features(rt Runtime) []string {
	if f, ok := rt.(interface{ Features() []string }); ok {
		return f.Features()
	}
	return nil
}

// ReadOptions reads a stored run's test.json from its folder dir: the
// options, and the file as stored. A regular file only (internal/regular):
// the stored file is copied into reports.
func ReadOptions(dir string) (Options, []byte, error) {
	var o Options
	b, err := regular.ReadFile(filepath.Join(dir, report.TestFile))
	if err != nil {
		return o, nil, fmt.Errorf("read test.json: %w", err)
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return o, nil, fmt.Errorf("%s: %w", filepath.Join(dir, report.TestFile), err)
	}
	return o, b, nil
}

// ReadResult reads a stored run's results.json from its folder dir (a
// regular file only, internal/regular).
func ReadResult(dir string) (Result, error) {
	var r Result
	b, err := regular.ReadFile(filepath.Join(dir, report.ResultsFile))
	if err != nil {
		return r, fmt.Errorf("read results.json: %w", err)
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return r, fmt.Errorf("%s: %w", filepath.Join(dir, report.ResultsFile), err)
	}
	return r, nil
}
