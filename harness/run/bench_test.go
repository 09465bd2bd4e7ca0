package run

import (
	"context"
	"testing"
	"time"

	"github.com/shardtest/shardtest/workloads"
)

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
