package node

import (
	"encoding/json"

	"github.com/shardtest/shardtest/impl/cluster"
	"github.com/shardtest/shardtest/impl/events"
	"github.com/shardtest/shardtest/impl/peer"
	"github.com/shardtest/shardtest/impl/sharding"
	"github.com/shardtest/shardtest/impl/singleton"
)

// The JSON shapes of the node protocol. docs/protocol.md is their contract.

// ProtocolVersion is the version of docs/protocol.md this node speaks.
const ProtocolVersion = "shardtest/1"

// ServedBy says which member served a reply; every reply carries it.
type ServedBy struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
}

// ErrorReply is the body of every non-2xx reply.
type ErrorReply struct {
	Error string `json:"error"`
	// Code is a stable machine-readable reason.
	Code string `json:"code"`
	// Outcome: "fail" (the request certainly had no effect) or "unknown".
	Outcome  string   `json:"outcome"`
	ServedBy ServedBy `json:"served_by"`
}

// MemberInfo is a member as the node sees it.
type MemberInfo struct {
	UID         string   `json:"uid"`
	Name        string   `json:"name"`
	Incarnation string   `json:"incarnation"`
	UpNumber    int64    `json:"up_number"`
	Status      string   `json:"status"`
	Reachable   bool     `json:"reachable"`
	GossipAddr  string   `json:"gossip_addr"`
	HTTPAddr    string   `json:"http_addr"`
	Roles       []string `json:"roles,omitempty"`
}

func memberInfo(m cluster.MemberState) MemberInfo {
	return MemberInfo{
		UID: m.UID(), Name: m.Name, Incarnation: m.Incarnation, UpNumber: m.UpNumber,
		Status: string(m.Status), Reachable: m.Reachable, GossipAddr: m.GossipAddr, HTTPAddr: m.HTTPAddr, Roles: m.Roles,
	}
}

// StatusReply is GET /v1/status.
type StatusReply struct {
	ServedBy ServedBy   `json:"served_by"`
	Protocol string     `json:"protocol"`
	Self     MemberInfo `json:"self"`
	// Ready: the member has joined and is Up (or Leaving).
	Ready bool `json:"ready"`
	// Oldest is the UID of the oldest Up member (the singleton's home) as
	// this node sees it; empty if none.
	Oldest      string          `json:"oldest"`
	Members     []MemberInfo    `json:"members"`
	Gone        []MemberInfo    `json:"gone"`
	Unreachable []string        `json:"unreachable"`
	Singletons  []SingletonInfo `json:"singletons"`
	Clock       ClockReply      `json:"clock"`
	Filter      peer.Rules      `json:"filter"`
	Downing     DowningInfo     `json:"downing"`
	Bugs        []string        `json:"bugs"`
	// Incarnations counts member incarnations of this process.
	Incarnations int `json:"incarnations"`
	// LastEventSeq is the newest event's sequence number.
	LastEventSeq uint64 `json:"last_event_seq"`
	// Sharding is one entry per entity type.
	Sharding []ShardingInfo `json:"sharding"`
	// Tells counts fire-and-forget messages queued, failed and dropped.
	Tells TellStatus `json:"tells"`
}

// ShardingInfo is one entity type's state on this node: its region, and,
// on the member running the type's coordinator, the allocation table.
type ShardingInfo struct {
	Type   string                `json:"type"`
	Region sharding.RegionStatus `json:"region"`
	// CoordinatorRunning: this member runs the type's coordinator.
	CoordinatorRunning bool `json:"coordinator_running"`
	// Allocations is the coordinator's table (only where it runs).
	Allocations *sharding.CoordinatorState `json:"allocations,omitempty"`
}

// SingletonInfo is one singleton's state on this node.
type SingletonInfo struct {
	Name string `json:"name"`
	// Running: an instance runs here now.
	Running bool                    `json:"running"`
	Manager singleton.ManagerStatus `json:"manager"`
	Proxy   singleton.ProxyStatus   `json:"proxy"`
}

// DowningInfo is the split-brain resolver's configuration.
type DowningInfo struct {
	Strategy      string `json:"strategy"`
	StableAfterMS int64  `json:"stable_after_ms"`
	QuorumSize    int    `json:"quorum_size,omitempty"`
}

// NextIDReply is POST /v1/singleton/next-id.
type NextIDReply struct {
	ServedBy ServedBy `json:"served_by"`
	ID       int64    `json:"id"`
	// Singleton is the instance that generated the id.
	Singleton Host `json:"singleton"`
}

// ClockRequest is POST /v1/admin/clock: it replaces the skew.
type ClockRequest struct {
	// OffsetMS is added to real time, in milliseconds (may be negative).
	OffsetMS float64 `json:"offset_ms"`
	// Drift is the rate error (0.01: the clock gains 1 %).
	Drift float64 `json:"drift"`
}

// ClockReply is the clock's state.
type ClockReply struct {
	ServedBy ServedBy `json:"served_by"`
	// OffsetMS is the current offset, including accumulated drift.
	OffsetMS float64 `json:"offset_ms"`
	Drift    float64 `json:"drift"`
	// Now is the node clock's reading (RFC 3339, nanoseconds).
	Now string `json:"now"`
}

// FilterReply is GET/POST /v1/admin/filter.
type FilterReply struct {
	ServedBy ServedBy `json:"served_by"`
	peer.Rules
}

// LeaveReply is POST /v1/admin/leave.
type LeaveReply struct {
	ServedBy ServedBy `json:"served_by"`
	Status   string   `json:"status"`
}

// DownRequest is POST /v1/admin/down: an operator downs a member.
type DownRequest struct {
	// Member is the member's uid (name@incarnation) or, for its current
	// incarnation, its node name.
	Member string `json:"member"`
}

// DownReply answers DownRequest.
type DownReply struct {
	ServedBy ServedBy `json:"served_by"`
	// Member is the uid downed.
	Member string `json:"member"`
	Status string `json:"status"`
}

// EventsReply is GET /v1/events.
type EventsReply struct {
	ServedBy ServedBy       `json:"served_by"`
	Events   []events.Event `json:"events"`
	// Last is the newest event's sequence number; poll again with
	// after=Last.
	Last uint64 `json:"last"`
}

// CapabilitiesReply is GET /v1/capabilities.
type CapabilitiesReply struct {
	ServedBy       ServedBy `json:"served_by"`
	Protocol       string   `json:"protocol"`
	Implementation string   `json:"implementation"`
	// Capabilities the harness may use; see docs/protocol.md.
	Capabilities []string `json:"capabilities"`
	Singletons   []string `json:"singletons"`
	// EntityTypes are the sharded entity types POST /v1/entity serves.
	EntityTypes []string `json:"entity_types"`
	// Bugs are deliberate bugs this implementation can switch on (only
	// the reference node has them).
	Bugs []string `json:"bugs"`
}

// ReferenceCapabilities are the capabilities of the reference node.
func ReferenceCapabilities() []string {
	return []string{"membership", "singleton", "sharding", "events", "clock", "filter", "leave", "down"}
}

// EntityRequest is POST /v1/entity: one message to one entity, routed
// through this node's region.
type EntityRequest struct {
	// Type is the entity type: "register" or "log".
	Type string `json:"type"`
	// ID is the entity id (1–256 bytes).
	ID string `json:"id"`
	// Op and Payload are the entity's operation (see docs/protocol.md).
	Op      string          `json:"op"`
	Payload json.RawMessage `json:"payload,omitempty"`
	// Sender names the client, for ordering and de-duplication.
	Sender string `json:"sender,omitempty"`
	// Mode "tell" sends fire-and-forget: the node accepts the message
	// (202) and delivers it at most once, in order per sender. Default
	// "ask": wait for the entity's reply.
	Mode string `json:"mode,omitempty"`
}

// TellReply is the answer to an accepted fire-and-forget message.
type TellReply struct {
	ServedBy ServedBy `json:"served_by"`
	Accepted bool     `json:"accepted"`
}

// EntityReply is the answer to POST /v1/entity.
type EntityReply struct {
	ServedBy ServedBy `json:"served_by"`
	Type     string   `json:"type"`
	ID       string   `json:"id"`
	Shard    string   `json:"shard"`
	// Node is the uid of the member that hosts the entity.
	Node string `json:"node"`
	// EntityIncarnation is unique per entity start, cluster-wide.
	EntityIncarnation string          `json:"entity_incarnation"`
	Result            json.RawMessage `json:"result"`
}
