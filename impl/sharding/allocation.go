package sharding

import (
	"errors"
	"slices"
	"sort"
)

// LeastShardAllocation is the default allocation strategy, as in the seeds:
// a new shard goes to the region with the fewest shards; a rebalance moves
// shards from the most to the least loaded region once their difference
// reaches RebalanceThreshold, at most MaxSimultaneousRebalance at a time.
// Ties are broken by region uid, so the strategy is deterministic.
type LeastShardAllocation struct {
	RebalanceThreshold       int
	MaxSimultaneousRebalance int
}

// NewLeastShardAllocation returns the strategy with its two knobs. A
// threshold below 2 is raised to 2: moving one shard between regions that
// differ by one only swaps their loads, and would do so on every tick.
func NewLeastShardAllocation(threshold, maxSimultaneous int) *LeastShardAllocation {
	return &LeastShardAllocation{RebalanceThreshold: max(threshold, 2), MaxSimultaneousRebalance: max(maxSimultaneous, 1)}
}

// ErrNoRegion: no region is registered to host shards.
var ErrNoRegion = errors.New("sharding: no region to allocate to")

// Allocate implements AllocationStrategy.
func (s *LeastShardAllocation) Allocate(requester, shard string, current map[string][]string) (string, error) {
	best, bestN := "", -1
	for region, shards := range current {
		n := len(shards)
		if bestN < 0 || n < bestN || (n == bestN && region < best) {
			best, bestN = region, n
		}
	}
	if bestN < 0 {
		return "", ErrNoRegion
	}
	return best, nil
}

// Rebalance implements AllocationStrategy. Shards already being handed off
// count as gone from their region and arrived at the least loaded one.
func (s *LeastShardAllocation) Rebalance(current map[string][]string, inProgress map[string]bool) []string {
	budget := s.MaxSimultaneousRebalance - len(inProgress)
	if budget <= 0 || len(current) < 2 {
		return nil
	}
	regions := make([]string, 0, len(current))
	for r := range current {
		regions = append(regions, r)
	}
	sort.Strings(regions)
	movable := map[string][]string{}
	count := map[string]int{}
	for _, r := range regions {
		for _, sh := range current[r] {
			if !inProgress[sh] {
				movable[r] = append(movable[r], sh)
			}
		}
		slices.Sort(movable[r])
		count[r] = len(movable[r])
	}
	// The shards in flight will land on the least loaded regions.
	for range len(inProgress) {
		count[leastOf(regions, count)]++
	}
	var picked []string
	for ; budget > 0; budget-- {
		most, least := mostOf(regions, count), leastOf(regions, count)
		if count[most]-count[least] < s.RebalanceThreshold || len(movable[most]) == 0 {
			break
		}
		last := len(movable[most]) - 1
		picked = append(picked, movable[most][last])
		movable[most] = movable[most][:last]
		count[most]--
		count[least]++
	}
	return picked
}

func leastOf(regions []string, count map[string]int) string {
	best := regions[0]
	for _, r := range regions[1:] {
		if count[r] < count[best] {
			best = r
		}
	}
	return best
}

func mostOf(regions []string, count map[string]int) string {
	best := regions[0]
	for _, r := range regions[1:] {
		if count[r] > count[best] {
			best = r
		}
	}
	return best
}
