package sharding

import (
	"context"
	"errors"
	"fmt"
	"github.com/shardtest/shardtest/protocol"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/shardtest/shardtest/impl/cluster"
)

// Each deliberate bug is run in the scenario that exposes it: with the bug
// the damage shows, without it (same scenario) none does.

func TestBugNames(t *testing.T) {
	if got := (Bugs{}).Names(); len(got) != 0 {
		t.Fatalf("zero Bugs names %v", got)
	}
	var all Bugs
	for _, name := range BugNames() {
		var b Bugs
		if err := ParseBug(name, &b); err != nil {
			t.Fatalf("ParseBug(%q): %v", name, err)
		}
		if got := b.Names(); len(got) != 1 || got[0] != name {
			t.Fatalf("ParseBug(%q) switched on %v", name, got)
		}
		if err := ParseBug(name, &all); err != nil {
			t.Fatal(err)
		}
	}
	if fmt.Sprint(all.Names()) != fmt.Sprint(BugNames()) {
		t.Fatalf("all on: %v, want %v", all.Names(), BugNames())
	}
	want := []string{"start-before-stopped", "drop-buffered-on-hand-off", "reorder-buffered",
		"no-coordinator-persistence", "drop-passivation-buffer"}
	if fmt.Sprint(BugNames()) != fmt.Sprint(want) {
		t.Fatalf("BugNames() = %v, want %v", BugNames(), want)
	}
	var b Bugs
	err := ParseBug("nope", &b)
	if err == nil || !strings.Contains(err.Error(), `"nope"`) || !strings.Contains(err.Error(), "start-before-stopped") {
		t.Fatalf("unknown bug: err = %v", err)
	}
	if b != (Bugs{}) {
		t.Fatalf("unknown bug changed %+v", b)
	}
}

// ---- hand-off: start-before-stopped, drop-buffered-on-hand-off ----

type handOffOutcome struct {
	shard    string
	sent     int
	failed   []error
	lost     int // messages sent during the hand-off that no entity handled
	overlaps []string
}

// handOffScenario: two regions host two entities of every shard; a third
// joins and the coordinator starts moving shards to it. Every entity's
// Stop is held (a slow Stop) while, during the first hand-off, one message
// is sent to each entity of that shard; the hold ends once those are all
// answered or after a second.
func handOffScenario(t *testing.T, bugs Bugs) handOffOutcome {
	s := testSettings()
	s.Bugs = bugs
	s.RebalanceInterval = 100 * time.Millisecond
	c := newShardCluster(t, 3, s)
	gate := make(chan struct{})
	c.stopGate = gate
	release := sync.OnceFunc(func() { close(gate) })
	defer release()
	c.setAll(allUp("n1", "n2"))
	c.start("n1", "n2")
	c.awaitRegistered("n1", "n2")

	extract := HashShards(s.NumberOfShards)
	byShard := map[string][]string{}
	for i := 0; i < 1000; i++ {
		id := fmt.Sprintf("h%d", i)
		sh := extract(id)
		if len(byShard[sh]) >= 2 {
			continue
		}
		byShard[sh] = append(byShard[sh], id)
		if _, err := c.deliver("n1", id, "before", 0); err != nil {
			t.Fatal(err)
		}
	}
	if len(byShard) != s.NumberOfShards {
		t.Fatalf("entities on %d shards", len(byShard))
	}

	n1 := c.node("n1")
	c.setAll(allUp("n1", "n2", "n3"))
	c.start("n3")
	var begun protocol.Event
	eventually(t, 15*time.Second, func() bool {
		evs := eventsOf(n1.ev, protocol.EventShardHandOffBegun)
		if len(evs) == 0 {
			return false
		}
		begun = evs[0]
		return true
	}, "a hand-off begins")
	var owner *snode
	for _, nd := range c.nodes {
		if nd.uid() == begun.Member {
			owner = nd
		}
	}
	if owner == nil {
		t.Fatalf("hand-off of shard %s from unknown region %s", begun.Shard, begun.Member)
	}
	// The owner has closed the shard: new messages for it are buffered.
	eventually(t, 5*time.Second, func() bool {
		for _, ss := range owner.region.Status().Shards {
			if ss.ID == begun.Shard {
				return ss.HandingOff
			}
		}
		return false
	}, "shard %s closed at %s", begun.Shard, owner.name)

	out := handOffOutcome{shard: begun.Shard}
	ids := byShard[begun.Shard]
	errs := make(chan error, len(ids))
	for _, id := range ids {
		out.sent++
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_, err := n1.region.Deliver(ctx, Message{EntityID: id, Op: "count", Sender: "during", Payload: mustJSON(t, payload{Seq: 1})})
			errs <- err
		}()
	}
	collect := func(err error) {
		if err != nil {
			out.failed = append(out.failed, err)
		}
	}
	hold := time.After(time.Second)
	answered := 0
wait:
	for ; answered < len(ids); answered++ {
		select {
		case err := <-errs:
			collect(err)
		case <-hold:
			break wait
		}
	}
	release()
	for ; answered < len(ids); answered++ {
		collect(<-errs)
	}
	// The old incarnations have stopped (and logged it).
	eventually(t, 10*time.Second, func() bool {
		return !slices.Contains(owner.region.HostedShards(), begun.Shard)
	}, "shard %s gone from %s", begun.Shard, owner.name)

	for _, id := range ids {
		got := 0
		for _, h := range c.entities.of(id) {
			if h.Sender == "during" {
				got++
			}
		}
		if got == 0 {
			out.lost++
		}
	}
	out.overlaps, _, _ = findOverlaps(c)
	return out
}

func TestBugHandOff(t *testing.T) {
	for _, tc := range []struct {
		name        string
		bugs        Bugs
		wantOverlap bool
		wantLost    bool
	}{
		{"correct", Bugs{}, false, false},
		{BugStartBeforeStopped, Bugs{StartBeforeStopped: true}, true, false},
		{BugDropBufferedOnHandOff, Bugs{DropBufferedOnHandOff: true}, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := handOffScenario(t, tc.bugs)
			t.Logf("shard %s: %d sent, %d failed, %d lost, %d overlaps", out.shard, out.sent, len(out.failed), out.lost, len(out.overlaps))
			if tc.wantOverlap {
				if len(out.overlaps) == 0 {
					t.Error("no entity ran twice at once: the new home did not start before the old one stopped")
				}
			} else {
				for _, o := range out.overlaps {
					t.Error(o)
				}
			}
			if tc.wantLost {
				// Every message buffered during the hand-off was thrown
				// away: its caller only learns that it was not delivered.
				if out.lost != out.sent || len(out.failed) != out.sent {
					t.Errorf("%d of %d lost, %d failed; want all lost and failed", out.lost, out.sent, len(out.failed))
				}
				for _, err := range out.failed {
					if !errors.Is(err, ErrNotDelivered) {
						t.Errorf("lost message: err = %v, want ErrNotDelivered", err)
					}
				}
			} else {
				if out.lost != 0 {
					t.Errorf("%d of %d messages sent during the hand-off were lost", out.lost, out.sent)
				}
				for _, err := range out.failed {
					t.Errorf("message sent during the hand-off: %v", err)
				}
			}
		})
	}
}

// ---- reorder-buffered ----

// TestBugReorderBuffered: TestBufferOverflow's scenario — one sender's
// messages wait in the buffer while the coordinator is unreachable — with
// and without the bug.
func TestBugReorderBuffered(t *testing.T) {
	t.Run("correct", func(t *testing.T) {
		if seqs := bufferOverflowScenario(t, Bugs{}); !slices.IsSorted(seqs) || len(seqs) != 5 {
			t.Fatalf("entity handled %v, want 1..5 in order", seqs)
		}
	})
	t.Run(BugReorderBuffered, func(t *testing.T) {
		seqs := bufferOverflowScenario(t, Bugs{ReorderBuffered: true})
		if fmt.Sprint(seqs) != fmt.Sprint([]int{5, 4, 3, 2, 1}) {
			t.Fatalf("entity handled %v, want the buffered messages newest first (5 4 3 2 1)", seqs)
		}
	})
}

// ---- no-coordinator-persistence ----

type failoverOutcome struct {
	before, after Reply
	// hosts are the nodes hosting the entity's shard afterwards.
	hosts []string
	// oldAlive: the first incarnation still runs on its node.
	oldAlive bool
}

// failoverScenario: an entity runs on n3 (its home known only to n3); the
// coordinator's node n1 is downed and n2 starts the next coordinator; then
// n2, which never learnt the shard's home, sends to the entity.
func failoverScenario(t *testing.T, bugs Bugs) failoverOutcome {
	s := testSettings()
	s.Bugs = bugs
	s.DownRemovalMargin = time.Minute
	c := newShardCluster(t, 3, s)
	c.setAll(allUp("n1", "n2", "n3"))
	c.start("n1", "n2", "n3")
	c.awaitRegistered("n1", "n2", "n3")
	n2, n3 := c.node("n2").uid(), c.node("n3").uid()
	var out failoverOutcome
	id := ""
	for i := 0; id == "" && i < 200; i++ {
		cand := fmt.Sprintf("f%d", i)
		rep, err := c.deliver("n3", cand, "s", 1)
		if err != nil {
			t.Fatal(err)
		}
		if rep.Node == n3 {
			id, out.before = cand, rep
		}
	}
	if id == "" {
		t.Fatal("no entity on n3")
	}

	c.stopNode(c.node("n1"))
	down := allUp("n1", "n2", "n3").with("n1", cluster.StatusDown)
	c.setView("n2", down)
	c.setView("n3", down)
	// The new coordinator knows both surviving regions (recovered from the
	// journal, or registered again).
	eventually(t, 10*time.Second, func() bool {
		st, err := c.coordState("n3")
		if err != nil || st.Coordinator != n2 {
			return false
		}
		_, ok2 := st.Regions[n2]
		_, ok3 := st.Regions[n3]
		return ok2 && ok3
	}, "new coordinator on n2 with both regions")

	rep, err := c.deliver("n2", id, "s", 2)
	if err != nil {
		t.Fatal(err)
	}
	out.after = rep
	for _, n := range []string{"n2", "n3"} {
		if slices.Contains(c.node(n).region.HostedShards(), out.before.Shard) {
			out.hosts = append(out.hosts, n)
		}
	}
	for _, ss := range c.node("n3").region.Status().Shards {
		for _, es := range ss.Entities {
			if es.Incarnation == out.before.EntityIncarnation {
				out.oldAlive = true
			}
		}
	}
	return out
}

func TestBugNoCoordinatorPersistence(t *testing.T) {
	t.Run("correct", func(t *testing.T) {
		out := failoverScenario(t, Bugs{})
		if out.after.EntityIncarnation != out.before.EntityIncarnation || fmt.Sprint(out.hosts) != "[n3]" {
			t.Fatalf("after failover: served by %s (%s), shard hosted on %v; want the same incarnation on n3 only",
				out.after.Node, out.after.EntityIncarnation, out.hosts)
		}
	})
	t.Run(BugNoCoordinatorPersistence, func(t *testing.T) {
		out := failoverScenario(t, Bugs{NoCoordinatorPersistence: true})
		if fmt.Sprint(out.hosts) != "[n2 n3]" || !out.oldAlive || out.after.EntityIncarnation == out.before.EntityIncarnation {
			t.Fatalf("after failover: served by %s (%s), shard hosted on %v, old incarnation alive %v; want shard %s on n2 and n3, two incarnations alive",
				out.after.Node, out.after.EntityIncarnation, out.hosts, out.oldAlive, out.before.Shard)
		}
	})
}

// ---- drop-passivation-buffer ----

type passivationOutcome struct {
	handled []handled
	failed  []error
}

// passivationScenario: an entity handles seq 1, then passivates itself
// (seq 2); its Stop is held until three more messages (seq 3..5) are held
// for the next incarnation.
func passivationScenario(t *testing.T, bugs Bugs) passivationOutcome {
	s := testSettings()
	s.Bugs = bugs
	c := newShardCluster(t, 1, s)
	gate := make(chan struct{})
	c.stopGate = gate
	release := sync.OnceFunc(func() { close(gate) })
	defer release()
	c.setAll(allUp("n1"))
	c.start("n1")
	c.awaitRegistered("n1")
	r := c.node("n1").region
	send := func(op string, seq int, timeout time.Duration) error {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		_, err := r.Deliver(ctx, Message{EntityID: "p", Op: op, Sender: "s", Payload: mustJSON(t, payload{Seq: seq})})
		return err
	}
	if err := send("count", 1, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := send("passivate", 2, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	r.mu.Lock()
	sh := r.local[r.extract("p")]
	r.mu.Unlock()
	held := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return sh.st.Held("p")
	}
	var out passivationOutcome
	errs := make(chan error, 3)
	for seq := 3; seq <= 5; seq++ {
		go func() { errs <- send("count", seq, 2*time.Second) }()
		eventually(t, 5*time.Second, func() bool { return held() == seq-2 }, "message %d held", seq)
	}
	release()
	for range 3 {
		if err := <-errs; err != nil {
			out.failed = append(out.failed, err)
		}
	}
	out.handled = c.entities.of("p")
	return out
}

func TestBugDropPassivationBuffer(t *testing.T) {
	t.Run("correct", func(t *testing.T) {
		out := passivationScenario(t, Bugs{})
		if len(out.failed) != 0 {
			t.Fatalf("sends failed: %v", out.failed)
		}
		var seqs []int
		for _, h := range out.handled {
			seqs = append(seqs, h.Seq)
		}
		if fmt.Sprint(seqs) != "[1 2 3 4 5]" || out.handled[2].Inc == out.handled[1].Inc {
			t.Fatalf("handled %+v; want 1..5, 3..5 by a new incarnation", out.handled)
		}
	})
	t.Run(BugDropPassivationBuffer, func(t *testing.T) {
		out := passivationScenario(t, Bugs{DropPassivationBuffer: true})
		if len(out.handled) != 2 {
			t.Fatalf("handled %+v; want only seq 1 and 2 (the held ones lost)", out.handled)
		}
		if len(out.failed) != 3 {
			t.Fatalf("%d sends failed, want the 3 held ones: %v", len(out.failed), out.failed)
		}
		for _, err := range out.failed {
			if !errors.Is(err, ErrNotDelivered) {
				t.Errorf("lost message: err = %v, want ErrNotDelivered", err)
			}
		}
	})
}
