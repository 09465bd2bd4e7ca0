package cluster

import (
	"slices"
	"testing"
	"time"
)

// mk builds a view: members n1..nN with up-numbers 1..N (n1 oldest); the
// ones listed in unreach are unreachable from self.
func mk(self string, n int, unreach []string, obs map[string][]string) view {
	v := view{self: self, observations: obs}
	for i := 1; i <= n; i++ {
		name := "n" + string(rune('0'+i))
		m := Member{Name: name, Incarnation: "i", UpNumber: int64(i)}
		v.members = append(v.members, MemberState{Member: m, Status: StatusUp, Reachable: !slices.Contains(unreach, m.UID())})
	}
	return v
}

func uids(names ...string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = n + "@i"
	}
	return out
}

func TestDecide(t *testing.T) {
	majority := DowningConfig{Strategy: KeepMajority, StableAfter: time.Second}
	quorum := DowningConfig{Strategy: StaticQuorum, QuorumSize: 3, StableAfter: time.Second}
	oldest := DowningConfig{Strategy: KeepOldest, DownIfAlone: true, StableAfter: time.Second}
	tests := []struct {
		name string
		cfg  DowningConfig
		v    view
		want []string
	}{
		{"all reachable", majority, mk("n1@i", 3, nil, nil), nil},
		{"majority downs the minority", majority, mk("n1@i", 5, uids("n4", "n5"), nil), uids("n4", "n5")},
		{"minority downs itself", majority, mk("n4@i", 5, uids("n1", "n2", "n3"), nil), uids("n4", "n5")},
		{"tie: side with oldest survives", majority, mk("n1@i", 4, uids("n3", "n4"), nil), uids("n3", "n4")},
		{"tie: side without oldest goes", majority, mk("n3@i", 4, uids("n1", "n2"), nil), uids("n3", "n4")},
		{"lone crash in three", majority, mk("n2@i", 3, uids("n1"), nil), uids("n1")},
		{"quorum reached", quorum, mk("n1@i", 5, uids("n4", "n5"), nil), uids("n4", "n5")},
		{"quorum missed", quorum, mk("n1@i", 5, uids("n3", "n4", "n5"), nil), uids("n1", "n2")},
		{"keep-oldest with oldest", oldest, mk("n1@i", 5, uids("n3", "n4", "n5"), nil), uids("n3", "n4", "n5")},
		{"keep-oldest without oldest", oldest, mk("n3@i", 5, uids("n1", "n2"), nil), uids("n3", "n4", "n5")},
		{"keep-oldest, oldest alone downs itself", oldest, mk("n1@i", 5, uids("n2", "n3", "n4", "n5"), nil), uids("n1")},
		{"keep-oldest, oldest alone there", oldest, mk("n2@i", 5, uids("n1"), nil), uids("n1")},
		{
			"indirectly connected are downed",
			majority,
			mk("n1@i", 5, nil, map[string][]string{"n2@i": uids("n3")}),
			uids("n2", "n3"),
		},
		{
			// n2 hears nothing from n3 while n3 hears n2 (n3's packets are
			// lost): n3 will be downed by n2's side and downs itself; n2,
			// healthy, is left to its own side's decision.
			"self indirectly connected downs itself alone",
			majority,
			mk("n3@i", 5, nil, map[string][]string{"n2@i": uids("n3")}),
			uids("n3"),
		},
		{
			// A one-way partition of the oldest: it hears all four, none
			// hears it. It is the leader of its view and must not down the
			// healthy four.
			"the oldest whose packets are lost downs only itself",
			majority,
			mk("n1@i", 5, nil, map[string][]string{"n2@i": uids("n1"), "n3@i": uids("n1"), "n4@i": uids("n1"), "n5@i": uids("n1")}),
			uids("n1"),
		},
		{
			// The packets of a majority (n1-n3) to a minority (n4, n5) are
			// lost: the minority, hearing nothing, downs itself; the
			// majority, unheard by it, waits instead of downing itself.
			"an unheard majority waits for the minority to go",
			majority,
			mk("n1@i", 5, nil, map[string][]string{"n4@i": uids("n1", "n2", "n3"), "n5@i": uids("n1", "n2", "n3")}),
			nil,
		},
		{
			"an unheard minority downs itself",
			majority,
			mk("n4@i", 5, nil, map[string][]string{"n1@i": uids("n4", "n5"), "n2@i": uids("n4", "n5"), "n3@i": uids("n4", "n5")}),
			uids("n4"),
		},
		{
			// Of two members, the one that hears the other but is not
			// heard: the other is alone and younger (a tie, the oldest's
			// side wins) and downs itself.
			"an unheard oldest of two waits",
			majority,
			mk("n1@i", 2, nil, map[string][]string{"n2@i": uids("n1")}),
			nil,
		},
		{
			"observations from unreachable observers are stale",
			majority,
			mk("n1@i", 5, uids("n5"), map[string][]string{"n5@i": uids("n1", "n2")}),
			uids("n5"),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := decide(tt.cfg, tt.v).down
			if !slices.Equal(got, tt.want) {
				t.Fatalf("down = %v, want %v", got, tt.want)
			}
		})
	}
}

// Both sides of a clean partition, deciding independently, must agree on
// which side survives: exactly one side lives.
func TestDecideSidesAgree(t *testing.T) {
	cfgs := []DowningConfig{
		{Strategy: KeepMajority, StableAfter: time.Second},
		{Strategy: KeepOldest, StableAfter: time.Second},
		{Strategy: KeepOldest, DownIfAlone: true, StableAfter: time.Second},
		{Strategy: StaticQuorum, QuorumSize: 3, StableAfter: time.Second},
	}
	for n := 2; n <= 7; n++ {
		for mask := 1; mask < (1<<n)-1; mask++ {
			var a, b []string
			for i := 0; i < n; i++ {
				name := "n" + string(rune('1'+i))
				if mask&(1<<i) != 0 {
					a = append(a, name)
				} else {
					b = append(b, name)
				}
			}
			for _, cfg := range cfgs {
				downA := decide(cfg, mk(a[0]+"@i", n, uids(b...), nil)).down
				downB := decide(cfg, mk(b[0]+"@i", n, uids(a...), nil)).down
				// A side lives unless it downs itself.
				aLives := !slices.Contains(downA, a[0]+"@i")
				bLives := !slices.Contains(downB, b[0]+"@i")
				if aLives && bLives {
					t.Fatalf("%s n=%d split %v|%v: both sides survive", cfg.Strategy, n, a, b)
				}
				if cfg.Strategy == KeepMajority && !aLives && !bLives {
					t.Fatalf("%s n=%d split %v|%v: neither side survives", cfg.Strategy, n, a, b)
				}
			}
		}
	}
}

func TestDowningConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  DowningConfig
		ok   bool
	}{
		{"keep-majority", DowningConfig{Strategy: KeepMajority, StableAfter: time.Second}, true},
		{"no stable-after", DowningConfig{Strategy: KeepMajority}, false},
		{"quorum zero", DowningConfig{Strategy: StaticQuorum, StableAfter: time.Second}, false},
		{"auto-down refused", DowningConfig{Strategy: AutoDown, AutoDownAfter: time.Second}, false},
		{"auto-down allowed", DowningConfig{Strategy: AutoDown, AutoDownAfter: time.Second, AllowUnsafeAutoDown: true}, true},
		{"unknown", DowningConfig{Strategy: "lease", StableAfter: time.Second}, false},
	}
	for _, tt := range tests {
		if err := tt.cfg.Validate(); (err == nil) != tt.ok {
			t.Errorf("%s: Validate() = %v, want ok=%v", tt.name, err, tt.ok)
		}
	}
}

func TestGossipMerge(t *testing.T) {
	m := Member{Name: "n1", Incarnation: "a", UpNumber: 1}
	g := gossip{}
	if !g.merge(&record{Member: m, Status: StatusUp}) {
		t.Fatal("first merge not a change")
	}
	if g.merge(&record{Member: m, Status: StatusUp}) {
		t.Fatal("same record changed state")
	}
	if !g.merge(&record{Member: m, Status: StatusLeaving}) || g[m.UID()].Status != StatusLeaving {
		t.Fatal("leaving did not win over up")
	}
	if g.merge(&record{Member: m, Status: StatusUp}) {
		t.Fatal("status went backwards")
	}
	if !g.merge(&record{Member: m, Status: StatusDown, DownReason: "x"}) || g[m.UID()].Status != StatusDown {
		t.Fatal("down did not win")
	}
	if g.merge(&record{Member: m, Status: StatusRemoved}) {
		t.Fatal("removed overrode down")
	}
	g.merge(&record{Member: m, ObsVersion: 2, Unreachable: []string{"x"}, Status: StatusDown})
	g.merge(&record{Member: m, ObsVersion: 1, Unreachable: []string{"y"}, Status: StatusDown})
	if got := g[m.UID()].Unreachable; !slices.Equal(got, []string{"x"}) {
		t.Fatalf("older observation won: %v", got)
	}
	if g.merge(&record{Member: Member{Name: "", Incarnation: "b"}, Status: StatusUp}) {
		t.Fatal("merged a nameless record")
	}
}

func TestLeaderIsOldestReachable(t *testing.T) {
	tests := []struct {
		self    string
		unreach []string
		want    string
	}{
		{"n3@i", nil, "n1@i"},
		{"n3@i", uids("n1"), "n2@i"},
		{"n3@i", uids("n1", "n2"), "n3@i"},
		{"n1@i", uids("n2", "n3"), "n1@i"},
	}
	for _, tt := range tests {
		if got := mk(tt.self, 4, tt.unreach, nil).leader(); got != tt.want {
			t.Errorf("self %s, unreachable %v: leader %s, want %s", tt.self, tt.unreach, got, tt.want)
		}
	}
}

// With an indirectly connected pair and a clean partition at once, the
// strategy judges the clean partition with the pair on this side, and the
// pair is downed on top.
func TestDecideIndirectWithPartition(t *testing.T) {
	cfg := DowningConfig{Strategy: KeepMajority, StableAfter: time.Second}
	v := mk("n1@i", 5, uids("n5"), map[string][]string{"n2@i": uids("n3")})
	if got, want := decide(cfg, v).down, uids("n2", "n3", "n5"); !slices.Equal(got, want) {
		t.Fatalf("down = %v, want %v", got, want)
	}
}
