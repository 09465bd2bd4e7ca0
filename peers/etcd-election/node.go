package main

import (
	"fmt"
	"time"

	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// requestTimeout bounds next-id below the harness's operation timeout
// (5 s by default): a request the node cannot finish is answered
// (unavailable or unknown-outcome) before the harness gives up on it.
const requestTimeout = 4 * time.Second

// node is the peer's part of shardtest/1, filled into the kit:
// membership with age (the election's queue), the id-generator singleton
// and events. No sharding, clock, filter, leave or down.
func (p *peer) node() *kit.Node {
	return &kit.Node{
		Implementation:  Implementation,
		Revision:        4, // shardtest/1 revision 4 (docs/protocol.md)
		Name:            p.set.Name,
		Incarnation:     p.incarnation,
		View:            p.members.view,
		Age:             true,
		SelfStatus:      p.members.status,
		NextID:          p.nextID,
		Singletons:      []string{protocol.IDGenerator},
		SingletonStatus: p.singletonStatus,
		Events:          p.events,
		Detail:          p.detail,
		RequestTimeout:  requestTimeout,
		Log:             p.log,
	}
}

// singletonStatus says whether the id generator runs here, and which
// instance.
func (p *peer) singletonStatus() []protocol.SingletonStatus {
	st := protocol.SingletonStatus{Name: protocol.IDGenerator}
	if p.single != nil {
		if inst, ok := p.single.running(); ok {
			st.Running, st.Instance = true, inst.String()
		}
	}
	return []protocol.SingletonStatus{st}
}

// statusDetail is the peer's own part of its status.
type statusDetail struct {
	Writes       string   `json:"writes"`
	SessionTTL   int      `json:"session_ttl_s"`
	Lease        string   `json:"lease,omitempty"`
	MemberID     string   `json:"etcd_member_id,omitempty"`
	RaftLeader   string   `json:"etcd_raft_leader,omitempty"`
	PeerURL      string   `json:"peer_url"`
	ClientURL    string   `json:"client_url"`
	Forward      string   `json:"forward"`
	Election     []string `json:"election_queue"`
	Bootstrapped bool     `json:"bootstrap"`
}

func (p *peer) detail() any {
	d := statusDetail{Writes: p.set.Writes, SessionTTL: p.set.SessionTTL, PeerURL: p.set.PeerURL().String(),
		ClientURL: p.set.ClientURL().String(), Forward: p.set.ForwardAddr(), Election: p.members.queueDetail(), Bootstrapped: p.set.Bootstrap}
	if l := p.lease.Load(); l != 0 {
		d.Lease = fmt.Sprintf("%x", l)
	}
	if e := p.etcd; e != nil {
		d.MemberID, d.RaftLeader = e.Server.MemberID().String(), e.Server.Leader().String()
	}
	return d
}
