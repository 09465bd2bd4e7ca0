package checker

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
)

// fault adds a nemesis entry, naming targets (none: no targets object,
// like a partition's heal). An inject began 100 ms before it took effect at
// tm; a heal at tm (TestFaultEndsWhenItsHealBegins covers the difference).
func (b *hb) fault(tm int64, f, action string, targets ...string) *hb {
	began := tm
	if action == "inject" {
		began = tm - sec/10
	}
	v := `{"action":"` + action + `","began":` + itoa(int(began))
	if len(targets) > 0 {
		v += `,"targets":{"targets":["` + strings.Join(targets, `","`) + `"],"how":"new"}`
	}
	return b.add(history.Op{Time: tm, Kind: history.Nemesis, Process: -1, F: f, Value: []byte(v + `}`)})
}

// failed marks the last entry as failed.
func (b *hb) failed() *hb {
	b.ops[len(b.ops)-1].Error = "add node: no room"
	return b
}

// started is a shard-started event node logged in [lo, hi].
func started(node string, shard string, lo, hi int64) history.NodeEvent {
	return history.NodeEvent{Node: node, Lo: lo, Hi: hi, Event: protocol.Event{Seq: 1, Incarnation: "abc", Type: "shard-started", EntityType: "register", Shard: shard}}
}

func TestShardsMoved(t *testing.T) {
	join := func() *hb {
		return (&hb{}).fault(5*sec, "member:join", "inject", "n4").fault(20*sec, "member:join", "heal", "n4")
	}
	n4up := history.NodeEvent{Node: "n4", Lo: 0, Hi: 5 * sec, Event: protocol.Event{Seq: 1, Incarnation: "abc", Type: "member-up", Member: "n4@abc"}}
	tests := []struct {
		name     string
		h        func() *hb
		min      int
		cut      bool
		noEvents bool
		// cutEvents ends events.jsonl with a cut-off line.
		cutEvents bool
		evs       []history.NodeEvent
		want      Verdict
		evidence  string
	}{
		{name: "empty history", h: func() *hb { return &hb{} }, evs: []history.NodeEvent{started("n4", "1", 6*sec, 7*sec)}, want: Unknown},
		{name: "no join", h: func() *hb {
			return (&hb{}).fault(1*sec, "partition:halves", "inject").fault(2*sec, "partition:halves", "heal")
		}, evs: []history.NodeEvent{started("n4", "1", 6*sec, 7*sec)}, want: Unknown},
		{name: "no events file", h: join, noEvents: true, want: Unknown},
		{name: "empty events file", h: join, want: Unknown},
		{name: "two shards moved", h: join, evs: []history.NodeEvent{
			n4up, started("n4", "1", 6*sec, 7*sec), started("n4", "2", 8*sec, 9*sec), started("n1", "3", 8*sec, 9*sec),
		}, want: Valid, evidence: "n4 joined at 5.0 s: 2 shards started on it before it left (want 2): [register/1, register/2]"},
		{name: "one shard moved", h: join, evs: []history.NodeEvent{
			n4up, started("n4", "3", 6*sec, 7*sec), started("n1", "4", 8*sec, 9*sec),
		}, want: Invalid, evidence: "n4 joined at 5.0 s: 1 shard started on it before it left (want 2): [register/3]"},
		{name: "a shard started twice counts once", h: join, evs: []history.NodeEvent{
			n4up, started("n4", "3", 6*sec, 7*sec), started("n4", "3", 10*sec, 11*sec),
		}, want: Invalid},
		{name: "Min 3", h: join, min: 3, evs: []history.NodeEvent{
			started("n4", "1", 6*sec, 7*sec), started("n4", "2", 8*sec, 9*sec),
		}, want: Invalid, evidence: "(want 3)"},
		{name: "member names the node", h: join, evs: []history.NodeEvent{
			n4up,
			func() history.NodeEvent { e := started("n1", "1", 6*sec, 7*sec); e.Member = "n4@abc"; return e }(),
			started("n4", "2", 8*sec, 9*sec),
		}, want: Valid},
		{name: "the first poll's events (lo 0) count", h: join, evs: []history.NodeEvent{
			started("n4", "1", 0, 5*sec), started("n4", "2", 0, 5*sec),
		}, want: Valid},
		{name: "shards started after the heal do not count", h: join, evs: []history.NodeEvent{
			n4up, started("n4", "1", 6*sec, 7*sec), started("n4", "2", 21*sec, 22*sec),
		}, want: Invalid},
		{name: "a shard starting across the heal counts", h: join, evs: []history.NodeEvent{
			n4up, started("n4", "1", 6*sec, 7*sec), started("n4", "2", 19*sec, 22*sec),
		}, want: Valid},
		{name: "an earlier join's shards count for it only", h: func() *hb {
			return join().fault(30*sec, "member:join", "inject", "n4").fault(40*sec, "member:join", "heal", "n4")
		}, evs: []history.NodeEvent{
			n4up, started("n4", "1", 6*sec, 7*sec), started("n4", "2", 8*sec, 9*sec),
			started("n4", "3", 0, 31*sec),
		}, want: Invalid, evidence: "n4 joined at 30.0 s: 1 shard started on it before it left (want 2): [register/3]"},
		{name: "overlapping joins pair with their own heals", h: func() *hb {
			return (&hb{}).fault(5*sec, "member:join", "inject", "n4").fault(6*sec, "member:join", "inject", "n5").
				fault(8*sec, "member:join", "heal", "n5").fault(20*sec, "member:join", "heal", "n4")
		}, evs: []history.NodeEvent{
			started("n4", "1", 6*sec, 7*sec), started("n4", "2", 12*sec, 13*sec),
			started("n5", "3", 6*sec, 7*sec), started("n5", "4", 6*sec, 7*sec),
		}, want: Valid},
		{name: "a failed inject is skipped", h: func() *hb {
			return join().fault(30*sec, "member:join", "inject", "n5").failed().fault(31*sec, "member:join", "heal", "n5")
		}, evs: []history.NodeEvent{
			n4up, started("n4", "1", 6*sec, 7*sec), started("n4", "2", 8*sec, 9*sec),
		}, want: Valid, evidence: "not judged, the inject failed"},
		{name: "only a failed inject", h: func() *hb {
			return (&hb{}).fault(30*sec, "member:join", "inject").failed().fault(31*sec, "member:join", "heal")
		}, evs: []history.NodeEvent{started("n4", "1", 6*sec, 7*sec)}, want: Unknown},
		{name: "nothing recorded from the joined node", h: join, evs: []history.NodeEvent{
			started("n1", "1", 6*sec, 7*sec),
		}, want: Unknown, evidence: "no events from it were recorded"},
		{name: "cut off before the heal: counted to the end", h: func() *hb {
			return (&hb{}).fault(5*sec, "member:join", "inject", "n4").inv(25*sec, 0, "read", "register/r1", "")
		}, cut: true, evs: []history.NodeEvent{
			started("n4", "1", 6*sec, 7*sec), started("n4", "2", 24*sec, 26*sec), started("n4", "3", 27*sec, 28*sec),
		}, want: Valid, evidence: "2 shards started on it by the end of the history"},
		{name: "cut-off events file", h: join, cutEvents: true, evs: []history.NodeEvent{
			n4up, started("n4", "1", 6*sec, 7*sec),
		}, want: Invalid, evidence: "cut-off line"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if !tt.noEvents {
				dir = writeEvents(t, tt.evs, tt.cutEvents)
			}
			f := tt.h().file()
			f.Truncated = tt.cut
			r := ShardsMoved{Min: tt.min}.Check(context.Background(), f, ReadInputs(dir))
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %q", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
			if tt.evidence != "" && !contains(r.Evidence, tt.evidence) {
				t.Fatalf("evidence lacks %q: %s %q", tt.evidence, r.Summary, r.Evidence)
			}
			if r.Checker != "shards-moved" || r.Summary == "" {
				t.Fatalf("result %+v", r)
			}
		})
	}
}

func TestServedDuringFault(t *testing.T) {
	const r1, r2, r3 = "register/r1", "register/r2", "register/r3"
	// The partition takes effect at 1 s and heals at 10 s: judged from 3 s.
	part := func() *hb { return (&hb{}).fault(1*sec, "partition:halves", "inject") }
	heal := func(b *hb) *hb { return b.fault(10*sec, "partition:halves", "heal") }
	// Process 0 talks to n1 (the downed side), 1 to n2, 2 to n3.
	tests := []struct {
		name     string
		h        func() *hb
		cut      bool
		want     Verdict
		evidence string
	}{
		{"empty history", func() *hb { return &hb{} }, false, Unknown, ""},
		{"no partition", func() *hb {
			b := (&hb{}).fault(1*sec, "member:join", "inject", "n4").inv(4*sec, 1, "read", r1, "").fail(5*sec, 1)
			return b.fault(10*sec, "member:join", "heal", "n4")
		}, false, Unknown, ""},
		{"every entity served", func() *hb {
			b := part().inv(4*sec, 0, "read", r1, "").fail(5*sec, 0).inv(4*sec, 1, "read", r1, "").ok(5*sec, 1, `{}`)
			b = b.inv(6*sec, 2, "read", r2, "").fail(7*sec, 2).inv(7*sec, 2, "read", r2, "").ok(8*sec, 2, `{}`)
			return heal(b)
		}, false, Valid, "2 of 2 entities served (served by n2, n3)"},
		{"an entity never served on the surviving side", func() *hb {
			b := part().inv(4*sec, 1, "read", r1, "").ok(5*sec, 1, `{}`)
			b = b.inv(6*sec, 2, "read", r2, "").fail(7*sec, 2).inv(7*sec, 1, "write", r2, `{"value":1}`).info(8*sec, 1)
			return heal(b)
		}, false, Invalid, "register/r2 never served: 2 attempts, none ok, sent to n2, n3"},
		{"an entity tried only on the downed side is not judged", func() *hb {
			b := part().inv(4*sec, 1, "read", r1, "").ok(5*sec, 1, `{}`)
			b = b.inv(6*sec, 0, "read", r3, "").fail(7*sec, 0)
			return heal(b)
		}, false, Valid, "1 entities tried only on nodes that served nothing"},
		{"nothing served anywhere", func() *hb {
			b := part().inv(4*sec, 0, "read", r1, "").fail(5*sec, 0).inv(4*sec, 1, "read", r2, "").info(9*sec, 1)
			return heal(b)
		}, false, Invalid, "no node served anything"},
		{"ops straddling the window edges are not attempts", func() *hb {
			// Invoked before the settle ended; in flight at the heal
			// (served after it); completed ok right at the heal.
			b := part().inv(2*sec, 1, "read", r2, "").fail(4*sec, 1)
			b = b.inv(9*sec, 2, "read", r3, "").inv(5*sec, 1, "read", r1, "").ok(10*sec, 1, `{}`)
			return heal(b).ok(11*sec, 2, `{}`)
		}, false, Valid, "1 of 1 entities served"},
		{"served only after the heal", func() *hb {
			b := part().inv(4*sec, 1, "read", r1, "").ok(5*sec, 1, `{}`).inv(4*sec, 2, "read", r1, "").ok(5*sec, 2, `{}`)
			b = b.inv(5*sec, 2, "read", r2, "").fail(6*sec, 2).inv(9*sec, 2, "read", r2, "")
			return heal(b).ok(11*sec, 2, `{}`)
		}, false, Invalid, "register/r2 never served: 1 attempts"},
		{"tells are not judged; a next-id tried only on the downed side is excused", func() *hb {
			b := part().inv(4*sec, 1, "read", r1, "").ok(5*sec, 1, `{}`)
			b = b.inv(4*sec, 2, "tell", "log/l1", ap("w0", 1)).fail(5*sec, 2).inv(6*sec, 2, "next-id", "", "").fail(7*sec, 2)
			return heal(b)
		}, false, Valid, ""},
		{"the id-generator served on the surviving side", func() *hb {
			b := part().inv(4*sec, 0, "next-id", "", "").fail(5*sec, 0).inv(4*sec, 1, "next-id", "", "").ok(5*sec, 1, `{"id":7}`)
			return heal(b)
		}, false, Valid, "1 of 1 entities served"},
		{"the id-generator never served on the surviving side", func() *hb {
			b := part().inv(4*sec, 1, "read", r1, "").ok(5*sec, 1, `{}`)
			b = b.inv(5*sec, 1, "next-id", "", "").fail(6*sec, 1).inv(7*sec, 1, "next-id", "", "").info(8*sec, 1)
			return heal(b)
		}, false, Invalid, "the id-generator never served: 2 attempts"},
		{"a window shorter than a second is not judged", func() *hb {
			b := part().inv(3*sec, 1, "read", r1, "").fail(3*sec+1, 1)
			return b.fault(3*sec+sec/2, "partition:halves", "heal")
		}, false, Unknown, "not judged, less than 1s left"},
		{"a failed inject is not judged", func() *hb {
			b := part().failed().inv(4*sec, 1, "read", r1, "").fail(5*sec, 1)
			return heal(b)
		}, false, Unknown, "not judged, the inject failed"},
		{"never healed is not judged", func() *hb {
			return part().inv(4*sec, 1, "read", r1, "").fail(5*sec, 1).inv(20*sec, 1, "read", r1, "")
		}, true, Unknown, "never healed"},
		{"cut off: open ops are in flight, not attempts", func() *hb {
			b := part().inv(4*sec, 1, "read", r1, "").ok(5*sec, 1, `{}`).inv(6*sec, 2, "read", r2, "")
			return heal(b)
		}, true, Valid, ""},
		{"one bad window of two", func() *hb {
			b := heal(part().inv(4*sec, 1, "read", r1, "").ok(5*sec, 1, `{}`))
			b = b.fault(20*sec, "partition:ring", "inject").inv(24*sec, 1, "read", r1, "").fail(25*sec, 1)
			b = b.inv(24*sec, 2, "read", r2, "").ok(25*sec, 2, `{}`).inv(26*sec, 2, "read", r1, "").fail(27*sec, 2)
			return b.fault(30*sec, "partition:ring", "heal")
		}, false, Invalid, "partition:ring injected at 20.0 s, judged from 22.0 s to its heal at 30.0 s: register/r1 never served"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.h().file()
			f.Truncated = tt.cut
			r := ServedDuringFault{Fault: "partition:", Settle: 2 * time.Second}.Check(context.Background(), f, Inputs{})
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %q", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
			if tt.evidence != "" && !contains(r.Evidence, tt.evidence) {
				t.Fatalf("evidence lacks %q: %s %q", tt.evidence, r.Summary, r.Evidence)
			}
			if r.Checker != "served-during-fault" || r.Summary == "" {
				t.Fatalf("result %+v", r)
			}
		})
	}
}

func TestAnsweredAfterHeal(t *testing.T) {
	const R = "register/r1"
	const J = "partition:journal"
	// The cut began at 0.9 s (took effect at 1 s) and healed at 10 s.
	cut := func() *hb { return (&hb{}).fault(1*sec, J, "inject") }
	heal := func(b *hb) *hb { return b.fault(10*sec, J, "heal") }
	tests := []struct {
		name     string
		h        func() *hb
		cut      bool
		want     Verdict
		evidence string
	}{
		{"empty history", func() *hb { return &hb{} }, false, Unknown, ""},
		{"no such fault", func() *hb {
			b := (&hb{}).fault(1*sec, "partition:halves", "inject").inv(2*sec, 0, "read", R, "").info(7*sec, 0)
			return b.fault(10*sec, "partition:halves", "heal")
		}, false, Unknown, ""},
		{"no op during the fault", func() *hb {
			return heal(cut()).inv(11*sec, 0, "read", R, "").info(16*sec, 0)
		}, false, Unknown, ""},
		{"answered after the heal", func() *hb {
			b := cut().inv(2*sec, 0, "write", R, `{"value":1}`).inv(3*sec, 1, "read", R, "").fail(4*sec, 1)
			b = b.inv(3*sec, 2, "next-id", "", "")
			return heal(b).ok(10*sec+sec/2, 0, `{}`).ok(11*sec, 2, `{"id":1}`)
		}, false, Valid, "3 of 3 operations invoked after it took effect answered"},
		{"timed out", func() *hb {
			b := cut().inv(2*sec, 0, "write", R, `{"value":1}`).inv(3*sec, 1, "read", R, "").ok(4*sec, 1, `{}`)
			return heal(b).info(12*sec, 0)
		}, false, Invalid, "write register/r1 (#1, process 0, node n1) invoked at 2.000 s got no answer: no reply by 12.000 s: unknown-outcome: timeout"},
		{"the node answered unknown-outcome itself: an answer", func() *hb {
			b := cut().inv(2*sec, 0, "write", R, `{"value":1}`).info(9*sec, 0).answered(504)
			return heal(b)
		}, false, Valid, "1 of 1 operations invoked after it took effect answered"},
		{"never completed", func() *hb {
			return heal(cut().inv(2*sec, 0, "read", R, "")).ended()
		}, false, Invalid, "never completed"},
		{"cut off: an op with no completion is not judged", func() *hb {
			return heal(cut().inv(2*sec, 0, "read", R, "").inv(3*sec, 1, "read", R, "").ok(4*sec, 1, `{}`))
		}, true, Valid, "1 operations with no completion"},
		{"cut off: nothing else to judge", func() *hb {
			return heal(cut().inv(2*sec, 0, "read", R, ""))
		}, true, Unknown, ""},
		{"ops straddling the window edges", func() *hb {
			// Before the inject began, or under way when it took effect
			// (a request cut midway): not judged; right when it took
			// effect: judged; right at the heal: judged; after it: not
			// judged.
			b := (&hb{}).inv(sec/2, 0, "read", R, "").inv(sec-sec/10, 3, "read", R, "").fault(1*sec, J, "inject").info(5*sec, 0).info(6*sec, 3)
			b = b.inv(sec, 1, "read", R, "").ok(11*sec, 1, `{}`)
			b = heal(b.inv(10*sec, 2, "read", R, "")).ok(11*sec, 2, `{}`)
			return b.inv(10*sec+1, 0, "read", R, "").info(15*sec, 0)
		}, false, Valid, "2 of 2 operations invoked after it took effect answered"},
		{"an op invoked right at the heal counts", func() *hb {
			return heal(cut().inv(10*sec, 2, "read", R, "")).info(15*sec, 2)
		}, false, Invalid, ""},
		{"tells are not judged", func() *hb {
			b := cut().inv(2*sec, 0, "tell", "log/l1", ap("w0", 1)).info(5*sec, 0).inv(3*sec, 1, "read", R, "").ok(4*sec, 1, `{}`)
			return heal(b)
		}, false, Valid, "1 of 1 operations invoked after it took effect answered"},
		{"a failed inject is not judged", func() *hb {
			return heal(cut().failed().inv(2*sec, 0, "read", R, "")).info(12*sec, 0)
		}, false, Unknown, "the inject failed"},
		{"a failed heal is not judged", func() *hb {
			return heal(cut().inv(2*sec, 0, "read", R, "")).failed().info(12*sec, 0)
		}, false, Unknown, "the heal at 10.0 s failed"},
		{"never healed is not judged", func() *hb {
			return cut().inv(2*sec, 0, "read", R, "").info(12*sec, 0)
		}, false, Unknown, "never healed"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := tt.h().file()
			f.Truncated = tt.cut
			r := AnsweredAfterHeal{Fault: J}.Check(context.Background(), f, Inputs{})
			if r.Verdict != tt.want {
				t.Fatalf("verdict %s, want %s: %s %q", r.Verdict, tt.want, r.Summary, r.Evidence)
			}
			if tt.evidence != "" && !contains(r.Evidence, tt.evidence) {
				t.Fatalf("evidence lacks %q: %s %q", tt.evidence, r.Summary, r.Evidence)
			}
			if r.Checker != "answered-after-heal" || r.Summary == "" {
				t.Fatalf("result %+v", r)
			}
		})
	}
}

// A cancelled context is unknown, never valid, for every expectation.
func TestExpectationsCancelled(t *testing.T) {
	b := (&hb{}).fault(1*sec, "member:join", "inject", "n4").fault(1*sec, "partition:journal", "inject")
	b = b.inv(4*sec, 1, "read", "register/r1", "").ok(5*sec, 1, `{}`)
	b = b.fault(10*sec, "partition:journal", "heal").fault(10*sec, "member:join", "heal", "n4")
	dir := writeEvents(t, []history.NodeEvent{started("n4", "1", 2*sec, 3*sec), started("n4", "2", 2*sec, 3*sec)}, false)
	ctx, cancel := context.WithCancel(context.Background())
	for _, c := range []Checker{ShardsMoved{}, ServedDuringFault{Fault: "partition:"}, AnsweredAfterHeal{Fault: "partition:"}} {
		if r := c.Check(context.Background(), b.file(), ReadInputs(dir)); r.Verdict != Valid {
			t.Fatalf("%s: %s: %s %q", c.Name(), r.Verdict, r.Summary, r.Evidence)
		}
	}
	cancel()
	for _, c := range []Checker{ShardsMoved{}, ServedDuringFault{Fault: "partition:"}, AnsweredAfterHeal{Fault: "partition:"}} {
		if r := c.Check(ctx, b.file(), ReadInputs(dir)); r.Verdict != Unknown {
			t.Fatalf("%s: cancelled, got %s", c.Name(), r.Verdict)
		}
	}
}

// Odd nemesis entries (no value, unreadable value, heals with no inject)
// never panic.
func TestExpectationsOddEntries(t *testing.T) {
	b := &hb{}
	b.add(history.Op{Time: 1, Kind: history.Nemesis, Process: -1, F: "partition:halves"})
	b.add(history.Op{Time: 2, Kind: history.Nemesis, Process: -1, F: "member:join", Value: []byte(`"x"`)})
	b.add(history.Op{Time: 3, Kind: history.Nemesis, Process: -1, F: "member:join", Value: []byte(`{"action":"heal","targets":{"targets":["n4"]}}`)})
	b.add(history.Op{Time: 4, Kind: history.Nemesis, Process: -1, F: "member:join", Value: []byte(`{"action":"inject","began":-5,"targets":{"targets":[]}}`)})
	b.add(history.Op{Time: 5, Kind: history.OK, Process: 3, F: "read"})
	dir := writeEvents(t, []history.NodeEvent{started("", "", 0, 0)}, false)
	for _, c := range []Checker{ShardsMoved{}, ServedDuringFault{Fault: "partition:"}, AnsweredAfterHeal{Fault: ""}} {
		if r := c.Check(context.Background(), b.file(), ReadInputs(dir)); r.Verdict != Unknown {
			t.Fatalf("%s: %s: %s %q", c.Name(), r.Verdict, r.Summary, r.Evidence)
		}
	}
}

// TestFaultEndsWhenItsHealBegins: a restart or a heal takes effect as soon
// as it begins, long before the harness records that it returned; what a
// node serves from then on says nothing about the fault.
func TestFaultEndsWhenItsHealBegins(t *testing.T) {
	b := (&hb{}).fault(sec, "kill:oldest-half", "inject", "n1")
	b = b.inv(5*sec, 1, "read", "register/r1", "").info(6*sec, 1)
	// The heal began at 9 s and returned at 10 s; in between the restarted
	// n1 served r1.
	b = b.inv(9*sec+sec/2, 0, "read", "register/r1", "").ok(9*sec+sec/2+1, 0, `{"value":null}`)
	b = b.add(history.Op{Time: 10 * sec, Kind: history.Nemesis, Process: -1, F: "kill:oldest-half",
		Value: []byte(`{"action":"heal","began":` + itoa(int(9*sec)) + `,"targets":{"targets":["n1"],"how":"oldest-half"}}`)})
	r := ServedDuringFault{Fault: "kill:", Settle: 2 * time.Second}.Check(context.Background(), b.file(), Inputs{})
	if r.Verdict != Invalid {
		t.Fatalf("verdict %s, want invalid (r1 never served before the heal began): %s %v", r.Verdict, r.Summary, r.Evidence)
	}
}

func TestPassivated(t *testing.T) {
	const R, L = "register/r1", "register/r2"
	served := func(b *hb, p int, t int64, entity, inc string) *hb {
		b = b.inv(t, p, "read", entity, "").ok(t+1, p, `{"value":null}`)
		b.ops[len(b.ops)-1].Reply.EntityIncarnation = inc
		return b
	}
	tests := []struct {
		name string
		h    func() *hb
		min  int
		want Verdict
	}{
		{"no entity ops", func() *hb { return &hb{} }, 1, Unknown},
		{"one incarnation each: the setting was ignored", func() *hb {
			return served(served(served(&hb{}, 0, 1, R, "a/1"), 0, 5, R, "a/1"), 1, 7, L, "b/1")
		}, 1, Unknown},
		{"an entity came back", func() *hb { return served(served(&hb{}, 0, 1, R, "a/1"), 0, 5, R, "a/2") }, 1, Valid},
		{"fewer than asked came back", func() *hb { return served(served(&hb{}, 0, 1, R, "a/1"), 0, 5, R, "a/2") }, 2, Unknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Passivated{Min: tt.min}.Check(context.Background(), tt.h().file(), Inputs{})
			if r.Verdict != tt.want || r.Summary == "" {
				t.Fatalf("%s %q, want %s", r.Verdict, r.Summary, tt.want)
			}
		})
	}
}
