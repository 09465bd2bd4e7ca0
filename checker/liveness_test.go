package checker

import (
	"context"
	"slices"
	"testing"

	"github.com/shardtest/shardtest/history"
)

func TestLiveness(t *testing.T) {
	const R = "register/r1"
	const s = int64(1e9)
	nem := func(b *hb, tm int64, f, action string) *hb {
		return b.add(history.Op{Time: tm, Kind: history.Nemesis, Process: -1, F: f,
			Value: []byte(`{"action":"` + action + `","began":` + itoa(int(tm-1)) + `}`)})
	}
	// on names the fault's target node (process 0 talks to n1, 1 to n2).
	on := func(b *hb, tm int64, f, action, node string) *hb {
		return b.add(history.Op{Time: tm, Kind: history.Nemesis, Process: -1, F: f,
			Value: []byte(`{"action":"` + action + `","began":` + itoa(int(tm-1)) + `,"targets":{"targets":["` + node + `"],"how":"one"}}`)})
	}
	tests := []struct {
		name string
		h    func() *hb
		cut  bool
		want Verdict
	}{
		{"empty", func() *hb { return &hb{} }, false, Unknown},
		{"healthy, answered", func() *hb { return (&hb{}).inv(1, 0, "read", R, "").ok(2, 0, `{"value":null}`) }, false, Valid},
		{"a definite failure is an answer", func() *hb { return (&hb{}).inv(1, 0, "read", R, "").fail(2, 0) }, false, Valid},
		{"healthy, timed out", func() *hb { return (&hb{}).inv(1, 0, "read", R, "").info(5*s, 0) }, false, Invalid},
		{"timed out during a partition", func() *hb {
			b := nem(&hb{}, 1*s, "partition:halves", "inject")
			b = b.inv(2*s, 0, "read", R, "").info(7*s, 0)
			return nem(b, 8*s, "partition:halves", "heal").inv(50*s, 0, "read", R, "").ok(51*s, 0, `{}`)
		}, false, Valid},
		{"timed out within the grace after a heal", func() *hb {
			b := nem(nem(&hb{}, 1*s, "kill:one", "inject"), 2*s, "kill:one", "heal")
			return b.inv(10*s, 0, "read", R, "").info(15*s, 0).inv(50*s, 0, "read", R, "").ok(51*s, 0, `{}`)
		}, false, Valid},
		{"the final phase is never excused", func() *hb {
			b := nem(nem(&hb{}, 1*s, "kill:one", "inject"), 2*s, "kill:one", "heal")
			b = b.add(history.Op{Time: 5 * s, Kind: history.Phase, Process: -1, F: "final"})
			return b.inv(6*s, 9, "read", R, "").info(11*s, 9)
		}, false, Invalid},
		{"a failed inject (it did nothing) excuses nothing", func() *hb {
			b := (&hb{}).add(history.Op{Time: 1 * s, Kind: history.Nemesis, Process: -1, F: "pause:coordinator", Error: "no node says it runs the coordinator",
				Value: []byte(`{"action":"inject","began":` + itoa(int(s-1)) + `,"failed":true}`)})
			return b.inv(2*s, 0, "read", R, "").info(7*s, 0)
		}, false, Invalid},
		{"everything excused: nothing to judge", func() *hb {
			return nem(&hb{}, 1*s, "pause:one", "inject").inv(2*s, 0, "read", R, "").info(7*s, 0)
		}, false, Unknown},
		{"timed out long after the heal", func() *hb {
			b := nem(nem(&hb{}, 1*s, "kill:one", "inject"), 2*s, "kill:one", "heal")
			return b.inv(60*s, 0, "read", R, "").info(65*s, 0)
		}, false, Invalid},
		{"a graceful join excuses nothing", func() *hb {
			b := nem(&hb{}, 1*s, "member:join", "inject")
			b = b.inv(2*s, 0, "read", R, "").info(7*s, 0)
			return nem(b, 8*s, "member:join", "heal")
		}, false, Invalid},
		{"a leave excuses operations sent to the node that leaves", func() *hb {
			b := on(&hb{}, 1*s, "member:leave-one", "inject", "n1")
			b = b.inv(2*s, 0, "read", R, "").info(3*s, 0)
			return on(b, 8*s, "member:leave-one", "heal", "n1").inv(9*s, 1, "read", R, "").ok(10*s, 1, `{}`)
		}, false, Valid},
		{"a leave excuses nothing sent to other nodes", func() *hb {
			b := on(&hb{}, 1*s, "member:leave-one", "inject", "n1")
			b = b.inv(2*s, 1, "read", R, "").info(3*s, 1)
			return on(b, 8*s, "member:leave-one", "heal", "n1")
		}, false, Invalid},
		{"a leave excuses nothing on its node after the restart", func() *hb {
			b := on(on(&hb{}, 1*s, "member:leave-one", "inject", "n1"), 8*s, "member:leave-one", "heal", "n1")
			return b.inv(9*s, 0, "read", R, "").info(10*s, 0)
		}, false, Invalid},
		{"a joined node's operations are judged until it leaves", func() *hb {
			b := on(&hb{}, 1*s, "member:join", "inject", "n1")
			b = b.inv(2*s, 0, "read", R, "").info(3*s, 0)
			return on(b, 8*s, "member:join", "heal", "n1")
		}, false, Invalid},
		{"a joined node's leave excuses its operations", func() *hb {
			b := on(&hb{}, 1*s, "member:join", "inject", "n1").inv(2*s, 1, "read", R, "").ok(3*s, 1, `{}`)
			b = on(b.inv(7*s, 0, "read", R, ""), 9*s, "member:join", "heal", "n1")
			return b.info(9*s+s/2, 0)
		}, false, Valid},
		{"an unhealed fault excuses until the end", func() *hb {
			b := (&hb{}).inv(0, 1, "read", R, "").ok(1, 1, `{}`)
			return nem(b, 1*s, "pause:one", "inject").inv(2*s, 0, "read", R, "").info(7*s, 0)
		}, false, Valid},
		{"tells are not judged", func() *hb { return (&hb{}).inv(1, 0, "tell", "log/l1", ap("w0", 1)).info(5*s, 0) }, false, Unknown},
		{"never completed on a healthy cluster, in a whole history", func() *hb {
			return (&hb{}).inv(1, 0, "read", R, "").ok(2, 0, `{}`).inv(3, 1, "read", R, "").ended()
		}, false, Invalid},
		{"cut off: an open op was not waited for", func() *hb {
			return (&hb{}).inv(1, 0, "read", R, "").ok(2, 0, `{}`).inv(3, 1, "read", R, "")
		}, true, Valid},
		// A harness killed at a line boundary leaves no cut-off line, but
		// no end either: its open ops were not waited for (they made the
		// liveness checker cry wolf).
		{"stopped before its end: an open op was not waited for", func() *hb {
			return (&hb{}).inv(1, 0, "read", R, "").ok(2, 0, `{}`).inv(3, 1, "read", R, "")
		}, false, Valid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.h().file()
			f.Truncated = tt.cut
			r := Liveness{}.Check(context.Background(), f, Inputs{})
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %v", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
		})
	}
}

// TestLivenessNamesTheFaultsItLeansOn: each window that excused operations
// names the faults that opened it (overlapping ones merged, each once with
// its count), and a node's leave names the node and its fault.
func TestLivenessNamesTheFaultsItLeansOn(t *testing.T) {
	const R = "register/r1"
	const s = int64(1e9)
	nem := func(b *hb, tm int64, f, action, targets string) *hb {
		return b.add(history.Op{Time: tm, Kind: history.Nemesis, Process: -1, F: f,
			Value: []byte(`{"action":"` + action + `","began":` + itoa(int(tm-1)) + targets + `}`)})
	}
	b := nem(&hb{}, 1*s, "kill:one", "inject", "")
	b = nem(b, 2*s, "kill:one", "heal", "")
	b = nem(b, 3*s, "partition:halves", "inject", "")
	b = nem(b, 4*s, "partition:halves", "heal", "")
	b = nem(b, 5*s, "kill:one", "inject", "")
	b = nem(b, 6*s, "kill:one", "heal", "")
	b = b.inv(7*s, 1, "read", R, "").info(12*s, 1)
	b = b.inv(8*s, 1, "read", R, "").info(13*s, 1)
	b = nem(b, 100*s, "member:leave-one", "inject", `,"targets":{"targets":["n1"],"how":"one"}`)
	b = b.inv(101*s, 0, "read", R, "").info(102*s, 0)
	b = nem(b, 110*s, "member:leave-one", "heal", `,"targets":{"targets":["n1"],"how":"one"}`)
	b = b.inv(111*s, 1, "read", R, "").ok(112*s, 1, `{}`)
	r := Liveness{}.Check(context.Background(), b.file(), Inputs{})
	if r.Verdict != Valid {
		t.Fatalf("verdict %s: %s %v", r.Verdict, r.Summary, r.Evidence)
	}
	want := []string{
		"2 operations excused from 1.000 s to 36.000 s (grace included) by kill:one ×2, partition:halves",
		"1 operations sent to n1 excused from 100.000 s to 110.000 s while it left (member:leave-one)",
	}
	for _, w := range want {
		if !slices.Contains(r.Evidence, w) {
			t.Errorf("evidence lacks %q: %q", w, r.Evidence)
		}
	}
}
