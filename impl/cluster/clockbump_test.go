package cluster

import (
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/protocol"
	"github.com/shardtest/shardtest/protocol/kit"
)

// TestClockJumpsDoNotEndTheResolversWait: once a problem appears, the
// resolver waits stable-after before it decides, and a clock bump or strobe
// (clock:bump, clock:strobe: the node's offset jumps) in the meantime does
// not shorten that wait — nor does it make members that were just heard look
// silent. Measured on the wall clock, a bump forward of a minute ended both
// at once: the majority side of a split decided as soon as it noticed, and
// its removal margin then ended before the other side had downed itself.
func TestClockJumpsDoNotEndTheResolversWait(t *testing.T) {
	for _, jump := range []time.Duration{time.Minute, -time.Minute} {
		t.Run(jump.String(), func(t *testing.T) {
			clk := clock.Real()
			c := newCluster(Config{
				Events: kit.NewEventLog(clk.Now, 100), Clock: clk, FailureTimeout: 2 * time.Second,
				Downing: DowningConfig{Strategy: KeepMajority, StableAfter: 5 * time.Second},
			}, Member{Name: "n1", Incarnation: "a", UpNumber: 1})
			m := c.m
			m.joined = true
			n2 := Member{Name: "n2", Incarnation: "b", UpNumber: 2}
			n3 := Member{Name: "n3", Incarnation: "c", UpNumber: 3}
			for _, mb := range []Member{m.self, n2, n3} {
				m.state.merge(&record{Member: mb, Status: StatusUp})
			}
			// n2 is heard now; n3 was last heard 3 s ago: unreachable, and
			// n1 with n2 is the majority that will down it after 5 s.
			now := clk.Elapsed()
			m.lastHeard[n2.UID()] = now
			m.lastHeard[n3.UID()] = now - 3*time.Second
			c.mu.Lock()
			c.stepLocked(InTick{})
			c.mu.Unlock()
			if !m.reachable[n2.UID()] || m.reachable[n3.UID()] {
				t.Fatalf("reachable %v, want n2 only", m.reachable)
			}
			if err := clk.Set(clock.Skew{Offset: jump}); err != nil {
				t.Fatal(err)
			}
			c.mu.Lock()
			c.stepLocked(InTick{})
			c.mu.Unlock()
			if !m.reachable[n2.UID()] {
				t.Errorf("after a %v jump n2, heard just now, is unreachable", jump)
			}
			evs, _ := c.cfg.Events.Since(0, 0)
			for _, e := range evs {
				if e.Type == protocol.EventDowningDecision {
					t.Fatalf("after a %v jump the resolver decided at once: %s", jump, e.Detail)
				}
			}
			if got := m.state[n3.UID()].Status; got != StatusUp {
				t.Fatalf("n3 is %s, want still up (stable-after has not passed)", got)
			}
		})
	}
}
