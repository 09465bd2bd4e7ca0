package cluster

import (
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/clock"
	"github.com/shardtest/shardtest/protocol/kit"
)

// TestNotFreshAfterAFreeze: a member whose failure detector has not run
// for longer than the failure timeout (frozen, starved) is not fresh, and
// stays so for a failure timeout after it runs again, so that the down
// notices and pushes that waited in its sockets reach it before it serves
// what also waited there.
func TestNotFreshAfterAFreeze(t *testing.T) {
	clk := clock.Real()
	const fd = 100 * time.Millisecond
	c := newCluster(Config{Events: kit.NewEventLog(clk.Now, 100), Clock: clk, FailureTimeout: fd, Downing: DowningConfig{Strategy: KeepMajority, StableAfter: time.Second}},
		Member{Name: "n1", Incarnation: "a", UpNumber: 1})
	c.m.joined = true
	c.m.state.merge(&record{Member: c.m.self, Status: StatusUp})
	tick := func() { c.mu.Lock(); c.stepLocked(InTick{}); c.mu.Unlock() }
	steps := []struct {
		name  string
		do    func()
		fresh bool
	}{
		{"before the first tick", func() {}, true},
		{"ticking", tick, true},
		{"frozen: no tick for twice the failure timeout", func() { time.Sleep(2 * fd) }, false},
		{"the first tick after the thaw", tick, false},
		{"ticking again, less than a failure timeout after the thaw", func() { time.Sleep(fd / 4); tick() }, false},
		{"ticking for a failure timeout after the thaw", func() {
			for range 6 {
				time.Sleep(fd / 4)
				tick()
			}
		}, true},
	}
	for _, st := range steps {
		st.do()
		if got := c.Fresh(); got != st.fresh {
			t.Fatalf("%s: fresh %v, want %v", st.name, got, st.fresh)
		}
	}
}
