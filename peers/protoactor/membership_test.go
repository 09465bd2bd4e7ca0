package main

import (
	"log/slog"
	"testing"

	"github.com/asynkron/protoactor-go/cluster"

	"github.com/shardtest/shardtest/protocol"
)

func testMembership(agree bool) (*membership, *[]protocol.Event) {
	var events []protocol.Event
	self := protocol.Member{UID: "n1@A", Name: "n1", Incarnation: "A", GossipAddr: "10.0.0.1:7946"}
	m := newMembership(self, agree, slog.New(slog.DiscardHandler), func(e protocol.Event) { events = append(events, e) })
	return m, &events
}

func topo(hash uint64, members, joined, left []*cluster.Member) *cluster.ClusterTopology {
	return &cluster.ClusterTopology{TopologyHash: hash, Members: members, Joined: joined, Left: left}
}

var (
	memberA = &cluster.Member{Id: "A", Host: "10.0.0.1", Port: 7946}
	memberB = &cluster.Member{Id: "B", Host: "10.0.0.2", Port: 7946}
)

func TestUpOnlyOnceTheTopologyAgrees(t *testing.T) {
	m, events := testMembership(true)
	if st := m.status(); st != protocol.StatusJoining {
		t.Fatalf("before anything: %s", st)
	}
	both := []*cluster.Member{memberA, memberB}
	m.onTopology(topo(7, both, both, nil), nil)
	m.setStarted()
	if st := m.status(); st != protocol.StatusJoining {
		t.Fatalf("seeing itself, before the others agree: %s", st)
	}
	// B still gossips an older topology: not up yet.
	m.setAgreement(map[string]uint64{"A": 7, "B": 3})
	if st := m.status(); st != protocol.StatusJoining {
		t.Fatalf("B disagrees: %s", st)
	}
	m.setAgreement(map[string]uint64{"A": 7, "B": 7})
	if st := m.status(); st != protocol.StatusUp {
		t.Fatalf("all agree: %s", st)
	}
	// B's name arrives by gossip: its member-up is logged then.
	m.setNames(map[string]string{"B": "n2"})
	v := m.view()
	if len(v.Members) != 2 || v.Members[1].UID != "n2@B" || !v.Members[1].Reachable || v.Members[1].Status != protocol.StatusUp {
		t.Fatalf("view %+v", v.Members)
	}
	// B leaves the topology: it is gone (down), and the member-downed
	// event names it.
	m.onTopology(topo(8, []*cluster.Member{memberA}, nil, []*cluster.Member{memberB}), []string{"B"})
	v = m.view()
	if len(v.Members) != 1 || len(v.Gone) != 1 || v.Gone[0].UID != "n2@B" || v.Gone[0].Status != protocol.StatusDown {
		t.Fatalf("after B left: members %+v gone %+v", v.Members, v.Gone)
	}
	var types []string
	for _, e := range *events {
		types = append(types, e.Type+" "+e.Member)
	}
	want := []string{"member-up n1@A", "member-up n2@B", "member-downed n2@B"}
	if len(types) != len(want) {
		t.Fatalf("events %v, want %v", types, want)
	}
	for i := range want {
		if types[i] != want[i] {
			t.Fatalf("events %v, want %v", types, want)
		}
	}
	// This member drops out of its own topology: down, for good.
	m.onTopology(topo(9, nil, nil, []*cluster.Member{memberA}), []string{"A", "B"})
	if st := m.status(); st != protocol.StatusDown {
		t.Fatalf("out of its own topology: %s", st)
	}
}

func TestUpWhenSelfListed(t *testing.T) {
	m, _ := testMembership(false)
	m.onTopology(topo(7, []*cluster.Member{memberA, memberB}, []*cluster.Member{memberA, memberB}, nil), nil)
	if st := m.status(); st != protocol.StatusJoining {
		t.Fatalf("before the member started: %s", st)
	}
	m.setStarted()
	if st := m.status(); st != protocol.StatusUp {
		t.Fatalf("started and listed: %s", st)
	}
}
