package scenario

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
)

// A Pair is one run of a suite: a scenario (with one of its bugs
// switched on, or none) and a seed, and how long it is expected to take.
type Pair struct {
	Scenario string
	Bug      string
	Seed     int64
	Weight   time.Duration
}

// ParseShard reads test-all's --shard: "K/N", 1 ≤ K ≤ N.
func ParseShard(s string) (k, n int, err error) {
	a, b, ok := strings.Cut(s, "/")
	k, err1 := strconv.Atoi(a)
	n, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || n < 1 || k < 1 || k > n {
		return 0, 0, fmt.Errorf("--shard %q: want K/N with 1 ≤ K ≤ N (e.g. 2/4)", s)
	}
	return k, n, nil
}

// Shard returns the pairs of shard k of n (from 1), in the order given. The
// pairs are dealt longest first (ties in the order given), each to the
// shard with the least time so far (ties to the lowest): the
// longest-processing-time rule, which ends the shards within one run of
// each other. It depends on nothing but its arguments, so every job of a
// CI matrix computes the same split, and the n shards cover the pairs
// exactly once between them.
func Shard(pairs []Pair, k, n int) []Pair {
	order := make([]int, len(pairs))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int { return cmp.Compare(pairs[b].Weight, pairs[a].Weight) })
	load := make([]time.Duration, n)
	mine := make([]bool, len(pairs))
	for _, i := range order {
		least := 0
		for s := range load {
			if load[s] < load[least] {
				least = s
			}
		}
		load[least] += max(pairs[i].Weight, 0)
		mine[i] = least == k-1
	}
	var out []Pair
	for i, p := range pairs {
		if mine[i] {
			out = append(out, p)
		}
	}
	return out
}

// Expected is how long a run of s takes when no measurement says: its main
// phase and the fixed part every run has (the cluster's start, the warm-up,
// the recovery wait, the read-back and the checks), which the catalogue's
// measured runs put at about 20 s (docs/scenarios.md).
func (s Scenario) Expected() time.Duration {
	return s.Limit + 20*time.Second
}
