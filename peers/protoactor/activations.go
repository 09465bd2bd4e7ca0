package main

import (
	"cmp"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// activations are the register grains alive on this member, from their
// actor's Started to its Stopped: what the status lists, and the
// entity-started / entity-stopped events.
type activations struct {
	uid    string // this member
	events *kit.EventLog
	next   atomic.Uint64 // the last activation number given

	mu   sync.Mutex
	live map[string]string // entity incarnation → entity id
}

func newActivations(uid string, events *kit.EventLog) *activations {
	return &activations{uid: uid, events: events, live: map[string]string{}}
}

// start records a new activation of id and returns its entity
// incarnation, unique cluster-wide: this member's uid and a number.
func (a *activations) start(id string) string {
	inc := fmt.Sprintf("%s/%d", a.uid, a.next.Add(1))
	a.mu.Lock()
	a.live[inc] = id
	a.mu.Unlock()
	a.events.Append(protocol.Event{Type: protocol.EventEntityStarted, EntityType: protocol.TypeRegister, Entity: id, EntityIncarnation: inc})
	return inc
}

// stop records that activation inc of id has stopped.
func (a *activations) stop(id, inc, why string) {
	a.mu.Lock()
	_, ok := a.live[inc]
	delete(a.live, inc)
	a.mu.Unlock()
	if ok {
		a.events.Append(protocol.Event{Type: protocol.EventEntityStopped, EntityType: protocol.TypeRegister, Entity: id, EntityIncarnation: inc, Detail: why})
	}
}

// status lists the live activations as the kit's sharding status: one
// shard with the empty id (virtual actors have no shards).
func (a *activations) status() []protocol.ShardingStatus {
	a.mu.Lock()
	ents := make([]protocol.EntityStatus, 0, len(a.live))
	for inc, id := range a.live {
		ents = append(ents, protocol.EntityStatus{ID: id, Incarnation: inc})
	}
	a.mu.Unlock()
	slices.SortFunc(ents, func(x, y protocol.EntityStatus) int {
		return cmp.Or(cmp.Compare(x.ID, y.ID), cmp.Compare(x.Incarnation, y.Incarnation))
	})
	return []protocol.ShardingStatus{{
		Type:   protocol.TypeRegister,
		Region: protocol.RegionStatus{Shards: []protocol.ShardStatus{{ID: "", Entities: ents}}},
	}}
}

// count is how many activations are alive.
func (a *activations) count() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.live)
}
