package run

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/node"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/nemesis"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
	"github.com/shardtest/shardtest/protocol/kit"
	"github.com/shardtest/shardtest/sim"
	"github.com/shardtest/shardtest/sim/nodes"
	"github.com/shardtest/shardtest/workloads"
)

// Sim is the deterministic simulation runtime (--runtime sim): the journal
// and the reference nodes in this process (sim/nodes: the node's own state
// machines over a virtual network), in virtual time, one seeded scheduler
// deciding every interleaving. The workload's clients are the workload's
// own Invoke over the protocol client, whose transport carries each
// request to a node's protocol handler (the kit's) in virtual time; the
// faults are the nemesis's own, acting on the simulated network and
// processes. The run writes the same history and node events as a real
// one, checked by the same checkers; the same options and seed write the
// same bytes.
//
// The simulated node runs membership, the ID generator singleton and
// sharding (regions, shards, coordinators, the real register and log
// entities, and the sender's decisions and journal driven by the
// simulation): the idgen, register, append and deliver workloads. Each node has the real node's
// clock over virtual time, which clock faults skew.
type Sim struct{}

// Name implements Runtime.
func (Sim) Name() string { return "sim" }

// Features implements Runtime: a simulated filter drops any direction and
// loses packets at random; processes are killed and paused; nodes are
// added and removed.
func (Sim) Features() []string {
	return []string{nemesis.FeatureKernelFilter, nemesis.FeatureKill, nemesis.FeaturePause, nemesis.FeatureAddNode}
}

// Start implements Runtime; a simulation runs the whole test itself (Test
// runs it through simulate), so there is no cluster to start.
func (Sim) Start(context.Context, string, int, string) (Cluster, error) {
	return nil, errors.New("the sim runtime runs the test itself: use Test.Run")
}

// SimWorkloads are the workloads the simulation can run so far.
func SimWorkloads() []string { return []string{"idgen", "register", "append", "deliver"} }

// simEntityTypes are the entity types a simulated node runs for w: the
// reference node's register and log, and its at-least-once sender when w
// sends through it. A region and a coordinator that nothing addresses
// would only add events: the sender's came with issue 28 after the other
// workloads' seeds had been run in simulation, and leaving it out of their
// runs keeps each of those seeds the schedule it was (every event draws
// from the seed).
func simEntityTypes(w workloads.Workload) []string {
	types := []string{protocol.TypeRegister, protocol.TypeLog}
	if slices.Contains(w.Needs().EntityTypes, protocol.TypeSender) {
		types = append(types, protocol.TypeSender)
	}
	return types
}

// simBugs are the deliberate bugs the simulated node has.
func simBugs() []string {
	return append([]string{node.BugSingletonNoFencing, node.BugAutoDown, node.BugBlindToOneWay, node.BugEntitySkipReplay}, sharding.BugNames()...)
}

// checkSim refuses what the simulation cannot run, before any side effect.
func checkSim(o Options) error {
	if !slices.Contains(SimWorkloads(), o.Workload) {
		return fmt.Errorf("%w: the sim runtime simulates the %s workloads",
			ErrUnsupported, strings.Join(SimWorkloads(), ", "))
	}
	if o.Image != "" {
		return fmt.Errorf("%w: the sim runtime simulates the reference node; --image is for --runtime docker", ErrUnsupported)
	}
	if _, err := simConfig(o); err != nil {
		return err
	}
	return nil
}

// simConfig is the simulated node's configuration: its arguments, then
// the protocol settings every node gets (which win, as the real node's
// environment does).
func simConfig(o Options) (nodes.Config, error) {
	cfg, err := simNodeArgs(o.NodeArgs)
	if err != nil {
		return cfg, err
	}
	for _, name := range slices.Sorted(maps.Keys(o.NodeSettings)) {
		target := map[string]*time.Duration{
			"passivate-idle-after": &cfg.Sharding.PassivateIdleAfter, "rebalance-interval": &cfg.Sharding.RebalanceInterval,
			"stable-after": &cfg.Downing.StableAfter, "down-removal-margin": &cfg.DownRemovalMargin,
		}[name]
		if target == nil {
			return cfg, fmt.Errorf("%w: the sim runtime takes the node settings passivate-idle-after, rebalance-interval, stable-after and down-removal-margin, not %s", ErrUnsupported, name)
		}
		v := o.NodeSettings[name]
		d, derr := time.ParseDuration(v)
		if derr != nil || d < 0 {
			return cfg, fmt.Errorf("node setting %s=%q: want a duration such as 30ms or 5s", name, v)
		}
		*target = d
	}
	return cfg, nil
}

// simNodeArgs reads the node arguments the simulated node takes (the
// reference node's flags of the same names): --bugs, --downing,
// --stable-after, --auto-down-after, --down-removal-margin, --shards,
// --hand-off-timeout, --rebalance-interval, --passivate-idle-after and
// --redeliver-interval.
func simNodeArgs(args []string) (nodes.Config, error) {
	var cfg nodes.Config
	fs := flag.NewFlagSet("node", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	bugs := fs.String("bugs", "", "")
	fs.StringVar(&cfg.Downing.Strategy, "downing", "", "")
	fs.DurationVar(&cfg.Downing.StableAfter, "stable-after", 0, "")
	fs.DurationVar(&cfg.Downing.AutoDownAfter, "auto-down-after", 0, "")
	fs.DurationVar(&cfg.DownRemovalMargin, "down-removal-margin", 0, "")
	fs.IntVar(&cfg.Sharding.NumberOfShards, "shards", 0, "")
	fs.DurationVar(&cfg.Sharding.HandOffTimeout, "hand-off-timeout", 0, "")
	fs.DurationVar(&cfg.Sharding.RebalanceInterval, "rebalance-interval", 0, "")
	fs.DurationVar(&cfg.Sharding.PassivateIdleAfter, "passivate-idle-after", 0, "")
	fs.DurationVar(&cfg.RedeliverInterval, "redeliver-interval", 0, "")
	if err := fs.Parse(args); err != nil {
		return cfg, fmt.Errorf("%w: the sim runtime takes the node arguments --bugs, --downing, --stable-after, --auto-down-after, --down-removal-margin, --shards, --hand-off-timeout, --rebalance-interval, --passivate-idle-after and --redeliver-interval: %w", ErrUnsupported, err)
	}
	if cfg.Sharding.NumberOfShards < 0 {
		return cfg, fmt.Errorf("node argument --shards %d: want a positive number", cfg.Sharding.NumberOfShards)
	}
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("%w: the sim runtime takes no node argument %q", ErrUnsupported, fs.Arg(0))
	}
	autoDown := false
	for _, b := range strings.Split(*bugs, ",") {
		switch b {
		case "":
		case node.BugSingletonNoFencing:
			cfg.NoFencing = true
		case node.BugBlindToOneWay:
			cfg.BlindToOneWay = true
		case node.BugAutoDown:
			autoDown = true
		case node.BugEntitySkipReplay:
			cfg.EntitySkipReplay = true
		default:
			if sharding.ParseBug(b, &cfg.Sharding.Bugs) == nil {
				continue
			}
			return cfg, fmt.Errorf("%w: the simulated node has the deliberate bugs %s, not %s", ErrUnsupported, strings.Join(simBugs(), ", "), b)
		}
	}
	// As the reference node: auto-down only with its bug, which also
	// turns it on.
	switch {
	case autoDown:
		cfg.Downing.Strategy, cfg.Downing.AllowUnsafeAutoDown = cluster.AutoDown, true
		if cfg.Downing.StableAfter <= 0 {
			cfg.Downing.StableAfter = 5 * time.Second
		}
		if cfg.Downing.AutoDownAfter <= 0 {
			cfg.Downing.AutoDownAfter = cfg.Downing.StableAfter
		}
	case cfg.Downing.Strategy == cluster.AutoDown:
		return cfg, fmt.Errorf("downing strategy auto-down causes split brain; it is a deliberate bug: enable it with --bugs %s", node.BugAutoDown)
	}
	return cfg, nil
}

// Simulation timing.
const (
	// simStartEvery: the runtimes start the nodes one after another.
	simStartEvery = 100 * time.Millisecond
	// simFormTimeout bounds the warm-up: the cluster forms by then.
	simFormTimeout = 60 * time.Second
	// simLinkDelay and simLinkJitter: a client's request to a node, and
	// its reply, each take this plus a random part of the jitter.
	simLinkDelay  = 200 * time.Microsecond
	simLinkJitter = 300 * time.Microsecond
)

// simEpoch is when a simulated run starts by the wall clock, for the
// history's header and the events' Time: fixed, so that a seed writes the
// same bytes.
func simEpoch() time.Time { return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC) }

// Simulate runs o in simulation and writes its history and node events
// (and test.json) into dir, without checking them: what a run costs in
// simulation (shardtest bench sim). It returns the options with the
// capabilities the simulated node declares.
func Simulate(ctx context.Context, o Options, w workloads.Workload, dir string) (Options, error) {
	if err := o.Validate(); err != nil {
		return o, err
	}
	if err := checkSim(o); err != nil {
		return o, err
	}
	t := &Test{Options: o, Runtime: Sim{}, Workload: w, Log: slog.New(slog.DiscardHandler)}
	return Sim{}.simulate(ctx, t, o, dir)
}

// simulate runs the test in simulation and writes its history and node
// events into dir; it returns the options with the capabilities the
// simulated node declares.
func (Sim) simulate(ctx context.Context, t *Test, o Options, dir string) (Options, error) {
	base, err := simConfig(o)
	if err != nil {
		return o, err
	}
	ew, err := history.CreateEvents(filepath.Join(dir, history.EventsFile))
	if err != nil {
		return o, err
	}
	defer ew.Close()
	var werr error
	cfg := base
	// The journal is the simulation's own, in memory (sim.Journal).
	cfg.Seed, cfg.Nodes, cfg.StartEvery = uint64(o.Seed), o.Nodes, simStartEvery
	cfg.EntityTypes = simEntityTypes(t.Workload)
	cfg.Events = func(e history.NodeEvent) {
		if err := ew.Write(e); err != nil && werr == nil {
			werr = err
		}
	}
	c, err := nodes.New(cfg)
	if err != nil {
		return o, err
	}
	defer c.Close()
	w := c.World
	hw, err := history.CreateClocked(filepath.Join(dir, history.HistoryFile), o.Name, simEpoch(), func() int64 { return int64(w.Now()) })
	if err != nil {
		return o, err
	}
	defer hw.Close()
	sw, err := history.CreateStatus(filepath.Join(dir, history.StatusFile))
	if err != nil {
		return o, err
	}
	defer sw.Close()
	s := &simRun{t: t, o: o, c: c, w: w, hw: hw, kits: map[string]http.Handler{}, sw: sw}
	for _, n := range c.Nodes() {
		s.kits[n.Name] = s.kitNode(n).Handler()
	}
	kn := s.kitNode(c.Nodes()[0])
	caps := protocol.Capabilities{Protocol: protocol.Version, Implementation: kn.Implementation,
		Capabilities: kn.Capabilities(), Singletons: kn.Singletons}
	// The simulation writes the node events itself, as the harness would
	// have recorded them.
	caps.Capabilities = append(caps.Capabilities, protocol.CapEvents)
	slices.Sort(caps.Capabilities)
	o.Capabilities = caps.Capabilities
	s.o = o
	if err := writeJSON(filepath.Join(dir, "test.json"), o); err != nil {
		return o, err
	}
	if err := s.run(ctx, caps); err != nil {
		return o, err
	}
	if werr != nil {
		return o, werr
	}
	if s.werr != nil {
		return o, s.werr
	}
	if err := errors.Join(ew.Close(), sw.Close()); err != nil {
		return o, err
	}
	return o, hw.Close()
}

// simRun is one simulated run in progress.
type simRun struct {
	t    *Test
	o    Options
	c    *nodes.Cluster
	w    *sim.World
	hw   *history.Writer
	kits map[string]http.Handler
	// sw records the status samples; nextSample is when the next is
	// due; werr is the first error writing one.
	sw         *history.StatusWriter
	nextSample time.Duration
	werr       error
	// procs: every coroutine started, to stop them in the end; current:
	// the one running now (nil: none, the scheduler runs).
	procs   []*simProc
	current *simProc
}

// resume runs p until it parks or returns (see sim.Co), as the current
// coroutine.
func (s *simRun) resume(p *simProc, stop bool) {
	prev := s.current
	s.current = p
	if stop {
		p.co.Stop()
	} else {
		p.co.Resume()
	}
	s.current = prev
}

// background starts f in a coroutine of its own (nemesis.Env.Background:
// a strobing clock); the function it returns parks the coroutine that
// calls it until f has returned.
func (s *simRun) background(f func()) (wait func()) {
	done := false
	var waiter func()
	s.spawn(func(*simProc) {
		f()
		done = true
		if waiter != nil {
			waiter()
		}
	})
	return func() {
		p := s.current
		if done || p == nil {
			return
		}
		waiter = p.waker()
		p.park()
	}
}

// parallel runs f(i) for i < n each in a coroutine of its own, at once,
// and returns once all have returned (nemesis.Env.Parallel: a heal that
// restarts several nodes waits for them together, as on a real cluster).
func (s *simRun) parallel(n int, f func(i int)) {
	parent := s.current
	if parent == nil || n == 0 {
		for i := range n {
			f(i)
		}
		return
	}
	left := n
	wake := parent.waker()
	for i := range n {
		s.spawn(func(*simProc) {
			f(i)
			if left--; left == 0 {
				wake()
			}
		})
	}
	parent.park()
}

// phase records a phase entry.
func (s *simRun) phase(name string, value []byte) {
	s.hw.Write(history.Op{Kind: history.Phase, Process: -1, F: name, Value: value})
}

// run drives the phases in virtual time.
func (s *simRun) run(ctx context.Context, caps protocol.Capabilities) error {
	defer func() {
		for _, p := range s.procs {
			s.resume(p, true)
		}
	}()
	o, c, w := s.o, s.c, s.w
	s.phase(history.PhaseWarmUp, nil)
	if !s.runUntil(ctx, w.Now()+simFormTimeout, func() bool { return c.Converged() && allUp(c) }) {
		return fmt.Errorf("sim: the simulated cluster did not form within %v of virtual time", simFormTimeout)
	}
	nem, err := s.t.nemesis(simCluster{s}, caps, s.hw, s.now)
	if err != nil {
		return err
	}
	s.phase(history.PhaseMain, nil)
	mainStart := w.Now()
	end := mainStart + o.TimeLimit
	touched := map[string]bool{}
	var workers []*simProc
	slots := &simSlots{rate: o.Rate, next: mainStart}
	wopts := workloads.Options{Entities: o.Entities, Skew: o.Skew, Concurrency: o.Concurrency, PerEntity: o.PerEntity,
		Tell: caps.Has(protocol.CapTell)}
	for k := range o.Concurrency {
		p := s.spawn(func(p *simProc) {
			gen := s.t.Workload.Generator(o.Seed, k, wopts)
			for i := 0; w.Now() < end; i++ {
				if !p.sleepUntil(slots.take(w.Now())) || w.Now() >= end {
					return
				}
				op := gen()
				n := c.Nodes()[(k+i)%len(c.Nodes())]
				kind, ok := s.perform(p, k, n.Name, op)
				if !ok {
					return
				}
				touched[op.Entity] = true
				if kind != history.OK && !p.sleep(errorBackoff) {
					return
				}
			}
		})
		workers = append(workers, p)
	}
	var nemDone *simProc
	if nem != nil {
		nemDone = s.spawn(func(p *simProc) {
			nem.Env.Clock, nem.Env.Parallel, nem.Env.Background = p, s.parallel, s.background
			nem.Env.Client = func(n nemesis.Node) *client.Client { return s.client(n.Name) }
			nem.Run(p.context(), s.now(), o.plan(nemesis.Names(nem.Faults)))
		})
	}
	all := func() bool {
		for _, p := range workers {
			if !p.co.Done() {
				return false
			}
		}
		return nemDone == nil || nemDone.co.Done()
	}
	// The workers stop at the end of the main phase; what is in flight
	// then completes or times out.
	if !s.runUntil(ctx, end+o.OpTimeout+time.Minute, all) {
		return fmt.Errorf("sim: the main phase did not end")
	}
	var recovery []byte
	if nem != nil {
		s.phase(history.PhaseRecovery, nil)
		healed := w.Now()
		conv := s.runUntil(ctx, healed+RecoveryTimeout, func() bool { return c.Converged() && allUp(c) })
		r := history.Recovery{Converged: conv, Waited: int64(w.Now() - healed)}
		if !conv {
			r.Why = "the simulated cluster did not converge"
		} else {
			s.runUntil(ctx, healed+RecoverySettle, func() bool { return false })
		}
		recovery, _ = json.Marshal(r)
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.phase(history.PhaseFinal, recovery)
	var keys []string
	for e := range touched {
		if e != "" {
			keys = append(keys, e)
		}
	}
	slices.Sort(keys)
	s.final(ctx, s.t.Workload.Final(keys))
	if ctx.Err() != nil {
		return ctx.Err()
	}
	s.phase(history.PhaseEnd, nil)
	return nil
}

// final reads back what was touched, as Test.final does: waves of one kind
// of operation, each on processes of their own, retried on the next node.
func (s *simRun) final(ctx context.Context, ops []workloads.Op) {
	o := s.o
	for start := 0; start < len(ops); {
		end := start + 1
		for end < len(ops) && ops[end].F == ops[start].F {
			end++
		}
		// As the real final wave: min(ops, concurrency) processes, numbered
		// after the workers', each taking the next op when it is done.
		var procs []*simProc
		next := start
		for k := range min(end-start, max(o.Concurrency, 1)) {
			process := o.Concurrency + k
			procs = append(procs, s.spawn(func(p *simProc) {
				for next < end {
					i := next
					next++
					timeouts := 0
					for attempt := range finalAttempts {
						n := s.c.Nodes()[(i+attempt)%len(s.c.Nodes())]
						kind, ok := s.perform(p, process, n.Name, ops[i])
						if !ok {
							return
						}
						if kind == history.OK {
							break
						}
						if kind == history.Info {
							if timeouts++; timeouts >= finalTimeouts {
								break
							}
						}
						if !p.sleep(200 * time.Millisecond) {
							return
						}
					}
				}
			}))
		}
		waves := (end - start + len(procs) - 1) / len(procs)
		s.runUntil(ctx, s.w.Now()+time.Duration(waves*finalAttempts)*(o.OpTimeout+time.Second), func() bool {
			for _, p := range procs {
				if !p.co.Done() {
					return false
				}
			}
			return true
		})
		start = end
	}
}

// perform records an invocation, performs it through the workload's own
// Invoke and records its completion; ok is false if the run is ending.
func (s *simRun) perform(p *simProc, process int, nodeName string, op workloads.Op) (kind string, ok bool) {
	s.hw.Write(history.Op{Kind: history.Invoke, Process: process, F: op.F, Entity: op.Entity, Node: nodeName, Value: op.Value})
	p.startOp(s.o.OpTimeout)
	result, reply, err := s.t.Workload.Invoke(p.context(), s.client(nodeName), op)
	if p.stopped {
		return "", false
	}
	done := completion(process, op, nodeName, result, reply, err)
	s.hw.Write(done)
	return done.Kind, true
}

// runUntil runs the world until cond holds (checked after every event),
// the world runs out of events or time limit passes; it reports whether
// cond held.
func (s *simRun) runUntil(ctx context.Context, limit time.Duration, cond func() bool) bool {
	for n := 0; ; n++ {
		if cond() {
			return true
		}
		if n%1024 == 0 && ctx.Err() != nil {
			return false
		}
		next, ok := s.w.Next()
		if !ok || next > limit {
			s.sampleBefore(limit + 1)
			s.w.RunUntil(limit)
			return cond()
		}
		s.sampleBefore(next)
		s.w.Step()
	}
}

// sampleBefore takes the status samples due before t: every
// StatusInterval of virtual time, each running node's status, as the
// harness samples it on the other runtimes (status.jsonl). A sample is
// read between two events, from the node's own status (its kit), with no
// event of its own: it changes nothing the seed decides, and its window
// is the instant it was taken. A paused node, which would not answer,
// gives none.
func (s *simRun) sampleBefore(t time.Duration) {
	for ; s.nextSample < t; s.nextSample += StatusInterval {
		at := int64(max(s.nextSample, s.w.Now()))
		for _, n := range s.c.Nodes() {
			if !n.Running() || n.Paused() {
				continue
			}
			st := s.kitNode(n).Status()
			if st.Self.UID == "" {
				continue
			}
			if err := s.sw.Write(history.Sample(n.Name, at, at, st)); err != nil && s.werr == nil {
				s.werr = err
			}
		}
	}
}

func (s *simRun) now() time.Time { return simEpoch().Add(s.w.Now()) }

// spawn starts f as a coroutine of the world, now.
func (s *simRun) spawn(f func(p *simProc)) *simProc {
	p := &simProc{w: s.w, s: s}
	p.co = sim.Go(func(co *sim.Co) { f(p) })
	s.procs = append(s.procs, p)
	s.w.At(s.w.Now(), func() { s.resume(p, false) })
	return p
}

// client is a protocol client of node name over the simulated transport.
func (s *simRun) client(name string) *client.Client {
	return client.New(name+":8080", &http.Client{Transport: simTransport{s}})
}

// allUp: every node's process runs and its member is Up.
func allUp(c *nodes.Cluster) bool {
	for _, n := range c.Nodes() {
		if n.Status() != "up" {
			return false
		}
	}
	return true
}

// simSlots spaces the workers' operations at the run's rate (0: none).
type simSlots struct {
	rate float64
	next time.Duration
}

// take returns when the next operation may start, at now at the earliest.
func (r *simSlots) take(now time.Duration) time.Duration {
	if r.rate <= 0 {
		return now
	}
	at := max(now, r.next)
	r.next = at + time.Duration(float64(time.Second)/r.rate)
	return at
}

// simProc is a coroutine of the simulation (a client worker, the
// nemesis): it waits in virtual time and for the simulated nodes.
type simProc struct {
	w  *sim.World
	s  *simRun
	co *sim.Co
	// token names the wait in progress (0: none): only the event that
	// ends that wait resumes the coroutine.
	token, waiting uint64
	// timedOut: the operation in progress passed its timeout; op counts
	// operations, so that a timeout only hits its own.
	timedOut bool
	op       uint64
	stopped  bool
}

type procKey struct{}

func (p *simProc) context() context.Context {
	return context.WithValue(context.Background(), procKey{}, p)
}

// The running coroutine is the proc: a context handed to coroutines of
// their own (nemesis.Env.Parallel's) still names the one that made it.
func procOf(ctx context.Context) *simProc {
	p, _ := ctx.Value(procKey{}).(*simProc)
	if p != nil && p.s.current != nil {
		return p.s.current
	}
	return p
}

// waker starts a wait: the function it returns ends it (through an event
// of the world, never from inside the coroutine), once.
func (p *simProc) waker() func() {
	p.token++
	t := p.token
	p.waiting = t
	return func() {
		p.w.After(0, func() {
			if p.waiting == t {
				p.waiting = 0
				p.s.resume(p, false)
			}
		})
	}
}

// park waits for the wait started by waker; false: the run is ending.
func (p *simProc) park() bool {
	if !p.co.Park() {
		p.stopped = true
		return false
	}
	return true
}

// sleep waits d of virtual time.
func (p *simProc) sleep(d time.Duration) bool {
	wake := p.waker()
	p.w.After(d, wake)
	return p.park()
}

func (p *simProc) sleepUntil(t time.Duration) bool {
	if t <= p.w.Now() {
		return true
	}
	return p.sleep(t - p.w.Now())
}

// startOp starts an operation that times out after d.
func (p *simProc) startOp(d time.Duration) {
	p.op++
	p.timedOut = false
	op := p.op
	p.w.After(d, func() {
		if p.op == op && !p.timedOut {
			p.timedOut = true
			if p.waiting != 0 {
				p.waiting = 0
				p.s.resume(p, false)
			}
		}
	})
}

// Now and Sleep make a simProc the nemesis's clock.
func (p *simProc) Now() time.Time { return simEpoch().Add(p.w.Now()) }

func (p *simProc) Sleep(ctx context.Context, d time.Duration) error {
	if q := p.s.current; q != nil {
		p = q // the coroutine that sleeps (see procOf)
	}
	if !p.sleep(d) {
		return context.Canceled
	}
	return nil
}

// simTransport carries a protocol request to a simulated node's handler:
// to the node (a link's delay; refused if its process is not running, held
// while it is paused), through its kit handler, and back.
type simTransport struct{ s *simRun }

var errTimeout = fmt.Errorf("simulated request: %w", context.DeadlineExceeded)

func (tr simTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	s := tr.s
	p := procOf(req.Context())
	if p == nil {
		return nil, errors.New("sim: a request outside the simulation's processes")
	}
	name, _, _ := strings.Cut(req.URL.Host, ":")
	n := s.c.Node(name)
	h := s.kits[name]
	if n == nil || h == nil || !n.Running() {
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	wake := p.waker()
	s.w.After(s.linkDelay(), func() {
		if !n.Do(wake) {
			wake() // it died on the way: the connection resets
		}
	})
	if !p.park() {
		return nil, context.Canceled
	}
	if p.timedOut {
		return nil, errTimeout
	}
	if !n.Running() {
		return nil, &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if p.stopped {
		return nil, context.Canceled
	}
	if p.timedOut {
		return nil, errTimeout
	}
	if !p.sleep(s.linkDelay()) {
		return nil, context.Canceled
	}
	if p.timedOut {
		return nil, errTimeout
	}
	return rec.Result(), nil
}

func (s *simRun) linkDelay() time.Duration {
	return simLinkDelay + time.Duration(s.w.Rand().Int64N(int64(simLinkJitter)))
}

// kitNode is node n's protocol handler: the kit, as the reference node
// uses it, over the simulated node.
func (s *simRun) kitNode(n *nodes.Node) *kit.Node {
	return &kit.Node{
		Implementation: node.Implementation,
		Revision:       protocol.Revision,
		Name:           n.Name,
		Incarnation: func() string {
			if m, ok := n.Member(); ok {
				return m.Incarnation
			}
			return ""
		},
		View: func() kit.View {
			snap, ok := n.Snapshot()
			if !ok {
				return kit.View{Self: protocol.Member{Name: n.Name, Status: protocol.StatusJoining}}
			}
			return node.ViewOf(snap, "")
		},
		Age:        true,
		SelfStatus: func() string { return string(n.Status()) },
		NextID: func(ctx context.Context) (protocol.NextID, error) {
			p := procOf(ctx)
			var res json.RawMessage
			var err error
			answered := false
			wake := p.waker()
			s.c.NextID(n.Name, func(r json.RawMessage, e error) {
				if !answered {
					answered, res, err = true, r, e
					wake()
				}
			})
			if !p.park() || p.timedOut || !answered {
				return protocol.NextID{}, kit.Errorf(protocol.CodeUnknownOutcome, "no answer before the client's timeout")
			}
			return node.NextIDReply(res, err)
		},
		Singletons: []string{nodes.SingletonName},
		SingletonStatus: func() []protocol.SingletonStatus {
			if !n.Running() {
				return nil
			}
			running, host := n.Singleton()
			st := protocol.SingletonStatus{Name: nodes.SingletonName, Running: running}
			if host != nil {
				st.Instance = host.String()
			}
			return []protocol.SingletonStatus{st}
		},
		Entity: func(ctx context.Context, req protocol.EntityRequest) (protocol.EntityReply, error) {
			p := procOf(ctx)
			var rep sharding.Reply
			var err error
			answered := false
			wake := p.waker()
			s.c.Deliver(n.Name, req.Type, sharding.Message{EntityID: req.ID, Op: req.Op, Payload: req.Payload, Sender: req.Sender},
				func(r sharding.Reply, e error) {
					if !answered {
						answered, rep, err = true, r, e
						wake()
					}
				})
			if !p.park() || p.timedOut || !answered {
				return protocol.EntityReply{}, kit.Errorf(protocol.CodeUnknownOutcome, "no answer before the client's timeout")
			}
			if err != nil {
				return protocol.EntityReply{}, node.DeliveryError(err)
			}
			return protocol.EntityReply{Shard: rep.Shard, Node: rep.Node, EntityIncarnation: rep.EntityIncarnation, Result: rep.Payload}, nil
		},
		Leave: func(context.Context) error {
			s.c.Leave(n.Name)
			return nil
		},
		Down: func(_ context.Context, member string) (string, error) {
			snap, ok := n.Snapshot()
			if !ok {
				return "", kit.Errorf(protocol.CodeNotReady, "no member running")
			}
			uid, err := node.MemberToDown(snap, member)
			if err != nil {
				return "", err
			}
			return uid, node.DownError(s.c.DownNow(n.Name, uid))
		},
		Journal: true,
		Tell: func(_ context.Context, req protocol.EntityRequest) error {
			if !s.c.Tell(n.Name, req.Type, sharding.Message{EntityID: req.ID, Op: req.Op, Payload: req.Payload, Sender: req.Sender}) {
				return kit.Errorf(protocol.CodeDropped, "fire-and-forget queue of this sender is full")
			}
			return nil
		},
		Clock:          simClockControl{n},
		EntityTypes:    s.c.EntityTypes(),
		ShardingStatus: n.Sharding,
		Coordinator:    true,
		// The simulation bounds requests itself, in virtual time.
		RequestTimeout: 24 * time.Hour,
	}
}

// simClockControl is a simulated node's clock as the kit skews it (the
// capability clock): the real node's clock.Adjustable over virtual time.
type simClockControl struct{ n *nodes.Node }

func (c simClockControl) Get() protocol.ClockState {
	if c.n.Clock() == nil {
		return protocol.ClockState{}
	}
	return node.ClockStateOf(c.n.Clock())
}

func (c simClockControl) Set(req protocol.ClockRequest) error { return c.n.SetClock(node.SkewOf(req)) }

// simCluster is the simulated cluster as the nemesis reaches it.
type simCluster struct{ s *simRun }

func (sc simCluster) Nodes() []Node {
	var out []Node
	for _, n := range sc.s.c.Nodes() {
		out = append(out, Node{Name: n.Name, HTTPAddr: n.Name + ":8080"})
	}
	return out
}

func (simCluster) Stop(context.Context, string) error { return nil }

func (sc simCluster) Nemesis() nemesis.Cluster { return simFaults{sc.s, map[string]nemesis.Rules{}} }

// simFaults performs the nemesis's actions on the simulation.
type simFaults struct {
	s     *simRun
	rules map[string]nemesis.Rules
}

func (simFaults) Runtime() string       { return "sim" }
func (simFaults) Features() []string    { return Sim{}.Features() }
func (simFaults) Journal() nemesis.Node { return nemesis.Node{Name: "journal", Addr: "journal"} }

func (f simFaults) Nodes() []nemesis.Node {
	var out []nemesis.Node
	for _, n := range f.s.c.Nodes() {
		out = append(out, nemesis.Node{Name: n.Name, HTTPAddr: n.Name + ":8080", Addr: n.Name + ":7946"})
	}
	return out
}

// SetRules replaces a node's filter; the network is rebuilt from every
// node's rules.
func (f simFaults) SetRules(_ context.Context, name string, r nemesis.Rules) error {
	if f.s.c.Node(name) == nil {
		return fmt.Errorf("no node %s", name)
	}
	if r.Empty() {
		delete(f.rules, name)
	} else {
		f.rules[name] = r
	}
	c := f.s.c
	c.Net.HealAll()
	for _, n := range c.Nodes() {
		c.CutJournal(n.Name, false)
	}
	for _, name := range slices.Sorted(mapKeys(f.rules)) {
		r := f.rules[name]
		self := name + ":7946"
		for _, a := range r.DropIn {
			if a == "journal" {
				c.CutJournal(name, true)
				continue
			}
			c.Net.Cut(a, self)
		}
		for _, a := range r.DropOut {
			if a == "journal" {
				c.CutJournal(name, true)
				continue
			}
			c.Net.Cut(self, a)
		}
		if r.LossPercent > 0 {
			for _, a := range r.LossPeers {
				for _, dir := range [][2]string{{self, a}, {a, self}} {
					l := c.Net.Link(dir[0], dir[1])
					l.Loss = float64(r.LossPercent) / 100
					c.Net.SetLink(dir[0], dir[1], l)
				}
			}
		}
	}
	return nil
}

func (f simFaults) Kill(_ context.Context, name string) error {
	if name == f.Journal().Name {
		f.s.c.StopJournal(true)
		return nil
	}
	f.s.c.Kill(name)
	return nil
}

// Start starts a new process and waits (in virtual time) until it is up.
func (f simFaults) Start(ctx context.Context, name string) error {
	if name == f.Journal().Name {
		f.s.c.StopJournal(false)
		return nil
	}
	if f.s.c.Node(name) == nil {
		return fmt.Errorf("no node %s", name)
	}
	f.s.c.Start(name)
	p := procOf(ctx)
	for range 300 {
		if f.s.c.Node(name).Status() == "up" {
			return nil
		}
		if p == nil || !p.sleep(100*time.Millisecond) {
			break
		}
	}
	return fmt.Errorf("%s did not come up within 30 s", name)
}

func (f simFaults) Pause(_ context.Context, name string) error {
	f.s.c.Pause(name)
	return nil
}

func (f simFaults) Resume(_ context.Context, name string) error {
	f.s.c.Resume(name)
	return nil
}

// AddNode adds a node and waits, in virtual time, until its member is Up
// (as the other runtimes wait until it is ready), at most simFormTimeout.
func (f simFaults) AddNode(ctx context.Context) (nemesis.Node, error) {
	s := f.s
	n := s.c.AddNode()
	s.kits[n.Name] = s.kitNode(n).Handler()
	node := nemesis.Node{Name: n.Name, HTTPAddr: n.Name + ":8080", Addr: n.Name + ":7946"}
	p := procOf(ctx)
	for deadline := s.w.Now() + simFormTimeout; n.Status() != cluster.StatusUp; {
		if s.w.Now() >= deadline {
			return node, fmt.Errorf("node %s added but not up after %v", n.Name, simFormTimeout)
		}
		if p == nil || !p.sleep(100*time.Millisecond) {
			return node, context.Canceled
		}
	}
	return node, nil
}

// RemoveNode ends the node's process and takes it out of the cluster.
func (f simFaults) RemoveNode(_ context.Context, name string) error {
	f.s.c.RemoveNode(name)
	delete(f.s.kits, name)
	return nil
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}
