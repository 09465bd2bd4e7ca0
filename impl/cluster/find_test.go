package cluster

import (
	"reflect"
	"testing"
)

// TestFindIsSnapshotFind: Find answers what Snapshot().Find answers, for
// every member the state holds and for one it does not, joined or not; and
// SelfStatus what Snapshot().Self.Status says.
func TestFindIsSnapshotFind(t *testing.T) {
	self := Member{Name: "n1", Incarnation: "a", UpNumber: 1}
	others := []*record{
		{Member: Member{Name: "n2", Incarnation: "b", UpNumber: 2}, Status: StatusUp},
		{Member: Member{Name: "n3", Incarnation: "c", UpNumber: 3}, Status: StatusLeaving},
		{Member: Member{Name: "n4", Incarnation: "d", UpNumber: 4}, Status: StatusDown},
		{Member: Member{Name: "n5", Incarnation: "e", UpNumber: 5}, Status: StatusRemoved},
	}
	for _, joined := range []bool{false, true} {
		c := newCluster(Config{}, self)
		c.m.joined = joined
		c.m.reachable = map[string]bool{"n2@b": true, "n4@d": true}
		c.m.state.merge(&record{Member: self, Status: StatusUp})
		for _, r := range others {
			c.m.state.merge(r)
		}
		if got, want := c.SelfStatus(), c.Snapshot().Self.Status; got != want {
			t.Errorf("joined %v: SelfStatus %s, Snapshot().Self.Status %s", joined, got, want)
		}
		for _, uid := range []string{"n1@a", "n2@b", "n3@c", "n4@d", "n5@e", "n6@f", "n1@old"} {
			want, wantOK := c.Snapshot().Find(uid)
			got, ok := c.Find(uid)
			if ok != wantOK || !reflect.DeepEqual(got, want) {
				t.Errorf("joined %v, %s: Find %+v %v, Snapshot().Find %+v %v", joined, uid, got, ok, want, wantOK)
			}
		}
	}
}
