package cluster

import (
	"fmt"
	"testing"
	"time"
)

// TestFreshnessAt: fresh before the first tick; not fresh once the last
// tick is more than a failure timeout old (frozen now); after a thaw, not
// fresh until a failure timeout has passed since it.
func TestFreshnessAt(t *testing.T) {
	const ft = 2 * time.Second
	s := time.Second
	for _, tc := range []struct {
		name string
		f    Freshness
		now  time.Duration
		want bool
	}{
		{"never ticked", Freshness{}, 100 * s, true},
		{"ticked just now", Freshness{Ticked: true, LastTick: 10 * s}, 10 * s, true},
		{"last tick exactly a timeout ago", Freshness{Ticked: true, LastTick: 10 * s}, 12 * s, true},
		{"last tick more than a timeout ago", Freshness{Ticked: true, LastTick: 10 * s}, 12*s + 1, false},
		{"just thawed", Freshness{Ticked: true, LastTick: 20 * s, Thawed: true, ThawedAt: 20 * s}, 20 * s, false},
		{"thawed less than a timeout ago", Freshness{Ticked: true, LastTick: 21 * s, Thawed: true, ThawedAt: 20 * s}, 21*s + 999*time.Millisecond, false},
		{"thawed a timeout ago", Freshness{Ticked: true, LastTick: 22 * s, Thawed: true, ThawedAt: 20 * s}, 22 * s, true},
		{"thawed long ago, frozen again now", Freshness{Ticked: true, LastTick: 30 * s, Thawed: true, ThawedAt: 20 * s}, 40 * s, false},
	} {
		if got := tc.f.At(tc.now, ft); got != tc.want {
			t.Errorf("%s: At(%v) = %v, want %v", tc.name, tc.now, got, tc.want)
		}
	}
}

// TestWireFormat: the datagrams and pushes are byte for byte what the
// members of a running cluster (older builds included) read: a type byte,
// then the heartbeat or the records as JSON with their short keys.
func TestWireFormat(t *testing.T) {
	n1 := Member{Name: "n1", Incarnation: "a", UpNumber: 1, GossipAddr: "n1:7946", HTTPAddr: "n1:8080"}
	n2 := Member{Name: "n2", Incarnation: "a", UpNumber: 2, GossipAddr: "n2:7946"}
	n3 := Member{Name: "n3", Incarnation: "a", UpNumber: 3, GossipAddr: "n3:7946"}
	m := NewMembershipState(MembershipConfig{FailureTimeout: 2 * time.Second, DownNoticeFor: 15 * time.Second, MaxGone: 10,
		Downing: DowningConfig{Strategy: KeepMajority, StableAfter: 5 * time.Second}}, n1)
	m.joined = true
	for _, mb := range []Member{n1, n2, n3} {
		m.state.merge(&record{Member: mb, Status: StatusUp})
	}
	m.state.merge(&record{Member: n3, Status: StatusDown, DownReason: "test"})
	m.downSeen[n3.UID()] = 0
	m.lastHeard[n2.UID()] = 0
	effs := m.Step(3*time.Second, InTick{}) // n2 silent for 3s: unreachable
	d := m.state.digest()
	mb := `{"name":"%s","incarnation":"a","up_number":%d,"gossip_addr":"%s:7946","http_addr":"%s"}`
	want := []string{
		fmt.Sprintf(`h{"f":"n1@a","a":"n1:7946","d":%d,"ov":1,"u":["n2@a"]}`, d),
		fmt.Sprintf(`h{"f":"n1@a","a":"n1:7946","d":%d,"ov":1,"u":["n2@a"],"down":{"m":`+mb+`,"s":"down","dr":"test"}}`, d, "n3", 3, "n3", ""),
		`s[{"m":` + fmt.Sprintf(mb, "n1", 1, "n1", "n1:8080") + `,"s":"up","ov":1,"u":["n2@a"]},` +
			`{"m":` + fmt.Sprintf(mb, "n2", 2, "n2", "") + `,"s":"up"},` +
			`{"m":` + fmt.Sprintf(mb, "n3", 3, "n3", "") + `,"s":"down","dr":"test"}]`,
	}
	var got []string
	for _, e := range effs {
		switch e := e.(type) {
		case SendDatagram:
			got = append(got, string(e.Msg))
		case PushState:
			got = append(got, string(e.Msg))
		}
	}
	if len(got) != len(want) {
		t.Fatalf("got %d messages, want %d:\n%q", len(got), len(want), got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("message %d:\ngot  %s\nwant %s", i, got[i], want[i])
		}
	}
}
