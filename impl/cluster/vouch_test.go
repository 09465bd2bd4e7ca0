package cluster

import (
	"encoding/json"
	"testing"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/protocol/kit"
)

// TestOnlyMembersVouch: a node shares its membership state (with a joiner,
// through its transport's push/pull) and takes newcomers in only while it is a
// member in good standing. A node not yet joined, or downed and not yet
// restarted, shares nothing: a joiner that learnt the members from it would
// count as joined to a cluster it never reached (the downed side of a
// split, restarted and cut off, became an island that way).
func TestOnlyMembersVouch(t *testing.T) {
	other := Member{Name: "n2", Incarnation: "b", UpNumber: 2, GossipAddr: "10.0.0.2:7946"}
	newcomer := Member{Name: "n3", Incarnation: "c", UpNumber: 3, GossipAddr: "10.0.0.3:7946"}
	meta, _ := json.Marshal(newcomer)
	for _, tc := range []struct {
		name   string
		joined bool
		self   Status
		vouch  bool
	}{
		{"not joined", false, "", false},
		{"up", true, StatusUp, true},
		{"leaving", true, StatusLeaving, true},
		{"downed", true, StatusDown, false},
		{"removed", true, StatusRemoved, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCluster(Config{Events: kit.NewEventLog(clock.Real().Now, 100), Clock: clock.Real()},
				Member{Name: "n1", Incarnation: "a", UpNumber: 1})
			c.m.joined = tc.joined
			c.m.state.merge(&record{Member: other, Status: StatusUp})
			if tc.self != "" {
				c.m.state.merge(&record{Member: c.m.self, Status: tc.self})
			}
			var recs []*record
			if err := json.Unmarshal((*receiver)(c).LocalState(true), &recs); err != nil {
				t.Fatal(err)
			}
			if shared := len(recs) > 0; shared != tc.vouch {
				t.Errorf("shares its state: %v, want %v (%d records)", shared, tc.vouch, len(recs))
			}
			(*receiver)(c).Met(meta)
			if _, took := c.m.state[newcomer.UID()]; took != tc.vouch {
				t.Errorf("took the newcomer in: %v, want %v", took, tc.vouch)
			}
		})
	}
}
