package sharding

import (
	"encoding/json"
	"errors"
	"maps"
	"reflect"
	"slices"
	"testing"
)

func TestStateApply(t *testing.T) {
	tests := []struct {
		name    string
		events  []CoordinatorEvent
		wantErr bool
		regions []string
		proxies []string
		homes   map[string]string
	}{
		{name: "register", events: []CoordinatorEvent{{Type: EvRegionRegistered, Region: "a"}},
			regions: []string{"a"}, homes: map[string]string{}},
		{name: "proxy", events: []CoordinatorEvent{{Type: EvRegionProxyRegistered, Region: "p"}},
			proxies: []string{"p"}, homes: map[string]string{}},
		{name: "allocate", events: []CoordinatorEvent{
			{Type: EvRegionRegistered, Region: "a"}, {Type: EvShardHomeAllocated, Shard: "1", Region: "a"}},
			regions: []string{"a"}, homes: map[string]string{"1": "a"}},
		{name: "allocate to unregistered", events: []CoordinatorEvent{{Type: EvShardHomeAllocated, Shard: "1", Region: "a"}}, wantErr: true},
		{name: "allocate twice", events: []CoordinatorEvent{
			{Type: EvRegionRegistered, Region: "a"}, {Type: EvShardHomeAllocated, Shard: "1", Region: "a"},
			{Type: EvShardHomeAllocated, Shard: "1", Region: "a"}}, wantErr: true},
		{name: "deallocate", events: []CoordinatorEvent{
			{Type: EvRegionRegistered, Region: "a"}, {Type: EvShardHomeAllocated, Shard: "1", Region: "a"},
			{Type: EvShardHomeDeallocated, Shard: "1"}},
			regions: []string{"a"}, homes: map[string]string{}},
		{name: "deallocate unallocated", events: []CoordinatorEvent{{Type: EvShardHomeDeallocated, Shard: "1"}}, wantErr: true},
		{name: "terminate frees shards", events: []CoordinatorEvent{
			{Type: EvRegionRegistered, Region: "a"}, {Type: EvRegionRegistered, Region: "b"},
			{Type: EvShardHomeAllocated, Shard: "1", Region: "a"}, {Type: EvShardHomeAllocated, Shard: "2", Region: "b"},
			{Type: EvRegionTerminated, Region: "a"}},
			regions: []string{"b"}, homes: map[string]string{"2": "b"}},
		{name: "unknown type", events: []CoordinatorEvent{{Type: "nope", Region: "a"}}, wantErr: true},
		{name: "missing region", events: []CoordinatorEvent{{Type: EvRegionRegistered}}, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewState()
			var err error
			for _, e := range tt.events {
				if err = s.Apply(e); err != nil {
					break
				}
			}
			if tt.wantErr {
				if !errors.Is(err, ErrInvalidEvent) {
					t.Fatalf("err = %v, want ErrInvalidEvent", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := keysOf(s.Regions); !reflect.DeepEqual(got, tt.regions) {
				t.Errorf("regions = %v, want %v", got, tt.regions)
			}
			if got := keysOf(s.Proxies); !reflect.DeepEqual(got, tt.proxies) {
				t.Errorf("proxies = %v, want %v", got, tt.proxies)
			}
			if !reflect.DeepEqual(s.Shards, tt.homes) {
				t.Errorf("shards = %v, want %v", s.Shards, tt.homes)
			}
		})
	}
}

func keysOf(m map[string]bool) []string { return slices.Sorted(maps.Keys(m)) }

// TestStateDecideRecover drives the state through the decide API, encodes
// the events as the coordinator persists them, and checks that a replay
// rebuilds the same state.
func TestStateDecideRecover(t *testing.T) {
	live := NewState()
	var log []CoordinatorEvent
	apply := func(evs []CoordinatorEvent, err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if err := live.Apply(e); err != nil {
				t.Fatal(err)
			}
		}
		log = append(log, evs...)
	}
	strategy := NewLeastShardAllocation(1, 3)
	apply(live.DecideRegister("a", false))
	apply(live.DecideRegister("b", false))
	apply(live.DecideRegister("p", true))
	if evs, _ := live.DecideRegister("a", false); len(evs) != 0 {
		t.Fatalf("re-registering decided %v", evs)
	}
	for _, sh := range []string{"1", "2", "3", "4", "5"} {
		_, evs, err := live.DecideAllocate(sh, "a", live.Allocations(nil), strategy)
		apply(evs, err)
	}
	// Allocating an allocated shard answers its home without events.
	home, evs, err := live.DecideAllocate("1", "b", live.Allocations(nil), strategy)
	if err != nil || len(evs) != 0 || home != live.Shards["1"] {
		t.Fatalf("re-allocate: home %q evs %v err %v", home, evs, err)
	}
	if n := len(live.ShardsOf("a")) - len(live.ShardsOf("b")); n < -1 || n > 1 {
		t.Fatalf("uneven allocation: %v", live.Allocations(nil))
	}
	// Only candidates are allocated to.
	_, evs, err = live.DecideAllocate("6", "a", live.Allocations(func(r string) bool { return r == "b" }), strategy)
	apply(evs, err)
	if live.Shards["6"] != "b" {
		t.Fatalf("shard 6 at %q, want b", live.Shards["6"])
	}
	if _, _, err := live.DecideAllocate("7", "a", map[string][]string{}, strategy); err == nil {
		t.Fatal("allocation without candidates succeeded")
	}
	apply(live.DecideDeallocate("1", live.Shards["1"]), nil)
	if evs := live.DecideDeallocate("2", "nobody"); len(evs) != 0 {
		t.Fatalf("deallocating from the wrong region decided %v", evs)
	}
	apply(live.DecideTerminate("a"), nil)
	apply(live.DecideTerminate("p"), nil)
	if evs := live.DecideTerminate("a"); len(evs) != 0 {
		t.Fatalf("terminating twice decided %v", evs)
	}

	data, err := EncodeEvents(log)
	if err != nil {
		t.Fatal(err)
	}
	recovered := NewState()
	for _, d := range data {
		var e CoordinatorEvent
		if err := json.Unmarshal(d, &e); err != nil {
			t.Fatal(err)
		}
		if err := recovered.Apply(e); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(recovered, live) {
		t.Fatalf("recovered %+v, live %+v", recovered, live)
	}
	if len(live.ShardsOf("a")) != 0 || live.Regions["a"] || live.Proxies["p"] {
		t.Fatalf("terminated regions remain: %+v", live)
	}
}
