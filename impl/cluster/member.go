package cluster

import (
	"slices"
	"strconv"

	"github.com/shardtest/shardtest/impl/peer"
)

// Member is one incarnation of a node: a restarted node is a new member.
type Member struct {
	// Name is the node's stable name (e.g. "n1").
	Name string `json:"name"`
	// Incarnation is new at every process start (and at every in-process
	// restart after being downed).
	Incarnation string `json:"incarnation"`
	// UpNumber is allocated atomically from the journal when the member
	// joins: a lower number is an older member. It never depends on clocks.
	UpNumber int64 `json:"up_number"`
	// GossipAddr is the memberlist address (host:port); it identifies the
	// member in packet-filter rules.
	GossipAddr string `json:"gossip_addr"`
	// HTTPAddr is the node protocol address (host:port).
	HTTPAddr string `json:"http_addr"`
	// PeerAddr is where other members send node-to-node requests (an
	// address of the cluster-internal IP).
	PeerAddr string   `json:"peer_addr,omitempty"`
	Roles    []string `json:"roles,omitempty"`
}

// Target is the member as node-to-node requests address it.
func (m Member) Target() peer.Target {
	return peer.Target{UID: m.UID(), GossipAddr: m.GossipAddr, Addr: m.PeerAddr}
}

// UID is the member's unique id: name@incarnation.
func (m Member) UID() string { return m.Name + "@" + m.Incarnation }

// IsOlderThan orders members by age. The order is total: up-numbers are
// unique, and the UID breaks the tie should two ever be equal.
func (m Member) IsOlderThan(o Member) bool {
	if m.UpNumber != o.UpNumber {
		return m.UpNumber < o.UpNumber
	}
	return m.UID() < o.UID()
}

// HasRole reports whether m has role r; every member has the empty role.
func (m Member) HasRole(r string) bool { return r == "" || slices.Contains(m.Roles, r) }

func (m Member) String() string { return m.UID() + "#" + strconv.FormatInt(m.UpNumber, 10) }

// Status is a member's membership status.
type Status string

// Member statuses. Down and Removed are final: a downed or removed member
// never comes back; its node rejoins as a new incarnation.
const (
	// StatusJoining: this node has not yet joined the cluster (only ever
	// the node's own status).
	StatusJoining Status = "joining"
	// StatusUp: a full member.
	StatusUp Status = "up"
	// StatusLeaving: leaving gracefully; it hands over what it runs.
	StatusLeaving Status = "leaving"
	// StatusDown: downed by a split-brain resolver (or itself).
	StatusDown Status = "down"
	// StatusRemoved: left gracefully and is gone.
	StatusRemoved Status = "removed"
)

// Final reports whether s is Down or Removed.
func (s Status) Final() bool { return s == StatusDown || s == StatusRemoved }

// MemberState is a member as this node sees it.
type MemberState struct {
	Member
	Status Status `json:"status"`
	// Reachable is this node's own failure detector's verdict.
	Reachable bool `json:"reachable"`
}

// Snapshot is this node's view of the cluster at one moment.
type Snapshot struct {
	// Version increases at every change this node sees.
	Version uint64 `json:"version"`
	// Self is this node's own member.
	Self MemberState `json:"self"`
	// Members are every member not yet final, self included, oldest first.
	Members []MemberState `json:"members"`
	// Gone are final members (down or removed) still remembered.
	Gone []MemberState `json:"gone,omitempty"`
}

// Oldest returns the oldest Up member with role (Leaving members hand over
// and are skipped), and whether there is one.
func (s Snapshot) Oldest(role string) (MemberState, bool) {
	for _, m := range s.Members {
		if m.Status == StatusUp && m.HasRole(role) {
			return m, true
		}
	}
	return MemberState{}, false
}

// Find returns the member with uid among Members and Gone.
func (s Snapshot) Find(uid string) (MemberState, bool) {
	for _, m := range s.Members {
		if m.UID() == uid {
			return m, true
		}
	}
	for _, m := range s.Gone {
		if m.UID() == uid {
			return m, true
		}
	}
	return MemberState{}, false
}

// Membership is what components running on a node (singleton managers,
// shard regions) need of the cluster.
type Membership interface {
	// Snapshot is the current view.
	Snapshot() Snapshot
	// Find is Snapshot().Find(uid) without building the whole view: what
	// every node-to-node request asks of it, once per request.
	Find(uid string) (MemberState, bool)
	// Changed returns a channel closed at the next change of the view.
	Changed() <-chan struct{}
}
