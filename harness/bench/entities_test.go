package bench

import (
	"context"
	"testing"
	"time"
)

// A small cluster through the whole measurement: the entities start, the
// nodes' memory grows with them, the sweep is seen to passivate them, and
// the probe reads are split between the rest and the sweep.
func TestMeasureEntities(t *testing.T) {
	if testing.Short() {
		t.Skip("local cluster")
	}
	// The starts take about a second here; --passivate-after leaves them
	// 13 s (a loaded CI machine once took 7 s for 3,000).
	c, err := MeasureEntities(context.Background(), EntitiesOptions{Binary: binary, BasePort: 21800, Nodes: 2, Entities: 2000, Workers: 8,
		PassivateAfter: 16 * time.Second, Rest: 3 * time.Second, Poll: 500 * time.Millisecond, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	held := 0
	for _, h := range c.Hosted {
		held += h
	}
	if c.StartFailed != 0 || held < 2000 || held > 2002 {
		t.Errorf("started %d, %d failed; the nodes held %v", c.Entities, c.StartFailed, c.Hosted)
	}
	if b := c.BytesPerEntity(); b < 100 || b > 100_000 {
		t.Errorf("%.0f bytes per idle entity", b)
	}
	if c.Passivated < c.Hosted[0]*9/10 || c.Sweep <= 0 || c.ProbeRest.N == 0 || c.ProbeSweep.N == 0 {
		t.Errorf("sweep %v from %v: passivated %d of %d; probes %+v %+v", c.Sweep, c.SweepFrom, c.Passivated, c.Hosted[0], c.ProbeRest, c.ProbeSweep)
	}
	if _, err := MeasureEntities(context.Background(), EntitiesOptions{Binary: binary, BasePort: 21800, Nodes: 1, Entities: 1, Workers: 1,
		PassivateAfter: time.Second, Rest: time.Second, Poll: time.Second}); err == nil {
		t.Error("a rest as long as the passivation was measured")
	}
}
