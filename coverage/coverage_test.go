package coverage

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/shardtest/shardtest/history"
	"github.com/shardtest/shardtest/protocol"
)

const s = int64(1e9) // a second on the history's clock

// A small recorded run, built entry by entry.
type run struct {
	ops     []history.Op
	events  []history.NodeEvent
	samples []history.StatusSample
}

func (r *run) op(o history.Op) *run { r.ops = append(r.ops, o); return r }

func (r *run) call(p int, node, f, entity string, from, to int64, kind, errText string, reply *history.Reply) *run {
	r.op(history.Op{Kind: history.Invoke, Process: p, Node: node, F: f, Entity: entity, Time: from})
	return r.op(history.Op{Kind: kind, Process: p, Node: node, F: f, Entity: entity, Time: to, Error: errText, Reply: reply})
}

func (r *run) fault(name, action string, at int64, targets any) *run {
	v, _ := json.Marshal(map[string]any{"action": action, "began": at, "targets": targets})
	return r.op(history.Op{Kind: history.Nemesis, Process: -1, F: name, Time: at, Value: v})
}

func (r *run) event(node, inc, typ string, seq uint64, lo, hi int64, member string) *run {
	r.events = append(r.events, history.NodeEvent{Node: node, Lo: lo, Hi: hi,
		Event: protocol.Event{Seq: seq, Incarnation: inc, Type: typ, Member: member}})
	return r
}

func (r *run) coverage(caps []string) Coverage {
	b := NewBuilder(caps)
	for i := range r.ops {
		r.ops[i].Index = int64(i)
		b.Observe(&r.ops[i])
	}
	var evs *history.Events
	if r.events != nil {
		evs = &history.Events{Events: r.events}
	}
	var ss *history.Samples
	if r.samples != nil {
		ss = &history.Samples{Samples: r.samples}
	}
	return b.Finish(evs, ss)
}

func TestBehaviours(t *testing.T) {
	isolate := map[string]any{"shape": "isolate-oldest", "components": [][]string{{"n1"}, {"n2", "n3"}},
		"drops": map[string]any{"n1": map[string]any{"drop_in": []string{"n2", "n3"}}}}
	cases := []struct {
		name string
		run  *run
		caps []string
		// want are behaviours that must be there, not are those that
		// must not.
		want, not []string
		never     []string
	}{
		{
			name: "a quiet run: outcomes without a fault",
			run: (&run{}).
				call(0, "n1", "read", "register/r1", 1*s, 2*s, history.OK, "", nil).
				call(1, "n2", "write", "register/r1", 1*s, 3*s, history.Fail, "not-ready: starting", &history.Reply{Status: 503}),
			want: []string{"op read ok | none", "op write fail not-ready | none"},
			not:  []string{"fault partition:isolate-oldest"},
		},
		{
			name: "an op in flight while a partition held takes the side of the node it asked",
			run: (&run{}).
				fault("partition:isolate-oldest", "inject", 5*s, isolate).
				call(0, "n1", "next-id", "", 6*s, 11*s, history.Info, "timeout", nil).
				call(1, "n2", "next-id", "", 6*s, 7*s, history.OK, "", nil).
				fault("partition:isolate-oldest", "heal", 20*s, nil).
				call(1, "n2", "next-id", "", 21*s, 22*s, history.OK, "", nil),
			want: []string{
				"fault partition:isolate-oldest",
				"op next-id info no-reply | partition/minority",
				"op next-id ok | partition/majority",
				"op next-id ok | none",
			},
			not: []string{"op next-id ok | partition/minority"},
		},
		{
			name: "an op that began before the inject and ended in it is in both",
			run: (&run{}).
				call(0, "n3", "read", "register/r1", 4*s, 9*s, history.Info, "unknown-outcome: forward", &history.Reply{Status: 504}).
				op(history.Op{Kind: history.Nemesis}). // unreadable: ignored
				fault("kill:one", "inject", 5*s, map[string]any{"targets": []string{"n3"}, "how": "one"}),
			// The call completed after the inject in the history's order:
			// rebuild it in order.
			want: []string{"fault kill:one"},
		},
		{
			name: "replies show an entity moved and a request forwarded",
			run: (&run{}).
				call(0, "n1", "read", "register/r1", 1*s, 2*s, history.OK, "", &history.Reply{Node: "n1", HostNode: "n1@a", EntityIncarnation: "n1@a/1"}).
				fault("member:leave-one", "inject", 3*s, map[string]any{"targets": []string{"n1"}, "how": "one"}).
				call(0, "n2", "read", "register/r1", 4*s, 5*s, history.OK, "", &history.Reply{Node: "n2", HostNode: "n3@c", EntityIncarnation: "n3@c/7"}),
			want: []string{"reply entity-moved | member", "reply entity-forwarded | member", "op read ok | member/other"},
			not:  []string{"reply entity-moved | none", "reply entity-restarted | member"},
		},
		{
			name: "a singleton that changed instance",
			run: (&run{}).
				call(0, "n1", "next-id", "", 1*s, 2*s, history.OK, "", &history.Reply{Node: "n1", Singleton: "n1@a#1"}).
				call(0, "n2", "next-id", "", 3*s, 4*s, history.OK, "", &history.Reply{Node: "n2", Singleton: "n2@b#1"}),
			want: []string{"reply singleton-moved | none"},
			not:  []string{"reply singleton-forwarded | none"},
		},
		{
			name: "node events by role and fault, and the sequences they make",
			caps: []string{protocol.CapMembership, protocol.CapAge, protocol.CapSingleton, protocol.CapEvents},
			run: (&run{}).
				event("n1", "a", protocol.EventOldestChanged, 1, 0, 1*s, "n1@a").
				event("n2", "b", protocol.EventOldestChanged, 1, 0, 1*s, "n1@a").
				fault("partition:isolate-oldest", "inject", 5*s, isolate).
				event("n2", "b", protocol.EventMemberUnreachable, 2, 6*s+s/2, 7*s, "n1@a").
				event("n2", "b", protocol.EventDowningDecision, 3, 8*s, 9*s, "").
				event("n2", "b", protocol.EventOldestChanged, 4, 8*s, 9*s, "n2@b").
				event("n2", "b", protocol.EventSingletonStarted, 5, 9*s+1, 10*s, "").
				event("n1", "a", protocol.EventSelfDowned, 2, 9*s, 10*s, ""),
			want: []string{
				"event oldest-changed @oldest | none",
				"event oldest-changed @younger | none",
				"event member-unreachable @younger | partition/majority",
				"event downing-decision @younger | partition/majority",
				// After its own oldest-changed, n2 is the oldest.
				"event singleton-started @oldest | partition/majority",
				"event self-downed @oldest | partition/minority",
				"pair inject:partition >fault member-unreachable | partition",
				"pair member-unreachable >same downing-decision | partition",
				"pair downing-decision >same singleton-started | partition",
				"pair member-unreachable >other self-downed | partition",
				// Three decisions in a row of n2's log, the inject among them.
				"triple inject:partition > member-unreachable > downing-decision | partition",
				"triple downing-decision > oldest-changed > singleton-started | partition",
			},
			not: []string{
				// 1 s to 6.5 s: certainly before, but not within the window.
				"pair oldest-changed >same member-unreachable | partition",
				// Overlapping windows on different members: no order.
				"pair self-downed >other singleton-started | partition",
				"pair singleton-started >other self-downed | partition",
				// Not in a row: oldest-changed came between.
				"triple member-unreachable > downing-decision > singleton-started | partition",
			},
			never: []string{protocol.EventNodeStarted, protocol.EventMemberUp, protocol.EventSingletonStopped},
		},
		{
			name: "a coordinator's host, from status samples",
			caps: []string{protocol.CapMembership, protocol.CapCoordinator, protocol.CapEvents},
			run: func() *run {
				r := (&run{}).event("n1", "a", protocol.EventShardAllocated, 1, 3*s, 4*s, "")
				r.samples = []history.StatusSample{{Node: "n1", Member: "n1@a", Lo: 1 * s, Hi: 2 * s, Coordinators: []string{"register"}}}
				return r
			}(),
			want: []string{"event shard-allocated @member+coordinator | none"},
		},
		{
			name: "without the events capability nothing is missing",
			run:  (&run{}).call(0, "n1", "read", "register/r1", 1*s, 2*s, history.OK, "", nil),
			caps: []string{protocol.CapMembership, protocol.CapSharding},
			want: []string{"op read ok | none"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := c.run.coverage(c.caps)
			for _, w := range c.want {
				if !slices.Contains(got.Behaviours, w) {
					t.Errorf("missing %q", w)
				}
			}
			for _, n := range c.not {
				if slices.Contains(got.Behaviours, n) {
					t.Errorf("has %q", n)
				}
			}
			for _, n := range c.never {
				if !slices.Contains(got.NeverHappened, n) {
					t.Errorf("never happened lacks %q: %v", n, got.NeverHappened)
				}
			}
			if t.Failed() {
				t.Logf("behaviours:\n%s", strings.Join(got.Behaviours, "\n"))
			}
			if !slices.IsSorted(got.Behaviours) {
				t.Error("behaviours not sorted")
			}
			again := c.run.coverage(c.caps)
			if !slices.Equal(got.Behaviours, again.Behaviours) {
				t.Error("the same run gave another set")
			}
		})
	}
}

func TestDescribe(t *testing.T) {
	c := Coverage{Behaviours: []string{"event a @oldest | none", "fault kill:one", "op read ok | none", "op write ok | none"}}
	if got, want := c.Describe(), "4 behaviours (1 fault, 2 op, 1 event)"; got != want {
		t.Errorf("%q, want %q", got, want)
	}
}
