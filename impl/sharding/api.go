// Package sharding is the reference implementation of cluster sharding:
// entities with an id run at exactly one place in the cluster; messages
// reach them through a ShardRegion on every node that knows where each
// shard lives; a ShardCoordinator, itself a cluster singleton on the oldest
// member, allocates shards to regions, rebalances them with a hand-off
// protocol, and keeps its state in the journal.
package sharding

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"log/slog"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/shardtest/shardtest/protocol/journal"
	"github.com/shardtest/shardtest/protocol/kit"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/peer"
)

// Message is one message to an entity.
type Message struct {
	EntityID string `json:"entity_id"`
	// Op names the operation; the entity interprets it with Payload.
	Op      string          `json:"op"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Sender identifies the sending client (for ordering and de-duplication).
	Sender string `json:"sender,omitempty"`
}

// Reply is an entity's answer, with where it was served.
type Reply struct {
	Payload json.RawMessage `json:"payload"`
	// Node is the uid of the member hosting the entity.
	Node  string `json:"node"`
	Shard string `json:"shard"`
	// EntityIncarnation is unique per entity start, cluster-wide.
	EntityIncarnation string `json:"entity_incarnation"`
}

// EntityContext is what an entity knows about itself and may ask of its
// shard.
type EntityContext struct {
	TypeName    string
	EntityID    string
	ShardID     string
	Incarnation string
	Node        string
	Clock       clock.Clock
	Journal     journal.Journal
	Logger      *slog.Logger
	// Passivate asks the shard to stop this entity gracefully: messages
	// arriving from now on are buffered and delivered to a new incarnation
	// once this one has stopped. Safe to call from Handle.
	Passivate func()
}

// Entity is a running entity. The shard calls Handle one message at a time,
// in arrival order, and Stop once (hand-off, passivation, region stop).
type Entity interface {
	Handle(ctx context.Context, msg Message) (json.RawMessage, error)
	Stop(ctx context.Context) error
}

// EntityFactory starts an entity, recovering its state (e.g. replaying its
// events) before it handles its first message.
type EntityFactory func(ctx context.Context, ec EntityContext) (Entity, error)

// ExtractShardID maps an entity id to its shard id.
type ExtractShardID func(entityID string) string

// HashShards is the default ExtractShardID: a stable hash (FNV-1a) of the
// entity id modulo n. The seed's advice: about ten shards per node of the
// largest cluster planned, so that rebalancing moves small parts.
func HashShards(n int) ExtractShardID {
	return func(entityID string) string {
		h := fnv.New32a()
		h.Write([]byte(entityID))
		return strconv.Itoa(int(h.Sum32() % uint32(n)))
	}
}

// Settings configure one entity type.
type Settings struct {
	TypeName string
	// Role: only members with it host shards; others are proxy-only.
	Role           string
	NumberOfShards int // default 100
	// BufferSize bounds messages a region buffers (all shards together)
	// while homes are unknown or shards are handed off. Overflow is dropped,
	// counted and logged, never silently.
	BufferSize               int           // default 10000
	HandOffTimeout           time.Duration // default 10s
	RebalanceInterval        time.Duration // default 10s
	RebalanceThreshold       int           // default 2
	MaxSimultaneousRebalance int           // default 3
	// PassivateIdleAfter passivates entities idle this long; 0: never.
	PassivateIdleAfter time.Duration
	// RetryInterval for registering with and asking the coordinator.
	RetryInterval time.Duration // default 500ms
	// DownRemovalMargin: after a region's member is downed, the coordinator
	// waits this long before reallocating its shards.
	DownRemovalMargin time.Duration
	// Bugs switches deliberate bugs on (for testing the harness's
	// checkers); the zero value is correct.
	Bugs Bugs
}

// Validate checks the settings (after defaults).
func (s Settings) Validate() error {
	if s.TypeName == "" {
		return fmt.Errorf("sharding: empty type name")
	}
	if s.NumberOfShards < 1 || s.BufferSize < 1 || s.MaxSimultaneousRebalance < 1 || s.RebalanceThreshold < 1 {
		return fmt.Errorf("sharding %s: number of shards, buffer size, rebalance threshold and max simultaneous rebalance must be positive", s.TypeName)
	}
	return nil
}

// WithDefaults fills zero fields.
func (s Settings) WithDefaults() Settings {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	defD := func(v *time.Duration, d time.Duration) {
		if *v == 0 {
			*v = d
		}
	}
	def(&s.NumberOfShards, 100)
	def(&s.BufferSize, 10000)
	def(&s.RebalanceThreshold, 2)
	def(&s.MaxSimultaneousRebalance, 3)
	defD(&s.HandOffTimeout, 10*time.Second)
	defD(&s.RebalanceInterval, 10*time.Second)
	defD(&s.RetryInterval, 500*time.Millisecond)
	return s
}

// Deps are a region's and coordinator's collaborators on this node.
type Deps struct {
	Membership cluster.Membership
	Peers      peer.Caller
	Clock      clock.Clock
	Events     *kit.EventLog
	Logger     *slog.Logger
	Journal    journal.Journal
	// Factory creates entities; nil makes the region proxy-only.
	Factory EntityFactory
	// Fresh, if set, reports whether this member may serve (cluster's
	// Fresh: not just thawed from a freeze); while it is not, requests
	// wait, and fail as unavailable if it does not become fresh in time.
	Fresh func() bool
	// ExtractShardID defaults to HashShards(NumberOfShards).
	ExtractShardID ExtractShardID
	// Incarnations numbers the region's entity starts; nil: a counter of
	// the region's own (a member uid has one region per type, so each
	// entity's incarnations differ all the same).
	Incarnations *Incarnations
}

// Incarnations numbers entity starts: with the member uid a number makes
// an entity incarnation unique cluster-wide. Its owner shares it among the
// regions it makes (the reference node: one for all its types and member
// incarnations, so that no number is used twice in its process).
type Incarnations struct{ n atomic.Uint64 }

func (c *Incarnations) next() uint64 { return c.n.Add(1) }

// AllocationStrategy decides where shards live. Regions are member uids.
// Implementations must be deterministic given their inputs.
type AllocationStrategy interface {
	// Allocate picks the region for a shard that has none. current maps
	// every registered region (proxies excluded) to its shards.
	Allocate(requester string, shard string, current map[string][]string) (string, error)
	// Rebalance picks shards to hand off now; rebalanceInProgress are
	// shards being handed off already.
	Rebalance(current map[string][]string, rebalanceInProgress map[string]bool) []string
}
