package sharding

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
)

// Coordinator event types, as stored in the journal. The coordinator's state
// is exactly the fold of these events, so a new coordinator (after a
// failover) recovers every allocation by replaying them.
const (
	EvRegionRegistered      = "region-registered"
	EvRegionProxyRegistered = "region-proxy-registered"
	EvRegionTerminated      = "region-terminated"
	EvShardHomeAllocated    = "shard-home-allocated"
	EvShardHomeDeallocated  = "shard-home-deallocated"
)

// CoordinatorEvent is one persisted change of the coordinator's state.
type CoordinatorEvent struct {
	Type   string `json:"type"`
	Region string `json:"region,omitempty"`
	Shard  string `json:"shard,omitempty"`
}

// ErrInvalidEvent: an event does not apply to the state (unknown type,
// missing fields, allocation to an unregistered region). Decide never
// produces one; in a replay it means a corrupt journal.
var ErrInvalidEvent = errors.New("sharding: invalid coordinator event")

// State is the coordinator's durable state. It is pure: no I/O, no clock,
// no goroutines — the coordinator decides events from it, persists them,
// and only then applies them (like a raft state machine), so the same code
// serves live operation and recovery.
type State struct {
	// Regions are registered hosting regions (member uids).
	Regions map[string]bool
	// Proxies are registered proxy-only regions.
	Proxies map[string]bool
	// Shards maps each allocated shard to its region.
	Shards map[string]string
}

// NewState returns the empty state.
func NewState() *State {
	return &State{Regions: map[string]bool{}, Proxies: map[string]bool{}, Shards: map[string]string{}}
}

// Apply folds one event into the state. It validates first and changes
// nothing if the event does not apply.
func (s *State) Apply(e CoordinatorEvent) error {
	switch e.Type {
	case EvRegionRegistered, EvRegionProxyRegistered, EvRegionTerminated:
		if e.Region == "" {
			return fmt.Errorf("%w: %s without region", ErrInvalidEvent, e.Type)
		}
	case EvShardHomeAllocated:
		if e.Shard == "" || e.Region == "" {
			return fmt.Errorf("%w: %s needs shard and region", ErrInvalidEvent, e.Type)
		}
		if !s.Regions[e.Region] {
			return fmt.Errorf("%w: shard %s allocated to unregistered region %s", ErrInvalidEvent, e.Shard, e.Region)
		}
		if cur, ok := s.Shards[e.Shard]; ok {
			return fmt.Errorf("%w: shard %s allocated to %s while at %s", ErrInvalidEvent, e.Shard, e.Region, cur)
		}
	case EvShardHomeDeallocated:
		if _, ok := s.Shards[e.Shard]; !ok {
			return fmt.Errorf("%w: shard %q deallocated but not allocated", ErrInvalidEvent, e.Shard)
		}
	default:
		return fmt.Errorf("%w: unknown type %q", ErrInvalidEvent, e.Type)
	}
	switch e.Type {
	case EvRegionRegistered:
		delete(s.Proxies, e.Region)
		s.Regions[e.Region] = true
	case EvRegionProxyRegistered:
		s.removeRegion(e.Region)
		s.Proxies[e.Region] = true
	case EvRegionTerminated:
		// One event both forgets the region and frees its shards, so a
		// recovery can never see a terminated region still owning shards.
		s.removeRegion(e.Region)
		delete(s.Proxies, e.Region)
	case EvShardHomeAllocated:
		s.Shards[e.Shard] = e.Region
	case EvShardHomeDeallocated:
		delete(s.Shards, e.Shard)
	}
	return nil
}

func (s *State) removeRegion(region string) {
	delete(s.Regions, region)
	for sh, r := range s.Shards {
		if r == region {
			delete(s.Shards, sh)
		}
	}
}

// Clone returns a deep copy.
func (s *State) Clone() *State {
	return &State{Regions: maps.Clone(s.Regions), Proxies: maps.Clone(s.Proxies), Shards: maps.Clone(s.Shards)}
}

// Allocations maps every registered region whose name passes keep (nil:
// all) to its shards, sorted: the `current` argument of AllocationStrategy.
func (s *State) Allocations(keep func(region string) bool) map[string][]string {
	out := map[string][]string{}
	for r := range s.Regions {
		if keep == nil || keep(r) {
			out[r] = []string{}
		}
	}
	for sh, r := range s.Shards {
		if _, ok := out[r]; ok {
			out[r] = append(out[r], sh)
		}
	}
	for r := range out {
		slices.Sort(out[r])
	}
	return out
}

// ShardsOf returns the shards allocated to region, sorted.
func (s *State) ShardsOf(region string) []string {
	var out []string
	for sh, r := range s.Shards {
		if r == region {
			out = append(out, sh)
		}
	}
	slices.Sort(out)
	return out
}

// DecideRegister returns the events registering region (as a proxy if
// proxy): none if it is registered so already.
func (s *State) DecideRegister(region string, proxy bool) ([]CoordinatorEvent, error) {
	if region == "" {
		return nil, fmt.Errorf("%w: empty region", ErrInvalidEvent)
	}
	if proxy {
		if s.Proxies[region] {
			return nil, nil
		}
		return []CoordinatorEvent{{Type: EvRegionProxyRegistered, Region: region}}, nil
	}
	if s.Regions[region] {
		return nil, nil
	}
	return []CoordinatorEvent{{Type: EvRegionRegistered, Region: region}}, nil
}

// DecideAllocate returns the home of shard: the current one (no events) or
// a new one chosen by strategy among candidates (a subset of the
// allocations, see Allocations), with the event that records it.
func (s *State) DecideAllocate(shard, requester string, candidates map[string][]string, strategy AllocationStrategy) (string, []CoordinatorEvent, error) {
	if shard == "" {
		return "", nil, fmt.Errorf("%w: empty shard", ErrInvalidEvent)
	}
	if home, ok := s.Shards[shard]; ok {
		return home, nil, nil
	}
	if len(candidates) == 0 {
		return "", nil, errNoCandidates
	}
	home, err := strategy.Allocate(requester, shard, candidates)
	if err != nil {
		return "", nil, err
	}
	if _, ok := candidates[home]; !ok || !s.Regions[home] {
		return "", nil, fmt.Errorf("sharding: strategy chose %q, not a candidate region", home)
	}
	return home, []CoordinatorEvent{{Type: EvShardHomeAllocated, Shard: shard, Region: home}}, nil
}

// DecideTerminate returns the event forgetting region (and its shards), or
// none if it is not registered.
func (s *State) DecideTerminate(region string) []CoordinatorEvent {
	if !s.Regions[region] && !s.Proxies[region] {
		return nil
	}
	return []CoordinatorEvent{{Type: EvRegionTerminated, Region: region}}
}

// DecideDeallocate returns the event freeing shard after its hand-off from
// region, or none if it is no longer there.
func (s *State) DecideDeallocate(shard, region string) []CoordinatorEvent {
	if s.Shards[shard] != region {
		return nil
	}
	return []CoordinatorEvent{{Type: EvShardHomeDeallocated, Shard: shard}}
}

var errNoCandidates = errors.New("sharding: no region registered to host shards")

// EncodeEvents marshals events for the journal (CoAppend's Events).
func EncodeEvents(evs []CoordinatorEvent) ([][]byte, error) {
	out := make([][]byte, len(evs))
	for i, e := range evs {
		b, err := json.Marshal(e)
		if err != nil {
			return nil, err
		}
		out[i] = b
	}
	return out, nil
}
