// Package events is a node's event log: what happened to membership, the
// singleton and (later) shards, as this node saw it, in the order it saw it.
// The harness reads it through the node protocol to corroborate what clients
// observed; each event carries a node-local sequence number that never
// repeats within one process.
package events

import (
	"sync"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
)

// Types of events. The node protocol documents each.
const (
	NodeStarted         = "node-started"
	MemberUp            = "member-up"
	MemberUnreachable   = "member-unreachable"
	MemberReachable     = "member-reachable"
	MemberLeaving       = "member-leaving"
	MemberDowned        = "member-downed"
	MemberRemoved       = "member-removed"
	SelfDowned          = "self-downed"
	DowningDecision     = "downing-decision"
	OldestChanged       = "oldest-changed"
	SingletonStarted    = "singleton-started"
	SingletonStopped    = "singleton-stopped"
	SingletonFailed     = "singleton-failed"
	HandOverToMe        = "hand-over-to-me"
	HandOverInProgress  = "hand-over-in-progress"
	HandOverDone        = "hand-over-done"
	TakeOverFromMe      = "take-over-from-me"
	HandOverGaveUp      = "hand-over-gave-up"
	ProxyDropped        = "proxy-dropped"
	ClockChanged        = "clock-changed"
	FilterChanged       = "filter-changed"
	JournalUnavailable  = "journal-unavailable"
	LeaveStarted        = "leave-started"
	LeaveCompleted      = "leave-completed"
	NodeStopped         = "node-stopped"
	IncarnationReplaced = "incarnation-replaced"

	// Sharding. Shard and Entity fields name what they are about.
	EntityStarted      = "entity-started"
	EntityStopped      = "entity-stopped"
	EntityPassivated   = "entity-passivated"
	ShardStarted       = "shard-started" // a region began hosting a shard
	ShardAllocated     = "shard-allocated"
	ShardHandOffBegun  = "shard-hand-off-begun"
	ShardStopped       = "shard-stopped" // every entity of the shard stopped here
	ShardRebalanced    = "shard-rebalanced"
	RegionRegistered   = "region-registered"
	RegionTerminated   = "region-terminated"
	BufferDropped      = "buffer-dropped"
	CoordinatorStarted = "coordinator-started"
	CoordinatorStopped = "coordinator-stopped"
)

// Event is one entry of the log.
type Event struct {
	// Seq is the node-local sequence number, from 1, gapless within a process
	// (a bounded log may have forgotten the oldest).
	Seq uint64 `json:"seq"`
	// Time is the node's clock (which the clock nemesis may skew): for people
	// reading the log, never for checkers' ordering.
	Time time.Time `json:"time"`
	// Incarnation is the member incarnation that logged the event.
	Incarnation string `json:"incarnation"`
	Type        string `json:"type"`
	// Member is the subject member's unique id (name@incarnation), if any.
	Member string `json:"member,omitempty"`
	// Peer is the other party of a protocol step (hand-over partner), if any.
	Peer string `json:"peer,omitempty"`
	// Singleton names the singleton an event is about, if any.
	Singleton string `json:"singleton,omitempty"`
	// Type of entity, Shard and Entity (id) for sharding events; Entity
	// incarnation in EntityIncarnation.
	EntityType        string `json:"entity_type,omitempty"`
	Shard             string `json:"shard,omitempty"`
	Entity            string `json:"entity,omitempty"`
	EntityIncarnation string `json:"entity_incarnation,omitempty"`
	Detail            string `json:"detail,omitempty"`
}

// Log is a bounded, concurrency-safe event log. Readers poll it with Since.
type Log struct {
	clock clock.Clock
	limit int

	mu      sync.Mutex
	inc     string
	next    uint64
	entries []Event // entries[i].Seq == first+i
	waiters chan struct{}
}

// DefaultLimit is how many events a Log keeps before it forgets the oldest.
const DefaultLimit = 100_000

// NewLog returns an empty log that keeps at most limit events.
func NewLog(c clock.Clock, limit int) *Log {
	if limit <= 0 {
		limit = DefaultLimit
	}
	return &Log{clock: c, limit: limit, next: 1, waiters: make(chan struct{})}
}

// SetIncarnation names the incarnation stamped on events appended from now on.
func (l *Log) SetIncarnation(inc string) {
	l.mu.Lock()
	l.inc = inc
	l.mu.Unlock()
}

// Append stamps e with the next sequence number, the time and the
// incarnation, stores it and returns the stamped event.
func (l *Log) Append(e Event) Event {
	now := l.clock.Now()
	l.mu.Lock()
	e.Seq = l.next
	l.next++
	e.Time = now
	if e.Incarnation == "" {
		e.Incarnation = l.inc
	}
	l.entries = append(l.entries, e)
	if len(l.entries) > l.limit {
		drop := len(l.entries) - l.limit
		l.entries = append([]Event(nil), l.entries[drop:]...)
	}
	close(l.waiters)
	l.waiters = make(chan struct{})
	l.mu.Unlock()
	return e
}

// Since returns up to max events with Seq > after, oldest first, and the
// sequence number of the newest event logged so far.
func (l *Log) Since(after uint64, max int) (evs []Event, last uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	last = l.next - 1
	if len(l.entries) == 0 || after >= last {
		return nil, last
	}
	first := l.entries[0].Seq
	start := 0
	if after >= first {
		start = int(after - first + 1)
	}
	if start >= len(l.entries) {
		return nil, last
	}
	end := len(l.entries)
	if max > 0 && end-start > max {
		end = start + max
	}
	return append([]Event(nil), l.entries[start:end]...), last
}

// Last returns the sequence number of the newest event (0: none yet).
func (l *Log) Last() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Changed returns a channel closed at the next Append.
func (l *Log) Changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.waiters
}
