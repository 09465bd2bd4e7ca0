package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/harness/local"
	refnode "github.com/shardtest/shardtest/impl/node"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
)

// EntitiesOptions are a cluster holding many idle entities, and their
// passivation.
type EntitiesOptions struct {
	// Binary is the shardtest executable the nodes run.
	Binary   string
	BasePort int
	Nodes    int
	// Entities are started with one read each (a register entity recovers
	// from the journal as it starts) by Workers at once.
	Entities, Workers int
	// PassivateAfter is every node's --passivate-idle-after. The sweep
	// comes at a region's idle tick (every half of it) once the entities
	// started have been idle this long: it must exceed the start of them
	// all plus Rest, or the sweep overlaps what is measured before it.
	PassivateAfter time.Duration
	// Rest is how long the entities sit idle before the memory is read
	// (and then each node's next garbage collection, if it has had none
	// since the last start, is waited for: at most 2 minutes).
	Rest time.Duration
	// Poll is how often n1's status is read to see the sweep begin and
	// end (a status lists every entity: it is large).
	Poll time.Duration
	Dir  string
	Log  *slog.Logger
	// Progress, if not nil, is told what is happening every few seconds.
	Progress func(string)
}

// EntitiesCost is what the entities cost and how the nodes answered while
// they were passivated.
type EntitiesCost struct {
	Entities int `json:"entities"`
	// Start is the time to start them all; StartFailed the reads that did
	// not complete ok (each was tried up to three times).
	Start       time.Duration `json:"start_ns"`
	StartFailed int           `json:"start_failed"`
	// Hosted are the entities each node ran at the end of the rest.
	Hosted []int `json:"hosted"`
	// Before and Rest are each node's Go memory (live heap plus goroutine
	// stacks) once ready and at the end of the rest.
	Before []uint64 `json:"before_bytes"`
	Rest   []uint64 `json:"rest_bytes"`
	// Goroutines at the end of the rest, per node.
	Goroutines []uint64 `json:"goroutines"`
	// ProbeRest and ProbeSweep are the reads of live entities (one per
	// node, read back to back by one client each) during the rest (from a
	// fifth of it on) and during the sweep: the windows between two polls
	// of n1's status across which its entities dropped.
	ProbeRest, ProbeSweep Latency
	// Sweep is those windows' total length (multiples of Poll);
	// SweepFrom when the first opened, after the last entity had started.
	Sweep, SweepFrom time.Duration
	// Passivated is how many entities n1 stopped in the sweep.
	Passivated int `json:"passivated"`
}

// BytesPerEntity is the nodes' memory growth over the entities they hold.
func (c EntitiesCost) BytesPerEntity() float64 {
	var grown, held float64
	for i := range c.Rest {
		grown += float64(c.Rest[i]) - float64(c.Before[i])
		held += float64(c.Hosted[i])
	}
	if held == 0 {
		return 0
	}
	return grown / held
}

// MeasureEntities starts a local cluster, starts the entities, lets them
// rest, probes live entities through the passivation sweep, and stops the
// cluster.
func MeasureEntities(ctx context.Context, o EntitiesOptions) (cost EntitiesCost, err error) {
	if o.Nodes < 1 || o.Entities < 1 || o.Workers < 1 || o.PassivateAfter <= o.Rest || o.Poll <= 0 {
		return cost, fmt.Errorf("bench entities: want nodes, entities, workers, a poll and --passivate-after above --rest, got %+v", o)
	}
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	cost.Entities = o.Entities
	c, err := local.Start(ctx, local.Options{Binary: o.Binary, Nodes: o.Nodes, BasePort: o.BasePort, Dir: o.Dir, Logger: o.Log,
		NodeArgs: []string{"--passivate-idle-after", o.PassivateAfter.String()}})
	if err != nil {
		return cost, err
	}
	defer c.Stop()
	// One kept-alive connection per worker: the figure is the nodes', not
	// the dialling's.
	hc := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: o.Workers + o.Nodes}}
	var clients []*client.Client
	for _, p := range c.NodeList() {
		clients = append(clients, client.New(p.HTTPAddr, hc))
	}
	for _, cl := range clients {
		st, err := afterCollection(ctx, cl, 0)
		if err != nil {
			return cost, err
		}
		cost.Before = append(cost.Before, st.mem.HeapLive+st.mem.Stacks)
	}

	t0 := time.Now()
	if o.Progress == nil {
		o.Progress = func(string) {}
	}
	if cost.StartFailed, err = startEntities(ctx, clients, o.Entities, o.Workers, o.Progress); err != nil {
		return cost, err
	}
	cost.Start = time.Since(t0)
	started := time.Now()
	var cycles []uint64 // each node's collections once every entity had started
	for _, cl := range clients {
		st, err := nodeStatus(ctx, cl)
		if err != nil {
			return cost, err
		}
		cycles = append(cycles, st.mem.GCCycles)
	}
	if cost.Start+o.Rest >= o.PassivateAfter {
		return cost, fmt.Errorf("bench entities: starting took %v: with --rest %v the sweep could come before the rest ends; give --passivate-after more than %v",
			cost.Start.Round(time.Second), o.Rest, (cost.Start + o.Rest).Round(time.Second))
	}

	pctx, stopProbes := context.WithCancel(ctx)
	probes := make([][]probeRead, len(clients))
	var wg sync.WaitGroup
	for i, cl := range clients {
		wg.Go(func() { probes[i] = probe(pctx, cl, "probe-"+strconv.Itoa(i+1), started) })
	}
	defer func() {
		stopProbes()
		wg.Wait()
	}()

	// The rest: polled as the sweep will be, so both windows bear it.
	o.Progress(fmt.Sprintf("every entity started in %v; resting %v", cost.Start.Round(time.Second), o.Rest))
	restEnd := started.Add(o.Rest)
	for time.Now().Before(restEnd) {
		if _, err := nodeStatus(ctx, clients[0]); err != nil {
			return cost, err
		}
		if err := sleep(ctx, min(o.Poll, time.Until(restEnd))); err != nil {
			return cost, err
		}
	}
	restAt := time.Since(started)
	for i, cl := range clients {
		st, err := afterCollection(ctx, cl, cycles[i])
		if err != nil {
			return cost, err
		}
		cost.Hosted = append(cost.Hosted, st.entities)
		cost.Rest = append(cost.Rest, st.mem.HeapLive+st.mem.Stacks)
		cost.Goroutines = append(cost.Goroutines, st.mem.Goroutines)
	}

	// The sweep: the windows between two polls of n1's status across
	// which its entities dropped (a region's idle tick passivates those
	// idle long enough: one tick, or two when the starts straddled a
	// tick), until they are gone (the probe's entity stays: it is never
	// idle). Quiet polls between two ticks are not the sweep.
	full := cost.Hosted[0]
	prev, last := full, time.Since(started)
	var windows [][2]time.Duration
	deadline := started.Add(o.PassivateAfter*2 + time.Minute)
	for prev > max(full/100, 1) {
		if time.Now().After(deadline) {
			return cost, fmt.Errorf("bench entities: no sweep on n1 within %v of the last start (%d of %d entities still running)", time.Since(started).Round(time.Second), prev, full)
		}
		if err := sleep(ctx, o.Poll); err != nil {
			return cost, err
		}
		st, err := nodeStatus(ctx, clients[0])
		if err != nil {
			return cost, err
		}
		now := time.Since(started)
		if st.entities < prev {
			windows = append(windows, [2]time.Duration{last, now})
			cost.Sweep += now - last
			if cost.SweepFrom == 0 {
				cost.SweepFrom = last
			}
		}
		if st.entities != prev {
			o.Progress(fmt.Sprintf("n1 runs %d of %d entities (%v after the last start)", st.entities, full, now.Round(time.Second)))
		}
		prev, last = st.entities, now
	}
	cost.Passivated = full - prev
	stopProbes()
	wg.Wait()
	inSweep := func(at time.Duration) bool {
		for _, w := range windows {
			if at >= w[0] && at <= w[1] {
				return true
			}
		}
		return false
	}
	var rest, sweep []time.Duration
	for _, ps := range probes {
		for _, p := range ps {
			switch {
			case p.at >= o.Rest/5 && p.at < restAt: // the first fifth settles the starts' after-effects
				rest = append(rest, p.took)
			case inSweep(p.at):
				sweep = append(sweep, p.took)
			}
		}
	}
	if len(rest) == 0 || len(sweep) == 0 {
		return cost, fmt.Errorf("bench entities: %d probe reads at rest and %d in the sweep: nothing to compare", len(rest), len(sweep))
	}
	cost.ProbeRest, cost.ProbeSweep = summarise(rest), summarise(sweep)
	return cost, nil
}

// startEntities reads entities register/e-0 ... through the nodes in turn
// with workers at once, trying each up to three times, and returns how
// many never completed ok.
func startEntities(ctx context.Context, clients []*client.Client, entities, workers int, progress func(string)) (int, error) {
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	done := make(chan struct{})
	defer close(done)
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				progress(fmt.Sprintf("started %d of %d entities", min(int(next.Load()), entities), entities))
			}
		}
	}()
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= entities {
					return
				}
				cl := clients[i%len(clients)]
				ok := false
				for try := 0; try < 3 && !ok && ctx.Err() == nil; try++ {
					rctx, cancel := context.WithTimeout(ctx, protocol.DefaultOpTimeout)
					_, err := cl.Entity(rctx, protocol.EntityRequest{Type: protocol.TypeRegister, ID: "e-" + strconv.Itoa(i), Op: protocol.OpRead})
					cancel()
					ok = err == nil
				}
				if !ok {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(failed.Load()), ctx.Err()
}

// probeRead is one probe read: when it was sent, since the last entity
// started, and how long it took.
type probeRead struct{ at, took time.Duration }

// probe reads entity id through cl back to back until ctx ends.
func probe(ctx context.Context, cl *client.Client, id string, since time.Time) []probeRead {
	var out []probeRead
	for ctx.Err() == nil {
		t := time.Now()
		rctx, cancel := context.WithTimeout(ctx, protocol.DefaultOpTimeout)
		_, err := cl.Entity(rctx, protocol.EntityRequest{Type: protocol.TypeRegister, ID: id, Op: protocol.OpRead})
		cancel()
		if ctx.Err() != nil {
			break
		}
		took := time.Since(t)
		if err != nil {
			took = max(took, protocol.DefaultOpTimeout) // a failed read counts as the slowest
		}
		out = append(out, probeRead{at: t.Sub(since), took: took})
	}
	return out
}

// status is what the bench reads from a node's status: the entities it
// runs and its memory (the reference node's Detail).
type status struct {
	entities int
	mem      refnode.MemoryInfo
}

func nodeStatus(ctx context.Context, cl *client.Client) (status, error) {
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := cl.Status(sctx)
	if err != nil {
		return status{}, fmt.Errorf("status of %s: %w", cl.Addr(), err)
	}
	var s status
	for _, t := range st.Sharding {
		for _, sh := range t.Region.Shards {
			s.entities += len(sh.Entities)
		}
	}
	b, err := json.Marshal(st.Detail)
	if err == nil {
		var d refnode.Detail
		err = json.Unmarshal(b, &d)
		s.mem = d.Memory
	}
	if err != nil || s.mem.Goroutines == 0 {
		return status{}, errors.Join(fmt.Errorf("status of %s: no memory in its detail (the reference node's)", cl.Addr()), err)
	}
	return s, nil
}

// afterCollection reads cl's status once it has collected garbage more
// than cycles times (the Go runtime forces a collection every 2 minutes),
// so that its live heap counts what it held after that count was taken.
func afterCollection(ctx context.Context, cl *client.Client, cycles uint64) (status, error) {
	deadline := time.Now().Add(3 * time.Minute)
	for {
		st, err := nodeStatus(ctx, cl)
		if err != nil || st.mem.GCCycles > cycles {
			return st, err
		}
		if time.Now().After(deadline) {
			return status{}, fmt.Errorf("status of %s: no garbage collection in 3 minutes", cl.Addr())
		}
		if err := sleep(ctx, 200*time.Millisecond); err != nil {
			return status{}, err
		}
	}
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(d):
		return nil
	}
}
