package sharding

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"
)

func TestLeastShardAllocate(t *testing.T) {
	s := NewLeastShardAllocation(2, 3)
	tests := []struct {
		name    string
		current map[string][]string
		want    string
		wantErr bool
	}{
		{"none", map[string][]string{}, "", true},
		{"fewest wins", map[string][]string{"a": {"1", "2"}, "b": {"3"}, "c": {"4", "5"}}, "b", false},
		{"tie by uid", map[string][]string{"b": {"1"}, "a": {"2"}}, "a", false},
		{"empty region", map[string][]string{"a": {"1"}, "z": nil}, "z", false},
	}
	for _, tt := range tests {
		got, err := s.Allocate("req", "x", tt.current)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("%s: Allocate = %q, %v; want %q (err %v)", tt.name, got, err, tt.want, tt.wantErr)
		}
	}
}

func shards(from, n int) []string {
	var out []string
	for i := from; i < from+n; i++ {
		out = append(out, strconv.Itoa(i))
	}
	return out
}

func TestLeastShardRebalance(t *testing.T) {
	tests := []struct {
		name       string
		threshold  int
		max        int
		current    map[string][]string
		inProgress map[string]bool
		wantN      int
		wantFrom   string
	}{
		{"balanced", 2, 3, map[string][]string{"a": shards(0, 5), "b": shards(5, 5)}, nil, 0, ""},
		{"below threshold", 2, 3, map[string][]string{"a": shards(0, 5), "b": shards(5, 4)}, nil, 0, ""},
		{"new empty region", 2, 3, map[string][]string{"a": shards(0, 10), "b": shards(10, 10), "c": nil}, nil, 3, ""},
		{"capped by max simultaneous", 1, 2, map[string][]string{"a": shards(0, 10), "b": nil}, nil, 2, "a"},
		{"in progress uses the budget", 1, 2, map[string][]string{"a": shards(0, 10), "b": nil}, map[string]bool{"0": true}, 1, "a"},
		{"single region", 1, 3, map[string][]string{"a": shards(0, 10)}, nil, 0, ""},
		{"no ping-pong at a difference of one", 1, 3, map[string][]string{"a": shards(0, 7), "b": shards(7, 7), "c": shards(14, 6)}, nil, 0, ""},
		{"moves only what evens out", 1, 10, map[string][]string{"a": shards(0, 4), "b": nil}, nil, 2, "a"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewLeastShardAllocation(tt.threshold, tt.max)
			got := s.Rebalance(tt.current, tt.inProgress)
			if len(got) != tt.wantN {
				t.Fatalf("Rebalance = %v, want %d shards", got, tt.wantN)
			}
			for _, sh := range got {
				if tt.inProgress[sh] {
					t.Fatalf("picked shard %s already in progress", sh)
				}
				if tt.wantFrom != "" && !slices.Contains(tt.current[tt.wantFrom], sh) {
					t.Fatalf("picked shard %s not from %s", sh, tt.wantFrom)
				}
			}
			if again := s.Rebalance(tt.current, tt.inProgress); !slices.Equal(again, got) {
				t.Fatalf("not deterministic: %v then %v", got, again)
			}
		})
	}
}

// Allocating shards one by one keeps regions within one shard of each
// other.
func TestLeastShardAllocationIsEven(t *testing.T) {
	s := NewLeastShardAllocation(1, 1)
	current := map[string][]string{}
	for i := range 7 {
		current[fmt.Sprintf("r%d", i)] = nil
	}
	for i := range 100 {
		r, err := s.Allocate("", strconv.Itoa(i), current)
		if err != nil {
			t.Fatal(err)
		}
		current[r] = append(current[r], strconv.Itoa(i))
	}
	lo, hi := 1000, 0
	for _, sh := range current {
		lo, hi = min(lo, len(sh)), max(hi, len(sh))
	}
	if hi-lo > 1 {
		t.Fatalf("uneven allocation: %d..%d", lo, hi)
	}
}

// BenchmarkAllocate10000Shards allocates 10,000 shards over 10 regions with
// the strategy, against a baseline that assigns them round-robin into the
// same map (the bookkeeping any strategy needs), measured in the same run.
func BenchmarkAllocate10000Shards(b *testing.B) {
	const nShards, nRegions = 10_000, 10
	names := make([]string, nShards)
	for i := range names {
		names[i] = strconv.Itoa(i)
	}
	regions := make([]string, nRegions)
	for i := range regions {
		regions[i] = fmt.Sprintf("n%d@x", i)
	}
	fresh := func() map[string][]string {
		m := make(map[string][]string, nRegions)
		for _, r := range regions {
			m[r] = nil
		}
		return m
	}
	baseline := func() {
		m := fresh()
		for i, sh := range names {
			r := regions[i%nRegions]
			m[r] = append(m[r], sh)
		}
	}
	const baseRuns = 50
	start := time.Now()
	for range baseRuns {
		baseline()
	}
	baseNs := float64(time.Since(start).Nanoseconds()) / baseRuns
	s := NewLeastShardAllocation(2, 3)
	b.ResetTimer()
	for b.Loop() {
		m := fresh()
		for _, sh := range names {
			r, err := s.Allocate("", sh, m)
			if err != nil {
				b.Fatal(err)
			}
			m[r] = append(m[r], sh)
		}
	}
	per := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
	b.ReportMetric(per/nShards, "ns/shard")
	b.ReportMetric(per/baseNs, "x-round-robin")
}
