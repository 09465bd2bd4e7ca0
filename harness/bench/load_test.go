package bench

import (
	"context"
	"strings"
	"testing"
	"time"
)

// A real local cluster at two points: both loops complete operations, the
// recorded one's times include its writes (so its p50 is not zero), and
// the harness and the nodes are seen using CPU.
func TestMeasureLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("local cluster")
	}
	points, err := MeasureLoad(context.Background(), LoadOptions{Binary: binary, BasePort: 21600, Nodes: 2,
		Concurrency: []int{1, 4}, Window: 500 * time.Millisecond, Repeat: 2, Entities: 50, Seed: 1, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if len(points) != 2 || points[0].Concurrency != 1 || points[1].Concurrency != 4 {
		t.Fatalf("points: %+v", points)
	}
	for _, p := range points {
		for name, l := range map[string]LoopCost{"plain": p.Plain, "recorded": p.Recorded} {
			if l.Ops < 10 || l.Latency.N != l.Ops || l.Latency.P50 <= 0 || l.Over < time.Second || l.Harness <= 0 || l.Cluster <= 0 || l.Machine < l.Harness || l.NotOK > l.Ops/10 {
				t.Errorf("%d workers, %s: %+v", p.Concurrency, name, l)
			}
		}
	}
	if _, err := MeasureLoad(context.Background(), LoadOptions{Binary: binary, BasePort: 21600, Nodes: 1, Concurrency: []int{0}, Window: time.Second, Repeat: 1}); err == nil {
		t.Error("concurrency 0 measured")
	}
}

func TestLoadKneeAndRatios(t *testing.T) {
	point := func(n int, plain, recorded int, p99Plain, p99Rec time.Duration) LoadPoint {
		return LoadPoint{Concurrency: n,
			Plain:    LoopCost{Ops: plain, Over: time.Second, Latency: Latency{P99: p99Plain}},
			Recorded: LoopCost{Ops: recorded, Over: time.Second, Latency: Latency{P99: p99Rec}}}
	}
	growing := []LoadPoint{point(1, 500, 480, time.Millisecond, time.Millisecond), point(2, 1000, 950, time.Millisecond, 2*time.Millisecond)}
	if k := LoadKnee(growing); k != "" {
		t.Errorf("knee %q in a growing curve", k)
	}
	flat := append(growing, point(4, 1050, 1000, time.Millisecond, 3*time.Millisecond), point(8, 1100, 1010, time.Millisecond, 5*time.Millisecond))
	if k := LoadKnee(flat); !strings.HasPrefix(k, "4 workers (1000 ops/s recorded, 950 at 2)") {
		t.Errorf("knee %q, want at 4 workers", k)
	}
	// Three workers after two: not doubled, so no knee however flat.
	if k := LoadKnee([]LoadPoint{point(2, 100, 100, 0, 0), point(3, 100, 100, 0, 0)}); k != "" {
		t.Errorf("knee %q without doubling", k)
	}
	want := "recorded/plain ops/s by workers: 1: 0.96× (p99 +0.0 ms), 2: 0.95× (p99 +1.0 ms)"
	if got := LoadRatios(growing); got != want {
		t.Errorf("ratios:\n got %s\nwant %s", got, want)
	}
}
