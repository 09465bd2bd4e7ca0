package main

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/asynkron/protoactor-go/cluster"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// nameKey is the gossip state key under which every member publishes its
// node name: protoactor member ids are random per process (the actor
// system's id), so names travel beside them.
const nameKey = "shardtest-name"

// maxGone bounds how many departed members the status remembers.
const maxGone = 64

// membership is this member's view of the cluster as protoactor has it:
// the topology the automanaged provider last published (its members are
// the ones whose health endpoint answered; every one that stopped
// answering was removed and blocked for good), and the node names the
// members gossip.
type membership struct {
	self  protocol.Member // uid, name, incarnation and addresses
	log   *slog.Logger
	event func(protocol.Event)
	// agree: up only once the topology's members agree (see status);
	// false: up as soon as this member sees itself.
	agree bool

	mu      sync.Mutex
	started bool // cluster.StartMember has returned
	// inTopology: self is in the last topology; wasListed: it has been
	// (once it drops out, it is blocked and never listed again).
	inTopology, wasListed bool
	// joined: the member has started, sees itself, and every member of
	// its topology has gossiped the same topology (so none of them still
	// places grains by an older one); it stays joined from then on.
	joined    bool
	hash      uint64
	members   []*cluster.Member // the last topology
	names     map[string]string // member id → node name
	pendingUp map[string]bool   // joined, member-up waits for the name
	gone      []protocol.Member
	blocked   []string
}

func newMembership(self protocol.Member, agree bool, log *slog.Logger, event func(protocol.Event)) *membership {
	return &membership{self: self, agree: agree, log: log, event: event,
		names: map[string]string{self.Incarnation: self.Name}, pendingUp: map[string]bool{}}
}

// setStarted records that the cluster member has started.
func (m *membership) setStarted() {
	m.mu.Lock()
	m.started = true
	m.mu.Unlock()
}

// onTopology takes a topology the member list published. It runs on the
// publisher's goroutine, inside the member list's lock: it must not call
// back into the cluster.
func (m *membership) onTopology(t *cluster.ClusterTopology, blocked []string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hash, m.members, m.blocked = t.TopologyHash, slices.Clone(t.Members), blocked
	for _, j := range t.Joined {
		m.pendingUp[j.Id] = true
	}
	for _, l := range t.Left {
		delete(m.pendingUp, l.Id)
		gone := m.member(l, protocol.StatusDown, false)
		m.gone = append(m.gone, gone)
		if len(m.gone) > maxGone {
			m.gone = m.gone[1:]
		}
		if l.Id != m.self.Incarnation {
			m.event(protocol.Event{Type: protocol.EventMemberDowned, Member: gone.UID,
				Detail: "left the protoactor topology (its automanaged health endpoint did not answer) and is blocked for good"})
		}
	}
	m.flushUp()
	in := slices.ContainsFunc(t.Members, func(x *cluster.Member) bool { return x.Id == m.self.Incarnation })
	if m.wasListed && !in && m.inTopology {
		// Left members are blocked forever, self included: this member
		// can never be in its own topology again.
		m.event(protocol.Event{Type: "self-blocked", Member: m.self.UID,
			Detail: "this member left its own topology and is blocked for good; the placement actor stops every grain here"})
		m.log.Warn("this member is no longer in its own topology: it is blocked for good", "topology_hash", t.TopologyHash)
	}
	m.inTopology = in
	m.wasListed = m.wasListed || in
}

// flushUp logs member-up for joined members whose name is known.
func (m *membership) flushUp() {
	for id := range m.pendingUp {
		if _, ok := m.names[id]; ok {
			delete(m.pendingUp, id)
			m.event(protocol.Event{Type: protocol.EventMemberUp, Member: protocol.UID(m.names[id], id)})
		}
	}
}

// setNames takes the node names the members gossip (member id → name).
func (m *membership) setNames(names map[string]string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, n := range names {
		m.names[id] = n
	}
	m.flushUp()
}

// status is this member's status: joining until the cluster has started,
// this member sees itself in its topology and every member of that
// topology gossips the same one, then up; down once it has left its own
// topology (it is then blocked for good). Without agree, up as soon as it
// sees itself: the harness then starts traffic while the first member's
// topology still lags the others' (docs/peers/protoactor.md, the join
// race).
func (m *membership) status() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.statusLocked()
}

func (m *membership) statusLocked() string {
	switch {
	case m.wasListed && !m.inTopology:
		return protocol.StatusDown
	case m.inTopology && m.started && (m.joined || !m.agree):
		return protocol.StatusUp
	}
	return protocol.StatusJoining
}

// setAgreement takes the topology hash every member gossips (member id →
// hash) and marks this member joined once all of its topology agree.
func (m *membership) setAgreement(hashes map[string]uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.joined || !m.started || !m.inTopology {
		return
	}
	var differ []string
	for _, x := range m.members {
		if h, ok := hashes[x.Id]; !ok || h != m.hash {
			differ = append(differ, x.Id)
		}
	}
	if len(differ) > 0 {
		m.log.Info("not up yet: members of this topology gossip another one", "topology_hash", m.hash, "members", differ)
		return
	}
	m.joined = true
	m.log.Info("up: every member of this topology gossips it", "topology_hash", m.hash, "members", len(m.members))
}

// member describes a protoactor member.
func (m *membership) member(x *cluster.Member, status string, reachable bool) protocol.Member {
	if x.Id == m.self.Incarnation {
		self := m.self
		self.Status, self.Reachable = status, reachable
		return self
	}
	// Until its name has come by gossip, a member is "?@id" with no name.
	name, ok := m.names[x.Id]
	uid := protocol.UID(name, x.Id)
	if !ok {
		uid = protocol.UID("?", x.Id)
	}
	return protocol.Member{UID: uid, Name: name, Incarnation: x.Id, Status: status, Reachable: reachable, GossipAddr: x.Address()}
}

// view is the membership view for the kit: the members of the last
// topology, all reachable (a member that stops answering leaves the
// topology), and the members that left it.
func (m *membership) view() kit.View {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := kit.View{Self: m.self}
	v.Self.Status, v.Self.Reachable = m.statusLocked(), true
	selfListed := false
	for _, x := range m.members {
		if x.Id == m.self.Incarnation {
			selfListed = true
			v.Members = append(v.Members, v.Self)
			continue
		}
		v.Members = append(v.Members, m.member(x, protocol.StatusUp, true))
	}
	if !selfListed && v.Self.Status == protocol.StatusJoining {
		v.Members = append(v.Members, v.Self)
	}
	v.Gone = slices.Clone(m.gone)
	return v
}

// topologyDetail is the topology as protoactor has it, for the status's
// detail.
type topologyDetail struct {
	Hash    uint64            `json:"topology_hash"`
	Members []string          `json:"member_ids"`
	Blocked []string          `json:"blocked"`
	Names   map[string]string `json:"names"`
}

func (m *membership) detail() topologyDetail {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := topologyDetail{Hash: m.hash, Blocked: slices.Clone(m.blocked), Names: map[string]string{}}
	for _, x := range m.members {
		d.Members = append(d.Members, x.Id+" "+x.Address())
	}
	for id, n := range m.names {
		d.Names[id] = n
	}
	return d
}

// runGossip publishes this member's name in the gossip state and reads,
// every interval until ctx ends, the names and the topologies the members
// gossip.
func (m *membership) runGossip(ctx context.Context, g *cluster.Gossiper, interval time.Duration) {
	g.SetState(nameKey, wrapperspb.String(m.self.Name))
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if state, err := g.GetState(nameKey); err == nil {
			names := map[string]string{}
			for id, kv := range state {
				var s wrapperspb.StringValue
				if kv.GetValue() != nil && kv.GetValue().UnmarshalTo(&s) == nil && s.GetValue() != "" {
					names[id] = s.GetValue()
				}
			}
			m.setNames(names)
		}
		if state, err := g.GetState(cluster.TopologyKey); err == nil {
			hashes := map[string]uint64{}
			for id, kv := range state {
				var topo cluster.ClusterTopology
				if kv.GetValue() != nil && kv.GetValue().UnmarshalTo(&topo) == nil {
					hashes[id] = topo.TopologyHash
				}
			}
			m.setAgreement(hashes)
		}
	}
}
