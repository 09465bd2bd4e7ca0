package scenario

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestParseShard(t *testing.T) {
	for _, tc := range []struct {
		in   string
		k, n int
		ok   bool
	}{
		{"1/1", 1, 1, true}, {"2/4", 2, 4, true}, {"4/4", 4, 4, true},
		{"0/4", 0, 0, false}, {"5/4", 0, 0, false}, {"1/0", 0, 0, false}, {"-1/2", 0, 0, false},
		{"1", 0, 0, false}, {"a/b", 0, 0, false}, {"", 0, 0, false}, {"1/2/3", 0, 0, false},
	} {
		k, n, err := ParseShard(tc.in)
		if (err == nil) != tc.ok || k != tc.k || n != tc.n {
			t.Errorf("%q: %d/%d %v", tc.in, k, n, err)
		}
	}
}

// The shards of the whole catalogue over ten seeds cover every run exactly
// once, keep each shard's runs in the suite's order, come out the same on
// every call, and end within one run's time of each other.
func TestShardCoversTheSuiteOnce(t *testing.T) {
	var pairs []Pair
	longest := time.Duration(0)
	for _, s := range Catalog() {
		for seed := int64(1); seed <= 10; seed++ {
			pairs = append(pairs, Pair{Scenario: s.Name, Seed: seed, Weight: s.Expected()})
			longest = max(longest, s.Expected())
		}
	}
	for _, n := range []int{1, 2, 3, 7, len(pairs) + 3} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			seen := map[Pair]int{}
			var loads []time.Duration
			for k := 1; k <= n; k++ {
				part := Shard(pairs, k, n)
				if again := Shard(pairs, k, n); !slices.Equal(part, again) {
					t.Fatalf("shard %d/%d differs from one call to the next", k, n)
				}
				last := -1
				var load time.Duration
				for _, p := range part {
					seen[p]++
					i := slices.Index(pairs, p)
					if i < last {
						t.Fatalf("shard %d/%d: %v out of the suite's order", k, n, p)
					}
					last = i
					load += p.Weight
				}
				loads = append(loads, load)
			}
			for _, p := range pairs {
				if seen[p] != 1 {
					t.Fatalf("%v in %d shards", p, seen[p])
				}
			}
			if spread := slices.Max(loads) - slices.Min(loads); spread > longest {
				t.Errorf("shards' times %v: spread %v, more than the longest run %v", loads, spread, longest)
			}
		})
	}
}
