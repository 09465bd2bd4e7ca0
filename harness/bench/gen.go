// Package bench measures the harness against yardsticks run in the same
// command (shardtest bench): the checkers of a long history against the
// least a linearizability check must do. It generates the inputs itself,
// so anyone can reproduce a figure with one command.
package bench

import (
	"bufio"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/shardtest/shardtest/harness/report"
	"github.com/shardtest/shardtest/harness/run"
	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/workloads"
)

// RegisterOptions shape a generated register history.
type RegisterOptions struct {
	// Ops is the number of operations (each an invocation and its
	// completion), the final read-back aside.
	Ops int
	// Entities, Workers and PerEntity as the register workload's
	// (PerEntity bounds the operations in flight on one entity).
	Entities, Workers, PerEntity int
	// InfoRate and FailRate are the shares of unknown and failed
	// outcomes.
	InfoRate, FailRate float64
	Seed               int64
}

// worker is one simulated client.
type worker struct {
	next     func() workloads.Op
	op       workloads.Op
	inFlight bool
}

// GenRegister writes a run folder dir (history.jsonl and test.json, as a
// run of the register workload leaves them) holding a linearizable history:
// the workload's own generator picks the operations, a simulated register
// per entity applies each at its completion (a point inside its interval),
// an unknown outcome takes effect or not at random, a failed one never;
// then a final read of every entity. Replies name one node, shard and
// incarnation per entity, as a healthy cluster's would. It streams: memory
// does not grow with Ops.
func GenRegister(dir string, o RegisterOptions) error {
	if o.Ops < 1 || o.Entities < 1 || o.Workers < 1 || o.PerEntity < 1 {
		return fmt.Errorf("generate: ops, entities, workers and per-entity must be at least 1 (%+v)", o)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	opts := run.Options{Name: "bench-register", Workload: "register", Entities: o.Entities, Concurrency: o.Workers,
		PerEntity: o.PerEntity, Seed: o.Seed, Runtime: "local", Nodes: 3}
	tj, err := json.MarshalIndent(opts, "", "  ")
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, report.TestFile), tj, 0o644); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	f, err := os.Create(filepath.Join(dir, history.HistoryFile))
	if err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	defer f.Close()
	g := &gen{w: bufio.NewWriterSize(f, 1<<20), rng: rand.New(rand.NewPCG(uint64(o.Seed), 2)), state: map[string]*int64{}}
	g.line(history.Header{Format: history.Format, Version: history.Version, Test: opts.Name, Started: genStarted})
	g.phase(history.PhaseMain, nil)
	wo := workloads.Options{Entities: o.Entities, Concurrency: o.Workers, PerEntity: o.PerEntity}
	ws := make([]worker, o.Workers)
	for i := range ws {
		ws[i].next = workloads.Register{}.Generator(o.Seed, i, wo)
	}
	if err := writeEvents(dir, o); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	started, busy := 0, 0
	for started < o.Ops || busy > 0 {
		g.fault()
		p := g.rng.IntN(len(ws))
		w := &ws[p]
		switch {
		case !w.inFlight && started < o.Ops:
			w.op, w.inFlight = w.next(), true
			started++
			busy++
			g.invoke(p, w.op)
		case w.inFlight:
			w.inFlight = false
			busy--
			g.complete(p, w.op, o)
		}
	}
	if g.faulty {
		g.nemesis(history.ActionHeal)
	}
	g.phase(history.PhaseFinal, nil)
	for _, op := range (workloads.Register{}).Final(g.touched) {
		g.invoke(0, op)
		g.complete(0, op, RegisterOptions{})
	}
	g.phase(history.PhaseEnd, nil)
	if g.err != nil {
		return fmt.Errorf("generate: %w", g.err)
	}
	if err := g.w.Flush(); err != nil {
		return fmt.Errorf("generate: %w", err)
	}
	return f.Close()
}

type gen struct {
	w       *bufio.Writer
	rng     *rand.Rand
	index   int64
	t       int64
	state   map[string]*int64
	touched []string
	err     error
	// faulty: inside a fault window, the only time an outcome may be
	// unknown or failed (a healthy cluster answers everything: liveness).
	faulty bool
}

// Fault windows: a partition of faultLen every faultEvery of history time,
// about the rate of a nemesis run.
const (
	faultEvery = 60 * int64(time.Second)
	faultLen   = 10 * int64(time.Second)
)

// fault opens or closes the fault window the time is in.
func (g *gen) fault() {
	in := g.t%faultEvery >= faultEvery-faultLen
	if in != g.faulty {
		g.faulty = in
		if in {
			g.nemesis(history.ActionInject)
		} else {
			g.nemesis(history.ActionHeal)
		}
	}
}

func (g *gen) nemesis(action string) {
	v, _ := json.Marshal(history.NemesisValue{Action: action, Began: g.t, Targets: map[string]any{"targets": []string{"n3"}}})
	g.add(history.Op{Kind: history.Nemesis, Process: -1, F: "partition:isolate-one", Value: v})
}

// genStarted is when a generated run started, on the wall clock.
var genStarted = time.Unix(0, 0).UTC()

// writeEvents writes the node events of the simulated cluster's healthy
// life: each node's start, the singletons and coordinator on n1, every
// shard started once on the node that serves its entities. The nodes'
// clocks are exact: an event's time is the end of its window.
func writeEvents(dir string, o RegisterOptions) error {
	w, err := history.CreateEvents(filepath.Join(dir, history.EventsFile))
	if err != nil {
		return err
	}
	var evs []history.NodeEvent
	seq := map[string]uint64{}
	add := func(e history.NodeEvent) {
		seq[e.Node]++
		e.Seq, e.Incarnation, e.Lo, e.Hi = seq[e.Node], "i"+e.Node, 0, 1000
		e.Time = genStarted.Add(time.Duration(e.Hi))
		evs = append(evs, e)
	}
	for _, n := range []string{"n1", "n2", "n3"} {
		add(history.NodeEvent{Node: n, Event: protocol.Event{Type: protocol.EventNodeStarted}})
	}
	add(history.NodeEvent{Node: "n1", Event: protocol.Event{Type: protocol.EventSingletonStarted, Singleton: "shard-coordinator-" + protocol.TypeRegister}})
	shards := map[string]string{}
	for i := range o.Entities {
		e := protocol.TypeRegister + "/r" + strconv.Itoa(i)
		shards[shardOf(e)] = node(e)
	}
	for shard, n := range shards {
		add(history.NodeEvent{Node: n, Event: protocol.Event{Type: protocol.EventShardStarted, EntityType: protocol.TypeRegister, Shard: shard}})
	}
	w.Write(evs...)
	return w.Close()
}

func (g *gen) line(v any) {
	b, err := json.Marshal(v)
	if err != nil {
		g.err = err
		return
	}
	g.w.Write(append(b, '\n'))
}

func (g *gen) add(op history.Op) {
	// About 1,000 operations a second: a run's pace.
	g.t += 100_000 + g.rng.Int64N(800_000)
	op.Index, op.Time = g.index, g.t
	g.index++
	g.line(op)
}

func (g *gen) phase(name string, value json.RawMessage) {
	g.add(history.Op{Kind: history.Phase, Process: -1, F: name, Value: value})
}

// shardOf is entity e's shard in the simulated cluster (100 shards).
func shardOf(e string) string {
	h := uint32(0)
	for i := 0; i < len(e); i++ {
		h = h*31 + uint32(e[i])
	}
	return strconv.Itoa(int(h % 100))
}

// node is the node that serves entity e: its shard's.
func node(e string) string {
	s, _ := strconv.Atoi(shardOf(e))
	return "n" + strconv.Itoa(s%3+1)
}

func (g *gen) invoke(p int, op workloads.Op) {
	if _, ok := g.state[op.Entity]; !ok {
		g.state[op.Entity] = nil
		g.touched = append(g.touched, op.Entity)
	}
	g.add(history.Op{Kind: history.Invoke, Process: p, F: op.F, Entity: op.Entity, Node: "n" + strconv.Itoa(p%3+1), Value: op.Value})
}

// complete applies op to its register (unless it failed, or an unknown
// outcome did not take effect) and writes the completion.
func (g *gen) complete(p int, op workloads.Op, o RegisterOptions) {
	c := history.Op{Process: p, F: op.F, Entity: op.Entity, Node: "n" + strconv.Itoa(p%3+1)}
	r := g.rng.Float64()
	if !g.faulty {
		r = math.Inf(1)
	}
	// Inside the windows (a sixth of the time) outcomes go wrong six times
	// as often, so the shares over the whole history are the options'.
	r /= float64(faultEvery / faultLen)
	switch {
	case r < o.FailRate:
		c.Kind, c.Error = history.Fail, "unavailable: simulated"
		g.add(c)
		return
	case r < o.FailRate+o.InfoRate:
		if g.rng.IntN(2) == 0 {
			g.apply(op)
		}
		c.Kind, c.Error = history.Info, "timeout: simulated"
		g.add(c)
		return
	}
	c.Kind, c.Value = history.OK, g.apply(op)
	host := node(op.Entity)
	c.Reply = &history.Reply{Node: c.Node, Incarnation: "i" + c.Node, Shard: shardOf(op.Entity),
		HostNode: host + "@i" + host, EntityIncarnation: op.Entity + "#1"}
	g.add(c)
}

// apply runs op on its register and returns the result.
func (g *gen) apply(op workloads.Op) json.RawMessage {
	cur := g.state[op.Entity]
	var res protocol.RegisterResult
	switch op.F {
	case protocol.OpRead:
		res.Value = cur
	case protocol.OpWrite:
		var w protocol.RegisterWrite
		json.Unmarshal(op.Value, &w)
		g.state[op.Entity] = &w.Value
	case protocol.OpCAS:
		var c protocol.RegisterCAS
		json.Unmarshal(op.Value, &c)
		ok := cur == nil && c.Expect == nil || cur != nil && c.Expect != nil && *cur == *c.Expect
		res.OK = &ok
		if ok {
			g.state[op.Entity] = &c.Value
		} else {
			res.Value = cur
		}
	}
	b, _ := json.Marshal(res)
	return b
}
