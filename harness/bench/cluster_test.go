package bench

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/harness/docker"
)

// A real two-node cluster on Docker: the cut is seen and healed, and the
// idle window counts the nodes' own traffic (heartbeats every 200 ms reach
// the other node whatever the harness does), and nothing is left behind.
func TestMeasureCluster(t *testing.T) {
	if testing.Short() || os.Getenv("SHARDTEST_NO_DOCKER") == "1" {
		t.Skip("Docker cluster")
	}
	c, err := MeasureCluster(context.Background(), ClusterOptions{Nodes: 2, Idle: time.Second, Binary: binary, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if c.Started <= 0 || c.Ready < c.Started || c.Detect <= 0 || c.Converge <= 0 {
		t.Errorf("times: %+v", c)
	}
	// The failure timeout is 2 s: a cut seen sooner was not the cut.
	if c.Detect < time.Second {
		t.Errorf("detect %v: the halves found each other unreachable before the failure timeout", c.Detect)
	}
	if len(c.Idle) != 2 || len(c.Memory) != 2 {
		t.Fatalf("idle %v memory %v: want one of each per node", c.Idle, c.Memory)
	}
	for i, r := range c.Idle {
		if r.Over < time.Second/2 || r.TxBytes <= 0 || r.RxBytes <= 0 || r.CPU <= 0 || c.Memory[i] < 1<<20 {
			t.Errorf("node %d: %+v, memory %d", i+1, r, c.Memory[i])
		}
	}
}

func TestSummarizeClusters(t *testing.T) {
	cost := func(n int, ready, conv time.Duration, sent ...float64) ClusterCost {
		c := ClusterCost{Nodes: n, Ready: ready, Converge: conv}
		for _, s := range sent {
			c.Idle = append(c.Idle, docker.Rates{TxBytes: s})
			c.Memory = append(c.Memory, 1)
		}
		return c
	}
	sums := SummarizeClusters([]ClusterCost{
		cost(3, 2*time.Second, 300*time.Millisecond, 100, 100, 100),
		cost(6, 5*time.Second, 400*time.Millisecond, 200, 210, 190, 200, 200, 200),
		cost(3, 1*time.Second, 200*time.Millisecond, 100, 120, 100),
		cost(6, 3*time.Second, 300*time.Millisecond, 220, 200, 200, 200, 200, 200),
		cost(3, 3*time.Second, 100*time.Millisecond, 100, 100, 100),
	})
	if len(sums) != 2 || sums[0].Nodes != 3 || sums[1].Nodes != 6 || sums[0].Repeats != 3 || sums[1].Repeats != 2 {
		t.Fatalf("sums: %+v", sums)
	}
	s := sums[0]
	if s.Ready != 2*time.Second || s.ReadyMin != time.Second || s.ReadyMax != 3*time.Second || s.Converge != 200*time.Millisecond || s.Sent != 100 || s.SentMax != 120 {
		t.Errorf("3 nodes: %+v", s)
	}
	// An even count takes the upper middle: 5 s of 3 s and 5 s.
	if sums[1].Ready != 5*time.Second || sums[1].Sent != 200 || sums[1].SentMax != 220 {
		t.Errorf("6 nodes: %+v", sums[1])
	}
	line := ClusterRatios(sums)
	want := "against 3 nodes (medians): 6 nodes (2.00× the nodes): ready 2.50×, converge 2.00×, sent per node 2.00×"
	if line != want {
		t.Errorf("ratios:\n got %s\nwant %s", line, want)
	}
	if one := ClusterRatios(sums[:1]); !strings.Contains(one, "no ratio") {
		t.Errorf("one size: %s", one)
	}
}
