package main

import (
	"encoding/json"
	"fmt"
	"slices"
	"sync"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// Membership is the election's candidate queue. Every member, once its
// etcd member runs, opens a session (a lease) and campaigns: it puts a
// key under electionPrefix with the lease, and etcd's election makes the
// key with the lowest create revision the leader. So the queue, oldest
// key first, is the membership this peer reports: a member is up while
// its key exists, its age (up_number) is the key's create revision — a
// revision of etcd's, no clock — and the oldest is the leader, where the
// singleton belongs. A member whose session ends (its lease expired or
// was revoked) drops out and comes back as a new incarnation with a new
// key, at the end of the queue.

// candidate is one key of the queue: its value names the member.
type candidate struct {
	protocol.Member
	// Forward is the member's forward port (ip:port).
	Forward string `json:"forward"`
	// Key and Rev are the key and its create revision (not in the value).
	Key string `json:"-"`
	Rev int64  `json:"-"`
}

// encodeCandidate is the value a member campaigns with.
func encodeCandidate(m protocol.Member, forward string) string {
	b, _ := json.Marshal(candidate{Member: protocol.Member{UID: m.UID, Name: m.Name, Incarnation: m.Incarnation,
		GossipAddr: m.GossipAddr, HTTPAddr: m.HTTPAddr}, Forward: forward}) // a Member always marshals
	return string(b)
}

// decodeCandidate reads a key of the queue.
func decodeCandidate(key string, value []byte, rev int64) (candidate, error) {
	var c candidate
	if err := json.Unmarshal(value, &c); err != nil {
		return c, fmt.Errorf("election key %s: %w", key, err)
	}
	if c.UID == "" || c.UID != protocol.UID(c.Name, c.Incarnation) {
		return c, fmt.Errorf("election key %s: uid %q does not match name %q and incarnation %q", key, c.UID, c.Name, c.Incarnation)
	}
	c.Key, c.Rev = key, rev
	return c, nil
}

// maxGone bounds how many departed members the status remembers.
const maxGone = 64

// membership is this node's view: the queue as last read, and this
// member's own incarnation and status.
type membership struct {
	event func(protocol.Event)

	mu sync.Mutex
	// self: this incarnation (status joining until its key is seen, then up).
	self  protocol.Member
	queue []candidate // oldest first
	gone  []protocol.Member
}

func newMembership(self protocol.Member, event func(protocol.Event)) *membership {
	self.Status, self.Reachable = protocol.StatusJoining, true
	return &membership{self: self, event: event}
}

// setIncarnation makes inc this member's incarnation (joining again).
func (m *membership) setIncarnation(inc string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.self.Incarnation, m.self.UID = inc, protocol.UID(m.self.Name, inc)
	m.self.Status, m.self.UpNumber = protocol.StatusJoining, 0
}

// selfMember is this member as it is now.
func (m *membership) selfMember() protocol.Member {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self
}

// status is this member's status.
func (m *membership) status() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.self.Status
}

// update takes a new reading of the queue (oldest first): members that
// appeared are up, members that left are down (their session ended), and
// this member is up once its own key is there.
func (m *membership) update(queue []candidate) {
	m.mu.Lock()
	defer m.mu.Unlock()
	had := map[string]bool{}
	for _, c := range m.queue {
		had[c.UID] = true
	}
	now := map[string]bool{}
	for _, c := range queue {
		now[c.UID] = true
		if !had[c.UID] {
			m.event(protocol.Event{Type: protocol.EventMemberUp, Member: c.UID,
				Detail: fmt.Sprintf("its election key %s was created at revision %d", c.Key, c.Rev)})
		}
		if c.UID == m.self.UID {
			m.self.Status, m.self.UpNumber = protocol.StatusUp, c.Rev
		}
	}
	for _, c := range m.queue {
		if !now[c.UID] {
			gone := c.Member
			gone.Status, gone.Reachable, gone.UpNumber = protocol.StatusDown, false, c.Rev
			m.gone = append(m.gone, gone)
			if len(m.gone) > maxGone {
				m.gone = m.gone[1:]
			}
			if c.UID != m.self.UID {
				m.event(protocol.Event{Type: protocol.EventMemberDowned, Member: c.UID,
					Detail: fmt.Sprintf("its election key %s (revision %d) is gone: its session's lease expired or was revoked", c.Key, c.Rev)})
			}
		}
	}
	if len(queue) > 0 && (len(m.queue) == 0 || m.queue[0].UID != queue[0].UID) {
		m.event(protocol.Event{Type: protocol.EventOldestChanged, Member: queue[0].UID,
			Detail: fmt.Sprintf("the election's leader key is now %s (revision %d)", queue[0].Key, queue[0].Rev)})
	}
	m.queue = queue
}

// view is the membership view for the kit: the queue's members (all up
// and reachable: a member this node cannot reach loses its key when its
// lease expires, and drops out) and this member if it is not among them.
func (m *membership) view() kit.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := kit.View{Self: m.self}
	listed := false
	for _, c := range m.queue {
		if c.UID == m.self.UID {
			listed = true
			v.Members = append(v.Members, m.self)
			continue
		}
		x := c.Member
		x.Status, x.Reachable, x.UpNumber = protocol.StatusUp, true, c.Rev
		v.Members = append(v.Members, x)
	}
	if !listed {
		v.Members = append(v.Members, m.self)
	}
	v.Gone = slices.Clone(m.gone)
	return v
}

// queueDetail is the queue for the status's detail.
func (m *membership) queueDetail() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make([]string, 0, len(m.queue))
	for _, c := range m.queue {
		out = append(out, fmt.Sprintf("%s rev=%d %s", c.Key, c.Rev, c.UID))
	}
	return out
}
