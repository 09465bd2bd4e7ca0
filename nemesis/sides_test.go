package nemesis

import (
	"encoding/json"
	"testing"
)

func TestSides(t *testing.T) {
	raw := func(v any) json.RawMessage { b, _ := json.Marshal(v); return b }
	cases := []struct {
		fault   string
		targets json.RawMessage
		want    map[string]string
	}{
		{"kill:one", raw(Targets{Targets: []string{"n2"}, How: "one"}), map[string]string{"n2": SideTarget, "n1": SideOther}},
		{"clock:bump", raw(ClockTargets{Targets: []string{"n1", "n3"}}), map[string]string{"n1": SideTarget, "n2": SideOther}},
		{"kill:journal", raw(Targets{Targets: []string{"journal"}, How: "journal"}), map[string]string{"n1": SideOther}},
		{"partition:isolate-oldest", raw(cutComponents("isolate-oldest", [][]string{{"n1"}, {"n2", "n3"}})),
			map[string]string{"n1": SideMinority, "n2": SideMajority, "n4": SideOther}},
		{"partition:halves", raw(cutComponents("halves", [][]string{{"n1", "n2"}, {"n3", "n4"}})),
			map[string]string{"n1": SideHalf, "n4": SideHalf}},
		{"partition:bridge", raw(Cut{Shape: "bridge", Components: [][]string{{"n1", "n2"}, {"n3"}, {"n4", "n5"}}, Drops: map[string]Rules{"n1": {}}}),
			map[string]string{"n3": SideBridge, "n1": SideMinority}},
		{"partition:asymmetric", raw(Cut{Shape: "asymmetric", Drops: map[string]Rules{"n1": {DropOut: []string{"n2"}}, "n2": {DropIn: []string{"n1"}}}}),
			map[string]string{"n1": SideSendsLost, "n2": SideReceivesLost, "n3": SideOther}},
		{"partition:journal-cut", raw(Cut{Shape: "journal-cut", Drops: map[string]Rules{"n2": {DropIn: []string{"journal"}}}}),
			map[string]string{"n2": SideJournalCut, "n1": SideOther}},
		{"partition:majorities-ring", raw(Cut{Shape: "majorities-ring", Drops: map[string]Rules{}}), map[string]string{"n1": SideRing}},
		{"loss:random", raw(Cut{Shape: "loss 5%", Drops: map[string]Rules{"n1": {LossPercent: 5, LossPeers: []string{"n2"}}}}),
			map[string]string{"n1": SideLossy, "n9": SideOther}},
		{"partition:halves", json.RawMessage(`"garbage"`), map[string]string{"n1": SideUnknown}},
		{"kill:one", nil, map[string]string{"n1": SideUnknown}},
	}
	for _, c := range cases {
		side := Sides(c.fault, c.targets)
		for node, want := range c.want {
			if got := side(node); got != want {
				t.Errorf("%s %s: %s is on side %q, want %q", c.fault, c.targets, node, got, want)
			}
		}
	}
}
