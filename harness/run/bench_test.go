package run

import (
	"context"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/client"
	"github.com/shardtest/shardtest/workloads"
)

// BenchmarkRecordingOverhead measures the operations per second the harness
// sustains and records (history on disk) against a 5-node local cluster,
// against the same client loop without recording, measured in the same run
// (goal: ratio ≥ 0.9). Each b.N iteration is one measuring round of both.
func BenchmarkRecordingOverhead(b *testing.B) {
	w, _ := workloads.Named("register")
	o := options("bench")
	o.Nodes, o.Concurrency, o.Entities, o.TimeLimit = 5, 10, 200, 3*time.Second
	rt := Local{Binary: binary, BasePort: 19400, Log: quiet()}
	dir := b.TempDir()
	cl, err := rt.Start(context.Background(), "bench", o.Nodes, dir)
	if err != nil {
		b.Fatal(err)
	}
	defer cl.Stop(context.Background(), dir)
	nodes := cl.Nodes()
	clients := make([]*client.Client, len(nodes))
	for i, n := range nodes {
		clients[i] = client.New(n.HTTPAddr, nil)
	}
	test := &Test{Options: o, Workload: w, Log: quiet()}
	var recorded, plain float64
	for i := 0; b.Loop(); i++ {
		hw, err := history.Create(filepath.Join(dir, "h"+time.Now().Format("150405.000000")+".jsonl"), "bench", time.Now())
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		test.drive(context.Background(), hw, nodes, clients, protocol.Capabilities{})
		recorded += float64(hw.Len()/2) / time.Since(start).Seconds()
		hw.Close()
		plain += plainLoop(w, o, nodes, clients)
	}
	b.ReportMetric(recorded/float64(b.N), "recorded-ops/s")
	b.ReportMetric(plain/float64(b.N), "plain-ops/s")
	b.ReportMetric(recorded/plain, "x-plain")
}

// plainLoop runs the same workers and operations without recording and
// returns operations per second.
func plainLoop(w workloads.Workload, o Options, nodes []Node, clients []*client.Client) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), o.TimeLimit)
	defer cancel()
	var n atomic.Int64
	var wg sync.WaitGroup
	wopts := workloads.Options{Entities: o.Entities, Concurrency: o.Concurrency, PerEntity: o.PerEntity}
	start := time.Now()
	for worker := range o.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gen := w.Generator(o.Seed, worker, wopts)
			for i := 0; ctx.Err() == nil; i++ {
				op := gen()
				octx, ocancel := context.WithTimeout(context.WithoutCancel(ctx), o.OpTimeout)
				w.Invoke(octx, clients[(worker+i)%len(nodes)], op)
				ocancel()
				n.Add(1)
			}
		}()
	}
	wg.Wait()
	return float64(n.Load()) / time.Since(start).Seconds()
}

// BenchmarkSimRegister is `shardtest bench sim`'s first configuration (a
// 60 s virtual register run of 3 nodes, as fast as the workers go), for
// profiling the simulation (-cpuprofile): one simulated run per iteration.
func BenchmarkSimRegister(b *testing.B) {
	w, _ := workloads.Named("register")
	o := options("bench-sim")
	o.Runtime, o.Workload, o.Nodes, o.TimeLimit = "sim", "register", 3, time.Minute
	o.Entities, o.PerEntity, o.Concurrency = 100, 3, 6
	for i := 0; b.Loop(); i++ {
		o.Seed = int64(1 + i)
		if _, err := Simulate(context.Background(), o, w, b.TempDir()); err != nil {
			b.Fatal(err)
		}
	}
}
