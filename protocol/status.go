package protocol

// Member statuses (docs/protocol.md, Membership and status).
const (
	// StatusJoining: not yet a member (not ready).
	StatusJoining = "joining"
	// StatusUp: a full member.
	StatusUp = "up"
	// StatusLeaving: leaving gracefully, handing over what it runs.
	StatusLeaving = "leaving"
	// StatusDown: downed (by a split-brain resolver, an operator or
	// itself); final.
	StatusDown = "down"
	// StatusRemoved: left gracefully; final.
	StatusRemoved = "removed"
)

// ReadyStatus reports whether a member in status s serves clients: up or
// leaving.
func ReadyStatus(s string) bool { return s == StatusUp || s == StatusLeaving }

// FinalStatus reports whether s is a final status (down, removed).
func FinalStatus(s string) bool { return s == StatusDown || s == StatusRemoved }

// Member is a member as a node sees it.
type Member struct {
	// UID is name@incarnation.
	UID         string `json:"uid"`
	Name        string `json:"name"`
	Incarnation string `json:"incarnation"`
	// UpNumber is the member's age (capability age): lower is older,
	// unique in the cluster, never derived from a clock; 0 without age.
	UpNumber int64 `json:"up_number,omitempty"`
	// Status is one of the Status* constants.
	Status string `json:"status"`
	// Reachable is this node's verdict on the member (its failure
	// detector's, or whether it can talk to it).
	Reachable bool `json:"reachable"`
	// GossipAddr and HTTPAddr are informational.
	GossipAddr string   `json:"gossip_addr,omitempty"`
	HTTPAddr   string   `json:"http_addr,omitempty"`
	Roles      []string `json:"roles,omitempty"`
}

// Status is GET /v1/status: the node's view of the cluster at this moment.
type Status struct {
	ServedBy ServedBy `json:"served_by"`
	Protocol string   `json:"protocol"`
	// Self is this member.
	Self Member `json:"self"`
	// Ready: Self.Status is up or leaving.
	Ready bool `json:"ready"`
	// Oldest is the uid of the oldest up member (capability age), where
	// the singleton belongs in this node's view; empty when not ready.
	Oldest string `json:"oldest,omitempty"`
	// Members are every member not yet final, this one included (oldest
	// first with capability age).
	Members []Member `json:"members"`
	// Gone are final members this node still remembers.
	Gone []Member `json:"gone"`
	// Unreachable are the uids of Members this node cannot reach.
	Unreachable []string `json:"unreachable"`
	// Singletons (capability singleton) and Sharding (capability
	// sharding) say what runs here.
	Singletons []SingletonStatus `json:"singletons"`
	Sharding   []ShardingStatus  `json:"sharding"`
	// LastEventSeq is the newest event's sequence number (capability
	// events).
	LastEventSeq uint64 `json:"last_event_seq,omitempty"`
	// Clock is the node clock's skew (capability clock); Filter its packet
	// filter (capability filter).
	Clock  *ClockState `json:"clock,omitempty"`
	Filter *Filter     `json:"filter,omitempty"`
	// Detail is the implementation's own (shown, never read by the
	// harness).
	Detail any `json:"detail,omitempty"`
}

// SingletonRunning reports whether the named singleton runs on the node.
func (s Status) SingletonRunning(name string) bool {
	for _, x := range s.Singletons {
		if x.Name == name && x.Running {
			return true
		}
	}
	return false
}

// SingletonStatus is one singleton's state on a node.
type SingletonStatus struct {
	Name string `json:"name"`
	// Running: an instance runs on this node now.
	Running bool `json:"running"`
	// Instance names the running instance as next-id replies do
	// (node@incarnation#instance), if the implementation knows it: then
	// two status samples naming one instance prove it alive in between.
	Instance string `json:"instance,omitempty"`
	Detail   any    `json:"detail,omitempty"`
}

// ShardingStatus is one entity type's state on a node.
type ShardingStatus struct {
	Type   string       `json:"type"`
	Region RegionStatus `json:"region"`
	// CoordinatorRunning: this node runs the type's shard coordinator
	// (capability coordinator).
	CoordinatorRunning bool `json:"coordinator_running"`
	Detail             any  `json:"detail,omitempty"`
}

// RegionStatus is a node's shard region for one entity type.
type RegionStatus struct {
	// Shards it hosts, with their running entities. An implementation
	// without shards lists its entities under one shard with the empty id.
	Shards []ShardStatus `json:"shards"`
	// Buffered: messages waiting for a shard's home now.
	Buffered int `json:"buffered"`
	// Dropped: messages dropped from a full buffer, in total.
	Dropped uint64 `json:"dropped"`
	// Coordinator is the member it looks for the coordinator on.
	Coordinator string `json:"coordinator,omitempty"`
	Detail      any    `json:"detail,omitempty"`
}

// ShardStatus is a hosted shard.
type ShardStatus struct {
	ID         string         `json:"id"`
	HandingOff bool           `json:"handing_off,omitempty"`
	Entities   []EntityStatus `json:"entities"`
}

// EntityStatus is a running entity incarnation.
type EntityStatus struct {
	ID string `json:"id"`
	// Incarnation is the entity_incarnation its replies carry.
	Incarnation string `json:"incarnation"`
	Passivating bool   `json:"passivating,omitempty"`
}
