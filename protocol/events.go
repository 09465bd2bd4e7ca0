package protocol

import "time"

// Event is one entry of a node's event log (capability events).
type Event struct {
	// Seq is node-local, from 1, consecutive within one process (a bounded
	// log may have forgotten the oldest; a gap shows it).
	Seq uint64 `json:"seq"`
	// Time is the node's own clock (skewable): for people, never for
	// ordering.
	Time time.Time `json:"time,omitzero"`
	// Incarnation is the member incarnation that logged the event.
	Incarnation string `json:"incarnation"`
	Type        string `json:"type"`
	// Member is the subject member's uid; Peer the other party of a
	// protocol step.
	Member    string `json:"member,omitempty"`
	Peer      string `json:"peer,omitempty"`
	Singleton string `json:"singleton,omitempty"`
	// EntityType, Shard, Entity (id) and EntityIncarnation for sharding
	// events.
	EntityType        string `json:"entity_type,omitempty"`
	Shard             string `json:"shard,omitempty"`
	Entity            string `json:"entity,omitempty"`
	EntityIncarnation string `json:"entity_incarnation,omitempty"`
	Detail            string `json:"detail,omitempty"`
}

// EventsReply is GET /v1/events?after=N&limit=M&wait_ms=W.
type EventsReply struct {
	ServedBy ServedBy `json:"served_by"`
	Events   []Event  `json:"events"`
	// Last is the newest event's sequence number: poll again with
	// after=Last.
	Last uint64 `json:"last"`
}

// Limits of GET /v1/events.
const (
	EventsDefaultLimit = 1000
	EventsMaxLimit     = 10_000
	EventsMaxWaitMS    = 30_000
)

// Event types (docs/protocol.md, Events). The harness ignores types it
// does not know; the singleton checker needs at least singleton-started
// and singleton-stopped.
const (
	EventNodeStarted         = "node-started"
	EventNodeStopped         = "node-stopped"
	EventMemberUp            = "member-up"
	EventMemberUnreachable   = "member-unreachable"
	EventMemberReachable     = "member-reachable"
	EventMemberLeaving       = "member-leaving"
	EventMemberRemoved       = "member-removed"
	EventMemberDowned        = "member-downed"
	EventSelfDowned          = "self-downed"
	EventDowningDecision     = "downing-decision"
	EventIncarnationReplaced = "incarnation-replaced"
	EventOldestChanged       = "oldest-changed"
	EventSingletonStarted    = "singleton-started"
	EventSingletonStopped    = "singleton-stopped"
	EventSingletonFailed     = "singleton-failed"
	EventHandOverToMe        = "hand-over-to-me"
	EventHandOverInProgress  = "hand-over-in-progress"
	EventHandOverDone        = "hand-over-done"
	EventTakeOverFromMe      = "take-over-from-me"
	EventHandOverGaveUp      = "hand-over-gave-up"
	EventProxyDropped        = "proxy-dropped"
	EventEntityStarted       = "entity-started"
	EventEntityStopped       = "entity-stopped"
	EventEntityPassivated    = "entity-passivated"
	EventShardStarted        = "shard-started"
	EventShardStopped        = "shard-stopped"
	EventShardAllocated      = "shard-allocated"
	EventShardHandOffBegun   = "shard-hand-off-begun"
	EventShardRebalanced     = "shard-rebalanced"
	EventRegionRegistered    = "region-registered"
	EventRegionTerminated    = "region-terminated"
	EventBufferDropped       = "buffer-dropped"
	EventCoordinatorStarted  = "coordinator-started"
	EventCoordinatorStopped  = "coordinator-stopped"
	EventLeaveStarted        = "leave-started"
	EventLeaveCompleted      = "leave-completed"
	EventClockChanged        = "clock-changed"
	EventFilterChanged       = "filter-changed"
	EventJournalUnavailable  = "journal-unavailable"
)

// EventTypes returns the event types an implementation that declares caps
// (capability events among them) logs when the situation arises, in the
// order of the table in docs/protocol.md: membership's for every one, and
// each optional capability's own. Behaviour coverage lists those a run
// never saw. Types no capability promises (journal-unavailable, which
// needs a journal) are not among them.
func EventTypes(caps []string) []string {
	has := func(c string) bool {
		for _, x := range caps {
			if x == c {
				return true
			}
		}
		return false
	}
	if !has(CapEvents) {
		return nil
	}
	var out []string
	for _, t := range []struct {
		capability string
		types      []string
	}{
		{CapMembership, []string{EventNodeStarted, EventMemberUp, EventMemberUnreachable, EventMemberReachable,
			EventMemberDowned, EventSelfDowned, EventDowningDecision, EventIncarnationReplaced}},
		{CapLeave, []string{EventMemberLeaving, EventMemberRemoved, EventLeaveStarted, EventLeaveCompleted, EventNodeStopped}},
		{CapAge, []string{EventOldestChanged}},
		{CapSingleton, []string{EventSingletonStarted, EventSingletonStopped, EventSingletonFailed,
			EventHandOverToMe, EventHandOverInProgress, EventHandOverDone, EventTakeOverFromMe, EventHandOverGaveUp, EventProxyDropped}},
		{CapSharding, []string{EventEntityStarted, EventEntityStopped, EventEntityPassivated, EventShardStarted, EventShardStopped, EventBufferDropped}},
		{CapCoordinator, []string{EventShardAllocated, EventShardHandOffBegun, EventShardRebalanced,
			EventRegionRegistered, EventRegionTerminated, EventCoordinatorStarted, EventCoordinatorStopped}},
		{CapClock, []string{EventClockChanged}},
		{CapFilter, []string{EventFilterChanged}},
	} {
		if t.capability == CapMembership || has(t.capability) {
			out = append(out, t.types...)
		}
	}
	return out
}
